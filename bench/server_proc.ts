/** Starts `main.ts serve` as a subprocess on port 0 and reads its bound addresses from stderr. */

const ROOT = new URL("../", import.meta.url).pathname;

export interface ServerProc extends AsyncDisposable {
  child: Deno.ChildProcess;
  pid: number;
  addr: string;
  adminAddr: string | null;
  opsAddr: string | null;
  command: string;
  /** Stderr lines seen so far (diagnostic log). */
  logLines: string[];
  stop(signal?: Deno.Signal): Promise<Deno.CommandStatus>;
}

export interface ServerProcOptions {
  args?: string[];
  /** `ulimit -n` for the subprocess (via sh). */
  fdLimit?: number;
  /** Ask for admin and ops listeners on port 0. */
  http?: boolean;
  startTimeoutMs?: number;
  /** Standard output (the audit log): discarded by default; "piped" gives `child.stdout` to read (or not). */
  stdout?: "null" | "piped";
}

export async function startServerProc(options: ServerProcOptions = {}): Promise<ServerProc> {
  const args = [
    "run",
    "-A",
    `${ROOT}main.ts`,
    "serve",
    "-listen",
    "127.0.0.1:0",
    "-log-level",
    "info",
    // No lockd-data/ left in the working directory (args may give a -data-dir; the last wins).
    "-data-dir",
    "",
    ...(options.http ? ["-admin-listen", "127.0.0.1:0", "-ops-listen", "127.0.0.1:0"] : []),
    ...(options.args ?? []),
  ];
  const denoPath = Deno.execPath();
  const command = options.fdLimit
    ? `ulimit -n ${options.fdLimit}; exec deno ${args.join(" ")}`
    : `deno ${args.join(" ")}`;
  const child = options.fdLimit
    ? new Deno.Command("sh", {
      args: ["-c", `ulimit -n ${options.fdLimit}; exec "$0" "$@"`, denoPath, ...args],
      stdin: "null",
      stdout: options.stdout ?? "null",
      stderr: "piped",
    }).spawn()
    : new Deno.Command(denoPath, {
      args,
      stdin: "null",
      stdout: options.stdout ?? "null",
      stderr: "piped",
    }).spawn();
  const logLines: string[] = [];
  let resolveStarted: () => void = () => {};
  const started = new Promise<void>((r) => (resolveStarted = r));
  const found: Record<string, string> = {};
  // Keep draining stderr for the whole life of the process so it never blocks on a full pipe.
  const drained = (async () => {
    const decoder = new TextDecoderStream();
    let rest = "";
    for await (const chunk of child.stderr.pipeThrough(decoder)) {
      rest += chunk;
      const lines = rest.split("\n");
      rest = lines.pop()!;
      for (const line of lines) {
        if (logLines.length < 10_000) logLines.push(line);
        for (const key of ["listen", "admin_listen", "ops_listen", "admin", "ops"]) {
          const m = line.match(new RegExp(`(?:^|[\\s"{,])${key}[=":]+"?([\\[\\]\\w.:]+:\\d+)`));
          if (m && !(key in found)) found[key] = m[1];
        }
        if (line.includes("lockd started")) resolveStarted();
      }
    }
    resolveStarted();
  })();
  const timeoutMs = options.startTimeoutMs ?? 15_000;
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    started,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error("server did not start in time")), timeoutMs);
    }),
  ]).finally(() => clearTimeout(timer));
  if (found.listen === undefined) {
    try {
      child.kill("SIGKILL");
    } catch { /* gone */ }
    await child.status;
    throw new Error(`server did not report its address:\n${logLines.join("\n")}`);
  }
  let stopped: Promise<Deno.CommandStatus> | null = null;
  const stop = (signal: Deno.Signal = "SIGTERM") => {
    stopped ??= (async () => {
      try {
        child.kill(signal);
      } catch { /* gone */ }
      const status = await child.status;
      await drained;
      return status;
    })();
    return stopped;
  };
  return {
    child,
    pid: child.pid,
    addr: found.listen,
    adminAddr: found.admin_listen ?? found.admin ?? null,
    opsAddr: found.ops_listen ?? found.ops ?? null,
    command,
    logLines,
    stop,
    [Symbol.asyncDispose]: async () => {
      await stop("SIGKILL");
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
