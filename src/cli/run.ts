import { type Scheduler, systemScheduler, type Timer } from "../clock.ts";
import {
  KILL_GRACE_MS_DEFAULT,
  RECONNECT_PROGRESS_INTERVAL_MS,
  RUN_CONNECT_RETRY_MS,
} from "../limits.ts";
import { type AcquireOptions, type Client, connect, type Lock } from "../client/client.ts";
import { composeClientName } from "../client/client_name.ts";
import { LockdError, LockLostError } from "../client/errors.ts";
import { isFinal } from "../client/connection.ts";
import { WIRE_CODES } from "../wire/codes.ts";
import { loadClientTls } from "../security/tls.ts";
import { type ProcessGroup, spawnInGroup } from "./process_group.ts";
import { FlagError, type FlagSpec, formatFlagHelp, parseFlags } from "./flags.ts";

/**
 * `lockd run`'s own exit statuses, one row each, from sysexits.h where one fits (2 for a usage
 * error, as every lockd command). Otherwise it exits with the command's status (128 + the signal
 * number when a signal ended it). The usage lists these rows; README.md and docs/operations.md
 * list them too (tests/cli/docs_test.ts compares), and tests/cli/exit_codes_test.ts produces each.
 */
export const RUN_EXIT = {
  /** The server cannot be reached, or it refused the request for a reason no other row names. */
  unreachable: { status: 1, when: "the server cannot be reached (or refused for another reason)" },
  usage: { status: 2, when: "a usage error (a bad flag or value, -cert without -key)" },
  /** EX_DATAERR: the lock name is refused (INVALID_ARGUMENT); asking again cannot help. */
  badName: { status: 65, when: "the server refused the lock name (INVALID_ARGUMENT)" },
  /** EX_UNAVAILABLE. */
  lockLost: { status: 69, when: "the lock was lost while the command ran" },
  /** EX_TEMPFAIL: try again later. */
  waitTimeout: { status: 75, when: "-wait ran out before the lock was granted" },
  /** EX_NOPERM: the ACL does not give this client the lock. */
  denied: { status: 77, when: "the ACL denied the lock (ACL_DENIED)" },
  /** EX_CONFIG: a -ca, -cert or -key file cannot be read or does not fit. */
  tlsFiles: { status: 78, when: "a -ca, -cert or -key file cannot be read or used" },
  /** As a shell says for a command it cannot start. */
  cannotRun: { status: 127, when: "CMD cannot be started" },
} as const;

/** Exit status when `-wait` ran out before the lock was granted (EX_TEMPFAIL: try again later). */
export const EXIT_WAIT_TIMEOUT = RUN_EXIT.waitTimeout.status;
/** Exit status when the lock was lost while the command ran (EX_UNAVAILABLE). */
export const EXIT_LOCK_LOST = RUN_EXIT.lockLost.status;

export const RUN_FLAGS: readonly FlagSpec[] = [
  {
    name: "addr",
    kind: "string",
    help: "lockd server host:port, or the nodes of a cluster: host:port,host:port,...",
    defaultText: "127.0.0.1:7400",
  },
  {
    name: "lease",
    kind: "duration",
    help: "lease length (heartbeats keep it alive)",
    defaultText: "server default",
  },
  {
    name: "wait",
    kind: "duration",
    help: "give up waiting after this long",
    defaultText: "forever",
  },
  {
    name: "kill-grace",
    kind: "duration",
    help: "after a lost lock, time between SIGTERM and SIGKILL to the command's process group",
    defaultText: "5s",
  },
  {
    name: "client-name",
    kind: "string",
    help: "client name sent to the server (admin API, audit log); cut to 256 bytes",
    defaultText: "lockd-run@HOST:PID",
  },
  {
    name: "shared",
    kind: "bool",
    help: "take a shared (read) lock: shared holders run together, an exclusive one alone",
  },
  {
    name: "limit",
    kind: "int",
    help: "take one of N slots of a semaphore (LOCKD_SLOT says which); 0 = the lock's or a rule's",
    defaultText: "1, a plain lock",
  },
  {
    name: "value",
    kind: "string",
    help: "publish this value while holding the lock (query/observe show it; LOCKD_VALUE)",
  },
  { name: "ca", kind: "string", help: "CA certificate (PEM) of the server; turns TLS on" },
  { name: "cert", kind: "string", help: "client certificate (PEM) for mutual TLS" },
  { name: "key", kind: "string", help: "client private key (PEM) for mutual TLS" },
];

export const RUN_USAGE = `Usage: lockd run NAME [flags] -- CMD [ARGS...]

Waits for the lock NAME, runs CMD in its own process group with LOCKD_LOCK,
LOCKD_TOKEN and LOCKD_SLOT in its environment (LOCKD_VALUE with -value,
LOCKD_WRITE_GENERATION with -shared), releases the lock when CMD and every process it
started in its group have exited, and exits with CMD's status. If the lock is
lost (expired, force-released, session closed, or the lease could not be
confirmed in time), the whole group gets SIGTERM, then SIGKILL after
-kill-grace; once no process of the group is left, lockd run says why and exits
${EXIT_LOCK_LOST}.

Exit statuses: CMD's own (128 + the signal number when a signal ended it), or
${
  Object.values(RUN_EXIT).map(({ status, when }) => `  ${String(status).padStart(3)}  ${when}`)
    .join("\n")
}

Flags:
${formatFlagHelp(RUN_FLAGS)}`;

export interface RunIo {
  stderr: (line: string) => void;
  /**
   * The clock and timers of the client, the progress lines, the kill grace and the wait for the
   * command's group (tests pass a manual one).
   */
  scheduler?: Scheduler;
}

/** `lockd run`: returns the exit status. */
export async function runCommand(
  args: readonly string[],
  io: RunIo = { stderr: (line) => console.error(line) },
): Promise<number> {
  const parsed = parseRunArgs(args, io);
  if (typeof parsed === "number") return parsed;
  const { name, command, values, addrs } = parsed;
  const leaseMs = (values.get("lease") as number | undefined) ?? 0;
  const waitMs = values.get("wait") as number | undefined;
  const killGraceMs = (values.get("kill-grace") as number | undefined) ?? KILL_GRACE_MS_DEFAULT;

  let tls;
  try {
    tls = await loadClientTls({
      ca: values.get("ca") as string | undefined,
      cert: values.get("cert") as string | undefined,
      key: values.get("key") as string | undefined,
    });
  } catch (error) {
    io.stderr(`lockd run: ${(error as Error).message}`);
    return RUN_EXIT.tlsFiles.status;
  }
  const scheduler = io.scheduler ?? systemScheduler;
  const reconnects: Reconnects = { attempt: 0, lastError: null };
  let client: Client;
  const startMs = scheduler.monotonicMs();
  try {
    client = await connectWithin(waitMs, scheduler, () =>
      connect({
        ...(addrs.length === 1 ? { addr: addrs[0] } : { addrs }),
        tls,
        clientName: (values.get("client-name") as string | undefined) ?? runClientName(),
        // A server that breaks the protocol is left (the client reconnects elsewhere); say so.
        onProtocolError: (error) => io.stderr(`lockd run: ${error.message}`),
        scheduler,
        onReconnectFailed: (attempt, error) => {
          reconnects.attempt = attempt;
          reconnects.lastError = error;
        },
      }));
  } catch (error) {
    io.stderr(`lockd run: ${(error as Error).message}`);
    return RUN_EXIT.unreachable.status;
  }
  try {
    let lock: Lock;
    const progress = reportWhileUnanswered(client, name, addrs, reconnects, scheduler, io);
    try {
      const leftMs = waitMs === undefined
        ? undefined
        : Math.max(0, waitMs - (scheduler.monotonicMs() - startMs));
      lock = await client.acquire(name, { leaseMs, waitMs: leftMs, ...kindOptions(values) });
    } catch (error) {
      if (error instanceof LockdError && error.code === WIRE_CODES.WAIT_TIMEOUT.code) {
        io.stderr(`lockd run: cannot acquire lock "${name}": wait timed out after ${waitMs} ms`);
        return EXIT_WAIT_TIMEOUT;
      }
      io.stderr(`lockd run: ${acquireFailureText(name, error)}`);
      return acquireFailureStatus(error);
    } finally {
      progress.cancel();
    }
    return await runHolding(lock, command, killGraceMs, scheduler, io);
  } finally {
    await client.close();
  }
}

/**
 * The first connect, tried again (every second at most) until `-wait` has passed: a cluster in
 * the middle of a fail-over answers within it (the client itself goes round several addresses
 * until its connect bound). Without `-wait`, or on a failure no retry mends (a bad address, TLS
 * against a plain listener, a refused certificate or redirect), one try.
 */
async function connectWithin(
  waitMs: number | undefined,
  scheduler: Scheduler,
  open: () => Promise<Client>,
): Promise<Client> {
  const endMs = scheduler.monotonicMs() + (waitMs ?? 0);
  for (;;) {
    try {
      return await open();
    } catch (error) {
      const leftMs = endMs - scheduler.monotonicMs();
      if (leftMs <= 0 || isFinal(error) || error instanceof RangeError) throw error;
      await new Promise<void>((resolve) =>
        scheduler.setTimer(resolve, Math.min(RUN_CONNECT_RETRY_MS, leftMs))
      );
      if (scheduler.monotonicMs() >= endMs) throw error;
    }
  }
}

/** `lockd run`'s arguments, checked; or, when they are not usable, the exit status. */
function parseRunArgs(args: readonly string[], io: RunIo): RunArgs | number {
  let parsed;
  try {
    parsed = parseFlags(args, RUN_FLAGS);
    if (parsed.positionals.length !== 1) {
      throw new FlagError("lockd run needs exactly one lock NAME before --");
    }
    if (parsed.afterDoubleDash === null || parsed.afterDoubleDash.length === 0) {
      throw new FlagError("lockd run needs a command after --");
    }
    const limit = parsed.values.get("limit") as number | undefined;
    if (limit !== undefined && !(limit >= 0 && limit <= 0xffff_ffff)) {
      throw new FlagError(`-limit must be 0 to 4294967295, not ${limit}`);
    }
    if (!parsed.values.get("cert") !== !parsed.values.get("key")) {
      throw new FlagError("-cert and -key go together (the client certificate and its key)");
    }
  } catch (error) {
    if (error instanceof FlagError) {
      io.stderr(`lockd run: ${error.message}`);
      io.stderr(RUN_USAGE);
      return RUN_EXIT.usage.status;
    }
    throw error;
  }
  const values = parsed.values;
  const addrs = ((values.get("addr") as string | undefined) ?? "127.0.0.1:7400").split(",")
    .map((a) => a.trim()).filter((a) => a !== "");
  if (addrs.length === 0) {
    io.stderr("lockd run: -addr needs at least one host:port");
    io.stderr(RUN_USAGE);
    return RUN_EXIT.usage.status;
  }
  return { name: parsed.positionals[0], command: parsed.afterDoubleDash, values, addrs };
}

/** What `lockd run` was asked to do. */
interface RunArgs {
  readonly name: string;
  readonly command: string[];
  readonly values: ReturnType<typeof parseFlags>["values"];
  readonly addrs: string[];
}

/**
 * Runs the command in its own process group while the lock is held. On a loss (any reason,
 * the local lease deadline included) the whole group gets SIGTERM, then SIGKILL after
 * `killGraceMs`; the loss is reported, and the status returned, only once every process of the
 * group is gone. When the command exits by itself, processes it left running in its group
 * (background jobs) keep the lock held until they exit too.
 */
async function runHolding(
  lock: Lock,
  command: string[],
  killGraceMs: number,
  scheduler: Scheduler,
  io: RunIo,
): Promise<number> {
  if (lock.lost.aborted) {
    io.stderr(
      `lockd run: ${(lock.lost.reason as LockLostError).message}; the command was not started`,
    );
    return EXIT_LOCK_LOST;
  }
  let child: Deno.ChildProcess;
  let group: ProcessGroup;
  try {
    ({ child, group } = spawnInGroup(command, lockEnvironment(lock)));
  } catch (error) {
    await lock.release();
    io.stderr(`lockd run: cannot run "${command[0]}": ${(error as Error).message}`);
    return RUN_EXIT.cannotRun.status;
  }
  let killTimer: Timer | undefined;
  let killed = false;
  const onLost = () => {
    group.signal("SIGTERM");
    killTimer = scheduler.setTimer(() => {
      killed = true;
      group.signal("SIGKILL");
    }, killGraceMs);
  };
  lock.lost.addEventListener("abort", onLost, { once: true });
  // Forward the operator's Ctrl-C / SIGTERM to the whole group; the lock is released after it.
  const forwarded: [Deno.Signal, () => void][] = (["SIGINT", "SIGTERM", "SIGHUP"] as const).map((
    signal,
  ) => [signal, () => group.signal(signal)]);
  for (const [signal, handler] of forwarded) Deno.addSignalListener(signal, handler);
  try {
    const status = await child.status;
    await group.gone(scheduler);
    if (lock.lost.aborted) {
      io.stderr(
        `lockd run: ${
          (lock.lost.reason as LockLostError).message
        }; the command group was stopped (${
          killed ? `SIGKILL after ${killGraceMs} ms` : "SIGTERM"
        })`,
      );
      return EXIT_LOCK_LOST;
    }
    return status.signal ? 128 + signalNumber(status.signal) : status.code;
  } finally {
    killTimer?.cancel();
    lock.lost.removeEventListener("abort", onLost);
    for (const [signal, handler] of forwarded) Deno.removeSignalListener(signal, handler);
    await lock.release().catch(() => {});
  }
}

/** `-shared`, `-limit` and `-value` as acquire options (protocol version 2). */
function kindOptions(values: RunArgs["values"]): AcquireOptions {
  const limit = values.get("limit") as number | undefined;
  const value = values.get("value") as string | undefined;
  return {
    ...(values.get("shared") === true ? { mode: "shared" as const } : {}),
    ...(limit === undefined ? {} : { limit }),
    ...(value === undefined ? {} : { value }),
  };
}

/**
 * What the command finds in its environment: the lock's name, its fencing token and slot (0
 * but in a semaphore), the value it publishes (with `-value`) and, for a shared lock, the write
 * generation (the token of the lock's last exclusive grant: data written under a smaller token
 * is older than the newest writer's).
 */
function lockEnvironment(lock: Lock): Record<string, string> {
  return {
    LOCKD_LOCK: lock.name,
    LOCKD_TOKEN: String(lock.token),
    LOCKD_SLOT: String(lock.slot),
    ...(lock.value.length > 0 ? { LOCKD_VALUE: new TextDecoder().decode(lock.value) } : {}),
    ...(lock.mode === "shared" ? { LOCKD_WRITE_GENERATION: String(lock.writeGeneration) } : {}),
  };
}

/** The client's failed reconnect attempts since its last WELCOME. */
interface Reconnects {
  attempt: number;
  lastError: Error | null;
}

/**
 * While the lock is waited for: every RECONNECT_PROGRESS_INTERVAL_MS in which the client has no
 * connection (no node answers: it reconnects with back-off), one line saying what it tries, so
 * a `lockd run` that waits is never mistaken for a frozen one.
 */
function reportWhileUnanswered(
  client: Client,
  name: string,
  addrs: readonly string[],
  reconnects: Reconnects,
  scheduler: Scheduler,
  io: RunIo,
): Timer {
  let timer: Timer;
  const tick = () => {
    if (client.sessionId === 0 && reconnects.lastError !== null) {
      io.stderr(
        `lockd run: still waiting for lock ${JSON.stringify(name)}: no lockd node answers; ` +
          `trying ${addrs.join(", ")} (attempt ${reconnects.attempt}; last error: ` +
          `${reconnects.lastError.message})`,
      );
    }
    timer = scheduler.setTimer(tick, RECONNECT_PROGRESS_INTERVAL_MS);
  };
  timer = scheduler.setTimer(tick, RECONNECT_PROGRESS_INTERVAL_MS);
  return { cancel: () => timer.cancel() };
}

/** The exit status of an ACQUIRE the server refused (WAIT_TIMEOUT aside). */
function acquireFailureStatus(error: unknown): number {
  if (!(error instanceof LockdError)) return RUN_EXIT.unreachable.status;
  switch (error.code) {
    case WIRE_CODES.ACL_DENIED.code:
      return RUN_EXIT.denied.status;
    case WIRE_CODES.INVALID_ARGUMENT.code:
      return RUN_EXIT.badName.status;
    default:
      return RUN_EXIT.unreachable.status;
  }
}

/** The line for a refused ACQUIRE: the server's message and the wire code's name. */
function acquireFailureText(name: string, error: unknown): string {
  if (!(error instanceof LockdError)) return (error as Error).message;
  const quoted = JSON.stringify(name);
  const message = error.message.includes(quoted)
    ? error.message
    : `Cannot acquire lock ${quoted}: ${error.message}`;
  return `${message} (${error.codeName})`;
}

/**
 * `lockd-run@<host>:<pid>`: which machine and which process hold the lock, for the admin API and
 * the audit log. The host name comes from Deno when the process may read it (`--allow-sys`),
 * else from the kernel's file where reading is allowed (the shipped binary has `--allow-read`);
 * nothing here asks for a permission, so a terminal never sees a prompt.
 */
function runClientName(): string {
  return composeClientName("lockd-run", runHostName(), Deno.pid);
}

function runHostName(): string {
  try {
    if (Deno.permissions.querySync({ name: "sys", kind: "hostname" }).state === "granted") {
      return Deno.hostname();
    }
    for (const path of ["/proc/sys/kernel/hostname", "/etc/hostname"]) {
      if (Deno.permissions.querySync({ name: "read", path }).state !== "granted") continue;
      try {
        const host = Deno.readTextFileSync(path).trim();
        if (host !== "") return host;
      } catch {
        // not on this system
      }
    }
  } catch {
    // a permission query that fails: go without the host
  }
  return "";
}

function signalNumber(signal: Deno.Signal): number {
  const numbers: Partial<Record<Deno.Signal, number>> = {
    SIGHUP: 1,
    SIGINT: 2,
    SIGQUIT: 3,
    SIGKILL: 9,
    SIGTERM: 15,
  };
  return numbers[signal] ?? 0;
}
