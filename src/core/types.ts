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

/**
 * Whether an ownership ended the way its holder meant it to (a RELEASE, a clean close, a
 * shutdown). Every other end (`expired`, `io_timeout`, `force`, `failover`) is non-graceful:
 * the holder may still be acting on the resource, so a lock-delay applies after it and cluster
 * mode raises the lock's floor.
 */
export function isGracefulEnd(reason: EndReason): boolean {
  return reason === "graceful";
}

/** How a claim holds a lock: alone (`exclusive`, the default) or beside other readers. */
export type ClaimMode = "exclusive" | "shared";

/**
 * What a lock is while it exists (while it has owners or waiters):
 * - `exclusive`: one owner at a time (limit 1), every claim exclusive;
 * - `shared`: a read/write lock (limit 1): any number of shared owners, or one exclusive owner;
 * - `semaphore`: at most `limit` owners (limit ≥ 2), every claim exclusive, each in its own slot.
 * An `exclusive` lock becomes `shared` at the first shared claim, unless a rule fixed it.
 */
export type LockKind = "exclusive" | "shared" | "semaphore";

/**
 * A server rule for a lock name (issue 22: the rules file), looked up when a lock gets its first
 * claim (kind and limit) and when an ownership ends non-gracefully (lock-delay).
 */
export interface KindRule {
  /**
   * The kind the rule fixes, or null when the first claim decides (as without a rule). A fixed
   * `exclusive` refuses shared claims; a fixed `shared` accepts both modes; a `semaphore` needs
   * `limit`.
   */
  readonly kind: LockKind | null;
  /** The semaphore's limit (2 or more); 1 for the other kinds; ignored when `kind` is null. */
  readonly limit: number;
  /** After a non-graceful end of an ownership, nothing is granted for this long (0: none). */
  readonly lockDelayMs: number;
}

/** Looks up the rule for a lock name (null: no rule). Must be pure and cheap. */
export type KindRuleLookup = (name: string) => KindRule | null;

/**
 * Where a claim stands in its queue: `[term, seq]`, compared term first. New claims take
 * `[current order term, next seq]`; a queue stays sorted by it (cluster mode restores waiters
 * of an earlier term with their original key).
 */
export interface OrderKey {
  readonly term: number;
  readonly seq: number;
}

/** Everything the engine reports back. Adapters carry these out in order. */
export type EngineEvent =
  | GrantedEvent
  | QueuedEvent
  | EndedEvent
  | WaitEndedEvent
  | RejectedEvent
  | SessionClosedEvent
  | ValueChangedEvent
  | ModeChangedEvent
  | ClaimMovedEvent;

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
  readonly mode: ClaimMode;
  /** The lock's kind and limit at the grant. */
  readonly kind: LockKind;
  readonly limit: number;
  /** The semaphore slot (0 to limit − 1); 0 for exclusive and shared locks. */
  readonly slot: number;
  /** Shared grants: the token of the lock's last exclusive grant (0: none known); else 0. */
  readonly writeGeneration: number;
  /** The holder's value (null: none). */
  readonly value: Uint8Array | null;
  /** A restored ownership (cluster mode, reclaimed after a fail-over): no new grant. */
  readonly restored: boolean;
}

export interface QueuedEvent {
  readonly type: "queued";
  readonly peer: Peer;
  readonly requestId: number;
  readonly name: string;
  /** 1 = next in line. */
  readonly position: number;
  readonly mode: ClaimMode;
  /** The claim's order key. */
  readonly orderTerm: number;
  readonly orderSeq: number;
  /** A restored waiter (cluster mode). */
  readonly restored: boolean;
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
  readonly mode: ClaimMode;
  /** The lock's kind and limit at the end. */
  readonly kind: LockKind;
  readonly limit: number;
  readonly slot: number;
  /**
   * Monotonic ms until which the lock grants nothing after this end (a lock-delay: a rule's,
   * after a non-graceful end), or 0 when no delay holds.
   */
  readonly delayedUntilMs: number;
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

/** A holder replaced its value (`setValue`). */
export interface ValueChangedEvent {
  readonly type: "value_changed";
  readonly peer: Peer;
  /** The SET_VALUE's request id. */
  readonly requestId: number;
  readonly name: string;
  readonly token: number;
  readonly value: Uint8Array | null;
}

/**
 * A holder's mode after `setMode` (a downgrade to shared; also answers a request for the mode
 * the holder already has). Grants it made possible follow as `granted` events.
 */
export interface ModeChangedEvent {
  readonly type: "mode_changed";
  readonly peer: Peer;
  /** The request's id. */
  readonly requestId: number;
  readonly name: string;
  readonly token: number;
  readonly mode: ClaimMode;
  /** Whether the mode changed (false: it already was `mode`). */
  readonly changed: boolean;
  readonly writeGeneration: number;
}

/** A claim moved to another session of the same client (`moveClaims`, a same-term RESUME). */
export interface ClaimMovedEvent {
  readonly type: "claim_moved";
  /** The session the claim belongs to now. */
  readonly peer: Peer;
  readonly fromSessionId: number;
  /** The claim's request id in its new session (the map's, or the old one). */
  readonly requestId: number;
  readonly previousRequestId: number;
  readonly name: string;
  readonly state: "owned" | "queued";
  /** The ownership's token (0 while queued). */
  readonly token: number;
}

/** Introspection of one lock (admin API). */
export interface LockView {
  readonly name: string;
  readonly kind: LockKind;
  /** 1 for exclusive and shared locks, N for a semaphore of N. */
  readonly limit: number;
  /** The oldest owner (lowest token), or null. */
  readonly holder: HolderView | null;
  /** Every owner, oldest (lowest token) first. */
  readonly holders: HolderView[];
  /** The queue in FIFO order, or its first part when the caller asked for fewer. */
  readonly waiters: WaiterView[];
  /** How many wait in all. */
  readonly queueLength: number;
  /** The token of the lock's last exclusive grant while it has existed (0: none). */
  readonly writeGeneration: number;
  /** Monotonic ms until which a lock-delay holds grants back, or 0. */
  readonly delayedUntilMs: number;
  /** Monotonic ms until which a reservation holds grants back (cluster mode), or 0. */
  readonly reservedUntilMs: number;
}

export interface HolderView {
  readonly identity: string;
  readonly remoteAddr: string;
  readonly sessionId: number;
  readonly clientName: string;
  /** False for an orphaned session's ownership (its connection ended; it waits for a RESUME). */
  readonly connected: boolean;
  readonly sinceWallMs: number;
  /** Monotonic start of the ownership ("held for" is measured from it). */
  readonly sinceMs: number;
  readonly leaseMs: number;
  readonly token: number;
  /** The ACQUIRE's request id. */
  readonly requestId: number;
  readonly mode: ClaimMode;
  readonly slot: number;
  /** Shared owners: the write generation of their grant; else 0. */
  readonly writeGeneration: number;
  /** The holder's value (null: none). Not a copy: do not change it. */
  readonly value: Uint8Array | null;
}

export interface WaiterView {
  readonly identity: string;
  readonly remoteAddr: string;
  readonly sessionId: number;
  readonly clientName: string;
  readonly queuedAtWallMs: number;
  /** Monotonic time the claim entered the queue ("waiting for" is measured from it). */
  readonly queuedAtMs: number;
  /** The ACQUIRE's request id. */
  readonly requestId: number;
  readonly mode: ClaimMode;
  readonly orderTerm: number;
  readonly orderSeq: number;
}

/** One claim of a session (a same-term RESUME moves them; a hand-over lists their sessions). */
export interface SessionClaimView {
  readonly name: string;
  readonly state: "owned" | "queued";
  /** The ACQUIRE's request id. */
  readonly requestId: number;
  /** Owned: its token; queued: 0. */
  readonly token: number;
  readonly leaseMs: number;
  readonly mode: ClaimMode;
  /** Its lock's limit: N for a semaphore of N, else 1. */
  readonly limit: number;
  /** Owned: its semaphore slot (0 for the other kinds); queued: 0. */
  readonly slot: number;
  /** Shared owners: the write generation of their grant; else 0. */
  readonly writeGeneration: number;
  /** Its order key, kept once it is granted. */
  readonly orderTerm: number;
  readonly orderSeq: number;
  /** Queued: its place in its queue (1 = head); owned: 0. */
  readonly position: number;
}

/** Counters and gauges the engine keeps exact; `/metrics` reads them at scrape time. */
export interface EngineStats {
  /** Sessions with a connection. */
  sessionsOpen: number;
  /** Orphaned sessions: their connection ended without GOODBYE, their ownerships stay. */
  sessionsOrphaned: number;
  /** Locks with at least one owner. */
  locksHeld: number;
  /** Owners now, by the kind of their lock. */
  owners: Record<LockKind, number>;
  waiters: number;
  /** New grants (restored ownerships are not counted: see reclaimsTotal). */
  acquiresTotal: number;
  /** Grants to a claim that waited in a queue: the lock passed from one owner to the next. */
  handoffsTotal: number;
  /** Ownerships restored (cluster mode, after a fail-over). */
  reclaimsTotal: number;
  heartbeatsTotal: number;
  releasesTotal: Record<EndReason, number>;
  waitSecondsSum: number;
  waitSecondsCount: number;
  holdSecondsSum: number;
  holdSecondsCount: number;
  /** Lock-delays started (a rule's delay after a non-graceful end). */
  lockDelaysTotal: number;
  /** Locks under a lock-delay now. */
  lockDelaysActive: number;
}

// ---- command options ---------------------------------------------------------

/** ACQUIRE. */
export interface AcquireOptions {
  readonly sessionId: number;
  readonly requestId: number;
  readonly name: string;
  /** 0: the server's default; clamped to the server's bounds. */
  readonly leaseMs: number;
  /** null: wait forever; 0: a try-lock (fails at once unless granted at once). */
  readonly waitMs: number | null;
  /** Default `exclusive`. */
  readonly mode?: ClaimMode;
  /**
   * 0 (default): no opinion (the lock's or a rule's limit, else 1); 1: a plain lock (exclusive
   * or shared); N ≥ 2: a semaphore of N.
   */
  readonly limit?: number;
  /** The holder's value from its grant on (copied; empty or null: none). */
  readonly value?: Uint8Array | null;
}

/** RELEASE: `token` ends that ownership; 0 cancels the session's queued claim. */
export interface ReleaseOptions {
  readonly sessionId: number;
  readonly requestId: number;
  readonly name: string;
  readonly token: number;
}

/** SET_VALUE: replaces the value of the ownership with `token` (copied; empty or null: none). */
export interface SetValueOptions {
  readonly sessionId: number;
  readonly requestId: number;
  readonly name: string;
  readonly token: number;
  readonly value: Uint8Array | null;
}

/** Changes the mode of the ownership with `token`: `shared` downgrades; `exclusive` is refused. */
export interface SetModeOptions {
  readonly sessionId: number;
  readonly requestId: number;
  readonly name: string;
  readonly token: number;
  readonly mode: ClaimMode;
}

/** An operator's force-release: every owner, or only the one holding `token`. */
export interface ForceReleaseOptions {
  readonly name: string;
  readonly token?: number;
}

/** Cluster mode: an ownership reclaimed after a fail-over, reinstated with its own token. */
export interface RestoreOwnershipOptions {
  readonly sessionId: number;
  readonly requestId: number;
  readonly name: string;
  readonly token: number;
  /** A fresh lease from now (0: the default). */
  readonly leaseMs: number;
  readonly mode?: ClaimMode;
  readonly limit?: number;
  /** The semaphore slot it held (0 for the other kinds). */
  readonly slot?: number;
  readonly value?: Uint8Array | null;
  /** A shared owner's write generation (what its grant said); ignored for exclusive owners. */
  readonly writeGeneration?: number;
}

/** Cluster mode: a queued claim reclaimed after a fail-over, put back at its order key. */
export interface RestoreWaiterOptions {
  readonly sessionId: number;
  readonly requestId: number;
  readonly name: string;
  readonly leaseMs: number;
  /** What is left of its wait bound (null: forever). */
  readonly waitMs: number | null;
  readonly mode?: ClaimMode;
  readonly limit?: number;
  readonly value?: Uint8Array | null;
  readonly order: OrderKey;
}

/** Cluster mode: hold a lock back from new grants until restores came in or `untilMs`. */
export interface ReserveOptions {
  readonly name: string;
  /** Monotonic ms at which the reservation ends by itself. */
  readonly untilMs: number;
  /**
   * How many restored ownerships end it early (at least 1). Without it (a takeover, which does
   * not know how many holders a lock had), the restore that leaves the lock no room for another
   * owner ends it: an exclusive owner, a semaphore's every slot; never a shared lock's readers.
   */
  readonly claims?: number;
  /** A lock-delay of the last term that runs on until then (monotonic ms; restores go ahead). */
  readonly delayedUntilMs?: number;
}

/** Cluster mode, a same-term RESUME: every claim of one session moves to another. */
export interface MoveClaimsOptions {
  readonly fromSessionId: number;
  readonly toSessionId: number;
  /** The new request id per lock name; a claim whose name is absent keeps its request id. */
  readonly requestIds?: ReadonlyMap<string, number>;
}

/**
 * How `restoreOwnership` turned out:
 * - `restored`: the ownership is back with its token (a `granted` event with `restored: true`,
 *   then whatever the end of a reservation granted);
 * - `refused`: the request itself is wrong or cannot be served now (as an ACQUIRE would be:
 *   invalid argument, duplicate claim, a limit, grants blocked); nothing changed;
 * - `void`: the ownership cannot be carried over: the lock now has an owner it cannot share
 *   with, the slot is taken, the lock's kind or limit differs, or the token is not one this
 *   server can stand behind (cluster mode answers CLAIM_VOID). Nothing changed.
 */
export type RestoreOutcome =
  | { readonly status: "restored"; readonly events: EngineEvent[] }
  | { readonly status: "refused"; readonly rejection: Rejection }
  | { readonly status: "void"; readonly problem: string };

/** How `moveClaims` turned out: `refused` changes nothing and says why. */
export type MoveOutcome =
  | { readonly status: "moved"; readonly events: EngineEvent[] }
  | { readonly status: "refused"; readonly problem: string };
