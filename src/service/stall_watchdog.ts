import type { Scheduler, Timer } from "../clock.ts";
import { STALL_CHECK_MS_MAX, STALL_CHECK_MS_MIN } from "../limits.ts";
import { log } from "../log/diagnostic.ts";

const logger = log("server");

/** A connection whose writes are watched. */
export interface StallWatched {
  /** Called once when a write has been in flight longer than the I/O timeout. */
  closeForStall(): void;
  readonly remoteAddr: string;
  readonly sessionId: number;
}

/**
 * Closes connections whose write has been in flight longer than the I/O timeout (a peer that
 * stopped reading with a full socket buffer). One periodic timer checks every write in
 * flight; sessions report the start and end of each write.
 */
export class StallWatchdog {
  readonly #scheduler: Scheduler;
  readonly #ioTimeoutMs: number;
  readonly #checkEveryMs: number;
  /**
   * When each connection's write in flight started (monotonic ms), or NaN once it ended: an
   * ended write keeps its entry until the next check, so a write costs one update of an entry
   * already there, not an insertion and a deletion (a Map that grows and shrinks with every
   * write reallocates its table).
   */
  readonly #writing = new Map<StallWatched, number>();
  #timer: Timer | undefined;
  #stopped = false;

  constructor(scheduler: Scheduler, ioTimeoutMs: number) {
    this.#scheduler = scheduler;
    this.#ioTimeoutMs = ioTimeoutMs;
    // Often enough that a stall is noticed within a quarter of the timeout, never busier than 20/s.
    this.#checkEveryMs = Math.max(
      STALL_CHECK_MS_MIN,
      Math.min(STALL_CHECK_MS_MAX, ioTimeoutMs / 4),
    );
    this.#arm();
  }

  writeStarted(connection: StallWatched): void {
    this.#writing.set(connection, this.#scheduler.monotonicMs());
  }

  writeEnded(connection: StallWatched): void {
    if (this.#writing.has(connection)) this.#writing.set(connection, NaN);
  }

  stop(): void {
    this.#stopped = true;
    this.#timer?.cancel();
    this.#timer = undefined;
  }

  #arm(): void {
    if (this.#stopped) return;
    this.#timer = this.#scheduler.setTimer(() => {
      try {
        this.#check();
      } catch (error) {
        logger.error("stall check failed", { error: String(error) });
      }
      this.#arm();
    }, this.#checkEveryMs);
  }

  #check(): void {
    const nowMs = this.#scheduler.monotonicMs();
    for (const [connection, startedMs] of [...this.#writing]) {
      if (Number.isNaN(startedMs)) {
        this.#writing.delete(connection); // its write ended
        continue;
      }
      if (nowMs - startedMs <= this.#ioTimeoutMs) continue;
      this.#writing.delete(connection);
      logger.warn("write stalled, closing session", {
        session: connection.sessionId,
        remote_addr: connection.remoteAddr,
      });
      connection.closeForStall();
    }
  }
}
