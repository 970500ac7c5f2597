/**
 * The engine's mutable state and its transitions: claims join and leave queues, become owners
 * and end, lock-delays and reservations start and end, with every gauge and the view version
 * kept exact. It validates nothing: the engine (engine.ts) checks each request first and calls
 * these in a legal state; the cheap invariants are asserted where a change is made.
 *
 * @module
 */

import { DeadlineHeap } from "./deadline_heap.ts";
import { admitClaim, type KindDecision, mayGrant, ownersMax } from "./grant_policy.ts";
import {
  appendOwner,
  appendToQueue,
  type Claim,
  type Deadline,
  hasClaims,
  insertInQueue,
  insertOwner,
  type LockState,
  newHolds,
  removeOwner,
  type Session,
  SlotSet,
  unlinkFromQueue,
} from "./lock_state.ts";
import type { TokenSource } from "./tokens.ts";
import {
  type ClaimMode,
  type CloseCause,
  END_REASON_OF_CLOSE,
  type EndReason,
  type EngineEvent,
  type EngineStats,
  type GrantBlock,
  type Instant,
  isGracefulEnd,
  type KindRuleLookup,
  type Peer,
  type WaitEndCause,
} from "./types.ts";

export class LockTable {
  readonly locks = new Map<string, LockState>();
  readonly sessions = new Map<number, Session>();
  readonly sessionsByAddr = new Map<string, Session>();
  readonly deadlines = new DeadlineHeap<Deadline>();
  /** Locks whose queue head could be granted but grants are blocked (see GrantBlock). */
  readonly pendingGrants = new Set<LockState>();
  /** Why grants are blocked; none while empty. */
  readonly blocks = new Set<GrantBlock>();
  /** The last token-store error while `token_store_unavailable` holds. */
  tokenFailure = "";
  /** Grows whenever an owner, a queue, a holder's mode or value changes. */
  viewVersion = 0;
  kindRule: KindRuleLookup | null;
  readonly tokens: TokenSource;

  readonly stats: EngineStats = {
    sessionsOpen: 0,
    sessionsOrphaned: 0,
    locksHeld: 0,
    owners: { exclusive: 0, shared: 0, semaphore: 0 },
    waiters: 0,
    acquiresTotal: 0,
    handoffsTotal: 0,
    reclaimsTotal: 0,
    heartbeatsTotal: 0,
    releasesTotal: { graceful: 0, expired: 0, io_timeout: 0, force: 0, failover: 0 },
    waitSecondsSum: 0,
    waitSecondsCount: 0,
    holdSecondsSum: 0,
    holdSecondsCount: 0,
    lockDelaysTotal: 0,
    lockDelaysActive: 0,
  };

  constructor(tokens: TokenSource, kindRule: KindRuleLookup | null) {
    this.tokens = tokens;
    this.kindRule = kindRule;
  }

  /** Owned and queued claims stored now (what -max-claims bounds). */
  claimCount = 0;

  /** The lock's kind once a claim (mode, limit) joins it, or the problem. */
  admit(
    name: string,
    lock: LockState | undefined,
    mode: ClaimMode,
    limit: number,
  ): KindDecision | string {
    if (lock !== undefined && hasClaims(lock)) return admitClaim(name, lock, null, mode, limit);
    const rule = this.kindRule === null ? null : this.kindRule(name);
    return admitClaim(name, null, rule, mode, limit);
  }

  /** Gives a lock the kind its next claim admitted (`lock` itself when unchanged). */
  applyKind(lock: LockState, kind: KindDecision): void {
    if (kind === lock) return;
    if (hasClaims(lock)) {
      // The only change while a lock has claims: an exclusive lock becomes a read/write lock.
      if (kind.kind !== lock.kind) this.changeKind(lock, "shared");
      return;
    }
    lock.kind = kind.kind;
    lock.limit = kind.limit;
    lock.fixed = kind.fixed;
    lock.slots = kind.kind === "semaphore" ? new SlotSet(kind.limit) : null;
  }

  /** exclusive → shared while the lock has claims: its owners now count as a shared lock's. */
  changeKind(lock: LockState, kind: "shared"): void {
    assert(lock.kind === "exclusive" && !lock.fixed, "only a plain lock becomes shared");
    this.stats.owners.exclusive -= lock.ownerCount;
    this.stats.owners.shared += lock.ownerCount;
    lock.kind = kind;
  }

  /** Appends a new claim at the tail of its lock's queue; returns its position (its length). */
  enqueue(claim: Claim): number {
    appendToQueue(claim);
    this.stats.waiters++;
    this.claimCount++;
    this.viewVersion++;
    return claim.lock.queueLength;
  }

  /** Puts a restored claim into its queue by its order key; returns its position (1 = head). */
  insertQueued(claim: Claim): number {
    const position = insertInQueue(claim);
    this.stats.waiters++;
    this.claimCount++;
    this.viewVersion++;
    return position;
  }

  /** Unlinks a queued claim and drops its wait deadline. */
  leaveQueue(claim: Claim): void {
    unlinkFromQueue(claim);
    this.stats.waiters--;
    this.claimCount--;
    this.viewVersion++;
    this.deadlines.remove(claim);
  }

  /** Removes a queued claim that was never answered (nothing is left behind). */
  dropClaim(claim: Claim): void {
    this.leaveQueue(claim);
    claim.state = "gone";
    claim.session.claims.delete(claim.lock.name);
    this.dropIfIdle(claim.lock);
  }

  #ownerAdded(lock: LockState): void {
    if (lock.ownerCount === 1) this.stats.locksHeld++;
    const owners = this.stats.owners;
    // Named properties: a keyed update costs more on the hand-off path.
    if (lock.kind === "exclusive") owners.exclusive++;
    else if (lock.kind === "shared") owners.shared++;
    else owners.semaphore++;
    this.claimCount++;
  }

  removeOwner(claim: Claim): void {
    const lock = claim.lock;
    removeOwner(claim);
    if (lock.ownerCount === 0) this.stats.locksHeld--;
    const owners = this.stats.owners;
    if (lock.kind === "exclusive") owners.exclusive--;
    else if (lock.kind === "shared") owners.shared--;
    else owners.semaphore--;
    this.claimCount--;
  }

  /**
   * Grants the head of the queue for as long as the grant policy allows it (a batch of readers,
   * the free slots of a semaphore, one exclusive claim). `handoff` is false only for the grant
   * of a free lock to the claim that just asked for it.
   */
  grantHeads(now: Instant, lock: LockState, events: EngineEvent[], handoff = true): void {
    for (let claim = lock.head; claim !== null; claim = lock.head) {
      if (lock.holds !== null || !mayGrant(lock, claim.mode)) return;
      if (this.blocks.size > 0) {
        this.pendingGrants.add(lock);
        return;
      }
      let token: number;
      try {
        token = this.tokens.next();
      } catch (error) {
        // Nothing is granted until the store works again: the shell retries with back-off.
        this.blocks.add("token_store_unavailable");
        this.tokenFailure = errorText(error);
        this.pendingGrants.add(lock);
        return;
      }
      if (this.pendingGrants.size !== 0) this.pendingGrants.delete(lock);
      // Only the head is granted (nobody passes an older claim), with the lock's largest token.
      if (token <= lock.tokenMax) throw new Error("lockd invariant broken: a lock's tokens grow");
      const waitedMs = now.monoMs - claim.queuedAtMs;
      this.#grant(now, claim, token);
      this.stats.acquiresTotal++;
      if (handoff) this.stats.handoffsTotal++;
      this.stats.waitSecondsSum += waitedMs / 1000;
      this.stats.waitSecondsCount++;
      events.push(this.grantedEvent(claim, waitedMs, false));
      // An exclusive owner admits nobody beside it: no need to look at the next head.
      if (lock.exclusiveOwners !== 0) return;
    }
  }

  /**
   * Makes a claim restored after a fail-over an owner with its own token, slot and write
   * generation (no new grant: reclaimsTotal counts it). The engine checked it may join.
   */
  restoreOwner(
    now: Instant,
    claim: Claim,
    token: number,
    slot: number,
    writeGeneration: number,
  ): void {
    const lock = claim.lock;
    claim.state = "owned";
    claim.token = token;
    claim.slot = slot;
    lock.slots?.take(slot);
    if (lock.kind !== "semaphore") {
      // What the lock knows of its last writer can only grow: an exclusive owner is one, a
      // reader saw one (no writer came after it while it held the lock).
      if (claim.mode === "shared") claim.writeGeneration = writeGeneration;
      const known = claim.mode === "exclusive" ? token : writeGeneration;
      if (known > lock.writeGeneration) lock.writeGeneration = known;
    }
    claim.sinceMs = now.monoMs;
    claim.sinceWallMs = now.wallMs;
    claim.leaseExpiresAtMs = now.monoMs + claim.leaseMs;
    if (token > lock.tokenMax) lock.tokenMax = token;
    insertOwner(claim);
    this.#ownerAdded(lock);
    this.stats.reclaimsTotal++;
    this.viewVersion++;
    this.deadlines.update(claim, claim.leaseExpiresAtMs);
  }

  /** Makes the head of its queue an owner with a new token. */
  #grant(now: Instant, claim: Claim, token: number): void {
    const lock = claim.lock;
    unlinkFromQueue(claim);
    this.stats.waiters--;
    this.claimCount--;
    claim.state = "owned";
    claim.token = token;
    claim.slot = lock.slots === null ? 0 : lock.slots.takeLowest();
    if (lock.kind !== "semaphore") {
      if (claim.mode === "exclusive") lock.writeGeneration = token;
      else claim.writeGeneration = lock.writeGeneration;
    }
    claim.sinceMs = now.monoMs;
    claim.sinceWallMs = now.wallMs;
    claim.leaseExpiresAtMs = now.monoMs + claim.leaseMs;
    lock.tokenMax = token;
    appendOwner(claim);
    this.#ownerAdded(lock);
    this.viewVersion++;
    // The wait bound's place on the heap (if any) becomes the lease's.
    this.deadlines.update(claim, claim.leaseExpiresAtMs);
  }

  grantedEvent(claim: Claim, waitedMs: number, restored: boolean): EngineEvent {
    const lock = claim.lock;
    return {
      type: "granted",
      peer: claim.session.peer,
      requestId: claim.requestId,
      name: lock.name,
      token: claim.token,
      leaseMs: claim.leaseMs,
      waitedMs,
      sinceWallMs: claim.sinceWallMs,
      mode: claim.mode,
      kind: lock.kind,
      limit: lock.limit,
      slot: claim.slot,
      writeGeneration: claim.writeGeneration,
      value: claim.value,
      restored,
    };
  }

  grantPending(now: Instant, events: EngineEvent[]): void {
    for (const lock of [...this.pendingGrants]) {
      this.pendingGrants.delete(lock);
      this.grantHeads(now, lock, events);
    }
  }

  endOwnership(
    now: Instant,
    claim: Claim,
    reason: EndReason,
    releaseRequestId: number,
    events: EngineEvent[],
  ): void {
    const lock = claim.lock;
    assert(claim.state === "owned", "only an owner's claim ends");
    const heldMs = now.monoMs - claim.sinceMs;
    claim.state = "gone";
    this.removeOwner(claim);
    claim.session.claims.delete(lock.name);
    this.deadlines.remove(claim);
    this.viewVersion++;
    this.stats.releasesTotal[reason]++;
    this.stats.holdSecondsSum += heldMs / 1000;
    this.stats.holdSecondsCount++;
    if (this.kindRule !== null && !isGracefulEnd(reason)) this.startDelay(now, lock);
    events.push({
      type: "ended",
      peer: claim.session.peer,
      acquireRequestId: claim.requestId,
      releaseRequestId,
      name: lock.name,
      token: claim.token,
      reason,
      heldMs,
      mode: claim.mode,
      kind: lock.kind,
      limit: lock.limit,
      slot: claim.slot,
      delayedUntilMs: lock.holds === null ? 0 : lock.holds.delayedUntilMs,
    });
    this.grantHeads(now, lock, events);
    this.dropIfIdle(lock);
    this.dropEmptyOrphan(now, claim.session, events);
  }

  /** A non-graceful end: the rule's lock-delay (if any) starts, or extends the running one. */
  startDelay(now: Instant, lock: LockState): void {
    const delayMs = this.kindRule!(lock.name)?.lockDelayMs ?? 0;
    if (!(delayMs > 0)) return;
    this.stats.lockDelaysTotal++;
    this.holdDelay(lock, now.monoMs + delayMs);
  }

  /** A lock-delay holds until `untilMs` (a running one only grows; a takeover carries one over). */
  holdDelay(lock: LockState, untilMs: number): void {
    const holds = lock.holds ??= newHolds(lock);
    if (untilMs <= holds.delayedUntilMs) return;
    if (holds.delayedUntilMs === 0) this.stats.lockDelaysActive++;
    holds.delayedUntilMs = untilMs;
    this.deadlines.update(holds.delayNode, untilMs);
  }

  /** The lock-delay ended (its deadline came): grants resume unless a reservation holds. */
  endDelay(now: Instant, lock: LockState, events: EngineEvent[]): void {
    const holds = lock.holds!;
    this.deadlines.remove(holds.delayNode);
    holds.delayedUntilMs = 0;
    this.stats.lockDelaysActive--;
    if (holds.reservedUntilMs === 0) lock.holds = null;
    this.grantHeads(now, lock, events);
    this.dropIfIdle(lock);
  }

  /** Holds new grants back until `untilMs` or until `claims` ownerships are restored. */
  reserve(lock: LockState, untilMs: number, claims: number): void {
    const holds = lock.holds ??= newHolds(lock);
    holds.reservedUntilMs = untilMs;
    holds.reservedClaims = claims;
    this.deadlines.update(holds.reserveNode, untilMs);
  }

  /**
   * An ownership of `lock` was restored: a reservation ends with its last awaited restore, or,
   * without a count, once the lock has no room for another owner (a semaphore with a free slot
   * or a shared lock stays reserved: more of its holders may come back, nobody knows how many).
   */
  restoredUnderReservation(now: Instant, lock: LockState, events: EngineEvent[]): void {
    const holds = lock.holds;
    if (holds === null || holds.reservedUntilMs === 0) return;
    const ends = holds.reservedClaims === 0
      ? lock.ownerCount >= ownersMax(lock.kind, lock.limit)
      : --holds.reservedClaims === 0;
    if (ends) this.endReservation(now, lock, events);
  }

  /** The reservation ended (deadline, lifted, or every expected claim restored). */
  endReservation(now: Instant, lock: LockState, events: EngineEvent[]): void {
    const holds = lock.holds;
    if (holds === null || holds.reservedUntilMs === 0) return;
    this.deadlines.remove(holds.reserveNode);
    holds.reservedUntilMs = 0;
    holds.reservedClaims = 0;
    if (holds.delayedUntilMs === 0) lock.holds = null;
    this.grantHeads(now, lock, events);
    this.dropIfIdle(lock);
  }

  endWait(
    now: Instant,
    claim: Claim,
    cause: WaitEndCause,
    releaseRequestId: number,
    events: EngineEvent[],
  ): void {
    assert(claim.state === "queued", "only a queued claim stops waiting");
    const lock = claim.lock;
    const wasHead = lock.head === claim;
    this.leaveQueue(claim);
    claim.state = "gone";
    claim.session.claims.delete(lock.name);
    events.push({
      type: "wait_ended",
      peer: claim.session.peer,
      requestId: claim.requestId,
      releaseRequestId,
      name: lock.name,
      cause,
      waitedMs: now.monoMs - claim.queuedAtMs,
    });
    // A head leaving lets the next one be tried (an ownerless queue, a writer that held readers
    // back, a semaphore with a free slot behind a blocked grant).
    if (wasHead) this.grantHeads(now, lock, events);
    if (lock.head === null) this.pendingGrants.delete(lock);
    this.dropIfIdle(lock);
  }

  /** Registers a connected session; its I/O deadline joins the heap. */
  openSession(peer: Peer, nowMs: number, ioTimeoutMs: number): void {
    const session: Session = {
      kind: "io",
      peer,
      claims: new Map(),
      lastSeenMs: nowMs,
      open: true,
      link: "connected",
      atMs: 0,
      heapIndex: -1,
    };
    this.sessions.set(peer.sessionId, session);
    this.sessionsByAddr.set(peer.remoteAddr, session);
    this.deadlines.update(session, nowMs + ioTimeoutMs);
    this.stats.sessionsOpen++;
  }

  /**
   * connected → orphaned (see `SessionLink`): its waits leave their queues (as at a close),
   * its I/O deadline goes; its ownerships stay until their leases end. A session left with no
   * ownership is closed at once (`cause`: its connection's end).
   */
  orphanSession(now: Instant, session: Session, cause: CloseCause, events: EngineEvent[]): void {
    assert(session.open && session.link === "connected", "only a connected session is orphaned");
    for (const claim of [...session.claims.values()]) {
      if (claim.state === "queued") this.endWait(now, claim, "session_closed", 0, events);
    }
    if (session.claims.size === 0) {
      this.closeSession(now, session, cause, "", events);
      return;
    }
    session.link = "orphaned";
    this.deadlines.remove(session);
    if (this.sessionsByAddr.get(session.peer.remoteAddr) === session) {
      this.sessionsByAddr.delete(session.peer.remoteAddr);
    }
    this.stats.sessionsOpen--;
    this.stats.sessionsOrphaned++;
    this.viewVersion++;
  }

  /**
   * Every claim of `from` moves to `to` (a same-term RESUME; the engine checked it may), its
   * request id renumbered by `requestIds` (by lock name), an owned one's lease renewed.
   */
  moveClaims(
    now: Instant,
    from: Session,
    to: Session,
    requestIds: ReadonlyMap<string, number> | undefined,
    events: EngineEvent[],
  ): void {
    for (const [name, claim] of from.claims) {
      const previousRequestId = claim.requestId;
      claim.session = to;
      claim.requestId = requestIds?.get(name) ?? previousRequestId;
      to.claims.set(name, claim);
      if (claim.state === "owned") claim.leaseExpiresAtMs = now.monoMs + claim.leaseMs;
      events.push({
        type: "claim_moved",
        peer: to.peer,
        fromSessionId: from.peer.sessionId,
        requestId: claim.requestId,
        previousRequestId,
        name,
        state: claim.state === "owned" ? "owned" : "queued",
        token: claim.token,
      });
    }
    from.claims.clear();
    if (events.length > 0) this.viewVersion++;
    this.dropEmptyOrphan(now, from, events);
  }

  /** An orphan whose last claim ended or moved is closed (its connection is long gone). */
  dropEmptyOrphan(now: Instant, session: Session, events: EngineEvent[]): void {
    if (session.link === "orphaned" && session.open && session.claims.size === 0) {
      this.closeSession(now, session, "io_error", "", events);
    }
  }

  closeSession(
    now: Instant,
    session: Session,
    cause: CloseCause,
    name: string,
    events: EngineEvent[],
  ): void {
    if (!session.open) return;
    session.open = false;
    // Waits leave first, so a closing session never receives a grant it cannot use.
    for (const claim of [...session.claims.values()]) {
      if (claim.state === "queued") this.endWait(now, claim, "session_closed", 0, events);
    }
    const reason = END_REASON_OF_CLOSE[cause];
    for (const claim of [...session.claims.values()]) {
      if (claim.state === "owned") this.endOwnership(now, claim, reason, 0, events);
    }
    this.sessions.delete(session.peer.sessionId);
    if (this.sessionsByAddr.get(session.peer.remoteAddr) === session) {
      this.sessionsByAddr.delete(session.peer.remoteAddr);
    }
    this.deadlines.remove(session);
    if (session.link === "orphaned") this.stats.sessionsOrphaned--;
    else this.stats.sessionsOpen--;
    events.push({ type: "session_closed", peer: session.peer, cause, name });
  }

  /** Forgets a lock with no owner, no waiter, no lock-delay and no reservation. */
  dropIfIdle(lock: LockState): void {
    if (
      lock.ownerCount === 0 && lock.queueLength === 0 && lock.holds === null &&
      this.locks.get(lock.name) === lock
    ) {
      this.locks.delete(lock.name);
      this.pendingGrants.delete(lock);
    }
  }
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function assert(condition: boolean, what: string): asserts condition {
  if (!condition) throw new Error(`lockd invariant broken: ${what}`);
}
