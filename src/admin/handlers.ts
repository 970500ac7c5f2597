/**
 * Handlers of the admin API. Each is a plain function of the request and its
 * route match; the server adds authentication and the actor. Domain outcomes
 * become HTTP problems through one table, {@link OUTCOME_PROBLEMS}.
 *
 * @module
 */

import { clusterStatusText } from "../cluster/cluster_status.ts";
import type { LockPageQuery, LockSort } from "../core/lock_queries.ts";
import { escapeInvisible, lockNameProblem } from "../core/lock_name.ts";
import { ADMIN_HISTORY_INTERVAL_MS, ADMIN_LOCKS_LIMIT_MAX } from "../limits.ts";
import type { Actor } from "../log/audit_records.ts";
import type { GrantBlock, Instant, LockView } from "../core/types.ts";
import { jsonResponse, problemResponse, type ProblemSlug } from "../http/problem.ts";
import type { RouteMatch } from "../http/router.ts";
import { compileGlob, GlobError } from "../security/glob.ts";
import type { OperatorPort, ServerView } from "../server/view.ts";
import type { EventHub } from "./events.ts";
import type { StatsHistory } from "./history.ts";
import { type ClusterInfoJson, idleLockJson, type InfoJson, lockJson } from "./views.ts";

/** What every admin handler sees besides the request. */
export interface AdminContext {
  readonly server: ServerView;
  /** The operator's actions (force-release, kick a waiter). */
  readonly operator: OperatorPort;
  /** Bound address of the ops server, null when it is off. */
  readonly opsAddr: string | null;
  /** Who is calling (audit `actor`). */
  readonly actor: Actor;
  /** Snapshots of the engine's counters (GET /api/history). */
  readonly history: StatsHistory;
  /** The event streams (GET /api/events). */
  readonly events: EventHub;
}

type AdminMatch = RouteMatch<AdminContext>;

/** Every way an admin request can fail in the domain, and the problem that answers it. */
const OUTCOME_PROBLEMS = {
  /** A path segment is not valid percent-encoded UTF-8. */
  bad_path_encoding: "invalid-path-encoding",
  /** `?match=` does not compile. */
  bad_glob: "invalid-glob",
  /** `?sort=`, `?offset=` or `?limit=` of GET /api/locks is not one the API takes. */
  bad_query: "invalid-query",
  /** The lock name in the path is one the server refuses (e.g. not NFC): no lock can have it. */
  bad_lock_name: "invalid-lock-name",
  /** The lock is idle (nothing stored) or never existed: the two cannot be told apart. */
  lock_not_found: "lock-not-found",
  /** No queued claim of the lock has that remote address. */
  waiter_not_found: "waiter-not-found",
  /** Force-release of a lock that has waiters but no owner (grants are blocked; the detail says why). */
  no_owner: "lock-has-no-owner",
  /** Force-release with `?token=T` of a lock whose owner holds another token (the holder changed). */
  holder_changed: "holder-changed",
  /** Lift-reservation of a lock that is not reserved for reclaims (any more). */
  not_reserved: "lock-not-reserved",
  /** Cluster mode: this node does not lead right now (a paused leader, or leadership moving). */
  not_leader: "not-leader",
} as const satisfies Record<string, ProblemSlug>;

type Outcome = keyof typeof OUTCOME_PROBLEMS;

function fail(outcome: Outcome, detail: string): Response {
  return problemResponse(OUTCOME_PROBLEMS[outcome], detail);
}

/** Why a cluster node cannot act now, for the problem's detail. */
export function notLeaderDetail(server: ServerView): string {
  const cluster = server.cluster;
  if (cluster === null) return "This server is not in cluster mode";
  const leader = cluster.leader;
  const status = cluster.status;
  const now = `This node is ${clusterStatusText(status)}`;
  if (status.phase === "standby" && leader !== null) {
    return `${now} (admin API ${leader.admin ?? "not advertised"})`;
  }
  return status.phase === "paused" || status.phase === "taking_over"
    ? `${now}; retry in a moment`
    : now;
}

/** GET /api/info */
export async function getInfo(_request: Request, { context }: AdminMatch): Promise<Response> {
  const { server, opsAddr } = context;
  const { config, engine } = server;
  const info: InfoJson = {
    version: server.version,
    uptime_ms: Math.max(0, Math.round(server.scheduler.wallMs() - server.startedAtWallMs)),
    config: {
      listen: server.listenAddr,
      ops_listen: opsAddr ?? "",
      tls: config.tlsCert !== null,
      mtls: config.tlsClientCa !== null,
      acl_file: config.aclFile ?? "",
      audit_log: config.auditLog === "" ? "-" : config.auditLog,
      io_timeout_ms: config.ioTimeoutMs,
    },
    locks: engine.lockCount,
    sessions: engine.stats.sessionsOpen,
  };
  if (server.cluster !== null) info.cluster = await clusterInfo(server);
  return jsonResponse(info);
}

/** The `cluster` object of /api/info; probes every etcd endpoint (at most 500 ms). */
async function clusterInfo(server: ServerView): Promise<ClusterInfoJson> {
  const cluster = server.cluster!;
  const leadership = cluster.leadership;
  const health = await cluster.health();
  const leader = cluster.leader;
  const safeUntilMs = leadership.safeUntilMs;
  const window = cluster.serving ? cluster.ownership.window : null;
  const status = cluster.status;
  return {
    status: status.phase,
    status_text: clusterStatusText(status),
    name: server.config.cluster ?? "",
    node: cluster.node.name,
    advertise: cluster.node.advertise,
    role: cluster.role,
    serving: cluster.serving,
    term: cluster.term,
    leader: leader === null
      ? null
      : { node: leader.name, advertise: leader.advertise, admin: leader.admin, term: leader.term },
    safe_until_ms: Number.isFinite(safeUntilMs)
      ? Math.round(safeUntilMs - server.scheduler.monotonicMs())
      : null,
    ttl_ms: leadership.ttlMs,
    token_high_water: cluster.term === 0 ? 0 : cluster.tokens.reservedThrough,
    lease_horizon_ms: cluster.horizonMs,
    records: cluster.ownership.recordStats.records,
    reserved_locks: cluster.ownership.reservedLocks(),
    window_ends_in_ms: window === null
      ? null
      : Math.max(0, Math.round(window.endsAtMs - server.scheduler.monotonicMs())),
    etcd: health.map((h) => ({
      endpoint: h.endpoint,
      healthy: h.healthy,
      took_ms: Math.round(h.tookMs),
      ...(h.error !== undefined ? { error: h.error } : {}),
    })),
  };
}

/**
 * GET /api/locks[?match=GLOB][&sort=KEY][&offset=N][&limit=N][&waiters_limit=N]. Without
 * `sort`, `offset` and `limit` the answer is the spec's `{"locks": [...]}`, every lock sorted by
 * name; with any of them it is one page, `{"locks": [...], "total": N}` (`total`: locks matching
 * in all). `waiters_limit` keeps the first N waiters of each lock and adds `waiters_total`.
 */
export function listLocks(_request: Request, { context, url }: AdminMatch): Response {
  const page = pageQuery(url.searchParams);
  if (page instanceof Response) return page;
  const waitersMax = waitersLimit(url.searchParams);
  if (waitersMax instanceof Response) return waitersMax;
  const withTotal = waitersMax !== Infinity;
  const pattern = url.searchParams.get("match");
  let filter: { prefix: string; matches: (name: string) => boolean } | undefined;
  if (pattern !== null) {
    try {
      const glob = compileGlob(pattern);
      // The literal prefix narrows the scan before the matcher runs.
      filter = { prefix: glob.literalPrefix, matches: glob.matches };
    } catch (error) {
      if (error instanceof GlobError) return fail("bad_glob", error.message);
      throw error;
    }
  }
  const now = instantOf(context.server);
  const engine = context.server.engine;
  const json = (view: LockView) => lockJson(view, now, withTotal);
  if (page === null) {
    return jsonResponse({ locks: engine.listLocks(filter, waitersMax).map(json) });
  }
  const { total, locks } = engine.pageLocks({ ...filter, ...page, waitersMax });
  return jsonResponse({ locks: locks.map(json), total });
}

/** `?waiters_limit=N` (GET /api/locks and /api/locks/{name}): Infinity when absent, 400 when bad. */
function waitersLimit(params: URLSearchParams): number | Response {
  const text = params.get("waiters_limit");
  if (text === null) return Infinity;
  return wholeNumber(text, 0, Number.MAX_SAFE_INTEGER) ??
    fail("bad_query", `waiters_limit="${text}" is not a whole number of at least 0`);
}

const SORTS: readonly LockSort[] = ["name", "held_for", "waiters"];

/** The paging parameters of GET /api/locks: null when none is given, a 400 when one is bad. */
function pageQuery(
  params: URLSearchParams,
): Omit<LockPageQuery, "prefix" | "matches"> | null | Response {
  const sort = params.get("sort");
  const offset = params.get("offset");
  const limit = params.get("limit");
  if (sort === null && offset === null && limit === null) return null;
  const key = sort?.replace(/^-/, "") ?? "name";
  if (!(SORTS as readonly string[]).includes(key)) {
    return fail(
      "bad_query",
      `sort="${sort}" is not one of ${SORTS.join(", ")} (a leading - sorts descending)`,
    );
  }
  const offsetValue = wholeNumber(offset ?? "0", 0, Number.MAX_SAFE_INTEGER);
  if (offsetValue === null) {
    return fail("bad_query", `offset="${offset}" is not a whole number of at least 0`);
  }
  const limitValue = wholeNumber(limit ?? String(ADMIN_LOCKS_LIMIT_MAX), 1, ADMIN_LOCKS_LIMIT_MAX);
  if (limitValue === null) {
    return fail(
      "bad_query",
      `limit="${limit}" is not a whole number from 1 to ${ADMIN_LOCKS_LIMIT_MAX}`,
    );
  }
  return {
    sort: key as LockSort,
    descending: sort?.startsWith("-") ?? false,
    offset: offsetValue,
    limit: limitValue,
  };
}

function wholeNumber(text: string, min: number, max: number): number | null {
  if (!/^\d{1,16}$/.test(text)) return null;
  const value = Number(text);
  return value >= min && value <= max ? value : null;
}

/** GET /api/history: the kept snapshots of the engine's counters, oldest first. */
export function getHistory(_request: Request, { context }: AdminMatch): Response {
  return jsonResponse({
    interval_ms: ADMIN_HISTORY_INTERVAL_MS,
    snapshots: context.history.snapshots(),
  });
}

/** GET /api/events: a server-sent-event stream (see events.ts). */
export function getEvents(_request: Request, { context }: AdminMatch): Response {
  return context.events.open();
}

/** GET /api/locks/{name} */
export function getLock(_request: Request, { context, params, url }: AdminMatch): Response {
  const name = decodeLockName(params.name);
  if (name instanceof Response) return name;
  const waitersMax = waitersLimit(url.searchParams);
  if (waitersMax instanceof Response) return waitersMax;
  const view = context.server.engine.getLock(name, waitersMax);
  if (view === undefined) return fail("lock_not_found", notFoundDetail(name));
  return jsonResponse(
    lockJson(view, instantOf(context.server), waitersMax !== Infinity),
  );
}

/**
 * POST /api/locks/{name}/release[?token=T]: the service writes the audit record first, then the
 * owner gets ERROR 0x02 and is disconnected, and the head waiter is granted at once. Every owner
 * of a semaphore or shared lock is ended (one audit record each). Answers with the lock's state
 * afterwards. With `?token=T` only the ownership with fencing token T is released (409
 * `holder-changed` when no owner holds it), so an operator who looked at one holder never
 * releases the next one.
 */
export function forceRelease(_request: Request, { context, params, url }: AdminMatch): Response {
  const name = decodeLockName(params.name);
  if (name instanceof Response) return name;
  const expectedToken = tokenPrecondition(url.searchParams);
  if (expectedToken instanceof Response) return expectedToken;
  const engine = context.server.engine;
  const result = context.operator.forceRelease(name, context.actor, expectedToken);
  switch (result.status) {
    case "not_leader":
      return fail("not_leader", notLeaderDetail(context.server));
    case "lock_not_found":
      return fail("lock_not_found", notFoundDetail(name));
    case "no_owner":
      return fail(
        "no_owner",
        `Cannot force-release lock "${name}": it has ${result.waiters} waiter(s) but no owner (${
          result.block === null
            ? heldBackBecause(engine.getLock(name, 0), context.server.scheduler.monotonicMs())
            : ownerlessBecause(result.block, result.detail)
        })`,
      );
    case "holder_changed":
      return fail(
        "holder_changed",
        result.holders.length === 1
          ? `Lock "${name}" is held with token ${result.holder.token}, not ${expectedToken}: its ` +
            "holder changed; nothing was released"
          : `Lock "${name}" has no owner with token ${expectedToken} (its ${result.holders.length} ` +
            `owners hold tokens ${
              result.holders.map((holder) => holder.token).join(", ")
            }); nothing was released`,
      );
    case "released": {
      const after = engine.getLock(name);
      return jsonResponse(
        after === undefined ? idleLockJson(name) : lockJson(after, instantOf(context.server)),
      );
    }
  }
}

/**
 * POST /api/locks/{name}/lift-reservation (cluster mode): frees a lock the new leader keeps
 * reserved for its holder's RECLAIM after a fail-over, for an operator who knows that holder is
 * gone. The service audits (`reservation_lifted`), then the head waiter is granted. Answers with
 * the lock's state afterwards; 409 `lock-not-reserved` when it is not (or no longer) reserved.
 */
export function liftReservation(_request: Request, { context, params }: AdminMatch): Response {
  const name = decodeLockName(params.name);
  if (name instanceof Response) return name;
  switch (context.operator.liftReservation(name, context.actor)) {
    case "not_leader":
      return fail("not_leader", notLeaderDetail(context.server));
    case "not_reserved":
      return fail(
        "not_reserved",
        `Lock "${name}" is not reserved for reclaims (the reclaim window ended, its holder ` +
          "reclaimed it, or no fail-over left it held); nothing was changed",
      );
    case "lifted": {
      const after = context.server.engine.getLock(name);
      return jsonResponse(
        after === undefined ? idleLockJson(name) : lockJson(after, instantOf(context.server)),
      );
    }
  }
}

/**
 * `?token=T` of a force-release: undefined when absent, the token when it is one (a whole number
 * from 1 to 2^53 - 1, as tokens are), else a 400 (also for the parameter given twice).
 */
function tokenPrecondition(params: URLSearchParams): number | undefined | Response {
  const values = params.getAll("token");
  if (values.length === 0) return undefined;
  const text = values[0];
  const token = values.length === 1 ? wholeNumber(text, 1, Number.MAX_SAFE_INTEGER) : null;
  if (token !== null) return token;
  return fail(
    "bad_query",
    values.length > 1
      ? "token is given more than once"
      : `token="${text}" is not a fencing token (a whole number from 1 to ${Number.MAX_SAFE_INTEGER})`,
  );
}

/** DELETE /api/locks/{name}/waiters/{remote_addr}: the service audits, then removes. 204. */
export function kickWaiter(_request: Request, { context, params }: AdminMatch): Response {
  const name = decodeLockName(params.name);
  if (name instanceof Response) return name;
  const remoteAddr = decodeSegment(params.remote_addr, "remote address");
  if (remoteAddr instanceof Response) return remoteAddr;
  const result = context.operator.kickWaiter(name, remoteAddr, context.actor);
  switch (result.status) {
    case "not_leader":
      return fail("not_leader", notLeaderDetail(context.server));
    case "lock_not_found":
      return fail("lock_not_found", notFoundDetail(name));
    case "waiter_not_found":
      return fail(
        "waiter_not_found",
        `Lock "${name}" has no waiter with remote address "${remoteAddr}"`,
      );
    case "kicked":
      return new Response(null, { status: 204 });
  }
}

/** Percent-decodes one path segment (URLPattern keeps groups encoded); 400 when malformed. */
function decodeSegment(raw: string | undefined, what: string): string | Response {
  try {
    return decodeURIComponent(raw ?? "");
  } catch (error) {
    if (!(error instanceof URIError)) throw error;
    return fail(
      "bad_path_encoding",
      `The ${what} "${raw}" in the path is not valid percent-encoded UTF-8`,
    );
  }
}

/** Decodes the lock-name segment and refuses a name no lock can have (the engine's own rule). */
function decodeLockName(raw: string | undefined): string | Response {
  const name = decodeSegment(raw, "lock name");
  if (name instanceof Response) return name;
  const problem = lockNameProblem(name);
  if (problem === null) return name;
  return fail(
    "bad_lock_name",
    `Lock name "${escapeInvisible(name)}" in the path is refused: ${problem}`,
  );
}

/** One reading of the server's clock: durations measured on it, deadlines shown in wall time. */
function instantOf(server: ServerView): Instant {
  return { monoMs: server.scheduler.monotonicMs(), wallMs: server.scheduler.wallMs() };
}

/** Why a stored lock has no owner while grants are not blocked: a lock-delay or a reservation. */
function heldBackBecause(view: LockView | undefined, nowMs: number): string {
  if (view !== undefined && view.delayedUntilMs > 0) {
    return `a lock-delay after a non-graceful end holds grants back for ${
      Math.max(0, Math.round(view.delayedUntilMs - nowMs))
    } ms more`;
  }
  if (view !== undefined && view.reservedUntilMs > 0) {
    return `it is reserved for reclaims after a fail-over for ${
      Math.max(0, Math.round(view.reservedUntilMs - nowMs))
    } ms more`;
  }
  return "no grant yet";
}

/** Why a queue has no owner, for the 409 of a force-release: the true cause. */
function ownerlessBecause(block: GrantBlock, detail: string): string {
  switch (block) {
    case "audit_unavailable":
      return "grants are paused while the audit log cannot be written";
    case "token_store_unavailable":
      return `grants are paused while no fencing token can be reserved: ${detail}`;
    case "shutting_down":
      return "the server is shutting down";
    case "not_leader":
      return "this node is not the leader";
  }
}

function notFoundDetail(name: string): string {
  return `Lock "${name}" has no owner and no waiters`;
}
