import { KILL_GRACE_MS_DEFAULT } from "../limits.ts";
import { type Client, connect, type Lock } from "../client/client.ts";
import { composeClientName } from "../client/client_name.ts";
import { LockdError, LockLostError } from "../client/errors.ts";
import { WIRE_CODES } from "../protocol/codes.ts";
import { loadClientTls } from "../security/tls.ts";
import { type ProcessGroup, spawnInGroup } from "./process_group.ts";
import { FlagError, type FlagSpec, formatFlagHelp, parseFlags } from "./flags.ts";

/** Exit status when `-wait` ran out before the lock was granted (EX_TEMPFAIL: try again later). */
export const EXIT_WAIT_TIMEOUT = 75;
/** Exit status when the lock was lost while the command ran (EX_UNAVAILABLE). */
export const EXIT_LOCK_LOST = 69;
/** Exit status for usage errors. */
const EXIT_USAGE = 2;
/** Exit status when the server cannot be reached or refuses the request. */
const EXIT_ERROR = 1;

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
  { name: "ca", kind: "string", help: "CA certificate (PEM) of the server; turns TLS on" },
  { name: "cert", kind: "string", help: "client certificate (PEM) for mutual TLS" },
  { name: "key", kind: "string", help: "client private key (PEM) for mutual TLS" },
];

export const RUN_USAGE = `Usage: lockd run NAME [flags] -- CMD [ARGS...]

Waits for the lock NAME, runs CMD in its own process group with LOCKD_LOCK and
LOCKD_TOKEN in its environment, releases the lock when CMD and every process it
started in its group have exited, and exits with CMD's status. If the lock is
lost (expired, force-released, session closed, or the lease could not be
confirmed in time), the whole group gets SIGTERM, then SIGKILL after
-kill-grace; once no process of the group is left, lockd run says why and exits
${EXIT_LOCK_LOST}. If -wait runs out it exits ${EXIT_WAIT_TIMEOUT}; ${EXIT_ERROR} when the server cannot be reached.

Flags:
${formatFlagHelp(RUN_FLAGS)}`;

export interface RunIo {
  stderr: (line: string) => void;
}

/** `lockd run`: returns the exit status. */
export async function runCommand(
  args: readonly string[],
  io: RunIo = { stderr: (line) => console.error(line) },
): Promise<number> {
  let name: string;
  let command: string[];
  let values;
  try {
    const parsed = parseFlags(args, RUN_FLAGS);
    values = parsed.values;
    if (parsed.positionals.length !== 1) {
      throw new FlagError("lockd run needs exactly one lock NAME before --");
    }
    if (parsed.afterDoubleDash === null || parsed.afterDoubleDash.length === 0) {
      throw new FlagError("lockd run needs a command after --");
    }
    name = parsed.positionals[0];
    command = parsed.afterDoubleDash;
    if (!values.get("cert") !== !values.get("key")) {
      throw new FlagError("-cert and -key go together (the client certificate and its key)");
    }
  } catch (error) {
    if (error instanceof FlagError) {
      io.stderr(`lockd run: ${error.message}`);
      io.stderr(RUN_USAGE);
      return EXIT_USAGE;
    }
    throw error;
  }
  const addrs = ((values.get("addr") as string | undefined) ?? "127.0.0.1:7400").split(",")
    .map((a) => a.trim()).filter((a) => a !== "");
  if (addrs.length === 0) {
    io.stderr("lockd run: -addr needs at least one host:port");
    io.stderr(RUN_USAGE);
    return EXIT_USAGE;
  }
  const leaseMs = (values.get("lease") as number | undefined) ?? 0;
  const waitMs = values.get("wait") as number | undefined;
  const killGraceMs = (values.get("kill-grace") as number | undefined) ?? KILL_GRACE_MS_DEFAULT;

  let client: Client;
  try {
    const tls = await loadClientTls({
      ca: values.get("ca") as string | undefined,
      cert: values.get("cert") as string | undefined,
      key: values.get("key") as string | undefined,
    });
    client = await connect({
      ...(addrs.length === 1 ? { addr: addrs[0] } : { addrs }),
      tls,
      clientName: (values.get("client-name") as string | undefined) ?? runClientName(),
      // A server that breaks the protocol is left (the client reconnects elsewhere); say so.
      onProtocolError: (error) => io.stderr(`lockd run: ${error.message}`),
    });
  } catch (error) {
    io.stderr(`lockd run: ${(error as Error).message}`);
    return EXIT_ERROR;
  }
  try {
    let lock: Lock;
    try {
      lock = await client.acquire(name, { leaseMs, waitMs });
    } catch (error) {
      if (error instanceof LockdError && error.code === WIRE_CODES.WAIT_TIMEOUT.code) {
        io.stderr(`lockd run: cannot acquire lock "${name}": wait timed out after ${waitMs} ms`);
        return EXIT_WAIT_TIMEOUT;
      }
      io.stderr(`lockd run: ${(error as Error).message}`);
      return EXIT_ERROR;
    }
    return await runHolding(lock, command, killGraceMs, io);
  } finally {
    await client.close();
  }
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
    ({ child, group } = spawnInGroup(command, {
      LOCKD_LOCK: lock.name,
      LOCKD_TOKEN: String(lock.token),
    }));
  } catch (error) {
    await lock.release();
    io.stderr(`lockd run: cannot run "${command[0]}": ${(error as Error).message}`);
    return 127;
  }
  let killTimer: ReturnType<typeof setTimeout> | undefined;
  let killed = false;
  const onLost = () => {
    group.signal("SIGTERM");
    killTimer = setTimeout(() => {
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
    await group.gone();
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
    clearTimeout(killTimer);
    lock.lost.removeEventListener("abort", onLost);
    for (const [signal, handler] of forwarded) Deno.removeSignalListener(signal, handler);
    await lock.release().catch(() => {});
  }
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
