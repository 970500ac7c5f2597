import type { Scheduler, Timer } from "../clock.ts";
import { log } from "../log/diagnostic.ts";
import { errorStackText } from "../error_text.ts";

const logger = log("server");

/**
 * The one timer that drives every engine deadline (leases, wait bounds, I/O timeouts):
 * armed for the earliest, re-armed only when an earlier one appears, never one timer
 * per lease (see DENO-NOTES). Its callback never throws into the event loop.
 */
export class DeadlineTimer {
  readonly #scheduler: Scheduler;
  readonly #onDue: () => void;
  #timer: Timer | undefined;
  #atMs = Infinity;
  #stopped = false;

  constructor(scheduler: Scheduler, onDue: () => void) {
    this.#scheduler = scheduler;
    this.#onDue = onDue;
  }

  /** Makes sure the timer fires no later than `atMs` (monotonic ms); undefined: nothing due. */
  arm(atMs: number | undefined): void {
    if (this.#stopped || atMs === undefined || atMs >= this.#atMs) return;
    this.#timer?.cancel();
    this.#atMs = atMs;
    const delayMs = Math.max(0, Math.ceil(atMs - this.#scheduler.monotonicMs()));
    this.#timer = this.#scheduler.setTimer(() => {
      this.#timer = undefined;
      this.#atMs = Infinity;
      try {
        this.#onDue();
      } catch (error) {
        // A bug must not end the process from a timer: log it and keep serving.
        logger.error("deadline handling failed", { error: errorStackText(error) });
      }
    }, delayMs);
  }

  stop(): void {
    this.#stopped = true;
    this.#timer?.cancel();
    this.#timer = undefined;
  }
}
