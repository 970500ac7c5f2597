/**
 * What an ACQUIRE (or a RECLAIM) asks the engine for beyond its lock, name, lease and wait.
 *
 * @module
 */

import type { ClaimMode } from "../core/types.ts";

/**
 * What an ACQUIRE asks for beyond its lock, name, lease and wait. Version 1 sessions ask for
 * {@link PLAIN_CLAIM}; protocol version 2 (issues 22, 23) may ask for a mode, a limit and a value
 * (see `AcquireOptions` in src/core/types.ts for their meaning).
 */
export interface ClaimOptions {
  readonly mode: ClaimMode;
  /** 0: no opinion (the lock's or a rule's limit, else 1); 1: a plain lock; N ≥ 2: a semaphore. */
  readonly limit: number;
  readonly value: Uint8Array | null;
}

/**
 * A version-1 ACQUIRE: a plain lock (limit 1, exclusive, no value). It never joins a semaphore or
 * shares a lock with readers, so "acquired" keeps meaning "alone" for its clients.
 */
export const PLAIN_CLAIM: ClaimOptions = Object.freeze({
  mode: "exclusive",
  limit: 1,
  value: null,
});
