/**
 * Shapes shared by the lock engine and its adapters. The engine speaks only
 * in these domain terms; the protocol layer maps them to wire codes.
 */

/**
 * Why an ownership ended (the label values of `lockd_releases_total{reason}`). `failover`
 * happens only in cluster mode: the leader stepped down and closed every session.
 */
export type EndReason = "graceful" | "expired" | "io_timeout" | "force" | "failover";
/**
 * The end reasons of a single node: exactly the four the operator spec names (and the only
 * label values of `lockd_releases_total{reason}` a single node exposes).
 */
export const SINGLE_NODE_END_REASONS: readonly EndReason[] = [
  "graceful",
  "expired",
  "io_timeout",
  "force",
];
/** Every end reason: a single node's and cluster mode's addition, `failover`. */
export const END_REASONS: readonly EndReason[] = [...SINGLE_NODE_END_REASONS, "failover"];

/**
 * Why a session is closed, and which end reason its ownerships get:
 * - `client_closed`: the client closed its connection cleanly (FIN) → graceful
 * - `io_error`: reset or read/write error → io_timeout
 * - `io_timeout`: nothing received for io_timeout_ms, or a write stalled → io_timeout
 * - `admin`: an operator force-released one of its locks or removed one of its waiters → force
 * - `shutdown`: the server is stopping → graceful
 * - `failover`: cluster mode, the leader stepped down (or handed over) → failover
 */
export type CloseCause =
  | "client_closed"
  | "io_error"
  | "io_timeout"
  | "admin"
  | "shutdown"
  | "failover";

export const END_REASON_OF_CLOSE: Readonly<Record<CloseCause, EndReason>> = {
  client_closed: "graceful",
  io_error: "io_timeout",
  io_timeout: "io_timeout",
  admin: "force",
  shutdown: "graceful",
  failover: "failover",
};

/** Why a queued claim left its queue without being granted. */
export type WaitEndCause = "timeout" | "cancelled" | "session_closed" | "kicked";

/**
 * One reading of the clock, taken once per operation by the caller and passed in:
 * the engine reads no clock, so one operation sees one instant.
 */
export interface Instant {
  /** Monotonic milliseconds: deadlines and durations. */
  readonly monoMs: number;
  /** Milliseconds since the Unix epoch: timestamps shown to people (audit, admin API). */
  readonly wallMs: number;
}

/**
 * Why no ownership can be granted right now. While any holds, ACQUIRE is refused with it,
 * hand-offs wait, and `/readyz` answers 503:
 * - `audit_unavailable`: the audit log cannot be written (every ownership must be recorded);
 * - `token_store_unavailable`: no fencing token could be reserved (the token file in
 *   `-data-dir` cannot be written, or the token space is exhausted); the shell retries;
 * - `shutting_down`: the server is stopping; nothing is granted from its first instant;
 * - `not_leader`: cluster mode, the node does not serve as leader (a standby, a node that stepped
 *   down); its sessions are closed at the same instant, so no ACQUIRE meets this block.
 */
export type GrantBlock =
  | "audit_unavailable"
  | "token_store_unavailable"
  | "shutting_down"
  | "not_leader";

/** Why a request was refused without changing anything, with what the message needs. */
export type Rejection =
  | { readonly reason: "invalid_argument"; readonly problem: string }
  | { readonly reason: "duplicate_claim"; readonly owned: boolean }
  | {
    readonly reason: "limit_exceeded";
    /** `claims`: the server-wide limit on stored claims (`-max-claims`). */
    readonly limit: "claims" | "claims_per_session" | "waiters_per_lock";
    readonly max: number;
  }
  | {
    readonly reason: "not_owner";
    /** What the session has of that lock. */
    readonly claim: "none" | "queued" | "owned";
    readonly token: number;
  }
  | { readonly reason: "grants_blocked"; readonly block: GrantBlock; readonly detail: string };

export type RejectReason = Rejection["reason"];

/** Who a session is, as shown to operators. */
export interface Peer {
  readonly sessionId: number;
  /** mTLS identity, or "" without mTLS. */
  readonly identity: string;
  /** `host:port`, IPv6 as `[::1]:port`. */
  readonly remoteAddr: string;
  /** The client name the session sent in HELLO (informational, at most 256 bytes). */
  readonly clientName: string;
}

/** Everything the engine reports back. Adapters carry these out in order. */
export type EngineEvent =
  | GrantedEvent
  | QueuedEvent
  | EndedEvent
  | WaitEndedEvent
  | RejectedEvent
  | SessionClosedEvent;

export interface GrantedEvent {
  readonly type: "granted";
  readonly peer: Peer;
  /** The ACQUIRE's request id. */
  readonly requestId: number;
  readonly name: string;
  readonly token: number;
  readonly leaseMs: number;
  readonly waitedMs: number;
  readonly sinceWallMs: number;
}

export interface QueuedEvent {
  readonly type: "queued";
  readonly peer: Peer;
  readonly requestId: number;
  readonly name: string;
  /** 1 = next in line. */
  readonly position: number;
}

export interface EndedEvent {
  readonly type: "ended";
  readonly peer: Peer;
  /** The ACQUIRE's request id of this ownership. */
  readonly acquireRequestId: number;
  /** The RELEASE's request id when a RELEASE ended it, else 0. */
  readonly releaseRequestId: number;
  readonly name: string;
  readonly token: number;
  readonly reason: EndReason;
  readonly heldMs: number;
}

export interface WaitEndedEvent {
  readonly type: "wait_ended";
  readonly peer: Peer;
  readonly requestId: number;
  /** The RELEASE's request id when the client cancelled, else 0. */
  readonly releaseRequestId: number;
  readonly name: string;
  readonly cause: WaitEndCause;
  readonly waitedMs: number;
}

export interface RejectedEvent {
  readonly type: "rejected";
  readonly peer: Peer;
  readonly requestId: number;
  readonly name: string;
  readonly rejection: Rejection;
}

/** The engine closed a session (io timeout or operator action); the adapter closes the connection. */
export interface SessionClosedEvent {
  readonly type: "session_closed";
  readonly peer: Peer;
  readonly cause: CloseCause;
  /** The lock an operator acted on, for the ERROR 0x02 frame ("" otherwise). */
  readonly name: string;
}

/** Introspection of one lock (admin API). */
export interface LockView {
  readonly name: string;
  readonly holder: HolderView | null;
  /** The queue in FIFO order, or its first part when the caller asked for fewer. */
  readonly waiters: WaiterView[];
  /** How many wait in all. */
  readonly queueLength: number;
}

export interface HolderView {
  readonly identity: string;
  readonly remoteAddr: string;
  readonly sessionId: number;
  readonly clientName: string;
  readonly sinceWallMs: number;
  /** Monotonic start of the ownership ("held for" is measured from it). */
  readonly sinceMs: number;
  readonly leaseMs: number;
  readonly token: number;
}

export interface WaiterView {
  readonly identity: string;
  readonly remoteAddr: string;
  readonly sessionId: number;
  readonly clientName: string;
  readonly queuedAtWallMs: number;
  /** Monotonic time the claim entered the queue ("waiting for" is measured from it). */
  readonly queuedAtMs: number;
}

/** Counters and gauges the engine keeps exact; `/metrics` reads them at scrape time. */
export interface EngineStats {
  sessionsOpen: number;
  locksHeld: number;
  waiters: number;
  acquiresTotal: number;
  /** Grants to a claim that waited in a queue: the lock passed from one owner to the next. */
  handoffsTotal: number;
  heartbeatsTotal: number;
  releasesTotal: Record<EndReason, number>;
  waitSecondsSum: number;
  waitSecondsCount: number;
  holdSecondsSum: number;
  holdSecondsCount: number;
}
