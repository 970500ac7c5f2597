/**
 * The engine's invariants, checked over its whole state. Tests call `assertInvariants` after
 * every step (it is O(state), so production code does not); the engine asserts the cheap ones
 * where it makes a change as well.
 *
 * @module
 */

import { mayGrant, ownersMax } from "./grant_policy.ts";
import type { Claim, EngineState, LockState } from "./lock_state.ts";
import type { EngineStats, LockKind } from "./types.ts";

/** Everything the check reads. */
export interface InvariantInput extends EngineState {
  readonly stats: EngineStats;
  readonly pendingGrants: ReadonlySet<LockState>;
  readonly grantsBlocked: boolean;
  /** The token source's largest token. */
  readonly lastToken: number;
  readonly orderTerm: number;
  readonly orderSeq: number;
  readonly valueBytesMax: number;
}

/** Throws `lockd invariant broken: …` at the first breach. */
export function checkInvariants(state: InvariantInput): void {
  let held = 0;
  let waiting = 0;
  let delayed = 0;
  const owners: Record<LockKind, number> = { exclusive: 0, shared: 0, semaphore: 0 };
  for (const [name, lock] of state.locks) {
    assert(lock.name === name, "lock stored under its own name");
    assert(
      lock.ownerCount > 0 || lock.queueLength > 0 || lock.holds !== null,
      `idle lock "${name}" is stored`,
    );
    checkKind(lock);
    const count = checkOwners(state, lock);
    if (count > 0) held++;
    owners[lock.kind] += count;
    waiting += checkQueue(state, lock);
    checkGrants(state, lock);
    checkHolds(lock);
    if (lock.holds !== null && lock.holds.delayedUntilMs !== 0) delayed++;
  }
  assert(held === state.stats.locksHeld, "locks_held gauge is exact");
  assert(waiting === state.stats.waiters, "waiters gauge is exact");
  for (const kind of ["exclusive", "shared", "semaphore"] as const) {
    assert(owners[kind] === state.stats.owners[kind], `owners gauge of ${kind} locks is exact`);
  }
  assert(delayed === state.stats.lockDelaysActive, "active lock-delays gauge is exact");
  let orphans = 0;
  for (const session of state.sessions.values()) {
    assert(session.open, "a stored session is open");
    if (session.link === "orphaned") {
      orphans++;
      assert(session.heapIndex === -1, "an orphan has no I/O deadline");
      assert(session.claims.size > 0, "an orphan owns something");
      for (const claim of session.claims.values()) {
        assert(claim.state === "owned", "an orphan keeps only its ownerships");
      }
      assert(state.sessionsByAddr.get(session.peer.remoteAddr) !== session, "no orphan by address");
    } else {
      assert(session.heapIndex !== -1, "a connected session has its I/O deadline");
    }
    for (const [name, claim] of session.claims) {
      assert(claim.state !== "gone", "a session keeps no ended claims");
      assert(claim.session === session, "a claim names its session");
      assert(state.locks.get(name) === claim.lock, "a claim's lock is stored");
    }
  }
  assert(orphans === state.stats.sessionsOrphaned, "orphaned sessions gauge is exact");
  assert(state.sessions.size === state.stats.sessionsOpen + orphans, "sessions gauge is exact");
  for (const [addr, session] of state.sessionsByAddr) {
    assert(session.peer.remoteAddr === addr, "sessions by address are keyed by their address");
    assert(state.sessions.get(session.peer.sessionId) === session, "an addressed session is open");
  }
  for (const lock of state.pendingGrants) {
    assert(state.locks.get(lock.name) === lock, "a lock waiting for a grant is stored");
    assert(lock.head !== null, "a lock waiting for a grant has a queue");
  }
}

function checkKind(lock: LockState): void {
  if (lock.kind === "semaphore") {
    assert(lock.limit >= 2, "a semaphore's limit is at least 2");
    assert(lock.slots !== null && lock.slots.limit === lock.limit, "a semaphore keeps its slots");
  } else {
    assert(lock.limit === 1, "exclusive and shared locks have limit 1");
    assert(lock.slots === null, "only a semaphore has slots");
  }
}

/** Checks a lock's owner list; returns how many owners it has. */
function checkOwners(state: InvariantInput, lock: LockState): number {
  let count = 0;
  let exclusive = 0;
  let previous: Claim | null = null;
  const slots: number[] = [];
  for (let owner = lock.ownersHead; owner !== null; owner = owner.next) {
    assert(owner.state === "owned", "an owner's claim is owned");
    assert(owner.lock === lock, "an owner is listed under its own lock");
    assert(owner.prev === previous, "owner links are consistent");
    assert(owner.session.claims.get(lock.name) === owner, "an owner's claim is in its session");
    assert(previous === null || previous.token < owner.token, "owners are in token order");
    assert(owner.token > 0 && owner.token <= lock.tokenMax, "an owner's token is the lock's");
    assert(owner.token <= state.lastToken, "an owner's token was issued");
    assert(owner.heapIndex !== -1, "an owner's lease is on the deadline heap");
    checkValue(state, owner);
    if (lock.kind === "semaphore") {
      assert(owner.mode === "exclusive", "a semaphore has no shared owner");
      assert(owner.slot >= 0 && owner.slot < lock.limit, "a semaphore slot is below the limit");
      slots.push(owner.slot);
    } else {
      assert(owner.slot === 0, "an exclusive or shared owner has slot 0");
      if (owner.mode === "exclusive") exclusive++;
      else {
        assert(lock.kind === "shared", "a shared owner holds a shared lock");
        assert(owner.writeGeneration <= lock.writeGeneration, "a reader's generation is known");
      }
    }
    previous = owner;
    count++;
  }
  assert(lock.ownersTail === previous, "owner tail is the last owner");
  assert(count === lock.ownerCount, "owner count is exact");
  assert(exclusive === lock.exclusiveOwners, "exclusive owner count is exact");
  assert(count <= ownersMax(lock.kind, lock.limit), "owners within the kind's maximum");
  assert(exclusive === 0 || count === 1, "never an exclusive owner beside another owner");
  assert(lock.writeGeneration <= lock.tokenMax, "the write generation is a token of the lock");
  if (lock.slots !== null) {
    slots.sort((a, b) => a - b);
    for (let i = 1; i < slots.length; i++) {
      assert(slots[i] !== slots[i - 1], "slots are unique among owners");
    }
    assert(
      slots.join(",") === lock.slots.inUse().join(","),
      "a semaphore's slots in use are its owners'",
    );
  }
  return count;
}

/** Checks a lock's queue; returns its length. */
function checkQueue(state: InvariantInput, lock: LockState): number {
  let count = 0;
  let previous: Claim | null = null;
  for (let claim = lock.head; claim !== null; claim = claim.next) {
    assert(claim.state === "queued", "a queued claim is queued");
    assert(claim.lock === lock, "a waiter is queued under its own lock");
    assert(claim.prev === previous, "queue links are consistent");
    assert(claim.session.claims.get(lock.name) === claim, "a waiter is in its session");
    assert(
      previous === null || previous.orderTerm < claim.orderTerm ||
        (previous.orderTerm === claim.orderTerm && previous.orderSeq < claim.orderSeq),
      "a queue is sorted by order key",
    );
    assert(
      claim.orderTerm < state.orderTerm ||
        (claim.orderTerm === state.orderTerm && claim.orderSeq <= state.orderSeq),
      "an order key was handed out",
    );
    if (lock.kind === "semaphore") assert(claim.mode === "exclusive", "no shared semaphore claim");
    if (lock.kind === "exclusive") {
      assert(claim.mode === "exclusive", "no shared claim on a plain lock");
    }
    checkValue(state, claim);
    previous = claim;
    count++;
  }
  assert(lock.tail === previous, "queue tail is the last claim");
  assert(count === lock.queueLength, "queue length is exact");
  return count;
}

/**
 * No grant is missed: unless something holds the lock back (a lock-delay, a reservation, a
 * grant block), the head of its queue is a claim the policy cannot grant yet. Every owner was
 * granted as a head, so this also means no claim was passed by a younger incompatible one.
 */
function checkGrants(state: InvariantInput, lock: LockState): void {
  const head = lock.head;
  if (head === null || !mayGrant(lock, head.mode)) return;
  const held = lock.holds !== null;
  assert(held || state.grantsBlocked, `the head of "${lock.name}" waits for nothing`);
  if (!held) assert(state.pendingGrants.has(lock), "a blocked grant is remembered");
}

function checkHolds(lock: LockState): void {
  const holds = lock.holds;
  if (holds === null) return;
  assert(
    holds.delayedUntilMs !== 0 || holds.reservedUntilMs !== 0,
    "a lock's holds are kept only while one holds",
  );
  assert(
    (holds.delayedUntilMs !== 0) === (holds.delayNode.heapIndex !== -1),
    "a lock-delay has its deadline",
  );
  assert(
    (holds.reservedUntilMs !== 0) === (holds.reserveNode.heapIndex !== -1),
    "a reservation has its deadline",
  );
  assert(
    Number.isSafeInteger(holds.reservedClaims) && holds.reservedClaims >= 0 &&
      (holds.reservedUntilMs !== 0 || holds.reservedClaims === 0),
    "a reservation awaits a count of restores, or none",
  );
}

function checkValue(state: InvariantInput, claim: Claim): void {
  const value = claim.value;
  assert(
    value === null || (value.length > 0 && value.length <= state.valueBytesMax),
    "a value is within its bound",
  );
}

function assert(condition: boolean, what: string): asserts condition {
  if (!condition) throw new Error(`lockd invariant broken: ${what}`);
}
