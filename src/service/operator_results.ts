/**
 * What the operator commands of the `LockService` (`forceRelease`, `kickWaiter`) answer: the
 * admin API maps each status to its reply.
 *
 * @module
 */

import type { GrantBlock, HolderView, WaiterView } from "../core/types.ts";

/** Outcome of a force-release (admin API). */
export type ForceReleaseResult =
  | {
    readonly status: "released";
    /** The oldest owner released. */
    readonly holder: HolderView;
    /** Every owner released, oldest first: all of them, or the one with the expected token. */
    readonly holders: readonly HolderView[];
  }
  /** The precondition failed: the lock is held, but no owner holds the expected token. */
  | {
    readonly status: "holder_changed";
    /** The oldest owner now. */
    readonly holder: HolderView;
    /** Every owner now, oldest first. */
    readonly holders: readonly HolderView[];
  }
  | { readonly status: "not_leader" }
  | { readonly status: "lock_not_found" }
  | {
    readonly status: "no_owner";
    readonly waiters: number;
    /** Why the queue has no owner: grants are blocked (null only in a race that cannot happen). */
    readonly block: GrantBlock | null;
    readonly detail: string;
  };

/** Outcome of removing a waiter (admin API). */
export type KickWaiterResult =
  | { readonly status: "kicked"; readonly waiter: WaiterView }
  | { readonly status: "not_leader" }
  | { readonly status: "lock_not_found" }
  | { readonly status: "waiter_not_found" };
