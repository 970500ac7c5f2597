/**
 * The checks of cluster mode's restores (milestone 2: ownerships and waiters reclaimed after a
 * fail-over): what the engine refuses to reinstate, and why. Pure functions over a lock.
 *
 * @module
 */

import { type KindDecision, mayGrant } from "./grant_policy.ts";
import type { LockState } from "./lock_state.ts";
import type { ClaimMode, OrderKey } from "./types.ts";

/** What is wrong with a restore's own numbers (token, slot, write generation), or null. */
export function restoreProblem(
  name: string,
  token: number,
  slot: number,
  writeGeneration: number,
): string | null {
  const what = `Cannot restore lock "${name}"`;
  if (!Number.isSafeInteger(token) || token < 1) return `${what}: token ${token} is not a token`;
  if (!Number.isSafeInteger(slot) || slot < 0) return `${what}: slot ${slot} is not a slot`;
  // A downgraded owner's generation is its own token (its exclusive grant was the last one).
  if (!Number.isSafeInteger(writeGeneration) || writeGeneration < 0 || writeGeneration > token) {
    return `${what}: write generation ${writeGeneration} is not a token up to ${token}`;
  }
  return null;
}

/**
 * Why a restored owner cannot join lock `name` (stored as `lock`, or not at all), which admits
 * it as `kind`, or null: a slot outside the limit or taken, an owner it cannot share the lock
 * with, its token in use.
 */
export function restoreConflict(
  name: string,
  lock: LockState | undefined,
  kind: KindDecision,
  mode: ClaimMode,
  slot: number,
  token: number,
): string | null {
  const what = `Cannot restore lock "${name}"`;
  if (kind.kind === "semaphore") {
    if (slot >= kind.limit) return `${what}: slot ${slot} is not below its limit ${kind.limit}`;
    if (lock?.slots?.has(slot)) return `${what}: slot ${slot} is taken`;
  } else if (slot !== 0) {
    return `${what}: slot ${slot} on a lock without slots`;
  }
  if (lock === undefined) return null;
  if (!mayGrant(lock, mode)) return `${what}: its owners cannot share it with this claim`;
  for (let owner = lock.ownersHead; owner !== null; owner = owner.next) {
    if (owner.token === token) return `${what}: token ${token} is in use`;
  }
  return null;
}

/**
 * Why a restored waiter's order key cannot go into `lock`'s queue, or null: not a key, from a
 * term after `currentTerm`, or the key of a claim queued already.
 */
export function orderKeyProblem(
  name: string,
  order: OrderKey,
  lock: LockState | undefined,
  currentTerm: number,
): string | null {
  const what = `Cannot restore a waiter of lock "${name}" at order ${order.term}:${order.seq}`;
  if (
    !Number.isSafeInteger(order.term) || !Number.isSafeInteger(order.seq) || order.term < 0 ||
    order.seq < 1
  ) {
    return `${what}: not an order key`;
  }
  if (order.term > currentTerm) {
    return `${what}: the term is after the current one (${currentTerm})`;
  }
  for (let claim = lock?.tail ?? null; claim !== null; claim = claim.prev) {
    if (claim.orderTerm < order.term) break;
    if (claim.orderTerm === order.term && claim.orderSeq === order.seq) {
      return `${what}: a claim with that key is queued already`;
    }
  }
  return null;
}
