/**
 * `lockd admin`: a small client of the admin HTTP API, as one table of subcommands
 * ({@link ADMIN_SUBCOMMANDS}: operands, flags, the request, what an answer prints, watch mode)
 * from which the usage, the checks of the command line and the dispatch follow, like `main.ts`'s
 * table of commands.
 *
 * ```
 * lockd admin [-admin ADDR] [-token-file F] [-json] info
 * lockd admin ... locks [-match GLOB] [-watch [-interval D]]
 * lockd admin ... show NAME [-watch [-interval D]]
 * lockd admin ... release NAME [-token T]
 * lockd admin ... kick NAME REMOTE_ADDR
 * ```
 *
 * Flags may come before or after the subcommand. Exit codes: 0 done, 1 the
 * request failed (HTTP error, server unreachable, token file unusable), 2 a
 * usage error. With `-watch`, `locks` and `show` ask again every `-interval`
 * (one request at a time, never two at once) and redraw the screen like
 * `watch` on a terminal, or print the view again each time it changes, like
 * `kubectl get -w`, when the output is a pipe; Ctrl-C ends it (exit 0).
 *
 * A cluster standby answers lock views and actions with 307 to the leader's admin API. It is
 * followed only to an address of the `-admin` list: the bearer token never goes to a host the
 * operator did not name (a redirect elsewhere is refused, naming its target).
 *
 * @module
 */

import type { InfoJson, LockJson } from "../admin/views.ts";
import { rfc3339, type Scheduler, systemScheduler } from "../clock.ts";
import { formatHostPort, parseHostPort } from "../host_port.ts";
import {
  ADMIN_WAIT_MS_CLUSTER_DEFAULT,
  WATCH_INTERVAL_MS_DEFAULT,
  WATCH_INTERVAL_MS_MIN,
} from "../limits.ts";
import {
  type AdminRequest,
  adminRequester,
  type Answer,
  type Reply,
  retryWhileNoLeader,
} from "./admin_request.ts";
import {
  formatDurationMs,
  formatInfo,
  formatLiftedReservation,
  formatLock,
  formatLockList,
  formatReleased,
} from "./admin_text.ts";
import { FlagError, type FlagSpec, formatFlagHelp, HelpRequested, parseFlags } from "./flags.ts";
import { errorText } from "../error_text.ts";

/** Default admin API address (matches the documented `-admin-listen`). */
const ADMIN_ADDR_DEFAULT = "127.0.0.1:7401";

const FLAGS: readonly FlagSpec[] = [
  {
    name: "admin",
    kind: "string",
    help: "admin API host:port, or the admin APIs of a cluster's nodes: host:port,host:port,...",
    defaultText: ADMIN_ADDR_DEFAULT,
  },
  { name: "token-file", kind: "string", help: "file with the admin bearer token" },
  { name: "json", kind: "bool", help: "print the raw JSON of the admin API" },
  { name: "match", kind: "string", help: "locks: only names matching this glob" },
  {
    name: "token",
    kind: "string",
    help: "release: only while the holder's fencing token is this one (409 if the holder changed)",
  },
  {
    name: "watch",
    kind: "bool",
    help: "locks, show: ask again every -interval and redraw (Ctrl-C stops)",
  },
  {
    name: "interval",
    kind: "duration",
    help: "with -watch: time between two requests",
    defaultText: `${WATCH_INTERVAL_MS_DEFAULT / 1000}s`,
  },
  {
    name: "wait",
    kind: "duration",
    help: "ask again while no node answers for the leader (a fail-over), until this has passed",
    defaultText: `${ADMIN_WAIT_MS_CLUSTER_DEFAULT / 1000}s with several -admin, else 0s`,
  },
];

/** What the flags of one subcommand alone (`-match`, `-token`) said. */
interface SubcommandOptions {
  readonly match?: string;
  readonly fencingToken?: string;
}

/** One `lockd admin` subcommand: a row of {@link ADMIN_SUBCOMMANDS}. */
interface AdminSubcommand {
  /** Its operands, as the usage names them. */
  readonly operands: readonly string[];
  /** The flags of some subcommands only that it takes; each is refused by the others. */
  readonly flags: readonly ("match" | "token")[];
  /** The usage's synopsis after the operands (its own flags). */
  readonly synopsisFlags?: string;
  /** What the usage says it does; further lines continue under the first. */
  readonly summary: readonly string[];
  /** The admin API request it makes. */
  request(operands: readonly string[], options: SubcommandOptions): AdminRequest;
  /** What a successful answer prints (without -json). */
  print(body: string, operands: readonly string[]): string;
  /** With -watch (only the subcommands that have this): how each answer is shown. */
  readonly watch?: {
    /** The view of a successful answer's body; `durations`: with held and waiting times. */
    text(body: string, durations: boolean): string;
    /** The body to show for an answer that is a state rather than an error, or null. */
    idle?(answer: Answer, operands: readonly string[]): string | null;
  };
}

const lockPath = (name: string) => `/api/locks/${encodeURIComponent(name)}`;

/** Every `lockd admin` subcommand, in the order of the usage. */
const ADMIN_SUBCOMMANDS: Readonly<Record<string, AdminSubcommand>> = {
  info: {
    operands: [],
    flags: [],
    summary: ["version, uptime, configuration, counts"],
    request: () => ({ method: "GET", path: "/api/info" }),
    print: (body) => formatInfo(JSON.parse(body) as InfoJson),
  },
  locks: {
    operands: [],
    flags: ["match"],
    synopsisFlags: "[-match GLOB]",
    summary: ["locks with an owner or waiters"],
    request: (_, { match }) => ({
      method: "GET",
      path: match === undefined ? "/api/locks" : `/api/locks?match=${encodeURIComponent(match)}`,
    }),
    print: (body) => formatLockList((JSON.parse(body) as { locks: LockJson[] }).locks),
    watch: {
      text: (body) => formatLockList((JSON.parse(body) as { locks: LockJson[] }).locks),
    },
  },
  show: {
    operands: ["NAME"],
    flags: [],
    summary: ["one lock: holder and waiters (FIFO)"],
    request: ([name]) => ({ method: "GET", path: lockPath(name) }),
    print: (body) => formatLock(JSON.parse(body) as LockJson),
    watch: {
      text: (body, durations) => formatLock(JSON.parse(body) as LockJson, durations),
      // In watch mode an idle lock is a state to show, not an error.
      idle: (answer, [name]) =>
        answer.status === 404 && /lock-not-found/.test(answer.body)
          ? JSON.stringify({ name, holder: null, waiters: [] } satisfies LockJson)
          : null,
    },
  },
  release: {
    operands: ["NAME"],
    flags: ["token"],
    synopsisFlags: "[-token T]",
    summary: ["force-release: disconnect the holder", "(with -token: only the holder of token T)"],
    // The precondition: the server answers 409 when the holder is not the one of this token.
    request: ([name], { fencingToken }) => ({
      method: "POST",
      path: `${lockPath(name)}/release${
        fencingToken === undefined ? "" : `?token=${fencingToken}`
      }`,
    }),
    print: (body) => formatReleased(JSON.parse(body) as LockJson),
  },
  "lift-reservation": {
    operands: ["NAME"],
    flags: [],
    summary: [
      "cluster mode: free a lock kept for its holder's reclaim",
      "after a fail-over (that holder is known to be gone)",
    ],
    request: ([name]) => ({ method: "POST", path: `${lockPath(name)}/lift-reservation` }),
    print: (body) => formatLiftedReservation(JSON.parse(body) as LockJson),
  },
  kick: {
    operands: ["NAME", "REMOTE_ADDR"],
    flags: [],
    summary: ["remove one waiter (REMOTE_ADDR as shown)"],
    request: ([name, remoteAddr]) => ({
      method: "DELETE",
      path: `${lockPath(name)}/waiters/${encodeURIComponent(remoteAddr)}`,
    }),
    print: (_, [name, remoteAddr]) =>
      `removed waiter ${remoteAddr} from lock "${name}"; a standard client reconnects and joins ` +
      `the tail of the queue again under a new address (same client name): stop or fix the ` +
      `client first if it should not come back\n`,
  },
};

/** The usage's lines for the subcommands, with the line for -watch after the last that has it. */
function subcommandUsage(): string {
  const names = Object.keys(ADMIN_SUBCOMMANDS);
  const watchable = names.filter((name) => ADMIN_SUBCOMMANDS[name].watch !== undefined);
  const rows: [string, readonly string[]][] = [];
  for (const name of names) {
    const { operands, synopsisFlags, summary } = ADMIN_SUBCOMMANDS[name];
    rows.push([[name, ...operands, ...(synopsisFlags ? [synopsisFlags] : [])].join(" "), summary]);
    if (name === watchable.at(-1)) {
      rows.push([`${watchable.join("|")} ... -watch`, ["the same, redrawn as locks change"]]);
    }
  }
  const synopses = rows.map(([synopsis]) => `lockd admin [flags] ${synopsis}`);
  const width = Math.max(...synopses.map((synopsis) => synopsis.length)) + 1;
  return rows.map(([, [first, ...more]], i) =>
    [`  ${synopses[i].padEnd(width)}${first}`, ...more.map((line) => " ".repeat(width + 2) + line)]
      .join("\n")
  ).join("\n");
}

export const ADMIN_USAGE = `Usage:
${subcommandUsage()}

Flags (before or after the subcommand):
${formatFlagHelp(FLAGS)}`;

/** Where `lockd admin` writes, and the clock it runs on; tests replace them. */
export interface AdminIo {
  stdout(text: string): void;
  stderr(text: string): void;
  /** Watch mode redraws the screen on a terminal, and prints changes only otherwise. */
  isTerminal: boolean;
  /** The clock and timers: each request's timeout, watch mode's interval and timestamps. */
  scheduler: Scheduler;
  /** Ends watch mode (the CLI aborts it on SIGINT). */
  signal?: AbortSignal;
  fetch: typeof fetch;
}

const encoder = new TextEncoder();

function writeAllSync(file: { writeSync(bytes: Uint8Array): number }, text: string): void {
  const bytes = encoder.encode(text);
  let written = 0;
  while (written < bytes.length) written += file.writeSync(bytes.subarray(written));
}

const STANDARD_IO: AdminIo = {
  stdout: (text) => writeAllSync(Deno.stdout, text),
  stderr: (text) => writeAllSync(Deno.stderr, text),
  get isTerminal() {
    return Deno.stdout.isTerminal();
  },
  scheduler: systemScheduler,
  fetch: (input, init) => fetch(input, init),
};

/** Clears a terminal and moves the cursor home (what `watch` and `clear` send). */
const CLEAR_SCREEN = "\x1b[H\x1b[2J";

/** A command line of `lockd admin` that passed every check. */
interface Invocation {
  readonly name: string;
  readonly subcommand: AdminSubcommand;
  readonly operands: readonly string[];
  readonly options: SubcommandOptions;
  readonly json: boolean;
  /** With -watch: the interval. */
  readonly watchIntervalMs: number | null;
  /** How long a first request is asked again while no node answers for the leader. */
  readonly waitMs: number;
  /** `-admin`, and the base URL of each address. */
  readonly adminAddrs: readonly string[];
  readonly baseUrls: readonly string[];
  readonly tokenFile?: string;
}

/** Runs `lockd admin ARGS`; returns the exit code. */
export async function adminCommand(
  args: readonly string[],
  io: Partial<AdminIo> = {},
): Promise<number> {
  const out = { ...STANDARD_IO, ...io };
  let values: Map<string, string | number | boolean>;
  let positionals: string[];
  try {
    ({ values, positionals } = parseFlags(args, FLAGS));
  } catch (error) {
    if (error instanceof HelpRequested) {
      out.stdout(`${ADMIN_USAGE}\n`);
      return 0;
    }
    if (error instanceof FlagError) return usageError(out, false, error.message);
    throw error;
  }
  const json = values.get("json") === true;
  const invocation = parseInvocation(values, positionals);
  if (typeof invocation === "string") return usageError(out, json, invocation);

  const headers: Record<string, string> = {};
  if (invocation.tokenFile !== undefined) {
    const token = await readAdminToken(invocation.tokenFile);
    if ("failure" in token) {
      out.stderr(json ? jsonError(token.failure, null, null) : `lockd admin: ${token.failure}\n`);
      return 1;
    }
    headers.authorization = `Bearer ${token.token}`;
  }
  const request = adminRequester(
    out,
    invocation.adminAddrs,
    invocation.baseUrls,
    invocation.subcommand.request(invocation.operands, invocation.options),
    headers,
  );
  return invocation.watchIntervalMs === null
    ? await askOnce(out, invocation, retryWhileNoLeader(out.scheduler, invocation.waitMs, request))
    : await watch(out, invocation, invocation.watchIntervalMs, request);
}

/** Prints a usage error (one JSON line with -json) and returns 2. */
function usageError(io: AdminIo, json: boolean, message: string): number {
  io.stderr(
    json
      ? jsonError(`${message} (lockd admin -h for the usage)`, null, null)
      : `lockd admin: ${message}\n\n${ADMIN_USAGE}\n`,
  );
  return 2;
}

/** `-FLAG only applies to the X and Y subcommands`, naming those that take it. */
function onlyAppliesTo(flag: string, takes: (subcommand: AdminSubcommand) => boolean): string {
  const names = Object.keys(ADMIN_SUBCOMMANDS).filter((name) => takes(ADMIN_SUBCOMMANDS[name]));
  return `-${flag} only applies to the ${names.join(" and ")} subcommand` +
    (names.length === 1 ? "" : "s");
}

/** The checked command line, or the usage error to print. */
function parseInvocation(
  values: Map<string, string | number | boolean>,
  positionals: readonly string[],
): Invocation | string {
  const [name, ...operands] = positionals;
  if (name === undefined) return "missing subcommand";
  const subcommand = Object.hasOwn(ADMIN_SUBCOMMANDS, name) ? ADMIN_SUBCOMMANDS[name] : undefined;
  if (subcommand === undefined) return `unknown subcommand "${name}"`;
  const arity = subcommand.operands.length;
  if (operands.length !== arity) {
    return `${name} takes ${arity === 0 ? "no" : arity} argument${
      arity === 1 ? "" : "s"
    }, got ${operands.length}`;
  }
  const match = values.get("match") as string | undefined;
  if (match !== undefined && !subcommand.flags.includes("match")) {
    return onlyAppliesTo("match", (s) => s.flags.includes("match"));
  }
  const fencingToken = values.get("token") as string | undefined;
  if (fencingToken !== undefined && !subcommand.flags.includes("token")) {
    return onlyAppliesTo("token", (s) => s.flags.includes("token"));
  }
  if (fencingToken !== undefined && !/^[1-9][0-9]{0,19}$/.test(fencingToken)) {
    return `-token must be a fencing token (a positive integer), got "${fencingToken}"`;
  }
  const watch = values.get("watch") === true;
  const intervalMs = (values.get("interval") as number | undefined) ?? WATCH_INTERVAL_MS_DEFAULT;
  if (values.has("interval") && !watch) return "-interval only applies with -watch";
  if (watch && subcommand.watch === undefined) {
    return onlyAppliesTo("watch", (s) => s.watch !== undefined);
  }
  if (intervalMs < WATCH_INTERVAL_MS_MIN) {
    return `-interval must be at least ${WATCH_INTERVAL_MS_MIN}ms`;
  }
  // Several admin addresses (a cluster): the first that answers for the leader is used.
  const adminAddrs = ((values.get("admin") as string | undefined) ?? ADMIN_ADDR_DEFAULT).split(",")
    .map((a) => a.trim()).filter((a) => a !== "");
  if (adminAddrs.length === 0) return "-admin needs at least one host:port";
  const baseUrls: string[] = [];
  try {
    for (const addr of adminAddrs) baseUrls.push(`http://${dialAddress(addr)}`);
  } catch (error) {
    if (error instanceof RangeError) return `-admin: ${error.message}`;
    throw error;
  }
  return {
    name,
    subcommand,
    operands,
    options: { match, fencingToken },
    json: values.get("json") === true,
    watchIntervalMs: watch ? intervalMs : null,
    waitMs: (values.get("wait") as number | undefined) ??
      (adminAddrs.length > 1 ? ADMIN_WAIT_MS_CLUSTER_DEFAULT : 0),
    adminAddrs,
    baseUrls,
    tokenFile: values.get("token-file") as string | undefined,
  };
}

/** The bearer token from `-token-file`, or why it cannot be used. */
async function readAdminToken(path: string): Promise<{ token: string } | { failure: string }> {
  let token: string;
  try {
    token = (await Deno.readTextFile(path)).trim();
  } catch (error) {
    return { failure: `cannot read the token file "${path}" (-token-file): ${messageOf(error)}` };
  }
  if (token === "") return { failure: `the token file "${path}" (-token-file) is empty` };
  return { token };
}

/** One request; prints the answer (or why there was none) and returns the exit code. */
async function askOnce(
  io: AdminIo,
  { subcommand, operands, json }: Invocation,
  request: () => Promise<Reply>,
): Promise<number> {
  const reply = await request();
  if ("failure" in reply) {
    io.stderr(json ? jsonError(reply.failure, null, null) : `lockd admin: ${reply.failure}\n`);
    return 1;
  }
  const { status, statusText, contentType, body } = reply;
  if (status < 200 || status > 299) {
    const text = describeFailure(status, statusText, contentType, body);
    io.stderr(
      json ? jsonError(text, status, problemOf(contentType, body)) : `lockd admin: ${text}\n`,
    );
    return 1;
  }
  if (json) {
    if (body !== "") io.stdout(body.endsWith("\n") ? body : `${body}\n`);
    return 0;
  }
  io.stdout(subcommand.print(body, operands));
  return 0;
}

/** Watch mode for `invocation` (its subcommand has `watch`): see {@link watchLoop}. */
async function watch(
  io: AdminIo,
  invocation: Invocation,
  intervalMs: number,
  request: () => Promise<Reply>,
): Promise<number> {
  const { name, operands, options, json } = invocation;
  const view = invocation.subcommand.watch!;
  const title = `lockd admin ${name}${operands.map((o) => ` ${o}`).join("")}${
    options.match === undefined ? "" : ` -match ${options.match}`
  }`;
  const header = `Every ${formatDurationMs(intervalMs)}: ${title} (admin API ${
    invocation.adminAddrs.join(",")
  })`;
  return await watchLoop(io, request, intervalMs, (answer) => {
    const body = view.idle?.(answer, operands) ??
      (answer.status < 200 || answer.status > 299 ? null : answer.body);
    if (body === null) {
      return {
        error: describeFailure(answer.status, answer.statusText, answer.contentType, answer.body),
      };
    }
    if (json) return { text: `${JSON.stringify(withoutDurations(JSON.parse(body)))}\n` };
    return { text: view.text(body, io.isTerminal) };
  }, header);
}

/**
 * With -json, a failure is one JSON line on standard error too, so a script
 * that parses the output never meets text: `{"error": "...", "status": 404,
 * "problem": {...}}` (`status` and `problem` null when no HTTP answer came).
 */
function jsonError(error: string, status: number | null, problem: unknown): string {
  return `${JSON.stringify({ error, status, problem })}\n`;
}

/** The problem+json body of an error answer, or null. */
function problemOf(contentType: string, body: string): unknown {
  if (!contentType.includes("json")) return null;
  try {
    return JSON.parse(body);
  } catch {
    return null;
  }
}

/**
 * A watched document without `held_for_ms` and `waiting_for_ms`: they grow with every request,
 * so a pipe would get a document each interval instead of one per change (`since` and
 * `queued_at` stay, and give the same durations).
 */
function withoutDurations(value: unknown): unknown {
  return JSON.parse(
    JSON.stringify(
      value,
      (key, field) => key === "held_for_ms" || key === "waiting_for_ms" ? undefined : field,
    ),
  );
}

/** What one round of watch mode shows: the view, or an error line. */
type Frame = { text: string } | { error: string };

/**
 * Watch mode: one request, then the next `intervalMs` after the previous one
 * started (or at once if it took longer), never two at once. A terminal gets
 * the whole screen redrawn under a header, like `watch`; a pipe gets a view
 * only when it differs from the previous one, each under a `--- time` line
 * (or, with -json, one JSON document per line), like `kubectl get -w`.
 * Errors (server down, 401) are shown and the loop goes on. Returns 0 when
 * `io.signal` (Ctrl-C) ends it.
 */
async function watchLoop(
  io: AdminIo,
  request: () => Promise<Reply>,
  intervalMs: number,
  render: (answer: Answer) => Frame,
  header: string,
): Promise<number> {
  const ownStop = io.signal === undefined ? new AbortController() : null;
  const signal = io.signal ?? ownStop!.signal;
  const onSigint = () => ownStop?.abort();
  if (ownStop !== null) Deno.addSignalListener("SIGINT", onSigint);
  try {
    let last = "";
    while (!signal.aborted) {
      const startedMs = io.scheduler.monotonicMs();
      const reply = await request();
      if (signal.aborted) break;
      const frame: Frame = "failure" in reply ? { error: reply.failure } : render(reply);
      const shown = "text" in frame ? frame.text : `lockd admin: ${frame.error}\n`;
      const now = rfc3339(io.scheduler.wallMs());
      if (io.isTerminal) {
        io.stdout(`${CLEAR_SCREEN}${header}   ${now}\n\n${shown}`);
      } else if (shown !== last) {
        if ("error" in frame) io.stderr(shown);
        else if (shown.startsWith("{")) io.stdout(shown);
        else io.stdout(`--- ${now}\n${shown}`);
      }
      last = shown;
      const delayMs = Math.max(0, startedMs + intervalMs - io.scheduler.monotonicMs());
      await new Promise<void>((resolve) => {
        const timer = io.scheduler.setTimer(done, delayMs);
        function done() {
          timer.cancel();
          signal.removeEventListener("abort", done);
          resolve();
        }
        signal.addEventListener("abort", done, { once: true });
      });
    }
    return 0;
  } finally {
    if (ownStop !== null) Deno.removeSignalListener("SIGINT", onSigint);
  }
}

/** `host:port` to dial: a wildcard listen address means this host. */
function dialAddress(addr: string): string {
  const { hostname, port } = parseHostPort(addr);
  if (hostname === "0.0.0.0" || hostname === "") return formatHostPort("127.0.0.1", port);
  if (hostname === "::") return formatHostPort("::1", port);
  return formatHostPort(hostname, port);
}

/** `<status> <title>: <detail>` from a problem body, or the status text and body otherwise. */
function describeFailure(
  status: number,
  statusText: string,
  contentType: string,
  body: string,
): string {
  if (contentType.includes("json")) {
    try {
      const problem = JSON.parse(body) as { title?: unknown; detail?: unknown };
      if (typeof problem.title === "string") {
        return `${status} ${problem.title}: ${String(problem.detail ?? "")}`;
      }
    } catch {
      // Not JSON after all: fall through.
    }
  }
  const text = body.trim().split("\n")[0] ?? "";
  return `${status} ${statusText || "error"}${text === "" ? "" : `: ${text}`}`;
}

/** One line: the error lines of fetch can span several. */
function messageOf(error: unknown): string {
  return errorText(error).replace(/\s*\n\s*/g, " ");
}
