/**
 * When the watch hub sends what it noted (`WatchHub.flush`): at once while sending is cheap,
 * else no more often than keeps it within WATCH_FANOUT_TIME_SHARE of the server's time. A
 * thousand watchers of one lock make every change a thousand frames; without pacing a lock
 * handed off as fast as it goes would spend nearly all its time telling watchers, and with it the
 * changes that come between two flushes are coalesced (each watcher gets the latest state).
 *
 * Time only through the injected scheduler: on a manual clock a flush takes no time, so every
 * change is sent at once, or right after the microtasks of the last flush (changes decided in
 * one synchronous step after the first wait as one per lock, as for a slow reader).
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import { WATCH_FANOUT_TIME_SHARE } from "../limits.ts";

/** What the pacer drives: the watch hub. */
export interface Flushable {
  readonly pending: boolean;
  flush(): void;
}

export class WatchPacer {
  readonly #scheduler: Scheduler;
  readonly #target: () => Flushable;
  /** Monotonic ms before which no flush runs (the last one's cost, spread). */
  #nextMs = 0;
  #timer: Timer | undefined;
  /** A flush's cost is being measured (until its microtasks ran): nothing flushes meanwhile. */
  #measuring = false;
  #stopped = false;

  /** `target`: the hub (a function, so the hub may be made after its pacer). */
  constructor(scheduler: Scheduler, target: () => Flushable) {
    this.#scheduler = scheduler;
    this.#target = target;
  }

  /** Something was noted: flush now if pacing allows, else once it does (one timer). */
  wake(): void {
    if (this.#timer !== undefined || this.#measuring) return;
    if (this.#stopped || !this.#target().pending) return;
    const nowMs = this.#scheduler.monotonicMs();
    if (nowMs >= this.#nextMs) {
      this.#run(nowMs);
      return;
    }
    this.#timer = this.#scheduler.setTimer(() => {
      this.#timer = undefined;
      this.#run(this.#scheduler.monotonicMs());
    }, this.#nextMs - nowMs);
  }

  stop(): void {
    this.#stopped = true;
    this.#timer?.cancel();
    this.#timer = undefined;
  }

  /**
   * Flushes, and measures what it cost once the microtasks it queued ran: the sessions start the
   * writes of the frames it sent there (queued before this measurement), and they count too.
   */
  #run(startMs: number): void {
    this.#target().flush();
    this.#measuring = true;
    queueMicrotask(() => {
      this.#measuring = false;
      const spentMs = this.#scheduler.monotonicMs() - startMs;
      this.#nextMs = startMs + spentMs / WATCH_FANOUT_TIME_SHARE;
      this.wake();
    });
  }
}
