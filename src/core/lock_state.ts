/**
 * The engine's state records (sessions, claims, locks) and the list operations on them. Only
 * the engine changes them; the queries (lock_queries.ts) and the invariant check
 * (invariants.ts) read them through `EngineState` and change nothing.
 *
 * A claim is in at most one list at a time, so one pair of links serves both: its lock's queue
 * while queued (sorted by order key: FIFO), its lock's owner list while owned (sorted by token:
 * grant order, oldest first). A hand-off therefore allocates nothing but its events.
 *
 * @module
 */

import type { DeadlineNode } from "./deadline_heap.ts";
import type { ClaimMode, LockKind, Peer } from "./types.ts";

/**
 * Whether a session's client can still be reached, and its only transitions:
 *   connected → orphaned   (`orphanSession`: a version-2 connection ended without GOODBYE while
 *                           the session owned something; its waits left their queues)
 * Either ends with the session (`closeSession`); an orphan also when its last ownership ends.
 * An orphan keeps only owned claims, each until its lease ends (no I/O deadline: nothing can
 * renew them), a RESUME moves them, or an operator force-releases one.
 */
export type SessionLink = "connected" | "orphaned";

/** A connected session's I/O deadline is the session itself on the heap (an orphan's: none). */
export interface Session extends DeadlineNode {
  readonly kind: "io";
  readonly peer: Peer;
  /** The session's claims by lock name: one per lock. */
  readonly claims: Map<string, Claim>;
  lastSeenMs: number;
  open: boolean;
  link: SessionLink;
}

/**
 * Claim states and their only transitions:
 *   queued → owned     (head of its queue and the grant policy allows it; or restored)
 *   queued → gone      (wait timeout, cancel, session closed, kicked)
 *   owned  → gone      (release, lease expiry, session closed, force-release)
 */
export type ClaimState = "queued" | "owned" | "gone";

/**
 * A claim is its own deadline on the heap: while queued, its wait bound (absent when it waits
 * forever); while owned, its lease (re-keyed lazily). It never needs both at once, so a claim
 * is one allocation.
 */
export interface Claim extends DeadlineNode {
  readonly kind: "claim";
  /** Changes only when `moveClaims` hands the claim to another session. */
  session: Session;
  readonly lock: LockState;
  /** The ACQUIRE's request id (renumbered by `moveClaims`). */
  requestId: number;
  readonly leaseMs: number;
  /** Changes only exclusive → shared (a downgrade). */
  mode: ClaimMode;
  state: ClaimState;
  /** Queue links while queued, owner-list links while owned. */
  prev: Claim | null;
  next: Claim | null;
  orderTerm: number;
  orderSeq: number;
  queuedAtMs: number;
  queuedAtWallMs: number;
  // ownership (while owned)
  token: number;
  slot: number;
  writeGeneration: number;
  sinceMs: number;
  sinceWallMs: number;
  leaseExpiresAtMs: number;
  value: Uint8Array | null;
}

/** A lock's own deadlines: the end of a lock-delay, the end of a reservation. */
export interface LockDeadline extends DeadlineNode {
  readonly kind: "delay" | "reserve";
  readonly lock: LockState;
}

export type Deadline = Session | Claim | LockDeadline;

/**
 * A lock the engine stores: while it has owners or waiters, and while a lock-delay or a
 * reservation holds it (then it may have neither).
 */
export interface LockState {
  readonly name: string;
  /** Holds while the lock has owners or waiters; the next first claim decides it again. */
  kind: LockKind;
  limit: number;
  /** Whether a rule fixed the kind (a fixed `exclusive` refuses shared claims). */
  fixed: boolean;
  /** Owners, lowest token first. */
  ownersHead: Claim | null;
  ownersTail: Claim | null;
  ownerCount: number;
  /** Owners in exclusive mode on an exclusive or shared lock (0 or 1). */
  exclusiveOwners: number;
  /** Queue, lowest order key first. */
  head: Claim | null;
  tail: Claim | null;
  queueLength: number;
  /** A semaphore's slots in use; null for the other kinds. */
  slots: SlotSet | null;
  /** The largest token granted or restored while the lock has been stored. */
  tokenMax: number;
  /** The token of the last exclusive grant while the lock has been stored (0: none). */
  writeGeneration: number;
  /** What holds grants back now (a lock-delay, a reservation); null while nothing does. */
  holds: LockHolds | null;
}

/**
 * A lock-delay and a reservation of one lock, kept only while one of them holds (both are
 * rare; a lock that has neither costs one null). While `holds` is set, nothing is granted.
 */
export interface LockHolds {
  /** Monotonic ms the lock-delay ends at, 0 when none holds. */
  delayedUntilMs: number;
  readonly delayNode: LockDeadline;
  /** Monotonic ms the reservation ends at, 0 when none holds. */
  reservedUntilMs: number;
  /**
   * Restored ownerships still expected before the reservation ends by itself; 0: not counted
   * (it ends with the restore that leaves the lock no room for another owner).
   */
  reservedClaims: number;
  readonly reserveNode: LockDeadline;
}

export function newHolds(lock: LockState): LockHolds {
  return {
    delayedUntilMs: 0,
    delayNode: { kind: "delay", lock, atMs: 0, heapIndex: -1 },
    reservedUntilMs: 0,
    reservedClaims: 0,
    reserveNode: { kind: "reserve", lock, atMs: 0, heapIndex: -1 },
  };
}

export function newLock(name: string): LockState {
  return {
    name,
    kind: "exclusive",
    limit: 1,
    fixed: false,
    ownersHead: null,
    ownersTail: null,
    ownerCount: 0,
    exclusiveOwners: 0,
    head: null,
    tail: null,
    queueLength: 0,
    slots: null,
    tokenMax: 0,
    writeGeneration: 0,
    holds: null,
  };
}

/** Whether the lock has an owner or a waiter (its kind holds only then). */
export function hasClaims(lock: LockState): boolean {
  return lock.ownerCount > 0 || lock.queueLength > 0;
}

/** A new queued claim (positional: it is made on every ACQUIRE, so no options object). */
export function newClaim(
  session: Session,
  lock: LockState,
  requestId: number,
  leaseMs: number,
  mode: ClaimMode,
  value: Uint8Array | null,
  orderTerm: number,
  orderSeq: number,
  now: { readonly monoMs: number; readonly wallMs: number },
): Claim {
  return {
    kind: "claim",
    atMs: 0,
    heapIndex: -1,
    session,
    lock,
    requestId,
    leaseMs,
    mode,
    state: "queued",
    prev: null,
    next: null,
    orderTerm,
    orderSeq,
    queuedAtMs: now.monoMs,
    queuedAtWallMs: now.wallMs,
    token: 0,
    slot: 0,
    writeGeneration: 0,
    sinceMs: 0,
    sinceWallMs: 0,
    leaseExpiresAtMs: 0,
    value,
  };
}

/** Orders claims by order key (negative: `a` is ahead). */
function compareOrder(a: Claim, b: Claim): number {
  return a.orderTerm - b.orderTerm || a.orderSeq - b.orderSeq;
}

// ---- the queue -------------------------------------------------------------------

/** Appends a claim at the tail of its lock's queue (its order key is the largest). */
export function appendToQueue(claim: Claim): void {
  const lock = claim.lock;
  claim.prev = lock.tail;
  claim.next = null;
  if (lock.tail === null) lock.head = claim;
  else lock.tail.next = claim;
  lock.tail = claim;
  lock.queueLength++;
}

/**
 * Inserts a claim by its order key, walking back from the tail (restored waiters are few and
 * old, new claims are appended). Returns its position (1 = head).
 */
export function insertInQueue(claim: Claim): number {
  const lock = claim.lock;
  let after = lock.tail;
  let behind = 0;
  while (after !== null && compareOrder(after, claim) > 0) {
    after = after.prev;
    behind++;
  }
  claim.prev = after;
  claim.next = after === null ? lock.head : after.next;
  if (after === null) lock.head = claim;
  else after.next = claim;
  if (claim.next === null) lock.tail = claim;
  else claim.next.prev = claim;
  lock.queueLength++;
  return lock.queueLength - behind;
}

/** Unlinks a queued claim (O(1)); the rest of the queue keeps its order. */
export function unlinkFromQueue(claim: Claim): void {
  const lock = claim.lock;
  if (claim.prev === null) lock.head = claim.next;
  else claim.prev.next = claim.next;
  if (claim.next === null) lock.tail = claim.prev;
  else claim.next.prev = claim.prev;
  claim.prev = null;
  claim.next = null;
  lock.queueLength--;
}

// ---- the owners --------------------------------------------------------------------

/** Appends a new grant to the owners (its token is the lock's largest): O(1). */
export function appendOwner(claim: Claim): void {
  const lock = claim.lock;
  claim.prev = lock.ownersTail;
  claim.next = null;
  if (lock.ownersTail === null) lock.ownersHead = claim;
  else lock.ownersTail.next = claim;
  lock.ownersTail = claim;
  lock.ownerCount++;
  if (claim.mode === "exclusive" && lock.kind !== "semaphore") lock.exclusiveOwners++;
}

/**
 * Adds a restored owner in token order, walking back from the tail (its token may be below
 * those of owners restored or granted before it).
 */
export function insertOwner(claim: Claim): void {
  const lock = claim.lock;
  let after = lock.ownersTail;
  while (after !== null && after.token > claim.token) after = after.prev;
  claim.prev = after;
  claim.next = after === null ? lock.ownersHead : after.next;
  if (after === null) lock.ownersHead = claim;
  else after.next = claim;
  if (claim.next === null) lock.ownersTail = claim;
  else claim.next.prev = claim;
  lock.ownerCount++;
  if (claim.mode === "exclusive" && lock.kind !== "semaphore") lock.exclusiveOwners++;
}

export function removeOwner(claim: Claim): void {
  const lock = claim.lock;
  if (claim.prev === null) lock.ownersHead = claim.next;
  else claim.prev.next = claim.next;
  if (claim.next === null) lock.ownersTail = claim.prev;
  else claim.next.prev = claim.prev;
  claim.prev = null;
  claim.next = null;
  lock.ownerCount--;
  if (claim.mode === "exclusive" && lock.kind !== "semaphore") lock.exclusiveOwners--;
  lock.slots?.free(claim.slot);
}

// ---- semaphore slots ---------------------------------------------------------------

/**
 * The slots in use of one semaphore: a byte per slot, grown on demand up to the limit, and a
 * hint below which every slot is taken, so the lowest free slot is found without rescanning
 * the taken prefix.
 */
export class SlotSet {
  #used: Uint8Array;
  /** Every slot below it is in use. */
  #lowestFree = 0;
  readonly limit: number;

  constructor(limit: number) {
    this.limit = limit;
    this.#used = new Uint8Array(Math.min(limit, 8));
  }

  has(slot: number): boolean {
    return slot < this.#used.length && this.#used[slot] === 1;
  }

  /** Takes the lowest free slot; the caller checked that fewer than `limit` are used. */
  takeLowest(): number {
    let slot = this.#lowestFree;
    while (this.has(slot)) slot++;
    this.take(slot);
    return slot;
  }

  /** Takes a given free slot (< limit). */
  take(slot: number): void {
    if (slot >= this.#used.length) {
      const grown = new Uint8Array(Math.min(this.limit, Math.max(slot + 1, this.#used.length * 2)));
      grown.set(this.#used);
      this.#used = grown;
    }
    this.#used[slot] = 1;
    if (slot === this.#lowestFree) this.#lowestFree++;
  }

  free(slot: number): void {
    this.#used[slot] = 0;
    if (slot < this.#lowestFree) this.#lowestFree = slot;
  }

  /** The slots in use, ascending (for the invariant check). */
  inUse(): number[] {
    const slots: number[] = [];
    for (let slot = 0; slot < this.#used.length; slot++) {
      if (this.#used[slot] === 1) slots.push(slot);
    }
    return slots;
  }
}

/** What the queries and the invariant check read: the engine's maps (they change nothing). */
export interface EngineState {
  readonly locks: ReadonlyMap<string, LockState>;
  readonly sessions: ReadonlyMap<number, Session>;
  readonly sessionsByAddr: ReadonlyMap<string, Session>;
}
