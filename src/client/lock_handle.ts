/**
 * An owned lock as the application sees it ({@link Lock}) and as the client tracks it.
 *
 * @module
 */

import { LockLostError, type LostReason } from "./errors.ts";

/**
 * An owned lock. Release it with `release()`, or hold it with `await using`.
 *
 * **What `lost` guarantees.** As long as `lost` has not fired (and `release()` has not been
 * called), the server has not granted this lock to anyone else, provided the client's and the
 * server's clocks run at rates within the safety margin of each other and the client's event
 * loop is not blocked. The client keeps a local deadline on its monotonic clock: the send time
 * of the newest HEARTBEAT the server acknowledged (or of the ACQUIRE, if later) plus the lease,
 * minus a margin of max(lease / 10, min(50 ms, lease / 4)); the I/O timeout stands in for the
 * lease when it is shorter. When that deadline passes without a newer acknowledgement, `lost`
 * fires with reason `lease_unconfirmed`, even if the network says nothing (a stalled path, a
 * paused server); nothing that arrives later revives the ownership. Heartbeats go out every
 * third of the lease, so a healthy connection never comes near the deadline.
 *
 * Reading `lost` (or `state`) compares the deadline with the clock right then, so the first
 * check after the event loop was blocked, or the whole process paused (a long GC, SIGSTOP, a
 * suspended VM), already says lost, even before the timer that fires `lost` has run. So check
 * `lost.aborted` right before each step on the guarded resource, and pass `token` with every
 * write so that a resource which checks fencing tokens rejects a stale holder whatever happens
 * on the client.
 */
export interface Lock extends AsyncDisposable {
  /** The lock's name. */
  readonly name: string;
  /** The fencing token: pass it to the guarded resource with every write. */
  readonly token: number;
  /** The effective lease in milliseconds (after the server's clamping). */
  readonly leaseMs: number;
  /**
   * Aborted when the ownership ends without `release()`; its reason is a
   * {@link LockLostError} telling why (`expired`, `force`, `io_timeout`, `disconnected`,
   * `lease_unconfirmed`, `failover`). Never aborted after `release()` was called. Reading it
   * checks the local lease deadline against the clock first, so a reading after a pause is
   * never stale.
   */
  readonly lost: AbortSignal;
  /**
   * `held`, `releasing` (release() called, no answer yet), `released` or `lost`; like `lost`,
   * checked against the local lease deadline when read.
   */
  readonly state: LockState;
  /**
   * Ends the ownership and resolves once the server confirmed it, or once the ownership ended
   * anyway (lost, connection closed, lease no longer confirmed). Resolves at once when the lock
   * was already lost; calling it again returns the same promise.
   */
  release(): Promise<void>;
}

/**
 * Legal transitions: `held` → `releasing` (release() called) → `released`; `held` → `lost`.
 * `released` and `lost` are final; `lost` fires only from `held`.
 */
export type LockState = "held" | "releasing" | "released" | "lost";

/** The client's side of an owned lock. */
export class LockHandle implements Lock {
  readonly name: string;
  readonly token: number;
  readonly leaseMs: number;
  /** Request id of the ACQUIRE that was granted (LEASE_EXPIRED echoes it). */
  readonly acquireRequestId: number;
  /** When that ACQUIRE was sent (client monotonic ms): the first confirmation of the lease. */
  readonly acquireSentAtMs: number;
  #state: LockState = "held";
  #releasing: Promise<void> | null = null;
  readonly #lost = new AbortController();
  readonly #sendRelease: (handle: LockHandle) => Promise<void>;
  /** Ends the ownership at once when its local deadline has passed (the client's check). */
  readonly #checkDeadline: (handle: LockHandle) => void;

  constructor(
    fields: {
      name: string;
      token: number;
      leaseMs: number;
      acquireRequestId: number;
      acquireSentAtMs: number;
    },
    sendRelease: (handle: LockHandle) => Promise<void>,
    checkDeadline: (handle: LockHandle) => void = () => {},
  ) {
    this.name = fields.name;
    this.token = fields.token;
    this.leaseMs = fields.leaseMs;
    this.acquireRequestId = fields.acquireRequestId;
    this.acquireSentAtMs = fields.acquireSentAtMs;
    this.#sendRelease = sendRelease;
    this.#checkDeadline = checkDeadline;
  }

  get state(): LockState {
    this.#check();
    return this.#state;
  }

  get lost(): AbortSignal {
    this.#check();
    return this.#lost.signal;
  }

  /** The deadline, read against the clock now: a timer that has not run yet cannot lag it. */
  #check(): void {
    if (this.#state === "held" || this.#state === "releasing") this.#checkDeadline(this);
  }

  release(): Promise<void> {
    if (this.#releasing !== null) return this.#releasing;
    if (this.#state !== "held") return Promise.resolve();
    this.#state = "releasing";
    this.#releasing = this.#sendRelease(this);
    return this.#releasing;
  }

  /** `held` → `lost`; returns false (and does nothing) in any other state. */
  markLost(reason: LostReason): boolean {
    if (this.#state !== "held") return false;
    this.#state = "lost";
    this.#lost.abort(new LockLostError(this.name, this.token, reason));
    return true;
  }

  /** `releasing` → `released`. */
  markReleased(): void {
    if (this.#state === "releasing") this.#state = "released";
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}
