/**
 * The watch pacer (src/service/watch_pacer.ts): a flush runs at once when pacing allows, and its
 * cost is measured once its microtasks ran (wakes meanwhile wait for that); a flush that took t ms
 * keeps the next one until t / WATCH_FANOUT_TIME_SHARE ms after it began, and the wakes meanwhile
 * make one flush; stop cancels its timers.
 */

import assert from "node:assert/strict";
import { ManualScheduler, type Scheduler } from "../../src/clock.ts";
import { WATCH_FANOUT_SESSIONS_PER_TURN, WATCH_FANOUT_TIME_SHARE } from "../../src/limits.ts";
import { WatchPacer } from "../../src/service/watch_pacer.ts";

/**
 * A hub stand-in whose flush takes `costMs`: the pacer's clock is the manual one plus the time
 * flushes took (as a real clock would read after them).
 */
function fakeHub(manual: ManualScheduler, costMs: number) {
  let spentMs = 0;
  const scheduler: Scheduler = {
    monotonicMs: () => manual.monotonicMs() + spentMs,
    wallMs: () => manual.wallMs(),
    setTimer: (callback, delayMs) => manual.setTimer(callback, delayMs),
  };
  const hub = {
    scheduler,
    pending: false,
    flushes: [] as number[],
    flush() {
      hub.flushes.push(scheduler.monotonicMs());
      hub.pending = false;
      spentMs += costMs;
    },
  };
  return hub;
}

/** Lets the flush's microtasks run (the pacer measures its flush then). */
const turn = async () => {
  for (let i = 0; i < 3; i++) await Promise.resolve();
};

Deno.test("watch pacer: a flush that costs nothing delays the next only until its microtasks ran", async () => {
  const scheduler = new ManualScheduler();
  const hub = fakeHub(scheduler, 0);
  const pacer = new WatchPacer(hub.scheduler, () => hub);
  hub.pending = true;
  pacer.wake();
  assert.equal(hub.flushes.length, 1, "at once");
  hub.pending = true;
  pacer.wake();
  assert.equal(hub.flushes.length, 1, "the first's cost is not known yet");
  await turn();
  assert.equal(hub.flushes.length, 2, "right after the first's microtasks");
  await turn();
  pacer.wake(); // nothing pending: no flush
  assert.equal(hub.flushes.length, 2);
  assert.equal(scheduler.pendingTimers, 0);
  pacer.stop();
});

Deno.test("watch pacer: after a costly flush the next waits for its share of the time, and the wakes meanwhile make one flush", async () => {
  const scheduler = new ManualScheduler();
  const hub = fakeHub(scheduler, 10);
  const pacer = new WatchPacer(hub.scheduler, () => hub);
  const t0 = hub.scheduler.monotonicMs();
  hub.pending = true;
  pacer.wake();
  assert.deepEqual(hub.flushes, [t0], "the first runs at once");
  const nextMs = 10 / WATCH_FANOUT_TIME_SHARE;
  for (let i = 0; i < 5; i++) {
    hub.pending = true;
    pacer.wake();
  }
  await turn();
  assert.equal(hub.flushes.length, 1, "held back");
  // The pacer's clock already reads t0 + 10 (the first flush's cost).
  scheduler.advance(nextMs - 10 - 1);
  assert.equal(hub.flushes.length, 1);
  scheduler.advance(1);
  assert.deepEqual(hub.flushes, [t0, t0 + nextMs], "one flush for the five wakes");
  await turn();
  hub.pending = true;
  pacer.wake();
  assert.equal(scheduler.pendingTimers, 1, "the third waits for its time");
  pacer.stop();
  assert.equal(scheduler.pendingTimers, 0, "stop cancels the timer");
});

Deno.test("watch pacer: a round is handed out a turn at a time with 0 ms timers between, and the round's whole cost paces the next", async () => {
  const manual = new ManualScheduler();
  let spentMs = 0;
  const scheduler: Scheduler = {
    monotonicMs: () => manual.monotonicMs() + spentMs,
    wallMs: () => manual.wallMs(),
    setTimer: (callback, delayMs) => manual.setTimer(callback, delayMs),
  };
  // Three turns of 4 ms make a round; the sessions asked for each time are recorded.
  const asked: number[] = [];
  let left = 0;
  const hub = {
    get pending() {
      return left > 0;
    },
    get midRound() {
      return left > 0 && left < 3;
    },
    flush(sessionsMax?: number) {
      asked.push(sessionsMax ?? Infinity);
      left--;
      spentMs += 4;
    },
  };
  const pacer = new WatchPacer(scheduler, () => hub);
  const t0 = scheduler.monotonicMs();
  left = 3;
  pacer.wake();
  assert.equal(asked.length, 1, "the first turn at once");
  assert.equal(asked[0], WATCH_FANOUT_SESSIONS_PER_TURN);
  await turn();
  assert.equal(manual.pendingTimers, 1, "the next turn waits behind other work");
  pacer.wake();
  assert.equal(asked.length, 1, "a wake meanwhile changes nothing");
  manual.advance(0);
  await turn();
  manual.advance(0);
  await turn();
  assert.equal(asked.length, 3, "the round's three turns");
  left = 3;
  pacer.wake();
  assert.equal(asked.length, 3, "the next round waits for the share of the whole round's cost");
  assert.equal(manual.pendingTimers, 1);
  const nextMs = t0 + 12 / WATCH_FANOUT_TIME_SHARE;
  manual.advance(nextMs - scheduler.monotonicMs() - 1);
  assert.equal(asked.length, 3);
  manual.advance(1);
  assert.equal(asked.length, 4);
  pacer.stop();
  assert.equal(manual.pendingTimers, 0);
});
