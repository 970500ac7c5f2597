/**
 * The grant policy: which claims a lock admits, and whether the head of its queue may be
 * granted now. Pure functions over a lock's kind and owner counts; the engine applies them.
 *
 * Kinds (decisions for issue 22, the docs describe them from here):
 * - A claim has a mode (`exclusive` by default, or `shared`) and a limit: 0 = no opinion (the
 *   lock's or a rule's, else 1), 1 = a plain lock, N ≥ 2 = a semaphore of N.
 * - A lock's kind and limit hold while it exists (has owners or waiters): a rule fixes them, or
 *   its first claim does: `semaphore` (limit N ≥ 2), `shared` (a shared claim, limit 1) or
 *   `exclusive` (limit 1).
 * - A plain lock is a read/write lock nobody has asked to read yet: exclusive and shared claims
 *   are compatible with each other on limit-1 locks, and the first shared claim makes an
 *   `exclusive` lock `shared` for as long as it exists. A rule that fixes `exclusive` refuses
 *   shared claims instead.
 * - A semaphore accepts only exclusive claims whose limit is 0 or its own. Any other claim (a
 *   limit that disagrees with the lock's, a shared claim on a semaphore) is refused
 *   INVALID_ARGUMENT with a problem naming the lock's kind and limit.
 *
 * Grants (only ever to the head of the queue, so nobody passes an older claim):
 * - exclusive claim on an exclusive or shared lock: no owner at all;
 * - shared claim: no exclusive owner. Consecutive shared claims at the head are granted
 *   together; a queued exclusive claim stops the shared claims behind it (writer preference:
 *   a stream of readers cannot starve a writer);
 * - semaphore: fewer than N owners (strictly FIFO: the head whenever a slot is free).
 *
 * @module
 */

import { SEMAPHORE_LIMIT_MAX } from "../limits.ts";
import type { ClaimMode, KindRule, LockKind } from "./types.ts";

/** A lock's kind as the policy sees it. */
export interface KindDecision {
  readonly kind: LockKind;
  readonly limit: number;
  /** Fixed by a rule. */
  readonly fixed: boolean;
}

/** What the grant check reads of a lock. */
export interface OwnerCounts {
  readonly kind: LockKind;
  readonly limit: number;
  readonly ownerCount: number;
  /** Exclusive-mode owners of an exclusive or shared lock (semaphore owners are not counted). */
  readonly exclusiveOwners: number;
}

const PLAIN_EXCLUSIVE: KindDecision = { kind: "exclusive", limit: 1, fixed: false };
const PLAIN_SHARED: KindDecision = { kind: "shared", limit: 1, fixed: false };

/** The most owners a lock of this kind may have at once. */
export function ownersMax(kind: LockKind, limit: number): number {
  return kind === "semaphore" ? limit : kind === "shared" ? Infinity : 1;
}

/** Whether a claim of `mode` at the head of the queue may be granted beside the lock's owners. */
export function mayGrant(lock: OwnerCounts, mode: ClaimMode): boolean {
  if (lock.kind === "semaphore") return lock.ownerCount < lock.limit;
  return mode === "shared" ? lock.exclusiveOwners === 0 : lock.ownerCount === 0;
}

/** The problem with a claim's limit as a number, or null. */
export function limitProblem(name: string, limit: number): string | null {
  if (Number.isSafeInteger(limit) && limit >= 0 && limit <= SEMAPHORE_LIMIT_MAX) return null;
  return `Cannot acquire lock "${name}": limit ${limit} is not a whole number from 0 to ${SEMAPHORE_LIMIT_MAX}`;
}

/**
 * Whether a claim (mode, limit) may join lock `name`, and the lock's kind if it does.
 * `current` is the lock's kind while it has claims, null when it has none (then `rule` or the
 * claim decides). Returns the kind after the claim joins (`current` itself when unchanged; a
 * `shared` one when a first shared claim turns an exclusive lock into a read/write lock), or
 * the problem (a string) when the claim disagrees with the lock.
 */
export function admitClaim(
  name: string,
  current: KindDecision | null,
  rule: KindRule | null,
  mode: ClaimMode,
  limit: number,
): KindDecision | string {
  if (current === null) {
    if (rule === null || rule.kind === null) return firstClaimKind(name, mode, limit);
    current = ruleKind(rule);
  }
  if (current.kind === "semaphore") {
    if (limit !== 0 && limit !== current.limit) return mismatch(name, current, limit);
    if (mode === "shared") return noSharedClaims(`Cannot acquire lock "${name}"`, current);
    return current;
  }
  if (limit > 1) return mismatch(name, current, limit);
  if (mode === "exclusive" || current.kind === "shared") return current;
  if (current.fixed) return noSharedClaims(`Cannot acquire lock "${name}"`, current);
  return PLAIN_SHARED;
}

/**
 * The problem with changing an owner's mode from `from` to `to` on a lock of kind `current`, or
 * null. Upgrades are refused: two readers upgrading at once would wait for each other forever.
 */
export function modeChangeProblem(
  name: string,
  current: KindDecision,
  from: ClaimMode,
  to: ClaimMode,
): string | null {
  if (from === to) return null;
  if (to === "exclusive") {
    return `Cannot upgrade lock "${name}" to exclusive: upgrade deadlocks; release then acquire exclusive`;
  }
  if (current.kind === "semaphore" || (current.kind === "exclusive" && current.fixed)) {
    return noSharedClaims(`Cannot downgrade lock "${name}" to shared`, current);
  }
  return null;
}

/** The kind of a lock whose first claim is (mode, limit), without a rule. */
function firstClaimKind(name: string, mode: ClaimMode, limit: number): KindDecision | string {
  if (limit <= 1) return mode === "shared" ? PLAIN_SHARED : PLAIN_EXCLUSIVE;
  if (mode === "shared") {
    return `Cannot acquire lock "${name}": a shared claim cannot ask for limit ${limit} (a semaphore takes no shared claims)`;
  }
  return { kind: "semaphore", limit, fixed: false };
}

function ruleKind(rule: KindRule): KindDecision {
  if (rule.kind === "semaphore") {
    if (!Number.isSafeInteger(rule.limit) || rule.limit < 2 || rule.limit > SEMAPHORE_LIMIT_MAX) {
      throw new RangeError(`A semaphore rule needs a limit from 2 to ${SEMAPHORE_LIMIT_MAX}`);
    }
    return { kind: "semaphore", limit: rule.limit, fixed: true };
  }
  return { kind: rule.kind!, limit: 1, fixed: true };
}

/** "an exclusive lock (limit 1)", "a semaphore with limit 8 by a server rule", ... */
function describeKind(kind: KindDecision): string {
  const what = kind.kind === "semaphore"
    ? `a semaphore with limit ${kind.limit}`
    : `${kind.kind === "exclusive" ? "an exclusive" : "a shared"} lock (limit 1)`;
  return kind.fixed ? `${what} by a server rule` : what;
}

function mismatch(name: string, current: KindDecision, limit: number): string {
  return `Cannot acquire lock "${name}": it is ${
    describeKind(current)
  }; this claim asks for limit ${limit}`;
}

function noSharedClaims(action: string, current: KindDecision): string {
  return `${action}: it is ${describeKind(current)}, which takes no shared claims`;
}
