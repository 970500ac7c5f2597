/**
 * HELLOs held by a node that cannot answer them yet (cluster mode): a standby while no live
 * leader is known, a new leader before it serves, a paused leader. Each is answered when the
 * node knows (`answerAll`: WELCOME once it serves, NOT_LEADER naming a leader once one is
 * elected elsewhere), or when its hold runs out (`verdict` decides then).
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import type { WireError } from "../service/wire_errors.ts";

interface HeldHello {
  readonly resolve: (verdict: WireError | null) => void;
  readonly timer: Timer;
}

export class HelloHold {
  readonly #scheduler: Scheduler;
  readonly #holdMs: number;
  readonly #verdict: () => WireError | null;
  readonly #held = new Set<HeldHello>();

  /** `verdict`: the answer of a HELLO whose hold of `holdMs` ran out (null: WELCOME). */
  constructor(scheduler: Scheduler, holdMs: number, verdict: () => WireError | null) {
    this.#scheduler = scheduler;
    this.#holdMs = holdMs;
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
        timer: this.#scheduler.setTimer(() => {
          this.#held.delete(held);
          resolve(this.#verdict());
        }, this.#holdMs),
      };
      this.#held.add(held);
    });
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
