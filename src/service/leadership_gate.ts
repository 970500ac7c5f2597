import type { Tickets } from "../security/tickets.ts";
import type { ReclaimVoidReason } from "./void_reasons.ts";
import type { WireError } from "./wire_errors.ts";

export type { ReclaimVoidReason } from "./void_reasons.ts";

/** The cluster's part of the reclaim rule decides these reasons; the service all the others. */
export type ClusterVoidReason = Extract<
  ReclaimVoidReason,
  "term" | "window" | "floor" | "regranted"
>;

/** A claim a RECLAIM asks to carry over from an earlier term, as `reclaimCheck` sees it. */
export interface ReclaimClaim {
  readonly kind: "owned" | "queued";
  readonly name: string;
  /**
   * The term the claim was made in (its ticket's term): the RESUME's `prevTerm`. Always below
   * the gate's `term` (a claim of this term is a same-term move, which the service handles).
   */
  readonly term: number;
  /** Owned: the ownership's token; queued: 0. */
  readonly token: number;
  /** Owned: its semaphore slot (0 for other kinds); queued: 0. */
  readonly slot: number;
}

/**
 * What the lock service asks of whoever keeps ownership records and takes reclaims (cluster
 * milestone 2, docs/cluster.md and design §1, §3.5): the term, the reclaim window, the tickets'
 * key, the cluster parts of the reclaim rule, and the records' write rules W1–W3. A single node
 * has its own implementation (`SingleNodeGate`): term 0, a per-process ticket key, no records.
 *
 * Every method is called synchronously from inside a service command (one engine step), in the
 * order of the engine's events, and must not call back into the service. None may throw.
 */
export interface OwnershipGate {
  /**
   * The term this node serves (0 on a single node). It goes into every WELCOME of version 2 and
   * every ticket minted, and `LockService.leading()` makes it the engine's order term (new
   * claims queue behind restored waiters of earlier terms); read only while the node may decide
   * (sessions are open only then), and by `leading()`, so it must be the new term by then.
   */
  readonly term: number;
  /**
   * WELCOME's `reclaimWindowMs` (version 2): how long after losing a connection a client should
   * keep trying to reclaim its claims (0: no reclaim). Cluster mode: about 1.5 × TTL + the HELLO
   * hold + the reclaim grace. Read when a version-2 session opens.
   */
  readonly reclaimWindowMs: number;
  /**
   * The tickets of this cluster (or process) under its key: the service mints one for every
   * ACQUIRED and QUEUED of a version-2 session and verifies the ticket of every RECLAIM. Read
   * only while the node may decide; the key must not change while tickets of the served term or
   * of the one before it may still be shown.
   */
  readonly tickets: Tickets;
  /**
   * RESUME from an earlier term (`prevTerm < term`): how long (ms) claims of `prevTerm` can still
   * be reclaimed here, for RESUMED's `windowLeftMs`; 0 when none can be (the window is closed, or
   * `prevTerm` is too old by rule (ii)): the RESUMED outcome is then `none`. A single node
   * answers 0 (it has no earlier term).
   */
  reclaimWindowLeftMs(prevTerm: number): number;
  /**
   * The cluster parts of the reclaim rule for one RECLAIM of a claim from an earlier term, asked
   * after its ticket verified (rule (i)) and before the ACL (vi) and the engine (v):
   * - (ii) the term rule: `claim.term` is the served term τ before this one, or τ₋₁ when τ
   *   crashed before closing its window and the lock's record was last written in a term
   *   ≤ `claim.term` → else `"term"`;
   * - (iii) the window is still open → else `"window"`;
   * - (iv), owned claims only: the lock is in H (the records read at takeover) and
   *   `claim.token` > its floor (for `claim.slot`) → else `"floor"`;
   * - (v), owned claims only, the part the engine cannot see: the lock was not granted afresh in
   *   this term (it may be idle again by now) → else `"regranted"`.
   * Returns null when all hold. Pure: it changes nothing (a kept reclaim's records are the
   * business of `beforeDeliver(name, true)`). A single node answers `"term"`.
   */
  reclaimCheck(claim: ReclaimClaim): ClusterVoidReason | null;
  /**
   * W1/W2, once per ownership about to be told to its client (ACQUIRED: a grant, a restored
   * ownership, a moved one), right when the engine decided it, before its audit record is
   * written: null when the ACQUIRED may leave as soon as the record is written (the lock's
   * record is committed for this term — or for any term when `restored` — with no floor write
   * pending; always on a single node); otherwise a promise that resolves once the write it waits
   * for committed, or rejects when it never will (the term ended): the ACQUIRED is then dropped
   * (its place in the reply order filled with nothing), as M1 does for a promise the node may
   * not make. The service attaches its handlers at once (no unhandled rejection). A grant also
   * ends the lock's linger (W3).
   */
  beforeDeliver(name: string, restored: boolean): Promise<void> | null;
  /**
   * W2: an ownership of `name` with `token` (in `slot`) ended, as the engine decided it, before
   * any later grant of the lock in the same step is passed to `beforeDeliver`. `graceful` is
   * false for `expired`, `io_timeout` (a version-2 session gone without GOODBYE included),
   * `force` and `failover`: the floor of the lock (slot) rises to `token`. `shared`: a reader's
   * ownership (readers share slot 0). `delayedUntilMs`: the monotonic end of the lock-delay this
   * end started (0: none), kept with the floor so a next leader holds the lock back as long.
   */
  ended(
    name: string,
    token: number,
    graceful: boolean,
    slot: number,
    shared: boolean,
    delayedUntilMs: number,
  ): void;
  /**
   * W3: the lock has no owner and no waiter any more (after an end or a wait's end); its record
   * may go after the linger. Not called for a lock the engine drops without an event (a
   * reservation or lock-delay that ran out with nobody): the gate notices those itself.
   */
  idle(name: string): void;
  /** W3: a claim joined the queue of `name` (QUEUED): its linger, if any, ends. */
  busy(name: string): void;
  /**
   * A session that RESUMEd with (`prevTerm`, `prevSessionId`) is done reclaiming: every RECLAIM
   * its RESUME announced was decided (kept or void, the engine's changes made), or it sent
   * another request first, or it ended. Called once per RESUME, for every outcome and term (the
   * gate filters): a planned hand-over's early window end counts the sessions of its list here.
   */
  reclaimsDone(prevTerm: number, prevSessionId: number): void;
}

/**
 * What the lock service asks of cluster mode (implemented by src/cluster/cluster_node.ts;
 * absent on a single node, where the service behaves exactly as without it and takes its
 * `OwnershipGate` from `SingleNodeGate` in src/service/single_node_gate.ts).
 */
export interface LeadershipGate extends OwnershipGate {
  /**
   * A HELLO arrived: null to WELCOME it now, an error (NOT_LEADER) to refuse it, or a promise
   * of either when the answer has to wait (an election in progress, a paused leader).
   */
  admit(): WireError | null | Promise<WireError | null>;
  /**
   * A frame that promises ownership for `leaseMs` (ACQUIRED, HEARTBEAT_ACK) is ready. The gate
   * calls `deliver` once the node may make that promise (at once when it serves and its own
   * etcd lease covers it), or `drop` if it never may (the node stepped down). Calls are
   * answered in the order they were made.
   */
  promise(leaseMs: number, deliver: () => void, drop: () => void): void;
  /** Whether an operator action (force-release, waiter removal) may run now. */
  mayAct(): boolean;
  /**
   * Whether the node may decide a change of ownership right now (grant, hand-off, expiry, the
   * end of a session's ownerships): only while it serves and can prove its leadership at this
   * instant. It does the arithmetic itself, so a node that slept through its timers (SIGSTOP, a
   * VM pause) finds out here, before its first decision. When it may not, the service decides
   * and audits nothing: the work waits for `LockService.decisionsResumed()` (the leader
   * re-proved its lease), or is dropped at the step-down (`closeAllForFailover`).
   */
  mayDecide(): boolean;
}
