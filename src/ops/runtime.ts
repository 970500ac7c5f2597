/**
 * Runtime readings for `/metrics`: the Deno stand-ins for the spec's go_*
 * rows (see docs/operations.md, "Metrics"). Everything is read at scrape
 * time except the event-loop lag, which needs a running probe.
 *
 * @module
 */

import { EVENT_LOOP_PROBE_INTERVAL_MS } from "../limits.ts";

/** One reading of the runtime. */
export interface RuntimeSample {
  residentMemoryBytes: number;
  heapUsedBytes: number;
  heapTotalBytes: number;
  /** Seconds since the Unix epoch when the process started. */
  startTimeSeconds: number;
  /** Open file descriptors; null where /proc cannot be read (no --allow-read, not Linux). */
  openFds: number | null;
  /** How late the last probe tick fired, in seconds. */
  eventLoopLagSeconds: number;
}

/**
 * Measures event-loop lag with a `setInterval` drift probe: each tick records
 * how much later than planned it ran. (`monitorEventLoopDelay` and
 * `eventLoopUtilization` give wrong values in Deno; see DENO-NOTES.) The
 * timer is unref'd so it never keeps the process alive, and `stop()` must be
 * called at shutdown.
 */
export class RuntimeProbe {
  #timer: ReturnType<typeof setInterval> | undefined;
  #lastTickMs = 0;
  #lagSeconds = 0;

  start(): void {
    if (this.#timer !== undefined) return;
    this.#lastTickMs = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      const lateMs = now - this.#lastTickMs - EVENT_LOOP_PROBE_INTERVAL_MS;
      this.#lagSeconds = Math.max(0, lateMs) / 1000;
      this.#lastTickMs = now;
    }, EVENT_LOOP_PROBE_INTERVAL_MS);
    Deno.unrefTimer(timer);
    this.#timer = timer;
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  sample(): RuntimeSample {
    const memory = Deno.memoryUsage();
    return {
      residentMemoryBytes: memory.rss,
      heapUsedBytes: memory.heapUsed,
      heapTotalBytes: memory.heapTotal,
      startTimeSeconds: performance.timeOrigin / 1000,
      openFds: countOpenFds(),
      eventLoopLagSeconds: this.#lagSeconds,
    };
  }
}

/** Entries of /proc/self/fd (the directory's own descriptor included, as Prometheus' Go client does). */
function countOpenFds(): number | null {
  try {
    let count = 0;
    for (const _ of Deno.readDirSync("/proc/self/fd")) count++;
    return count;
  } catch {
    // No /proc, or no read permission (a compiled binary without --allow-read).
    return null;
  }
}
