/**
 * `lockd admin`: a small client of the admin HTTP API.
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

import type { HolderJson, InfoJson, LockJson, WaiterJson } from "../admin/views.ts";
import { rfc3339, type Scheduler, systemScheduler } from "../clock.ts";
import { formatHostPort, parseHostPort } from "../host_port.ts";
import {
  ADMIN_REQUEST_TIMEOUT_MS,
  WATCH_INTERVAL_MS_DEFAULT,
  WATCH_INTERVAL_MS_MIN,
} from "../limits.ts";
import { FlagError, type FlagSpec, formatFlagHelp, HelpRequested, parseFlags } from "./flags.ts";
import { describeFetchError } from "./http_errors.ts";
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
];

export const ADMIN_USAGE = `Usage:
  lockd admin [flags] info                    version, uptime, configuration, counts
  lockd admin [flags] locks [-match GLOB]     locks with an owner or waiters
  lockd admin [flags] show NAME               one lock: holder and waiters (FIFO)
  lockd admin [flags] locks|show ... -watch   the same, redrawn as locks change
  lockd admin [flags] release NAME [-token T] force-release: disconnect the holder
                                              (with -token: only the holder of token T)
  lockd admin [flags] kick NAME REMOTE_ADDR   remove one waiter (REMOTE_ADDR as shown)

Flags (before or after the subcommand):
${formatFlagHelp(FLAGS)}`;

/** Where `lockd admin` writes, and what watch mode runs on; tests replace them. */
export interface AdminIo {
  stdout(text: string): void;
  stderr(text: string): void;
  /** Watch mode redraws the screen on a terminal, and prints changes only otherwise. */
  isTerminal: boolean;
  /** Watch mode's clock and timers. */
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

const SUBCOMMAND_ARITY: Readonly<Record<string, number>> = {
  info: 0,
  locks: 0,
  show: 1,
  release: 1,
  kick: 2,
};

/** Runs `lockd admin ARGS`; returns the exit code. */
export async function adminCommand(
  args: readonly string[],
  io: Partial<AdminIo> = {},
): Promise<number> {
  const out = { ...STANDARD_IO, ...io };
  let jsonErrors = false;
  const usageError = (message: string) => {
    out.stderr(
      jsonErrors
        ? jsonError(`${message} (lockd admin -h for the usage)`, null, null)
        : `lockd admin: ${message}\n\n${ADMIN_USAGE}\n`,
    );
    return 2;
  };

  let values: Map<string, string | number | boolean>;
  let positionals: string[];
  try {
    ({ values, positionals } = parseFlags(args, FLAGS));
  } catch (error) {
    if (error instanceof HelpRequested) {
      out.stdout(`${ADMIN_USAGE}\n`);
      return 0;
    }
    if (error instanceof FlagError) return usageError(error.message);
    throw error;
  }
  jsonErrors = values.get("json") === true;
  const [subcommand, ...operands] = positionals;
  if (subcommand === undefined) return usageError("missing subcommand");
  const arity = SUBCOMMAND_ARITY[subcommand];
  if (arity === undefined) return usageError(`unknown subcommand "${subcommand}"`);
  if (operands.length !== arity) {
    return usageError(
      `${subcommand} takes ${arity === 0 ? "no" : arity} argument${
        arity === 1 ? "" : "s"
      }, got ${operands.length}`,
    );
  }
  const match = values.get("match") as string | undefined;
  if (match !== undefined && subcommand !== "locks") {
    return usageError("-match only applies to the locks subcommand");
  }
  const fencingToken = values.get("token") as string | undefined;
  if (fencingToken !== undefined && subcommand !== "release") {
    return usageError("-token only applies to the release subcommand");
  }
  if (fencingToken !== undefined && !/^[1-9][0-9]{0,19}$/.test(fencingToken)) {
    return usageError(`-token must be a fencing token (a positive integer), got "${fencingToken}"`);
  }
  const json = values.get("json") === true;
  const watch = values.get("watch") === true;
  const intervalMs = (values.get("interval") as number | undefined) ?? WATCH_INTERVAL_MS_DEFAULT;
  if (values.has("interval") && !watch) return usageError("-interval only applies with -watch");
  if (watch && subcommand !== "locks" && subcommand !== "show") {
    return usageError("-watch only applies to the locks and show subcommands");
  }
  if (intervalMs < WATCH_INTERVAL_MS_MIN) {
    return usageError(`-interval must be at least ${WATCH_INTERVAL_MS_MIN}ms`);
  }

  // Several admin addresses (a cluster): the first that answers for the leader is used.
  const adminAddrs = ((values.get("admin") as string | undefined) ?? ADMIN_ADDR_DEFAULT).split(",")
    .map((a) => a.trim()).filter((a) => a !== "");
  if (adminAddrs.length === 0) return usageError("-admin needs at least one host:port");
  const baseUrls: string[] = [];
  try {
    for (const addr of adminAddrs) baseUrls.push(`http://${dialAddress(addr)}`);
  } catch (error) {
    if (error instanceof RangeError) return usageError(`-admin: ${error.message}`);
    throw error;
  }
  const adminAddr = adminAddrs.join(",");

  const headers: Record<string, string> = {};
  const tokenFile = values.get("token-file") as string | undefined;
  if (tokenFile !== undefined) {
    let token: string;
    try {
      token = (await Deno.readTextFile(tokenFile)).trim();
    } catch (error) {
      const text = `cannot read the token file "${tokenFile}" (-token-file): ${messageOf(error)}`;
      out.stderr(jsonErrors ? jsonError(text, null, null) : `lockd admin: ${text}\n`);
      return 1;
    }
    if (token === "") {
      const text = `the token file "${tokenFile}" (-token-file) is empty`;
      out.stderr(jsonErrors ? jsonError(text, null, null) : `lockd admin: ${text}\n`);
      return 1;
    }
    headers.authorization = `Bearer ${token}`;
  }

  const lockPath = (name: string) => `/api/locks/${encodeURIComponent(name)}`;
  let method = "GET";
  let path: string;
  switch (subcommand) {
    case "info":
      path = "/api/info";
      break;
    case "locks":
      path = match === undefined ? "/api/locks" : `/api/locks?match=${encodeURIComponent(match)}`;
      break;
    case "show":
      path = lockPath(operands[0]);
      break;
    case "release":
      method = "POST";
      // The precondition: the server answers 409 when the holder is not the one of this token.
      path = `${lockPath(operands[0])}/release${
        fencingToken === undefined ? "" : `?token=${fencingToken}`
      }`;
      break;
    default: // kick
      method = "DELETE";
      path = `${lockPath(operands[0])}/waiters/${encodeURIComponent(operands[1])}`;
      break;
  }

  /**
   * One address after the other (the one that answered last first). A cluster standby answers
   * lock views and actions with 307 to the leader's admin API: followed here, not by fetch, so
   * the token goes along (fetch drops Authorization on a redirect to another origin), but only
   * to an address of the -admin list (`listed`): a redirect elsewhere is refused, and the token
   * never leaves the hosts the operator named. A node that cannot be reached, or says it is not
   * the leader (503), hands over to the next address.
   */
  const listed = new Set(baseUrls.map((base) => new URL(base).origin));
  let current = 0;
  const request = async (): Promise<Reply> => {
    let reply: Reply | null = null;
    for (let i = 0; i < baseUrls.length; i++) {
      const index = (current + i) % baseUrls.length;
      reply = await requestOne(baseUrls[index] + path, adminAddrs[index]);
      const tryNext = "failure" in reply
        ? reply.final !== true
        : reply.status === 503 && /not-leader/.test(reply.body);
      if (!tryNext) {
        current = index;
        return reply;
      }
    }
    return reply!;
  };

  const requestOne = async (url: string, addr: string, redirects = 0): Promise<Reply> => {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), ADMIN_REQUEST_TIMEOUT_MS);
    try {
      const response = await out.fetch(url, {
        method,
        headers,
        signal: controller.signal,
        redirect: "manual",
      });
      const location = response.headers.get("location");
      if (response.status === 307 && location !== null && redirects < 2) {
        await response.body?.cancel();
        clearTimeout(timer);
        const target = URL.canParse(location, url) ? new URL(location, url) : null;
        if (target === null || !listed.has(target.origin)) {
          return { failure: refusedRedirectText(addr, location, target, adminAddrs), final: true };
        }
        return await requestOne(target.href, target.host, redirects + 1);
      }
      return {
        status: response.status,
        statusText: response.statusText,
        contentType: response.headers.get("content-type") ?? "",
        body: await response.text(),
      };
    } catch (error) {
      const target = {
        what: "the admin API",
        addr,
        clientFlag: "-admin",
        serverFlag: "-admin-listen",
      };
      return {
        failure: controller.signal.aborted
          ? describeFetchError(
            new DOMException("timeout", "TimeoutError"),
            target,
            ADMIN_REQUEST_TIMEOUT_MS,
          )
          : describeFetchError(error, target, ADMIN_REQUEST_TIMEOUT_MS),
      };
    } finally {
      clearTimeout(timer);
    }
  };

  if (watch) {
    const title = `lockd admin ${subcommand}${operands.map((o) => ` ${o}`).join("")}${
      match === undefined ? "" : ` -match ${match}`
    }`;
    return await watchLoop(out, request, intervalMs, (reply) => {
      // In watch mode an idle lock is a state to show, not an error.
      if (subcommand === "show" && reply.status === 404 && /lock-not-found/.test(reply.body)) {
        const idle: LockJson = { name: operands[0], holder: null, waiters: [] };
        return { text: json ? `${JSON.stringify(idle)}\n` : formatLock(idle) };
      }
      if (reply.status < 200 || reply.status > 299) {
        return {
          error: describeFailure(reply.status, reply.statusText, reply.contentType, reply.body),
        };
      }
      if (json) return { text: `${JSON.stringify(withoutDurations(JSON.parse(reply.body)))}\n` };
      return {
        text: subcommand === "locks"
          ? formatLockList((JSON.parse(reply.body) as { locks: LockJson[] }).locks)
          : formatLock(JSON.parse(reply.body) as LockJson, out.isTerminal),
      };
    }, `Every ${formatDurationMs(intervalMs)}: ${title} (admin API ${adminAddr})`);
  }

  const reply = await request();
  if ("failure" in reply) {
    out.stderr(json ? jsonError(reply.failure, null, null) : `lockd admin: ${reply.failure}\n`);
    return 1;
  }
  const { status, statusText, contentType, body } = reply;
  if (status < 200 || status > 299) {
    const text = describeFailure(status, statusText, contentType, body);
    out.stderr(
      json ? jsonError(text, status, problemOf(contentType, body)) : `lockd admin: ${text}\n`,
    );
    return 1;
  }
  if (json) {
    if (body !== "") out.stdout(body.endsWith("\n") ? body : `${body}\n`);
    return 0;
  }
  switch (subcommand) {
    case "info":
      out.stdout(formatInfo(JSON.parse(body) as InfoJson));
      break;
    case "locks":
      out.stdout(formatLockList((JSON.parse(body) as { locks: LockJson[] }).locks));
      break;
    case "show":
      out.stdout(formatLock(JSON.parse(body) as LockJson));
      break;
    case "release":
      out.stdout(formatReleased(JSON.parse(body) as LockJson));
      break;
    default:
      out.stdout(
        `removed waiter ${operands[1]} from lock "${operands[0]}"; a standard client ` +
          `reconnects and joins the tail of the queue again under a new address (same client ` +
          `name): stop or fix the client first if it should not come back\n`,
      );
      break;
  }
  return 0;
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
 * One answer of the admin API, or why there was none; a `final` failure is not handed over to
 * the next address.
 */
type Reply =
  | { status: number; statusText: string; contentType: string; body: string }
  | { failure: string; final?: boolean };

/** Why a 307 was not followed: its target is not an address of -admin (or not a URL at all). */
function refusedRedirectText(
  from: string,
  location: string,
  target: URL | null,
  adminAddrs: readonly string[],
): string {
  const shown = JSON.stringify(location.slice(0, 200));
  if (target === null) {
    return `the admin API at ${from} redirected (307) to ${shown}, which is not a URL; not followed`;
  }
  const where = target.protocol === "http:" ? target.host : target.origin;
  return `the admin API at ${from} redirected (307) to ${where} (${shown}), which is not in ` +
    `-admin: not followed, so the admin token is not sent there. If ${where} is the admin ` +
    `API of a node of your cluster, add it: -admin ${[...adminAddrs, where].join(",")}`;
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
  render: (reply: Exclude<Reply, { failure: string }>) => Frame,
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

function orNone(value: string): string {
  return value === "" ? "(none)" : value;
}

/** `key  value` lines, values aligned. */
function keyValues(rows: [string, string][]): string {
  const width = Math.max(...rows.map(([key]) => key.length)) + 2;
  return rows.map(([key, value]) => `${key.padEnd(width)}${value}\n`).join("");
}

/** A table with a header row; columns separated by two spaces, the last one not padded. */
function table(header: string[], rows: string[][]): string {
  const all = [header, ...rows];
  const widths = header.map((_, column) => Math.max(...all.map((row) => [...row[column]].length)));
  return all.map((row) =>
    row.map((cell, column) =>
      column === row.length - 1 ? cell : cell + " ".repeat(widths[column] - [...cell].length + 2)
    ).join("") + "\n"
  ).join("");
}

function formatInfo(info: InfoJson): string {
  const c = info.config;
  return keyValues([
    ["version", info.version],
    ["uptime", formatDurationMs(info.uptime_ms)],
    ["listen", c.listen],
    ["ops_listen", orNone(c.ops_listen)],
    ["tls", String(c.tls)],
    ["mtls", String(c.mtls)],
    ["acl_file", orNone(c.acl_file)],
    ["audit_log", c.audit_log === "-" ? "- (standard output)" : c.audit_log],
    ["io_timeout_ms", String(c.io_timeout_ms)],
    ["locks", String(info.locks)],
    ["sessions", String(info.sessions)],
    ...clusterLines(info),
  ]);
}

/** Cluster mode: the node's role, the leader, its lease and etcd's health. */
function clusterLines(info: InfoJson): [string, string][] {
  const k = info.cluster;
  if (k === undefined) return [];
  const leader = k.leader === null
    ? "(none known)"
    : `${k.leader.node} at ${k.leader.advertise} (term ${k.leader.term}, admin ${
      k.leader.admin ?? "not advertised"
    })`;
  return [
    ["cluster", `${k.name}, node ${k.node} at ${k.advertise}`],
    ["role", `${k.role}${k.serving ? " (serving)" : ""}`],
    ["term", String(k.term)],
    ["leader", leader],
    ["safe_until", k.safe_until_ms === null ? "(no lease)" : `in ${k.safe_until_ms} ms`],
    ["ttl_ms", String(k.ttl_ms)],
    ["token_high_water", String(k.token_high_water)],
    ...k.etcd.map((e): [string, string] => [
      "etcd",
      `${e.endpoint} ${
        e.healthy ? "healthy" : `unhealthy (${e.error ?? "no answer"})`
      }, ${e.took_ms} ms`,
    ]),
  ];
}

function holderText(holder: HolderJson): string {
  return holder.identity === "" ? holder.remote_addr : `${holder.remote_addr} (${holder.identity})`;
}

function formatLockList(locks: LockJson[]): string {
  return table(
    ["NAME", "HOLDER", "TOKEN", "SINCE", "WAITERS"],
    locks.map((lock) => [
      lock.name,
      lock.holder === null ? "-" : holderText(lock.holder),
      lock.holder === null ? "-" : String(lock.holder.token),
      lock.holder === null ? "-" : lock.holder.since,
      String(lock.waiters.length),
    ]),
  );
}

/**
 * One lock: the holder block and the waiters table, each record with the client name from
 * HELLO and the session id, so a client that rejoins the queue after a kick (new address, new
 * session) is recognised by its name. `durations` adds "held for" / "waiting for"; watch mode
 * into a pipe leaves them out, or every view would differ from the last.
 */
function formatLock(lock: LockJson, durations = true): string {
  const holder = lock.holder;
  const rows: [string, string][] = [["name", lock.name]];
  if (holder === null) {
    rows.push(["holder", "(none)"]);
  } else {
    rows.push(
      ["holder", holder.remote_addr],
      ["client", orNone(holder.client_name ?? "")],
      ["session", String(holder.session ?? "-")],
      ["identity", orNone(holder.identity)],
      [
        "since",
        durations && holder.held_for_ms !== undefined
          ? `${holder.since} (held for ${formatDurationMs(holder.held_for_ms)})`
          : holder.since,
      ],
      ["lease_ms", String(holder.lease_ms)],
      ["token", String(holder.token)],
    );
  }
  rows.push(["waiters", String(lock.waiters.length)]);
  let text = keyValues(rows);
  if (lock.waiters.length > 0) text += "\n" + formatWaiters(lock.waiters, durations);
  return text;
}

function formatWaiters(waiters: WaiterJson[], durations: boolean): string {
  const header = ["#", "REMOTE_ADDR", "CLIENT", "SESSION", "IDENTITY", "QUEUED_AT"];
  if (durations) header.push("WAITING");
  return table(
    header,
    waiters.map((waiter, i) => {
      const row = [
        String(i + 1),
        waiter.remote_addr,
        waiter.client_name ? waiter.client_name : "-",
        String(waiter.session ?? "-"),
        waiter.identity === "" ? "-" : waiter.identity,
        waiter.queued_at,
      ];
      if (durations) row.push(formatDurationMs(waiter.waiting_for_ms ?? 0));
      return row;
    }),
  );
}

function formatReleased(lock: LockJson): string {
  if (lock.holder === null) return `released lock "${lock.name}"; it is now idle\n`;
  return `released lock "${lock.name}"; new holder ${
    holderText(lock.holder)
  } with token ${lock.holder.token}, ${lock.waiters.length} waiting\n`;
}

/** `1h2m3s`, `4m5s`, `6.7s`. */
function formatDurationMs(ms: number): string {
  if (ms < 60_000) return `${Math.round(ms / 100) / 10}s`;
  const totalSeconds = Math.floor(ms / 1000);
  const hours = Math.floor(totalSeconds / 3600);
  const minutes = Math.floor((totalSeconds % 3600) / 60);
  const seconds = totalSeconds % 60;
  return hours > 0 ? `${hours}h${minutes}m${seconds}s` : `${minutes}m${seconds}s`;
}

/** One line: the error lines of fetch can span several. */
function messageOf(error: unknown): string {
  return errorText(error).replace(/\s*\n\s*/g, " ");
}
