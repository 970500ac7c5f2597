/**
 * One clock, two readings: `monotonicMs()` for deadlines, `wallMs()` for
 * timestamps shown to people (audit log, admin API). The engine only ever
 * reads time through this interface so tests can drive it by hand.
 */
export interface Clock {
  /** Milliseconds from an arbitrary origin; never goes backwards. */
  monotonicMs(): number;
  /** Milliseconds since the Unix epoch (for display only). */
  wallMs(): number;
}

/** The process clock. */
const systemClock: Clock = {
  monotonicMs: () => performance.now(),
  wallMs: () => Date.now(),
};

/** A clock that moves only when told to; used by tests of lock semantics. */
export class ManualClock implements Clock {
  #monoMs: number;
  #wallMs: number;

  constructor(startWallMs = Date.UTC(2026, 0, 1), startMonoMs = 1_000) {
    this.#monoMs = startMonoMs;
    this.#wallMs = startWallMs;
  }

  monotonicMs(): number {
    return this.#monoMs;
  }

  wallMs(): number {
    return this.#wallMs;
  }

  /** Moves both readings forward by `ms`. */
  advance(ms: number): void {
    if (ms < 0) throw new RangeError(`Cannot move a clock backwards by ${ms} ms`);
    this.#monoMs += ms;
    this.#wallMs += ms;
  }
}

/** A pending timer of a {@link Scheduler}; `cancel()` may be called any number of times. */
export interface Timer {
  /** Stops the timer if it has not run yet. */
  cancel(): void;
}

/**
 * A clock that can also wait: everything in lockd that waits (the deadline timer, handshake
 * and retry timers, the client's heartbeats and back-offs) goes through one, so tests drive
 * time by hand with {@link ManualScheduler} instead of sleeping.
 */
export interface Scheduler extends Clock {
  /** Runs `callback` once, `delayMs` from now (negative counts as 0). */
  setTimer(callback: () => void, delayMs: number): Timer;
}

/**
 * Longest delay one `setTimeout` can take (2^31 - 1 ms, about 24.8 days); a longer one
 * fires at once in every JavaScript runtime, so {@link systemScheduler} waits in steps.
 */
export const TIMER_DELAY_MS_MAX = 2 ** 31 - 1;

/** The process clock with real timers. */
export const systemScheduler: Scheduler = {
  monotonicMs: systemClock.monotonicMs,
  wallMs: systemClock.wallMs,
  setTimer(callback: () => void, delayMs: number): Timer {
    let handle: ReturnType<typeof setTimeout> | undefined;
    const arm = (remainingMs: number) => {
      const stepMs = Math.min(TIMER_DELAY_MS_MAX, Math.max(0, remainingMs));
      handle = setTimeout(() => {
        if (remainingMs > stepMs) arm(remainingMs - stepMs);
        else {
          handle = undefined;
          callback();
        }
      }, stepMs);
    };
    arm(delayMs);
    return {
      cancel() {
        if (handle !== undefined) clearTimeout(handle);
        handle = undefined;
      },
    };
  },
};

/**
 * Runs `callback` in a later turn of the event loop, once the I/O events already delivered have
 * been handled (`setTimeout(0)`). It is an order, not a time: work that must wait for the end of
 * a burst of socket events (the TLS transport's read-queue check) uses it, and a manual clock
 * must not hold it back, so it is not a {@link Scheduler}'s timer.
 */
export function afterIoTurn(callback: () => void): Timer {
  let handle: ReturnType<typeof setTimeout> | undefined = setTimeout(() => {
    handle = undefined;
    callback();
  }, 0);
  return {
    cancel() {
      if (handle !== undefined) clearTimeout(handle);
      handle = undefined;
    },
  };
}

interface ManualTimer {
  readonly atMs: number;
  readonly seq: number;
  readonly callback: () => void;
}

/**
 * A scheduler whose time moves only when a test says so. `advance(ms)` runs every timer
 * that falls due, in deadline order (ties in the order they were set), each with the clock
 * set to its own deadline; timers set by a callback run too if they fall due within the step.
 */
export class ManualScheduler extends ManualClock implements Scheduler {
  #timers: ManualTimer[] = [];
  #seq = 0;

  setTimer(callback: () => void, delayMs: number): Timer {
    const timer = { atMs: this.monotonicMs() + Math.max(0, delayMs), seq: this.#seq++, callback };
    this.#timers.push(timer);
    return {
      cancel: () => {
        const i = this.#timers.indexOf(timer);
        if (i !== -1) this.#timers.splice(i, 1);
      },
    };
  }

  /** Timers set and not yet run or cancelled. */
  get pendingTimers(): number {
    return this.#timers.length;
  }

  /** When the next timer falls due (monotonic ms), or undefined. */
  nextTimerAtMs(): number | undefined {
    return this.#earliest()?.atMs;
  }

  /** Moves time forward by `ms`, running due timers at their own deadlines. */
  override advance(ms: number): void {
    if (ms < 0) throw new RangeError(`Cannot move a clock backwards by ${ms} ms`);
    const endMs = this.monotonicMs() + ms;
    for (;;) {
      const next = this.#earliest();
      if (next === undefined || next.atMs > endMs) break;
      this.#timers.splice(this.#timers.indexOf(next), 1);
      super.advance(Math.max(0, next.atMs - this.monotonicMs()));
      next.callback();
    }
    super.advance(endMs - this.monotonicMs());
  }

  #earliest() {
    let best: ManualTimer | undefined;
    for (const timer of this.#timers) {
      if (
        best === undefined || timer.atMs < best.atMs ||
        timer.atMs === best.atMs && timer.seq < best.seq
      ) {
        best = timer;
      }
    }
    return best;
  }
}

let lastWallMs = NaN;
let lastText = "";

/** RFC 3339 UTC with milliseconds, e.g. `2026-01-01T00:00:00.000Z`. */
export function rfc3339(wallMs: number): string {
  // Audit records come in bursts within one millisecond: formatting a Date was 3% of a grant.
  if (wallMs !== lastWallMs) {
    lastWallMs = wallMs;
    lastText = new Date(wallMs).toISOString();
  }
  return lastText;
}
