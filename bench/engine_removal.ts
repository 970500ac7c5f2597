/**
 * Scenario 4's removal cost measured on the engine itself (no sockets): the median time to take
 * one waiter out of the middle of a queue, at several queue lengths (`deno task bench`).
 *
 * @module
 */

import { LockEngine } from "../src/core/engine.ts";
import { ManualClock } from "../src/clock.ts";
import { openTokenIssuer } from "../src/storage/token_store.ts";
import { quantile, sortedCopy } from "./bench_client.ts";

/** Removal cost measured on the engine itself (no sockets) at two queue lengths. */
export function engineRemoval(lengths: number[]): Record<number, number> {
  const out: Record<number, number> = {};
  for (const len of lengths) {
    const clock = new ManualClock();
    const now = () => ({ monoMs: clock.monotonicMs(), wallMs: clock.wallMs() });
    const engine = new LockEngine({
      tokens: openTokenIssuer(null, 0),
      ioTimeoutMs: 60_000,
      leaseDefaultMs: 15_000,
      leaseMaxMs: 300_000,
      sessionsMax: len + 10,
      claimsPerSessionMax: 16,
      waitersPerLockMax: len + 10,
    });
    const owner = engine.openSession(now(), "", "10.0.0.1:1")!;
    engine.acquire(now(), {
      sessionId: owner.sessionId,
      requestId: 1,
      name: "deep",
      leaseMs: 0,
      waitMs: null,
    });
    const addrs: string[] = [];
    for (let i = 0; i < len; i++) {
      const addr = `10.1.${i >> 16}.${i & 0xffff}:${1000 + (i % 50000)}`;
      const p = engine.openSession(now(), "", addr)!;
      engine.acquire(now(), {
        sessionId: p.sessionId,
        requestId: 1,
        name: "deep",
        leaseMs: 0,
        waitMs: null,
      });
      addrs.push(addr);
    }
    // Remove 50 waiters around the middle; median time per removal.
    const times: number[] = [];
    for (let k = 0; k < 50; k++) {
      const addr = addrs[Math.floor(len / 2) + k * 3];
      const t0 = performance.now();
      const r = engine.kickWaiter(now(), "deep", addr);
      times.push(performance.now() - t0);
      if (r.status !== "ok") throw new Error(`kick failed at ${len}: ${r.status}`);
    }
    out[len] = quantile(sortedCopy(times), 0.5);
  }
  return out;
}
