import {
  CLAIMS_MAX_DEFAULT,
  CLAIMS_PER_SESSION_MAX_DEFAULT,
  DEADLINES_PER_TICK_MAX,
  IO_TIMEOUT_MS_DEFAULT,
  LEASE_MS_DEFAULT,
  LEASE_MS_MAX_DEFAULT,
  LEASE_MS_MIN,
  LOCK_VALUE_BYTES_MAX_DEFAULT,
  SESSIONS_MAX_DEFAULT,
  WAITERS_PER_LOCK_MAX_DEFAULT,
} from "../limits.ts";
import { type KindDecision, limitProblem, mayGrant, modeChangeProblem } from "./grant_policy.ts";
import { checkInvariants } from "./invariants.ts";
import { LockQueries } from "./lock_queries.ts";
import { lockNameProblem } from "./lock_name.ts";
import { type Claim, type LockState, newClaim, newLock, type Session } from "./lock_state.ts";
import { LockTable } from "./lock_table.ts";
import { orderKeyProblem, restoreConflict, restoreProblem } from "./restore_checks.ts";
import type { TokenSource } from "./tokens.ts";
import type {
  AcquireOptions,
  ClaimMode,
  CloseCause,
  EngineEvent,
  EngineStats,
  ForceReleaseOptions,
  GrantBlock,
  Instant,
  KindRuleLookup,
  MoveClaimsOptions,
  MoveOutcome,
  OrderKey,
  Peer,
  Rejection,
  ReleaseOptions,
  ReserveOptions,
  RestoreOutcome,
  RestoreOwnershipOptions,
  RestoreWaiterOptions,
  SetModeOptions,
  SetValueOptions,
} from "./types.ts";

/** How the engine is built: its token source, bounds and server rules. */
export interface EngineOptions {
  tokens: TokenSource;
  ioTimeoutMs?: number;
  leaseDefaultMs?: number;
  leaseMaxMs?: number;
  sessionsMax?: number;
  claimsPerSessionMax?: number;
  waitersPerLockMax?: number;
  /** Claims (owned or queued) stored at once, server-wide. */
  claimsMax?: number;
  /** Server rules: kind and limit per name, lock-delays (none by default). */
  kindRule?: KindRuleLookup | null;
  /** The largest value a holder may carry (`LOCK_VALUE_BYTES_MAX_DEFAULT`). */
  valueBytesMax?: number;
}

/** How a command that only operators (or the cluster) issue turned out. */
export type ForceReleaseStatus = "ok" | "not_found" | "no_owner" | "not_holder";

/**
 * The lock engine: owners, FIFO queues, leases, fencing tokens and session deadlines, for
 * every kind of lock (exclusive, shared read/write, semaphore; see grant_policy.ts). It does no
 * I/O and reads no clock: every operation that depends on time takes the caller's one reading
 * of it (an {@link Instant}). Every operation returns the events it caused, in order; the
 * service carries them out (audit records, frames, connection closes). The read side (views,
 * lists, pages) is `view` (lock_queries.ts); the state records are in lock_state.ts.
 *
 * Decisions (issue 22; the docs are written from here):
 * - Tokens: every grant gets its own token, larger than every token issued before, whatever the
 *   kind (semaphore owners too: the token orders grants; a resource that must reject stale
 *   holders of a slot keeps the last token per slot, and the grant says its slot). A lock's
 *   tokens grow in grant order.
 * - Semaphore slots: a grant takes the lowest free slot (0 to N − 1), so a resource with N
 *   places can index them by it.
 * - Write generation: a shared grant carries the token of the lock's last exclusive grant while
 *   the lock has been stored (0: none). It is not remembered once a lock is idle and dropped:
 *   remembering every name ever written would grow without bound, and a fail-over forgets it
 *   anyway, so a reader must treat 0 as "unknown" in every case; a non-zero value is exact
 *   (two reads with the same non-zero generation had no writer between them).
 * - Downgrade: an exclusive owner of a limit-1 lock may become shared in place (`setMode`), with
 *   the same token; waiting readers at the head are granted beside it. Upgrade is refused
 *   (two readers upgrading at once would deadlock): release, then acquire exclusive.
 * - Lock-delay: after a non-graceful end (`expired`, `io_timeout`, `force`, and `failover`: the
 *   holder did not let go and may still be acting on the resource) of an ownership of a lock
 *   whose rule gives a lock-delay, the lock grants nothing until the delay has passed (a
 *   semaphore's remaining owners keep their slots; no new one is granted). An idle lock under
 *   a delay stays stored until it ends. Never after a graceful end.
 * - Values: an ownership may carry a value (at most `valueBytesMax` bytes); its holder replaces
 *   it with `setValue`; it ends with the ownership. A waiter's value becomes its holder's value
 *   at the grant. Every change a watcher needs is an event: `granted`, `ended`, `queued`,
 *   `wait_ended`, `value_changed`, `mode_changed`, `claim_moved`.
 *
 * Cluster mode, milestone 2 (the engine's part of docs/cluster.md's reclaim):
 * - Order keys: every claim has `[orderTerm, orderSeq]`; new claims take the current term (0 on
 *   a single node) and the next sequence number, which keeps growing across terms; a queue is
 *   sorted by it, so restored waiters of an earlier term go ahead of newer claims.
 * - A restored ownership is not a new grant: it keeps its token (the token source is told it,
 *   so new grants stay above), takes a fresh lease, and neither a lock-delay nor a reservation
 *   holds it back. It is void (changes nothing) beside an owner it cannot share the lock with,
 *   in a taken slot, or against the lock's kind and limit.
 * - A reservation holds new grants back until its deadline, `liftReservation`, or as many
 *   restored ownerships as it awaits; without a count, until a restore leaves the lock no room
 *   for another owner (an exclusive owner, a semaphore's every slot): a semaphore with a free
 *   slot or a shared lock stays reserved until its deadline (the new leader cannot know how many
 *   holders will come back).
 * - Moved claims (a same-term RESUME) keep everything but their session and request ids; an
 *   owned one's lease is renewed, as a heartbeat would.
 */
export class LockEngine {
  readonly ioTimeoutMs: number;
  readonly leaseDefaultMs: number;
  readonly leaseMaxMs: number;
  readonly valueBytesMax: number;
  readonly #sessionsMax: number;
  readonly #claimsPerSessionMax: number;
  readonly #waitersPerLockMax: number;
  readonly #claimsMax: number;
  readonly #table: LockTable;
  /** The table's maps, held here too: the hot path reads them on every request. */
  readonly #locks: LockTable["locks"];
  readonly #sessions: LockTable["sessions"];
  #nextSessionId = 1;
  #orderTerm = 0;
  #orderSeq = 0;

  /** Counters and gauges, exact after every operation; `/metrics` reads them at scrape time. */
  readonly stats: EngineStats;
  /** The read side: views, lists, pages and lookups (admin API, console, metrics, tests). */
  readonly view: LockQueries;

  constructor(options: EngineOptions) {
    this.ioTimeoutMs = options.ioTimeoutMs ?? IO_TIMEOUT_MS_DEFAULT;
    this.leaseMaxMs = options.leaseMaxMs ?? LEASE_MS_MAX_DEFAULT;
    this.leaseDefaultMs = Math.min(options.leaseDefaultMs ?? LEASE_MS_DEFAULT, this.leaseMaxMs);
    this.valueBytesMax = options.valueBytesMax ?? LOCK_VALUE_BYTES_MAX_DEFAULT;
    this.#sessionsMax = options.sessionsMax ?? SESSIONS_MAX_DEFAULT;
    this.#claimsPerSessionMax = options.claimsPerSessionMax ?? CLAIMS_PER_SESSION_MAX_DEFAULT;
    this.#waitersPerLockMax = options.waitersPerLockMax ?? WAITERS_PER_LOCK_MAX_DEFAULT;
    this.#claimsMax = options.claimsMax ?? CLAIMS_MAX_DEFAULT;
    this.#table = new LockTable(options.tokens, options.kindRule ?? null);
    this.#locks = this.#table.locks;
    this.#sessions = this.#table.sessions;
    this.stats = this.#table.stats;
    this.view = new LockQueries(this.#table, this);
  }

  /**
   * Replaces the server rules (a reload). A lock keeps the kind it has while it has claims; the
   * next first claim and the next non-graceful end read the new rules.
   */
  setKindRule(kindRule: KindRuleLookup | null): void {
    this.#table.kindRule = kindRule;
  }

  // ---- sessions -----------------------------------------------------------

  /** Registers a session; null when the session limit is reached. */
  openSession(now: Instant, identity: string, remoteAddr: string, clientName = ""): Peer | null {
    if (this.#sessions.size >= this.#sessionsMax) return null;
    const peer: Peer = { sessionId: this.#nextSessionId++, identity, remoteAddr, clientName };
    this.#table.openSession(peer, now.monoMs, this.ioTimeoutMs);
    return peer;
  }

  /**
   * A connected session whose client may come back: orphaned (`SessionLink`), or closed with
   * `cause` when it owns nothing.
   */
  orphanSession(now: Instant, sessionId: number, cause: CloseCause): EngineEvent[] {
    const events: EngineEvent[] = [];
    const session = this.#sessions.get(sessionId);
    if (session?.link === "connected") this.#table.orphanSession(now, session, cause, events);
    return events;
  }

  /** Records that a session sent something; its I/O deadline moves (lazily, see tick). */
  touch(nowMs: number, sessionId: number): void {
    const session = this.#sessions.get(sessionId);
    if (session) session.lastSeenMs = nowMs;
  }

  /** Ends a session at the adapter's request: its ownerships end and its waits leave their queues. */
  closeSession(now: Instant, sessionId: number, cause: CloseCause): EngineEvent[] {
    const events: EngineEvent[] = [];
    const session = this.#sessions.get(sessionId);
    if (session) this.#table.closeSession(now, session, cause, "", events);
    return events;
  }

  // ---- requests -----------------------------------------------------------

  /**
   * ACQUIRE: grant at once when the lock admits the claim and nobody waits ahead of it, else
   * queue (or fail at once when `waitMs` is 0).
   */
  acquire(now: Instant, options: AcquireOptions): EngineEvent[] {
    const { requestId, name } = options;
    const mode = options.mode ?? "exclusive";
    const limit = options.limit ?? 0;
    const session = this.#requireSession(options.sessionId);
    const lock = this.#locks.get(name);
    const kind = this.#checkNewClaim(session, requestId, name, lock, mode, limit, options.value);
    if (Array.isArray(kind)) return kind;
    const grantable = lock === undefined ||
      (lock.queueLength === 0 && lock.holds === null && mayGrant(lock, mode));
    return this.#enter(now, session, options, lock, kind, mode, grantable, null);
  }

  /**
   * RELEASE: ends an ownership with its token, or cancels a queued claim (token 0). Also of an
   * orphan: a same-term RESUME releases what its client did not carry over.
   */
  release(now: Instant, options: ReleaseOptions): EngineEvent[] {
    const { requestId, name, token } = options;
    const events: EngineEvent[] = [];
    const session = this.#requireSession(options.sessionId, true);
    const claim = session.claims.get(name);
    if (claim !== undefined && claim.state === "owned" && claim.token === token) {
      this.#table.endOwnership(now, claim, "graceful", requestId, events);
      return events;
    }
    if (claim !== undefined && claim.state === "queued" && token === 0) {
      this.#table.endWait(now, claim, "cancelled", requestId, events);
      return events;
    }
    return this.#notOwner(session, requestId, name, claim, token);
  }

  /** HEARTBEAT: renews every ownership of the session; returns how many. */
  heartbeat(nowMs: number, sessionId: number): number {
    const session = this.#requireSession(sessionId);
    session.lastSeenMs = nowMs;
    let renewed = 0;
    for (const claim of session.claims.values()) {
      if (claim.state !== "owned") continue;
      // The heap node is re-keyed lazily when it comes due (see tick).
      claim.leaseExpiresAtMs = nowMs + claim.leaseMs;
      renewed++;
    }
    this.stats.heartbeatsTotal++;
    return renewed;
  }

  /**
   * SET_VALUE: replaces the value of the session's ownership with `token`. A stale or unknown
   * token is refused `not_owner`; a value over `valueBytesMax` `invalid_argument`.
   */
  setValue(_now: Instant, options: SetValueOptions): EngineEvent[] {
    const { requestId, name, token } = options;
    const session = this.#requireSession(options.sessionId);
    const problem = this.#valueProblem("set the value of", name, options.value);
    if (problem !== null) {
      return this.#reject(session, requestId, name, { reason: "invalid_argument", problem });
    }
    const claim = session.claims.get(name);
    if (claim === undefined || claim.state !== "owned" || claim.token !== token) {
      return this.#notOwner(session, requestId, name, claim, token);
    }
    claim.value = copyValue(options.value);
    this.#table.viewVersion++;
    return [{
      type: "value_changed",
      peer: session.peer,
      requestId,
      name,
      token,
      value: claim.value,
    }];
  }

  /**
   * Changes the mode of the session's ownership with `token`. `shared` downgrades an exclusive
   * owner in place (same token) and grants the readers waiting at the head beside it;
   * `exclusive` on a shared owner is refused (an upgrade deadlocks). The mode it already has
   * answers `mode_changed` with `changed: false`.
   */
  setMode(now: Instant, options: SetModeOptions): EngineEvent[] {
    const { requestId, name, token, mode } = options;
    const session = this.#requireSession(options.sessionId);
    const claim = session.claims.get(name);
    if (claim === undefined || claim.state !== "owned" || claim.token !== token) {
      return this.#notOwner(session, requestId, name, claim, token);
    }
    const lock = claim.lock;
    const problem = modeChangeProblem(name, lock, claim.mode, mode);
    if (problem !== null) {
      return this.#reject(session, requestId, name, { reason: "invalid_argument", problem });
    }
    const events: EngineEvent[] = [];
    const changed = claim.mode !== mode;
    if (changed) {
      // Exclusive → shared: the lock becomes a read/write lock if it was not one yet.
      if (lock.kind === "exclusive") this.#table.changeKind(lock, "shared");
      lock.exclusiveOwners--;
      claim.mode = "shared";
      claim.writeGeneration = lock.writeGeneration;
      this.#table.viewVersion++;
    }
    events.push({
      type: "mode_changed",
      peer: session.peer,
      requestId,
      name,
      token,
      mode: claim.mode,
      changed,
      writeGeneration: claim.writeGeneration,
    });
    if (changed) this.#table.grantHeads(now, lock, events);
    return events;
  }

  // ---- operator actions ---------------------------------------------------

  /**
   * Force-release: the owner's session is closed (ERROR 0x02 first), all its ownerships end
   * with reason force, and the head waiter is granted at once. Without `token`, every owner's
   * session is closed (oldest first); with it, only the session of the owner holding it
   * (`not_holder` when none does).
   */
  forceRelease(
    now: Instant,
    options: ForceReleaseOptions,
  ): { status: ForceReleaseStatus; events: EngineEvent[] } {
    const events: EngineEvent[] = [];
    const lock = this.#locks.get(options.name);
    if (lock === undefined) return { status: "not_found", events };
    if (lock.ownerCount === 0) return { status: "no_owner", events };
    const sessions: Session[] = [];
    for (let owner = lock.ownersHead; owner !== null; owner = owner.next) {
      if (options.token === undefined || owner.token === options.token) {
        sessions.push(owner.session);
      }
    }
    if (sessions.length === 0) return { status: "not_holder", events };
    for (const session of sessions) {
      this.#table.closeSession(now, session, "admin", options.name, events);
    }
    return { status: "ok", events };
  }

  /** Removes the waiter with exactly this remote address; its session is closed like a force-release. */
  kickWaiter(
    now: Instant,
    name: string,
    remoteAddr: string,
  ): { status: "ok" | "not_found"; events: EngineEvent[] } {
    const events: EngineEvent[] = [];
    const lock = this.#locks.get(name);
    const claim = this.#table.sessionsByAddr.get(remoteAddr)?.claims.get(name);
    if (lock === undefined || claim === undefined || claim.state !== "queued") {
      return { status: "not_found", events };
    }
    this.#table.endWait(now, claim, "kicked", 0, events);
    this.#table.closeSession(now, claim.session, "admin", name, events);
    return { status: "ok", events };
  }

  // ---- cluster mode: order keys, restores, reservations, moved claims -----------

  /**
   * The term new claims take as the first part of their order key (cluster mode: the leader's
   * term; 0 on a single node). Terms only grow; sequence numbers keep growing across terms.
   */
  setOrderTerm(term: number): void {
    if (!Number.isSafeInteger(term) || term < this.#orderTerm) {
      throw new RangeError(`Cannot set the order term to ${term}: it is ${this.#orderTerm}`);
    }
    this.#orderTerm = term;
  }

  /**
   * Reinstates an ownership reclaimed after a fail-over, with its own token, mode, slot and value
   * and a fresh lease: a `granted` event with `restored: true` (not counted in acquiresTotal;
   * in reclaimsTotal). Only beside owners it can share the lock with, in a free slot, on a lock
   * of its kind and limit (else `void`). A reservation counts it and ends with its last awaited
   * one (without a count: once the lock is full: an exclusive owner, a semaphore's every slot).
   * Lock-delays and reservations do not hold a restore back: it is not a new grant.
   */
  restoreOwnership(now: Instant, options: RestoreOwnershipOptions): RestoreOutcome {
    const { requestId, name, token } = options;
    const mode = options.mode ?? "exclusive";
    const limit = options.limit ?? 0;
    const slot = options.slot ?? 0;
    const writeGeneration = mode === "shared" ? options.writeGeneration ?? 0 : 0;
    const session = this.#requireSession(options.sessionId);
    const refusal = this.#restoreRefusal(session, options, limit, slot, writeGeneration);
    if (refusal !== null) return { status: "refused", rejection: refusal };
    const existing = this.#locks.get(name);
    const kind = this.#table.admit(name, existing, mode, limit);
    if (typeof kind === "string") return { status: "void", problem: kind };
    const conflict = restoreConflict(name, existing, kind, mode, slot, token) ??
      this.#observeRestoredToken(name, token);
    if (conflict !== null) return { status: "void", problem: conflict };
    const lock = this.#lockFor(name, existing);
    this.#table.applyKind(lock, kind);
    const claim = newClaim(
      session,
      lock,
      requestId,
      this.#clampLease(options.leaseMs),
      mode,
      copyValue(options.value),
      this.#orderTerm,
      0,
      now,
    );
    session.claims.set(name, claim);
    this.#table.restoreOwner(now, claim, token, slot, writeGeneration);
    const events: EngineEvent[] = [this.#table.grantedEvent(claim, 0, true)];
    this.#table.restoredUnderReservation(now, lock, events);
    return { status: "restored", events };
  }

  /** Why a restored ownership is refused before its lock is looked at, or null. */
  #restoreRefusal(
    session: Session,
    options: RestoreOwnershipOptions,
    limit: number,
    slot: number,
    writeGeneration: number,
  ): Rejection | null {
    const { name, token } = options;
    const problem = lockNameProblem(name) ?? limitProblem(name, limit) ??
      this.#valueProblem("acquire", name, options.value) ??
      restoreProblem(name, token, slot, writeGeneration);
    if (problem !== null) return { reason: "invalid_argument", problem };
    const existing = session.claims.get(name);
    if (existing !== undefined) {
      return { reason: "duplicate_claim", owned: existing.state === "owned" };
    }
    // A restore needs no new token: only the blocks that stop every ownership hold it back.
    const block = this.grantBlock;
    if (block !== null && block !== "token_store_unavailable") {
      return { reason: "grants_blocked", block, detail: this.blockDetail(block) };
    }
    if (session.claims.size >= this.#claimsPerSessionMax) {
      return {
        reason: "limit_exceeded",
        limit: "claims_per_session",
        max: this.#claimsPerSessionMax,
      };
    }
    if (this.#table.claimCount >= this.#claimsMax) {
      return { reason: "limit_exceeded", limit: "claims", max: this.#claimsMax };
    }
    return null;
  }

  /**
   * Tells the token source of a restored token above every token issued here, so every later
   * grant is above it; the problem when the source cannot be told (only such a source may
   * restore it), or null.
   */
  #observeRestoredToken(name: string, token: number): string | null {
    if (token <= this.#table.tokens.lastIssued) return null;
    if (this.#table.tokens.observe === undefined) {
      return `Cannot restore lock "${name}": token ${token} is above every token issued here`;
    }
    this.#table.tokens.observe(token);
    return null;
  }

  /** The lock of a name, made and stored when there is none yet. */
  #lockFor(name: string, existing: LockState | undefined): LockState {
    if (existing !== undefined) return existing;
    const lock = newLock(name);
    this.#locks.set(name, lock);
    return lock;
  }

  /**
   * Puts back a queued claim reclaimed after a fail-over at its original order key (walking
   * back from the tail), answered as an ACQUIRE is: `queued` with `restored: true` and its
   * position, or `granted` when it lands at the head of a lock that can take it. The order
   * key must not be from a later term than the current one, nor be queued already.
   */
  restoreWaiter(now: Instant, options: RestoreWaiterOptions): EngineEvent[] {
    const { requestId, name, order } = options;
    const mode = options.mode ?? "exclusive";
    const limit = options.limit ?? 0;
    const session = this.#requireSession(options.sessionId);
    const lock = this.#locks.get(name);
    const kind = this.#checkNewClaim(session, requestId, name, lock, mode, limit, options.value);
    if (Array.isArray(kind)) return kind;
    const orderProblem = orderKeyProblem(name, order, lock, this.#orderTerm);
    if (orderProblem !== null) {
      return this.#reject(session, requestId, name, {
        reason: "invalid_argument",
        problem: orderProblem,
      });
    }
    const ahead = lock?.head ?? null;
    const grantable = lock === undefined ||
      ((ahead === null || ahead.orderTerm > order.term ||
        (ahead.orderTerm === order.term && ahead.orderSeq > order.seq)) &&
        lock.holds === null && mayGrant(lock, mode));
    return this.#enter(now, session, options, lock, kind, mode, grantable, order);
  }

  /**
   * Holds a lock back from new grants (cluster mode: a lock the last term may have left held,
   * until its holders reclaimed it): until `untilMs`, `liftReservation`, or `claims` restored
   * ownerships (without `claims`: the restore that leaves the lock no room for another owner).
   * Queued claims wait meanwhile; restores go ahead. A reserved idle lock is kept.
   */
  reserve(options: ReserveOptions): void {
    const { name, untilMs } = options;
    const claims = options.claims ?? 0;
    const problem = lockNameProblem(name);
    if (problem !== null) throw new RangeError(`Cannot reserve lock "${name}": ${problem}`);
    if (
      !Number.isSafeInteger(claims) || claims < 0 || (options.claims !== undefined && claims < 1) ||
      !Number.isFinite(untilMs)
    ) {
      throw new RangeError(`Cannot reserve lock "${name}" until ${untilMs} for ${claims} claims`);
    }
    let lock = this.#locks.get(name);
    if (lock === undefined) {
      lock = newLock(name);
      this.#locks.set(name, lock);
    }
    this.#table.reserve(lock, untilMs, claims);
    if ((options.delayedUntilMs ?? 0) > 0) this.#table.holdDelay(lock, options.delayedUntilMs!);
  }

  /** Ends a lock's reservation now: its queue head is granted (an idle lock is forgotten). */
  liftReservation(now: Instant, name: string): EngineEvent[] {
    const events: EngineEvent[] = [];
    const lock = this.#locks.get(name);
    if (lock !== undefined) this.#table.endReservation(now, lock, events);
    return events;
  }

  /**
   * A same-term RESUME: every claim of `fromSessionId` moves to `toSessionId` with its state,
   * token, slot, value and queue place, renumbered by `requestIds` (by lock name); an owned
   * one's lease is renewed (its client just proved it is alive). One `claim_moved` event per
   * claim. Refused, changing nothing, when the new session already has a claim on one of the
   * locks or would pass its claim limit. The old session stays with no claims (an orphan closes).
   */
  moveClaims(now: Instant, options: MoveClaimsOptions): MoveOutcome {
    const from = this.#requireSession(options.fromSessionId, true);
    const to = this.#requireSession(options.toSessionId);
    const why =
      `Cannot move the claims of session ${from.peer.sessionId} to session ${to.peer.sessionId}`;
    if (from === to) return { status: "refused", problem: `${why}: it is the same session` };
    for (const name of from.claims.keys()) {
      if (to.claims.has(name)) {
        return { status: "refused", problem: `${why}: it has a claim on lock "${name}" already` };
      }
    }
    if (from.claims.size + to.claims.size > this.#claimsPerSessionMax) {
      return {
        status: "refused",
        problem: `${why}: it would have more than ${this.#claimsPerSessionMax} claims`,
      };
    }
    const events: EngineEvent[] = [];
    this.#table.moveClaims(now, from, to, options.requestIds, events);
    return { status: "moved", events };
  }

  // ---- grant blocks ---------------------------------------------------------

  /**
   * Blocks grants for a reason the shell sees (the audit log failed, shutdown began):
   * ACQUIRE is refused with it and hand-offs wait until every block is lifted.
   */
  blockGrants(block: "audit_unavailable" | "shutting_down" | "not_leader"): void {
    this.#table.blocks.add(block);
  }

  /** Lifts a block; when none is left, every queue whose head waits for a grant is granted. */
  unblockGrants(
    now: Instant,
    block: "audit_unavailable" | "shutting_down" | "not_leader",
  ): EngineEvent[] {
    const events: EngineEvent[] = [];
    this.#table.blocks.delete(block);
    if (this.#table.blocks.size === 0) this.#table.grantPending(now, events);
    return events;
  }

  /**
   * Tries the token store again after a failed reservation (the shell calls it with
   * back-off). On success the block is lifted and waiting queues are granted.
   */
  retryTokenStore(now: Instant): EngineEvent[] {
    const events: EngineEvent[] = [];
    if (!this.#table.blocks.has("token_store_unavailable")) return events;
    try {
      this.#table.tokens.prepare();
    } catch (error) {
      this.#table.tokenFailure = errorText(error);
      return events;
    }
    this.#table.blocks.delete("token_store_unavailable");
    this.#table.tokenFailure = "";
    if (this.#table.blocks.size === 0) this.#table.grantPending(now, events);
    return events;
  }

  /** The block that refuses ACQUIRE now (the most fundamental first), or null when granting. */
  get grantBlock(): GrantBlock | null {
    if (this.#table.blocks.size === 0) return null;
    for (const block of GRANT_BLOCK_ORDER) if (this.#table.blocks.has(block)) return block;
    return null;
  }

  /** Whether `block` holds now (several can at once). */
  isBlocked(block: GrantBlock): boolean {
    return this.#table.blocks.has(block);
  }

  /** What is known of a block's cause (the token store's last error), or "". */
  blockDetail(block: GrantBlock): string {
    return block === "token_store_unavailable" ? this.#table.tokenFailure : "";
  }

  // ---- time ---------------------------------------------------------------

  /** The earliest pending deadline (monotonic ms), or undefined. The adapter arms one timer for it. */
  nextDeadlineMs(): number | undefined {
    return this.#table.deadlines.peek()?.atMs;
  }

  /**
   * Handles every deadline due at `now`: lease expiries, wait timeouts, I/O timeouts, the ends
   * of lock-delays and reservations.
   */
  tick(now: Instant): EngineEvent[] {
    const events: EngineEvent[] = [];
    const nowMs = now.monoMs;
    for (let handled = 0; handled < DEADLINES_PER_TICK_MAX; handled++) {
      const node = this.#table.deadlines.peek();
      if (node === undefined || node.atMs > nowMs) break;
      switch (node.kind) {
        case "io": {
          const dueMs = node.lastSeenMs + this.ioTimeoutMs;
          if (dueMs > nowMs) this.#table.deadlines.update(node, dueMs);
          else this.#table.closeSession(now, node, "io_timeout", "", events);
          break;
        }
        case "claim":
          if (node.state === "queued") this.#table.endWait(now, node, "timeout", 0, events);
          else if (node.leaseExpiresAtMs > nowMs) {
            // Renewed by a heartbeat since: re-keyed now that it came due.
            this.#table.deadlines.update(node, node.leaseExpiresAtMs);
          } else this.#table.endOwnership(now, node, "expired", 0, events);
          break;
        case "delay":
          this.#table.endDelay(now, node.lock, events);
          break;
        case "reserve":
          this.#table.endReservation(now, node.lock, events);
          break;
      }
    }
    return events;
  }

  // ---- introspection ------------------------------------------------------

  /**
   * A number that grows whenever a lock gets or loses an owner or a waiter, or a holder's mode
   * or value changes: readers that show locks (the console's event stream) compare it to tell
   * whether anything changed.
   */
  get viewVersion(): number {
    return this.#table.viewVersion;
  }

  /** The largest token issued so far. */
  get lastToken(): number {
    return this.#table.tokens.lastIssued;
  }

  /** The order term new claims take (0 on a single node). */
  get orderTerm(): number {
    return this.#orderTerm;
  }

  /**
   * Checks the engine's invariants; throws on a breach. Tests call it after every step; it is
   * O(state) so production code does not.
   */
  assertInvariants(): void {
    checkInvariants({
      locks: this.#locks,
      sessions: this.#sessions,
      sessionsByAddr: this.#table.sessionsByAddr,
      stats: this.stats,
      pendingGrants: this.#table.pendingGrants,
      grantsBlocked: this.#table.blocks.size > 0,
      lastToken: this.#table.tokens.lastIssued,
      orderTerm: this.#orderTerm,
      orderSeq: this.#orderSeq,
      valueBytesMax: this.valueBytesMax,
    });
  }

  // ---- internals ----------------------------------------------------------

  /** The session a command names: a connected one (an orphan only when `orphan` allows it). */
  #requireSession(sessionId: number, orphan = false): Session {
    const session = this.#sessions.get(sessionId);
    if (session === undefined) throw new Error(`Unknown session ${sessionId}`);
    if (!orphan && session.link === "orphaned") throw new Error(`Orphaned session ${sessionId}`);
    return session;
  }

  #reject(
    session: Session,
    requestId: number,
    name: string,
    rejection: Rejection,
  ): EngineEvent[] {
    return [{ type: "rejected", peer: session.peer, requestId, name, rejection }];
  }

  #notOwner(
    session: Session,
    requestId: number,
    name: string,
    claim: Claim | undefined,
    token: number,
  ): EngineEvent[] {
    return this.#reject(session, requestId, name, {
      reason: "not_owner",
      claim: claim === undefined ? "none" : claim.state === "queued" ? "queued" : "owned",
      token,
    });
  }

  /**
   * The checks a new claim passes before anything is decided (ACQUIRE, a restored waiter), in
   * the order the protocol answers them: the refusal, or the lock's kind once the claim joins.
   */
  #checkNewClaim(
    session: Session,
    requestId: number,
    name: string,
    lock: LockState | undefined,
    mode: ClaimMode,
    limit: number,
    value: Uint8Array | null | undefined,
  ): KindDecision | EngineEvent[] {
    const problem = lockNameProblem(name) ??
      (limit === 0 || limit === 1 ? null : limitProblem(name, limit)) ??
      (value == null ? null : this.#valueProblem("acquire", name, value));
    if (problem !== null) {
      return this.#reject(session, requestId, name, { reason: "invalid_argument", problem });
    }
    const existing = session.claims.get(name);
    if (existing !== undefined) {
      return this.#reject(session, requestId, name, {
        reason: "duplicate_claim",
        owned: existing.state === "owned",
      });
    }
    const block = this.grantBlock;
    if (block !== null) {
      return this.#reject(session, requestId, name, {
        reason: "grants_blocked",
        block,
        detail: this.blockDetail(block),
      });
    }
    if (session.claims.size >= this.#claimsPerSessionMax) {
      return this.#reject(session, requestId, name, {
        reason: "limit_exceeded",
        limit: "claims_per_session",
        max: this.#claimsPerSessionMax,
      });
    }
    const kind = this.#table.admit(name, lock, mode, limit);
    if (typeof kind === "string") {
      return this.#reject(session, requestId, name, { reason: "invalid_argument", problem: kind });
    }
    return kind;
  }

  /**
   * A new claim that passed `#checkNewClaim` enters its lock: granted at once when `grantable`
   * (nobody waits ahead of it and the lock can take it), else queued at the tail with a new
   * order key (an ACQUIRE) or at its own key (`order`: a restored waiter), or, for a try-lock,
   * answered `timeout` with nothing stored.
   */
  #enter(
    now: Instant,
    session: Session,
    options: AcquireOptions | RestoreWaiterOptions,
    existing: LockState | undefined,
    kind: KindDecision,
    mode: ClaimMode,
    grantable: boolean,
    order: OrderKey | null,
  ): EngineEvent[] {
    const { requestId, name, waitMs } = options;
    if (!grantable && waitMs === 0) {
      return [{
        type: "wait_ended",
        peer: session.peer,
        requestId,
        releaseRequestId: 0,
        name,
        cause: "timeout",
        waitedMs: 0,
      }];
    }
    if (!grantable && existing!.queueLength >= this.#waitersPerLockMax) {
      return this.#reject(session, requestId, name, {
        reason: "limit_exceeded",
        limit: "waiters_per_lock",
        max: this.#waitersPerLockMax,
      });
    }
    const refusal = this.#claimsRefusal(session, requestId, name);
    if (refusal !== null) return refusal;
    const lock = this.#lockFor(name, existing);
    this.#table.applyKind(lock, kind);
    if (order !== null && order.term === this.#orderTerm && order.seq > this.#orderSeq) {
      this.#orderSeq = order.seq;
    }
    const claim = newClaim(
      session,
      lock,
      requestId,
      this.#clampLease(options.leaseMs),
      mode,
      copyValue(options.value),
      order === null ? this.#orderTerm : order.term,
      order === null ? ++this.#orderSeq : order.seq,
      now,
    );
    session.claims.set(name, claim);
    const position = order === null ? this.#table.enqueue(claim) : this.#table.insertQueued(claim);
    if (grantable) return this.#grantEntered(now, claim, order !== null);
    if (waitMs !== null) this.#table.deadlines.update(claim, now.monoMs + waitMs);
    return [{
      type: "queued",
      peer: session.peer,
      requestId,
      name,
      position,
      mode,
      orderTerm: claim.orderTerm,
      orderSeq: claim.orderSeq,
      restored: order !== null,
    }];
  }

  /**
   * Grants a claim that just entered a lock that can take it; when the token reservation fails
   * (grants are blocked now), leaves nothing behind and refuses it.
   */
  #grantEntered(now: Instant, claim: Claim, restored: boolean): EngineEvent[] {
    const events: EngineEvent[] = [];
    this.#table.grantHeads(now, claim.lock, events, restored);
    if (claim.state !== "queued") return events;
    const { session, requestId, lock } = claim;
    this.#table.dropClaim(claim);
    return this.#reject(session, requestId, lock.name, {
      reason: "grants_blocked",
      block: "token_store_unavailable",
      detail: this.blockDetail("token_store_unavailable"),
    });
  }

  /** The `limit_exceeded` refusal when storing one more claim passes -max-claims, or null. */
  #claimsRefusal(session: Session, requestId: number, name: string): EngineEvent[] | null {
    // Checked last, where a claim would be stored (a try-lock of a held lock stores none).
    // Every stored claim is an owner or a waiter: memory stays within the documented budget.
    if (this.#table.claimCount < this.#claimsMax) return null;
    return this.#reject(session, requestId, name, {
      reason: "limit_exceeded",
      limit: "claims",
      max: this.#claimsMax,
    });
  }

  #valueProblem(
    action: string,
    name: string,
    value: Uint8Array | null | undefined,
  ): string | null {
    if (value === undefined || value === null || value.length <= this.valueBytesMax) return null;
    return `Cannot ${action} lock "${name}": its value is ${value.length} bytes, more than the server's limit of ${this.valueBytesMax}`;
  }

  #clampLease(leaseMs: number): number {
    if (leaseMs === 0) return this.leaseDefaultMs;
    return Math.min(this.leaseMaxMs, Math.max(LEASE_MS_MIN, leaseMs));
  }
}

/** The engine's own copy of a value (empty: none), so no caller's buffer is kept. */
function copyValue(value: Uint8Array | null | undefined): Uint8Array | null {
  return value === undefined || value === null || value.length === 0 ? null : value.slice();
}

/** Grant blocks in the order ACQUIRE names them: the most fundamental cause first. */
const GRANT_BLOCK_ORDER: readonly GrantBlock[] = [
  "shutting_down",
  "not_leader",
  "audit_unavailable",
  "token_store_unavailable",
];

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
