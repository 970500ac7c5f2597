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
export const systemClock: Clock = {
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
