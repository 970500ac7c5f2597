/**
 * `lockd observe NAME|GLOB`: one JSON line per state of the locks it names, for scripts and
 * `jq` (protocol version 2: WATCH through the client's `observe`, which watches again after a
 * reconnect or a fail-over and goes on with a fresh snapshot). `-once` prints the state of one
 * lock now (QUERY) and exits.
 *
 * @module
 */

import { type Client, connect } from "../client/client.ts";
import { type Scheduler, systemScheduler, type Timer } from "../clock.ts";
import { RECONNECT_PROGRESS_INTERVAL_MS } from "../limits.ts";
import { composeClientName } from "../client/client_name.ts";
import { LockdError } from "../client/errors.ts";
import type { LockHolder, LockInfo } from "../client/observe.ts";
import { loadClientTls } from "../security/tls.ts";
import { WIRE_CODES } from "../wire/codes.ts";
import { FlagError, type FlagSpec, formatFlagHelp, parseFlags } from "./flags.ts";

/** `lockd observe`'s exit statuses, one row each (sysexits.h where one fits, as `lockd run`). */
export const OBSERVE_EXIT = {
  done: { status: 0, when: "stopped by SIGINT or SIGTERM, or -once printed the state" },
  unreachable: { status: 1, when: "the server cannot be reached (or refused for another reason)" },
  usage: { status: 2, when: "a usage error (a bad flag or value, -cert without -key)" },
  /** EX_DATAERR: a name or glob the server refuses. */
  badPattern: { status: 65, when: "the server refused the name or glob (INVALID_ARGUMENT)" },
  /** EX_NOPERM. */
  denied: { status: 77, when: "the ACL does not let this client read the locks (ACL_DENIED)" },
  /** EX_CONFIG. */
  tlsFiles: { status: 78, when: "a -ca, -cert or -key file cannot be read or used" },
} as const;

export const OBSERVE_FLAGS: readonly FlagSpec[] = [
  {
    name: "addr",
    kind: "string",
    help: "lockd server host:port, or the nodes of a cluster: host:port,host:port,...",
    defaultText: "127.0.0.1:7400",
  },
  { name: "once", kind: "bool", help: "print the state of NAME now (no glob) and exit" },
  {
    name: "client-name",
    kind: "string",
    help: "client name sent to the server (admin API, audit log); cut to 256 bytes",
    defaultText: "lockd-observe:PID",
  },
  { name: "ca", kind: "string", help: "CA certificate (PEM) of the server; turns TLS on" },
  { name: "cert", kind: "string", help: "client certificate (PEM) for mutual TLS" },
  { name: "key", kind: "string", help: "client private key (PEM) for mutual TLS" },
];

export const OBSERVE_USAGE = `Usage: lockd observe NAME|GLOB [flags]

Prints one JSON line per state of the lock NAME, or of every lock GLOB matches
(the ACL's glob language: service/*, jobs/**): first the current state of each,
then one line per change (granted, ended with its reason, value or queue
changed), until SIGINT or SIGTERM. After a reconnect or a fail-over it watches
again and prints a fresh snapshot. A line:

  {"name":"service/leader","event":"granted","reason":null,"kind":"exclusive",
   "limit":1,"queueLength":0,"owners":1,"holder":{"token":1795426718504001,
   "heldMs":0,"leaseMs":10000,"mode":"exclusive","slot":0,"identity":"",
   "clientName":"api@host-1:4242","value":"10.0.0.7:8080"},"holders":[...]}

"holder" is the oldest owner, null when nobody holds the lock; a value is shown
as UTF-8 text ("valueBase64" is added when its bytes are not UTF-8). While no
node answers, nothing is printed (the last states may be stale) and a line on
standard error every 10 s says what it tries.

Exit statuses:
${
  Object.values(OBSERVE_EXIT).map(({ status, when }) => `  ${String(status).padStart(3)}  ${when}`)
    .join("\n")
}

Flags:
${formatFlagHelp(OBSERVE_FLAGS)}`;

/** Where `lockd observe` writes, and what stops it; tests replace them. */
export interface ObserveIo {
  stdout(line: string): void;
  stderr(line: string): void;
  /** Aborted to stop (default: SIGINT or SIGTERM). */
  signal?: AbortSignal;
  /** The client's clock and timers and the progress line's (default: the process clock). */
  scheduler?: Scheduler;
}

/** The reconnects since the last WELCOME, as the client reports them. */
interface Reconnects {
  attempt: number;
  lastError: Error | null;
}

/** `lockd observe`: returns the exit status. */
export async function observeCommand(
  args: readonly string[],
  io: ObserveIo = {
    stdout: (line) => console.log(line),
    stderr: (line) => console.error(line),
  },
): Promise<number> {
  const parsed = parseObserveArgs(args, io);
  if (typeof parsed === "number") return parsed;
  const { values } = parsed;
  const pattern = parsed.positionals[0];
  const addrs = ((values.get("addr") as string | undefined) ?? "127.0.0.1:7400").split(",")
    .map((a) => a.trim()).filter((a) => a !== "");
  let tls;
  try {
    tls = await loadClientTls({
      ca: values.get("ca") as string | undefined,
      cert: values.get("cert") as string | undefined,
      key: values.get("key") as string | undefined,
    });
  } catch (error) {
    io.stderr(`lockd observe: ${(error as Error).message}`);
    return OBSERVE_EXIT.tlsFiles.status;
  }
  let client: Client;
  const reconnects: Reconnects = { attempt: 0, lastError: null };
  const scheduler = io.scheduler ?? systemScheduler;
  try {
    client = await connect({
      ...(addrs.length === 1 ? { addr: addrs[0] } : { addrs }),
      tls,
      clientName: (values.get("client-name") as string | undefined) ??
        composeClientName("lockd-observe", "", Deno.pid),
      onProtocolError: (error) => io.stderr(`lockd observe: ${error.message}`),
      scheduler,
      onReconnectFailed: (attempt, error) => {
        reconnects.attempt = attempt;
        reconnects.lastError = error;
      },
    });
  } catch (error) {
    io.stderr(`lockd observe: ${(error as Error).message}`);
    return OBSERVE_EXIT.unreachable.status;
  }
  try {
    if (values.get("once") === true) {
      io.stdout(JSON.stringify(stateJson(await client.query(pattern))));
      return OBSERVE_EXIT.done.status;
    }
    const progress = reportWhileUnanswered(client, addrs, reconnects, scheduler, io);
    try {
      return await printStates(client, pattern, io);
    } finally {
      progress.cancel();
    }
  } catch (error) {
    io.stderr(`lockd observe: ${(error as Error).message}`);
    return failureStatus(error);
  } finally {
    await client.close();
  }
}

/** The flags and the one NAME or GLOB, or the usage error's exit status (said on stderr). */
function parseObserveArgs(args: readonly string[], io: ObserveIo) {
  try {
    const parsed = parseFlags(args, OBSERVE_FLAGS);
    if (parsed.positionals.length !== 1) {
      throw new FlagError("lockd observe needs exactly one lock NAME or GLOB");
    }
    if (!parsed.values.get("cert") !== !parsed.values.get("key")) {
      throw new FlagError("-cert and -key go together (the client certificate and its key)");
    }
    if (parsed.values.get("once") === true && /[*?[\\]/.test(parsed.positionals[0])) {
      throw new FlagError("-once takes a lock NAME, not a glob");
    }
    return parsed;
  } catch (error) {
    if (!(error instanceof FlagError)) throw error;
    io.stderr(`lockd observe: ${error.message}`);
    io.stderr(OBSERVE_USAGE);
    return OBSERVE_EXIT.usage.status;
  }
}

/** Every state of `pattern` as a line, until the signal (or SIGINT/SIGTERM). */
async function printStates(client: Client, pattern: string, io: ObserveIo): Promise<number> {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  const signals = io.signal === undefined ? (["SIGINT", "SIGTERM"] as const) : [];
  for (const signal of signals) Deno.addSignalListener(signal, onSignal);
  io.signal?.addEventListener("abort", onSignal, { once: true });
  try {
    for await (const state of client.observe(pattern, { signal: stop.signal })) {
      try {
        io.stdout(JSON.stringify(stateJson(state)));
      } catch {
        break; // the reader went away (`lockd observe NAME | head -1`): done
      }
    }
    return OBSERVE_EXIT.done.status;
  } finally {
    for (const signal of signals) Deno.removeSignalListener(signal, onSignal);
    io.signal?.removeEventListener("abort", onSignal);
  }
}

/**
 * Every RECONNECT_PROGRESS_INTERVAL_MS in which the client has no connection (no node answers:
 * it reconnects with back-off), one line on standard error saying what it tries, as `lockd run`
 * does. Standard output stays JSON states only: nothing is printed there until a node answers
 * and the watch's fresh snapshot comes.
 */
function reportWhileUnanswered(
  client: Client,
  addrs: readonly string[],
  reconnects: Reconnects,
  scheduler: Scheduler,
  io: ObserveIo,
): Timer {
  let timer: Timer;
  const tick = () => {
    if (client.sessionId === 0 && reconnects.lastError !== null) {
      io.stderr(
        `lockd observe: no lockd node answers; trying ${addrs.join(", ")} (attempt ` +
          `${reconnects.attempt}; last error: ${reconnects.lastError.message}); the states ` +
          `printed last may be stale until a fresh snapshot`,
      );
    }
    timer = scheduler.setTimer(tick, RECONNECT_PROGRESS_INTERVAL_MS);
  };
  timer = scheduler.setTimer(tick, RECONNECT_PROGRESS_INTERVAL_MS);
  return { cancel: () => timer.cancel() };
}

function failureStatus(error: unknown): number {
  if (!(error instanceof LockdError)) return OBSERVE_EXIT.unreachable.status;
  if (error.code === WIRE_CODES.ACL_DENIED.code) return OBSERVE_EXIT.denied.status;
  if (error.code === WIRE_CODES.INVALID_ARGUMENT.code) return OBSERVE_EXIT.badPattern.status;
  return OBSERVE_EXIT.unreachable.status;
}

/** A state as the JSON object of one line. */
function stateJson(state: LockInfo): Record<string, unknown> {
  const holders = state.holders.map(holderJson);
  return {
    name: state.name,
    event: state.event,
    reason: state.reason,
    kind: state.kind,
    limit: state.limit,
    queueLength: state.queueLength,
    owners: state.owners,
    holder: holders[0] ?? null,
    holders,
  };
}

function holderJson(holder: LockHolder): Record<string, unknown> {
  const { value, ...rest } = holder;
  let text: string;
  let utf8 = true;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(value);
  } catch {
    text = new TextDecoder().decode(value);
    utf8 = false;
  }
  return { ...rest, value: text, ...(utf8 ? {} : { valueBase64: base64(value) }) };
}

function base64(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}
