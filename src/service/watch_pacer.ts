/**
 * When the watch hub sends what it noted (`WatchHub.flush`): at once while sending is cheap,
 * else no more often than keeps it within WATCH_FANOUT_TIME_SHARE of the server's time. A
 * thousand watchers of one lock make every change a thousand frames; without pacing a lock
 * handed off as fast as it goes would spend nearly all its time telling watchers, and with it the
 * changes that come between two rounds are coalesced (each watcher gets the latest state). A
 * round is handed out WATCH_FANOUT_SESSIONS_PER_TURN sessions at a time, with the server's other
 * work in between, so a request that comes during a fan-out waits for one turn, not all of it.
 *
 * Time only through the injected scheduler: on a manual clock a flush takes no time, so every
 * change is sent at once, or right after the microtasks of the last flush (changes decided in
 * one synchronous step after the first wait as one per lock, as for a slow reader).
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import { WATCH_FANOUT_SESSIONS_PER_TURN, WATCH_FANOUT_TIME_SHARE } from "../limits.ts";

/** What the pacer drives: the watch hub. */
export interface Flushable {
  readonly pending: boolean;
  /** A round of flushes is under way (`flush(sessionsMax)` handed out part of it). */
  readonly midRound?: boolean;
  flush(sessionsMax?: number): void;
}

export class WatchPacer {
  readonly #scheduler: Scheduler;
  readonly #target: () => Flushable;
  /** Monotonic ms before which no round begins (the last one's cost, spread). */
  #nextMs = 0;
  #timer: Timer | undefined;
  /** A flush's cost is being measured (until its microtasks ran): nothing flushes meanwhile. */
  #measuring = false;
  /** When the round under way began, and what its turns cost so far. */
  #roundStartMs = 0;
  #roundSpentMs = 0;
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
    this.#later(this.#nextMs - nowMs);
  }

  stop(): void {
    this.#stopped = true;
    this.#timer?.cancel();
    this.#timer = undefined;
  }

  #later(delayMs: number): void {
    this.#timer = this.#scheduler.setTimer(() => {
      this.#timer = undefined;
      if (!this.#stopped) this.#run(this.#scheduler.monotonicMs());
    }, delayMs);
  }

  /**
   * One turn of a round: flushes WATCH_FANOUT_SESSIONS_PER_TURN sessions, and measures what it
   * cost once the microtasks it queued ran (the sessions start the writes of the frames it sent
   * there, queued before this measurement: they count too). While the round has more, the next
   * turn follows after whatever else waits (a timer of 0 ms: requests are not held up by a whole
   * fan-out); once it is done, the next round waits until the round's cost is its share.
   */
  #run(startMs: number): void {
    const target = this.#target();
    if (target.midRound !== true) {
      this.#roundStartMs = startMs;
      this.#roundSpentMs = 0;
    }
    target.flush(WATCH_FANOUT_SESSIONS_PER_TURN);
    this.#measuring = true;
    queueMicrotask(() => {
      this.#measuring = false;
      this.#roundSpentMs += this.#scheduler.monotonicMs() - startMs;
      if (this.#stopped) return;
      if (target.midRound === true) {
        this.#later(0);
        return;
      }
      this.#nextMs = this.#roundStartMs + this.#roundSpentMs / WATCH_FANOUT_TIME_SHARE;
      this.wake();
    });
  }
}
