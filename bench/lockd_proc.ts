/**
 * lockd as a child process, the way an operator runs it (`deno run <permissions> main.ts ...`):
 * `spawnLockd` starts `lockd serve` on port 0, waits for its start line and reads the bound
 * addresses from it, keeps its standard error, and stops it by its PID; `runLockd` runs any
 * other command (or a `serve` that fails at start) to its end. Shared by bench/ and tests/:
 * it lives here, with nothing but the Deno runtime to depend on, so that `deno task bench`,
 * `deno task soak` and the like run from a fresh clone without the test helpers.
 */

import { fileURLToPath } from "node:url";

/** This checkout's main.ts. */
export const LOCKD_MAIN = fileURLToPath(new URL("../main.ts", import.meta.url));

export interface LockdCommandOptions {
  /** Permission flags of `deno run` (default `--allow-all`). */
  permissions?: readonly string[];
  cwd?: string;
  /** Added to this process's environment (which always gets NO_COLOR=1). */
  env?: Record<string, string>;
  stdin?: "null" | "piped";
  stdout?: "null" | "piped";
  stderr?: "null" | "piped";
}

/** `deno run <permissions> main.ts <args>`, not started yet. */
export function lockdCommand(
  args: readonly string[],
  options: LockdCommandOptions = {},
): Deno.Command {
  return new Deno.Command(Deno.execPath(), {
    args: ["run", ...(options.permissions ?? ["--allow-all"]), LOCKD_MAIN, ...args],
    cwd: options.cwd,
    env: { NO_COLOR: "1", ...options.env },
    stdin: options.stdin ?? "null",
    stdout: options.stdout ?? "piped",
    stderr: options.stderr ?? "piped",
  });
}

/** What a finished lockd command did. */
export interface LockdOutput {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a lockd command to its end: its exit code and both outputs as text. */
export async function runLockd(
  args: readonly string[],
  options: LockdCommandOptions = {},
): Promise<LockdOutput> {
  const output = await lockdCommand(args, options).output();
  const decoder = new TextDecoder();
  return {
    code: output.code,
    stdout: decoder.decode(output.stdout),
    stderr: decoder.decode(output.stderr),
  };
}

export interface SpawnLockdOptions extends Omit<LockdCommandOptions, "stderr"> {
  /** Flags after `serve` and the defaults below (of a flag given twice, the last wins). */
  flags?: readonly string[];
  /**
   * `-data-dir`: "" by default (tokens not durable: nothing is written, no lockd-data/ is left
   * behind); null gives no flag at all (lockd's own default, lockd-data/ in the working dir).
   */
  dataDir?: string | null;
  /** Admin and ops listeners on port 0 as well. */
  http?: boolean;
  /** `ulimit -n` for the process (set through sh, which then execs deno). */
  fdLimit?: number;
  /** How long to wait for the start line (default 15 s); then the process is killed. */
  startTimeoutMs?: number;
  /** Another checkout's main.ts (a comparison with an older version); this one's by default. */
  main?: string;
  /**
   * What happens to standard error once the server has started: "read" (the default) keeps
   * reading it for the life of the process into `logLines`, so it never blocks on a full
   * pipe; "handed-over" stops reading and leaves `stderrReader` to the caller (a test of a
   * standard error nobody reads).
   */
  stderrAfterStart?: "read" | "handed-over";
}

/** A running `lockd serve`. */
export interface LockdProc extends AsyncDisposable {
  readonly child: Deno.ChildProcess;
  readonly pid: number;
  /** The bound addresses, from the start line. */
  readonly addr: string;
  readonly adminAddr: string | null;
  readonly opsAddr: string | null;
  /** The command line, for reports (`deno run -A .../main.ts serve ...`). */
  readonly command: string;
  /** Standard error's lines so far (the first 10,000). */
  readonly logLines: string[];
  /** With `stderrAfterStart: "handed-over"`: standard error from just after the start line. */
  readonly stderrReader: ReadableStreamDefaultReader<string> | null;
  /** Standard error so far, as text. */
  log(): string;
  /**
   * Sends `signal` (SIGTERM by default) to the process by its PID and waits for it to exit
   * (and for standard error to end, when it is read here). With `killAfterMs`, a process still
   * running by then gets SIGKILL. The first call decides; later calls return its promise.
   */
  stop(signal?: Deno.Signal, killAfterMs?: number): Promise<Deno.CommandStatus>;
}

const LOG_LINES_MAX = 10_000;
const ADDRESS_KEYS = ["listen", "admin_listen", "ops_listen"] as const;

/** Starts `lockd serve` as a child process and waits until it has started. */
export async function spawnLockd(options: SpawnLockdOptions = {}): Promise<LockdProc> {
  const dataDir = options.dataDir === undefined ? "" : options.dataDir;
  const serveArgs = [
    "serve",
    "-listen",
    "127.0.0.1:0",
    ...(dataDir === null ? [] : ["-data-dir", dataDir]),
    ...(options.http ? ["-admin-listen", "127.0.0.1:0", "-ops-listen", "127.0.0.1:0"] : []),
    ...(options.flags ?? []),
  ];
  const permissions = options.permissions ?? ["--allow-all"];
  const denoArgs = ["run", ...permissions, options.main ?? LOCKD_MAIN, ...serveArgs];
  const quoted = denoArgs.map((arg) => arg === "" ? '""' : arg).join(" ");
  const command = options.fdLimit
    ? `ulimit -n ${options.fdLimit}; exec deno ${quoted}`
    : `deno ${quoted}`;
  const io = {
    cwd: options.cwd,
    env: { NO_COLOR: "1", ...options.env },
    stdin: options.stdin ?? "null",
    stdout: options.stdout ?? "null",
    stderr: "piped",
  } as const;
  const child = options.fdLimit
    ? new Deno.Command("sh", {
      args: ["-c", `ulimit -n ${options.fdLimit}; exec "$0" "$@"`, Deno.execPath(), ...denoArgs],
      ...io,
    }).spawn()
    : new Deno.Command(Deno.execPath(), { args: denoArgs, ...io }).spawn();

  const reader = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  const logLines: string[] = [];
  const found: Partial<Record<(typeof ADDRESS_KEYS)[number], string>> = {};
  let rest = "";
  let startLine = false;
  const take = (chunk: string) => {
    rest += chunk;
    const lines = rest.split("\n");
    rest = lines.pop()!;
    for (const line of lines) {
      if (logLines.length < LOG_LINES_MAX) logLines.push(line);
      for (const key of ADDRESS_KEYS) {
        // Text (listen="127.0.0.1:7400") and JSON ("listen":"127.0.0.1:7400") lines.
        const m = line.match(new RegExp(`(?:^|[\\s"{,])${key}[=":]+"?([\\[\\]\\w.:]+:\\d+)`));
        if (m && !(key in found)) found[key] = m[1];
      }
      if (line.includes("lockd started")) startLine = true;
    }
  };
  const flushRest = () => {
    if (rest !== "" && logLines.length < LOG_LINES_MAX) logLines.push(rest);
    rest = "";
  };

  // Read until the start line (or the end of standard error, or the time limit).
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), options.startTimeoutMs ?? 15_000);
  });
  let ended = false;
  try {
    while (!startLine) {
      const next = await Promise.race([reader.read(), timedOut]);
      if (next === "timeout" || next.done) {
        ended = next !== "timeout";
        break;
      }
      take(next.value);
    }
  } finally {
    clearTimeout(timer);
  }
  if (!startLine || found.listen === undefined) {
    try {
      child.kill("SIGKILL");
    } catch { /* gone */ }
    const status = await child.status;
    if (!ended) await reader.cancel().catch(() => {});
    flushRest();
    const why = ended ? `exited (${status.code})` : "did not start in time";
    throw new Error(`lockd serve ${why} before it reported its address:\n${logLines.join("\n")}`);
  }

  const handedOver = options.stderrAfterStart === "handed-over";
  // Keep draining standard error for the whole life of the process, so it never blocks.
  const drained = handedOver ? Promise.resolve() : (async () => {
    for (;;) {
      const next = await reader.read().catch(() => ({ done: true as const, value: undefined }));
      if (next.done) break;
      take(next.value);
    }
    flushRest();
  })();

  let stopped: Promise<Deno.CommandStatus> | null = null;
  const stop = (signal: Deno.Signal = "SIGTERM", killAfterMs?: number) => {
    stopped ??= (async () => {
      try {
        child.kill(signal);
      } catch { /* gone */ }
      let killer: ReturnType<typeof setTimeout> | undefined;
      if (killAfterMs !== undefined) {
        killer = setTimeout(() => {
          try {
            child.kill("SIGKILL");
          } catch { /* gone */ }
        }, killAfterMs);
      }
      try {
        const status = await child.status;
        await drained;
        return status;
      } finally {
        clearTimeout(killer);
      }
    })();
    return stopped;
  };
  return {
    child,
    pid: child.pid,
    addr: found.listen,
    adminAddr: found.admin_listen ?? null,
    opsAddr: found.ops_listen ?? null,
    command,
    logLines,
    stderrReader: handedOver ? reader : null,
    log: () => [...logLines, ...(rest === "" ? [] : [rest])].join("\n"),
    stop,
    [Symbol.asyncDispose]: async () => {
      await stop("SIGKILL");
      if (handedOver) await reader.cancel().catch(() => {});
    },
  };
}

/** Resident set size of a process in bytes (VmRSS). */
export function rssBytes(pid: number): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  const m = status.match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) * 1024 : NaN;
}

/** CPU time (user + system) of a process in seconds. */
export function cpuSeconds(pid: number): number {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // fields[0] is field 3 (state); utime is field 14, stime field 15.
  const ticks = Number(fields[11]) + Number(fields[12]);
  return ticks / 100; // CLK_TCK is 100 on Linux
}
