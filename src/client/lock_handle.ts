/**
 * An owned lock as the application sees it ({@link Lock}) and as the client tracks it.
 *
 * @module
 */

import { ConnectionError, LockdError, LockLostError, type LostReason } from "./errors.ts";
import { type Acquired, EMPTY_TICKET, EMPTY_VALUE } from "../wire/messages.ts";
import { WIRE_CODES } from "../wire/codes.ts";
import { valueBytes } from "./claim_kind.ts";
import { localDeadlineMs } from "./timing.ts";

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
 *
 * **Fail-overs (protocol version 2).** When the connection to a cluster's leader ends (the
 * leader died, stepped down or went silent), the lock stays held while its local deadline runs
 * and is carried over to the new leader with its token (docs/cluster.md). A lock acquired with
 * `suspend: true` whose deadline passes meanwhile is **suspended** rather than lost: `suspended`
 * is true and a `suspend` event fires; do no unfenced work then (fenced writes stay safe). A
 * `resume` event fires when it is confirmed again; it is lost (`failover`) when it cannot be.
 */
export interface Lock extends AsyncDisposable, EventTarget {
  /** The lock's name. */
  readonly name: string;
  /** The fencing token: pass it to the guarded resource with every write. */
  readonly token: number;
  /** The effective lease in milliseconds (after the server's clamping; the new leader's once carried over). */
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
   * True while a lock acquired with `suspend: true` is not confirmed (its local deadline passed
   * while it was being carried over to a new leader, or on a silent connection): do no unfenced
   * work. It becomes held again (event `resume`) or lost (`failover`, or `expired`).
   */
  readonly suspended: boolean;
  /**
   * `held`, `suspended`, `releasing` (release() called, no answer yet), `released` or `lost`;
   * like `lost`, checked against the local lease deadline when read. A lock being carried over
   * to a new leader after a fail-over is `held`.
   */
  readonly state: LockState;
  /** `exclusive` or `shared` (protocol version 2; version 1 has exclusive locks only). */
  readonly mode: "exclusive" | "shared";
  /** The lock's limit: N for a semaphore of N, else 1. */
  readonly limit: number;
  /**
   * The semaphore slot this ownership holds, 0 to `limit - 1` (0 for exclusive and shared
   * locks): a resource that must refuse stale holders of a slot keeps the last token per slot.
   */
  readonly slot: number;
  /**
   * A shared grant: the token of the lock's last exclusive grant (0 when none is known), so a
   * reader can tell whether what it reads was written by the newest writer; else 0.
   */
  readonly writeGeneration: number;
  /** The holder's value as the server has it (the acquire's, then each `setValue`'s). */
  readonly value: Uint8Array;
  /**
   * Replaces the holder's value (SET_VALUE, protocol version 2): what `query` and `observe`
   * show others, e.g. a leader's address; a string is sent as UTF-8. Rejects with a
   * {@link LockLostError} when the lock was lost, a {@link LockdError} NOT_OWNER when the
   * server no longer has this ownership or INVALID_ARGUMENT for a value longer than the
   * server takes, and a retryable `ConnectionError` while the lock is being carried over to a
   * new connection.
   */
  setValue(value: Uint8Array | string): Promise<void>;
  /**
   * Makes this exclusive ownership shared, in place (DOWNGRADE, protocol version 2): same token,
   * no moment without the lock; readers waiting at the head of the queue are granted beside it.
   * `mode` becomes `shared` and `writeGeneration` this lock's own token. Resolves at once when it
   * is shared already. There is no upgrade (two readers upgrading at once would wait for each
   * other forever): release, then acquire exclusive. Rejects as `setValue` (INVALID_ARGUMENT on a
   * semaphore, or on a lock a server rule makes exclusive).
   */
  downgrade(): Promise<void>;
  /**
   * Ends the ownership and resolves once the server confirmed it, or once the ownership ended
   * anyway (lost, connection closed, lease no longer confirmed). Resolves at once when the lock
   * was already lost; calling it again returns the same promise.
   */
  release(): Promise<void>;
}

/**
 * Legal transitions: `held` → `releasing` (release() called) → `released`; `held` → `lost`;
 * `held` ↔ `suspended` (a lock acquired with `suspend: true`: not confirmed in time, confirmed
 * again); `suspended` → `lost` or `releasing`. `released` and `lost` are final.
 */
export type LockState = "held" | "suspended" | "releasing" | "released" | "lost";

/**
 * Where a held lock stands with the server (the client's side only). Legal transitions:
 * `confirmed` → `reclaiming` (its connection ended in a way that lets it be carried over);
 * `reclaiming` → `confirmed` (the ACQUIRED of its RECLAIM); `confirmed` or `reclaiming` →
 * `suspended` (its deadline passed, acquired with `suspend`); `suspended` → `confirmed`
 * (an acknowledged heartbeat, a kept RECLAIM).
 */
export type LockPhase = "confirmed" | "reclaiming" | "suspended";

/** Where a held lock's SET_VALUE and DOWNGRADE go (looks.ts, on the current connection). */
export interface LockRequests {
  setValue(name: string, token: number, value: Uint8Array): Promise<void>;
  downgrade(name: string, token: number): Promise<Acquired>;
}

/** What a lock's deadline is counted against: the connection it was confirmed on last. */
export interface Confirmer {
  readonly ioTimeoutMs: number;
  readonly lastAckedHeartbeatSendMs: number;
}

/** The client's side of an owned lock. */
export class LockHandle extends EventTarget implements Lock {
  readonly name: string;
  readonly token: number;
  leaseMs: number;
  /** Request id of the ACQUIRE (or RECLAIM) it is keyed by (LEASE_EXPIRED echoes it). */
  requestId: number;
  /** Send time of that request (client monotonic ms): the first confirmation of the lease. */
  confirmedSendMs: number;
  /** The connection it was confirmed on last (while carried over: the one that was lost). */
  confirmer: Confirmer;
  /** Acquired with `suspend: true`. */
  readonly suspend: boolean;
  phase: LockPhase = "confirmed";
  /** The ticket of its last ACQUIRED on a session that takes reclaims (EMPTY_TICKET: none). */
  ticket: Uint8Array = EMPTY_TICKET;
  /** An owned RECLAIM on its way: its request id (0: none) and its send time. */
  reclaimRequestId = 0;
  reclaimSentAtMs = 0;
  mode: "exclusive" | "shared";
  readonly limit: number;
  readonly slot: number;
  writeGeneration: number;
  value: Uint8Array;
  readonly #values?: LockRequests;
  #state: "held" | "releasing" | "released" | "lost" = "held";
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
      requestId: number;
      confirmedSendMs: number;
      confirmer: Confirmer;
      suspend?: boolean;
      /** The ACQUIRED's kind fields (absent: a plain lock) and the acquire's value. */
      grant?: { mode?: unknown; limit?: number; slot?: number; writeGeneration?: number };
      value?: Uint8Array;
      /** Where `setValue` sends SET_VALUE (absent: values are refused). */
      values?: LockRequests;
    },
    sendRelease: (handle: LockHandle) => Promise<void>,
    checkDeadline: (handle: LockHandle) => void = () => {},
  ) {
    super();
    this.name = fields.name;
    this.token = fields.token;
    this.leaseMs = fields.leaseMs;
    this.requestId = fields.requestId;
    this.confirmedSendMs = fields.confirmedSendMs;
    this.confirmer = fields.confirmer;
    this.suspend = fields.suspend ?? false;
    this.mode = fields.grant?.mode === "shared" ? "shared" : "exclusive";
    this.limit = fields.grant?.limit ?? 1;
    this.slot = fields.grant?.slot ?? 0;
    this.writeGeneration = fields.grant?.writeGeneration ?? 0;
    this.value = fields.value ?? EMPTY_VALUE;
    this.#values = fields.values;
    this.#sendRelease = sendRelease;
    this.#checkDeadline = checkDeadline;
  }

  get state(): LockState {
    this.#check();
    if (this.#state === "held" && this.phase === "suspended") return "suspended";
    return this.#state;
  }

  get lost(): AbortSignal {
    this.#check();
    return this.#lost.signal;
  }

  get suspended(): boolean {
    return this.state === "suspended";
  }

  /** `held` (suspended or not): neither released nor lost. */
  get live(): boolean {
    return this.#state === "held";
  }

  /** `releasing`: release() was called and the ownership is not over yet. */
  get releasing(): boolean {
    return this.#state === "releasing";
  }

  /** The local lease deadline on the client's monotonic clock. */
  get deadlineMs(): number {
    const confirmedSendMs = Math.max(
      this.confirmedSendMs,
      this.confirmer.lastAckedHeartbeatSendMs,
    );
    return localDeadlineMs(confirmedSendMs, this.leaseMs, this.confirmer.ioTimeoutMs);
  }

  /** The deadline, read against the clock now: a timer that has not run yet cannot lag it. */
  #check(): void {
    if (this.#state === "held" || this.#state === "releasing") this.#checkDeadline(this);
  }

  async setValue(value: Uint8Array | string): Promise<void> {
    const bytes = valueBytes(value);
    await this.#confirmed("set the value of").setValue(this.name, this.token, bytes);
    this.value = bytes;
  }

  async downgrade(): Promise<void> {
    const requests = this.#confirmed("downgrade");
    if (this.mode === "shared") return;
    const grant = await requests.downgrade(this.name, this.token);
    this.mode = "shared";
    this.writeGeneration = grant.writeGeneration ?? this.token;
    // A ticket names the mode: the new one is what a reclaim shows (none without reclaims).
    if (this.ticket.length > 0) this.ticket = grant.ticket ?? EMPTY_TICKET;
  }

  /** Where a request about the held lock goes; throws when it is lost, released or carried over. */
  #confirmed(action: string): LockRequests {
    this.#check();
    if (this.#state === "lost") throw this.#lost.signal.reason;
    if (this.#state !== "held") {
      throw new LockdError(
        WIRE_CODES.NOT_OWNER.code,
        this.name,
        `Cannot ${action} lock "${this.name}": it was released`,
      );
    }
    if (this.phase !== "confirmed" || this.#values === undefined) {
      throw new ConnectionError(
        `Cannot ${action} lock "${this.name}": it is being carried over to a new connection; ` +
          "try again",
      );
    }
    return this.#values;
  }

  release(): Promise<void> {
    if (this.#releasing !== null) return this.#releasing;
    if (this.#state !== "held") return Promise.resolve();
    this.#state = "releasing";
    this.#releasing = this.#sendRelease(this);
    return this.#releasing;
  }

  /** `held` → `lost`; returns false (and does nothing) in any other state. */
  markLost(reason: LostReason, cause?: unknown): boolean {
    if (this.#state !== "held") return false;
    this.#state = "lost";
    this.#lost.abort(new LockLostError(this.name, this.token, reason, { cause }));
    return true;
  }

  /** `releasing` → `released`. */
  markReleased(): void {
    if (this.#state === "releasing") this.#state = "released";
  }

  /** Phase `suspended` ↔ `confirmed`, with the `suspend` or `resume` event. */
  setSuspended(suspended: boolean): void {
    const was = this.phase === "suspended";
    this.phase = suspended ? "suspended" : "confirmed";
    if (was === suspended || this.#state !== "held") return;
    try {
      this.dispatchEvent(new Event(suspended ? "suspend" : "resume"));
    } catch {
      // A listener's failure must not break the client.
    }
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}
