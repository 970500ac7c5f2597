/**
 * HELLOs held by a node that cannot answer them yet (cluster mode): a standby while no live
 * leader is known, a new leader before it serves, a paused leader. Each is answered when the
 * node knows (`answerAll`: WELCOME once it serves, NOT_LEADER naming a leader once one is
 * elected elsewhere), or when its hold runs out (`verdict` decides then). A verdict of "hold" (an
 * election or a takeover still under way) holds it on, in short steps, up to `maxMs` in all.
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import type { WireError } from "../service/wire_errors.ts";

interface HeldHello {
  readonly resolve: (verdict: WireError | null) => void;
  readonly sinceMs: number;
  timer: Timer;
}

/** How often a HELLO held past its hold asks again whether the node can answer it. */
const HOLD_STEP_MS = 250;

export class HelloHold {
  readonly #scheduler: Scheduler;
  readonly #holdMs: number;
  readonly #maxMs: number;
  readonly #verdict: (last: boolean) => WireError | null | "hold";
  readonly #held = new Set<HeldHello>();

  /**
   * `verdict`: the answer of a HELLO whose hold of `holdMs` ran out (null: WELCOME; "hold": keep
   * it, but never when `last`, once `maxMs` have passed since it came).
   */
  constructor(
    scheduler: Scheduler,
    holdMs: number,
    maxMs: number,
    verdict: (last: boolean) => WireError | null | "hold",
  ) {
    this.#scheduler = scheduler;
    this.#holdMs = holdMs;
    this.#maxMs = Math.max(holdMs, maxMs);
    this.#verdict = verdict;
  }

  /** HELLOs held now. */
  get size(): number {
    return this.#held.size;
  }

  /** Holds one HELLO: its answer, once known or once its hold ran out. */
  hold(): Promise<WireError | null> {
    return new Promise((resolve) => {
      const held: HeldHello = {
        resolve,
        sinceMs: this.#scheduler.monotonicMs(),
        timer: this.#scheduler.setTimer(() => this.#due(held), this.#holdMs),
      };
      this.#held.add(held);
    });
  }

  #due(held: HeldHello): void {
    const leftMs = held.sinceMs + this.#maxMs - this.#scheduler.monotonicMs();
    const verdict = this.#verdict(leftMs <= 0);
    if (verdict === "hold" && leftMs > 0) {
      held.timer = this.#scheduler.setTimer(
        () => this.#due(held),
        Math.min(HOLD_STEP_MS, leftMs),
      );
      return;
    }
    this.#held.delete(held);
    held.resolve(verdict === "hold" ? null : verdict);
  }

  /** Answers every held HELLO with `verdict`. */
  answerAll(verdict: WireError | null): void {
    for (const held of this.#held) {
      held.timer.cancel();
      held.resolve(verdict);
    }
    this.#held.clear();
  }
}
