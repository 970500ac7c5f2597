/**
 * One `client.observe(nameOrGlob)` ({@link Observation}): the states waiting for its reader, at
 * most one per lock (a slow reader gets the latest state of each lock, never a backlog), and its
 * WATCH's life across connections (looks.ts sends the WATCH; after a reconnect the new snapshot
 * replaces what was known, and a lock missing from it reads kind `none`).
 *
 * @module
 */

import { CLIENT_OBSERVED_LOCKS_MAX } from "../limits.ts";

/** One owner of a lock, as `query` and `observe` show it. */
export interface LockHolder {
  /** Its fencing token (a leader's epoch). */
  readonly token: number;
  /** How long it has owned the lock, in ms, at the time of the state. */
  readonly heldMs: number;
  /** Its lease, in ms. */
  readonly leaseMs: number;
  /** `exclusive` or `shared`. */
  readonly mode: "exclusive" | "shared";
  /** Its semaphore slot (0 for exclusive and shared locks). */
  readonly slot: number;
  /** Its identity (the subject of its mutual-TLS certificate), or "". */
  readonly identity: string;
  /** The client name its HELLO sent, e.g. `lockd-ts/0.1.0@host-1:4242`. */
  readonly clientName: string;
  /** The value it published (empty: none), e.g. a leader's address. */
  readonly value: Uint8Array;
}

/** How an ownership ended, in a state of event `ended`. */
export type LockEndReason = "graceful" | "expired" | "io_timeout" | "force" | "failover";

/** The state of one lock: the answer to `query`, or one item of `observe`. */
export interface LockInfo {
  /** The lock's name. */
  readonly name: string;
  /** `none` (no owner and no waiter), `exclusive`, `shared` or `semaphore`. */
  readonly kind: "none" | "exclusive" | "shared" | "semaphore";
  /** N for a semaphore of N, 1 for exclusive and shared locks, 0 for `none`. */
  readonly limit: number;
  /** Claims waiting in the lock's queue. */
  readonly queueLength: number;
  /** Owners in all (`holders` lists the oldest of them, as many as fit one frame). */
  readonly owners: number;
  /** The owners, oldest first. */
  readonly holders: readonly LockHolder[];
  /** The oldest owner, or null when nobody holds the lock (in a leader election: the leader). */
  readonly holder: LockHolder | null;
  /**
   * What this state reports: `state` (a query's answer, a watch's snapshot), `granted`,
   * `ended`, `value` (a holder's value changed) or `queue` (the queue changed).
   */
  readonly event: "state" | "granted" | "ended" | "value" | "queue";
  /** Event `ended`: how the ownership ended; null for the other events. */
  readonly reason: LockEndReason | null;
}

/** Options of `client.observe`. */
export interface ObserveOptions {
  /** Aborting it ends the observation: the iteration finishes (no error) and the watch ends. */
  readonly signal?: AbortSignal;
}

/** What `client.observe` returns: an async iterator of states; `close()` ends it. */
export interface Observation extends AsyncIterableIterator<LockInfo>, AsyncDisposable {
  /** The lock name or glob it watches. */
  readonly pattern: string;
  /** True from the server's WATCHING until the connection ends. */
  readonly watching: boolean;
  /** How many times its WATCH was sent (1, plus one per reconnect it lived through). */
  readonly watchesSent: number;
  /** Ends the watch (UNWATCH); the iteration finishes. */
  close(): Promise<void>;
}

/** One `observe`: the states waiting for its reader, and its watch's life. */
export class Observer implements Observation {
  readonly pattern: string;
  readonly #onClose: (observer: Observer) => void;
  /** States waiting for the reader, at most one per lock, oldest first. */
  readonly #waiting = new Map<string, LockInfo>();
  /** Locks whose last state had an owner or a waiter. */
  readonly #known = new Set<string>();
  /** Locks in the snapshot of the current WATCH, until its WATCHING. */
  #snapshot = new Set<string>();
  #wake: (() => void) | null = null;
  #error: unknown = null;
  #closed = false;
  #live = false;
  requestId = 0;
  #watchesSent = 0;
  /** Called once when the observer is over (closed, ended, failed): looks.ts drops its signal. */
  onDone: (() => void) | null = null;
  /** An observer the reader has closed: what still comes for its WATCH is dropped. */
  dropped = false;

  constructor(pattern: string, onClose: (observer: Observer) => void) {
    this.pattern = pattern;
    this.#onClose = onClose;
  }

  static dropping(pattern: string): Observer {
    const observer = new Observer(pattern, () => {});
    observer.dropped = true;
    observer.#closed = true;
    return observer;
  }

  get watching(): boolean {
    return this.#live && !this.#closed;
  }

  get watchesSent(): number {
    return this.#watchesSent;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  async next(): Promise<IteratorResult<LockInfo>> {
    while (true) {
      const first = this.#waiting.entries().next();
      if (!first.done) {
        this.#waiting.delete(first.value[0]);
        return { value: first.value[1], done: false };
      }
      if (this.#error !== null) {
        const error = this.#error;
        this.#error = null;
        this.#closed = true;
        throw error;
      }
      if (this.#closed) return { value: undefined, done: true };
      await new Promise<void>((resolve) => this.#wake = resolve);
    }
  }

  async return(): Promise<IteratorResult<LockInfo>> {
    await this.close();
    return { value: undefined, done: true };
  }

  close(): Promise<void> {
    this.#done();
    if (!this.#closed) {
      this.#closed = true;
      this.#waiting.clear();
      this.#onClose(this);
      this.#wakeUp();
    }
    return Promise.resolve();
  }

  #done(): void {
    const done = this.onDone;
    this.onDone = null;
    done?.();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  watchSent(requestId: number): void {
    this.requestId = requestId;
    this.#live = false;
    this.#snapshot = new Set();
    this.#watchesSent++;
  }

  /** A state from the server; what is wrong when it is one lock too many. */
  push(state: LockInfo): string | null {
    if (this.#closed) return null;
    if (!this.#live) this.#snapshot.add(state.name);
    if (state.kind === "none") this.#known.delete(state.name);
    else {
      this.#known.add(state.name);
      if (this.#known.size > CLIENT_OBSERVED_LOCKS_MAX) {
        return `LOCK_STATEs of more than ${CLIENT_OBSERVED_LOCKS_MAX} locks for one WATCH`;
      }
    }
    this.#waiting.set(state.name, state); // a waiting state of that lock is replaced in place
    this.#wakeUp();
    return null;
  }

  /** The snapshot is complete: a lock known before and missing from it has ended. */
  watchingNow(): void {
    this.#live = true;
    for (const name of [...this.#known].filter((n) => !this.#snapshot.has(n)).sort()) {
      this.push({
        name,
        kind: "none",
        limit: 0,
        queueLength: 0,
        owners: 0,
        holders: [],
        holder: null,
        event: "state",
        reason: null,
      });
    }
    this.#snapshot = new Set();
  }

  connectionEnded(): void {
    this.#live = false;
    this.requestId = 0;
  }

  fail(error: unknown): void {
    this.#done();
    if (this.#closed) return;
    this.#error = error;
    this.#live = false;
    this.#wakeUp();
  }

  end(): void {
    this.#done();
    this.#closed = true;
    this.#wakeUp();
  }

  #wakeUp(): void {
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }
}
