/**
 * The last 15 minutes of the engine's counters, for the console's charts
 * (`GET /api/history`): a ring buffer of snapshots taken every
 * ADMIN_HISTORY_INTERVAL_MS on the server's scheduler, so no Prometheus is
 * needed to see what the wait and hold times did a few minutes ago.
 *
 * Snapshots hold the counters themselves, as /metrics does; a reader takes
 * rates between two of them (acquires/s = Δacquires_total / Δuptime_ms), and
 * averages the spec's way: Δwait_seconds_sum / Δwait_seconds_count.
 *
 * @module
 */

import { rfc3339, type Scheduler, type Timer } from "../clock.ts";
import type { EngineStats } from "../core/types.ts";

/** One snapshot, as `GET /api/history` and the `snapshot` event carry it. */
export interface SnapshotJson {
  /** Wall-clock time of the snapshot (RFC 3339 UTC): the charts' time axis. */
  at: string;
  /** Monotonic milliseconds since the server started: rates are taken over its differences. */
  uptime_ms: number;
  acquires_total: number;
  handoffs_total: number;
  wait_seconds_sum: number;
  wait_seconds_count: number;
  hold_seconds_sum: number;
  hold_seconds_count: number;
  locks_held: number;
  waiters: number;
  /**
   * How long the longest-waiting current waiter has waited (ms, monotonic), 0 when nobody waits:
   * the wait averages count finished waits only, so a waiter queued for minutes shows here.
   */
  oldest_waiter_ms: number;
  sessions: number;
}

export interface StatsHistoryOptions {
  readonly stats: Readonly<EngineStats>;
  /** When the longest-waiting current waiter was queued (monotonic ms), null when none waits. */
  readonly oldestQueuedAtMs: () => number | null;
  readonly scheduler: Scheduler;
  /** Monotonic reading at the server's start (uptime_ms counts from it). */
  readonly startedAtMs: number;
  readonly intervalMs: number;
  readonly snapshotsMax: number;
}

/** Takes snapshots from `start()` until `stop()`; the oldest is dropped once `snapshotsMax` are kept. */
export class StatsHistory {
  readonly #options: StatsHistoryOptions;
  /** Ring buffer: `#next` is where the next snapshot goes, `#count` how many are kept. */
  readonly #ring: SnapshotJson[] = [];
  #next = 0;
  #count = 0;
  #timer: Timer | null = null;
  #stopped = false;
  /** Called with each new snapshot (the event streams). */
  onSnapshot: ((snapshot: SnapshotJson) => void) | null = null;

  constructor(options: StatsHistoryOptions) {
    this.#options = options;
  }

  /** Takes the first snapshot and keeps taking them every `intervalMs`. */
  start(): void {
    if (this.#timer === null && this.#count === 0) this.#take();
  }

  /** The kept snapshots, oldest first. */
  snapshots(): SnapshotJson[] {
    const max = this.#options.snapshotsMax;
    const first = (this.#next - this.#count + max) % max;
    return Array.from({ length: this.#count }, (_, i) => this.#ring[(first + i) % max]);
  }

  stop(): void {
    this.#stopped = true;
    this.#timer?.cancel();
    this.#timer = null;
  }

  #take(): void {
    if (this.#stopped) return;
    const { stats, scheduler, startedAtMs, intervalMs, snapshotsMax } = this.#options;
    const nowMs = scheduler.monotonicMs();
    const oldestQueuedAtMs = this.#options.oldestQueuedAtMs();
    const snapshot: SnapshotJson = {
      at: rfc3339(scheduler.wallMs()),
      uptime_ms: Math.round(nowMs - startedAtMs),
      acquires_total: stats.acquiresTotal,
      handoffs_total: stats.handoffsTotal,
      wait_seconds_sum: stats.waitSecondsSum,
      wait_seconds_count: stats.waitSecondsCount,
      hold_seconds_sum: stats.holdSecondsSum,
      hold_seconds_count: stats.holdSecondsCount,
      locks_held: stats.locksHeld,
      waiters: stats.waiters,
      oldest_waiter_ms: oldestQueuedAtMs === null
        ? 0
        : Math.max(0, Math.round(nowMs - oldestQueuedAtMs)),
      sessions: stats.sessionsOpen,
    };
    this.#ring[this.#next] = snapshot;
    this.#next = (this.#next + 1) % snapshotsMax;
    this.#count = Math.min(this.#count + 1, snapshotsMax);
    this.#timer = scheduler.setTimer(() => this.#take(), intervalMs);
    this.onSnapshot?.(snapshot);
  }
}
