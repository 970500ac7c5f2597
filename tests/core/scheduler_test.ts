import { deepStrictEqual, strictEqual } from "node:assert/strict";
import { ManualScheduler, systemScheduler, TIMER_DELAY_MS_MAX } from "../../src/clock.ts";

Deno.test("manual scheduler runs due timers in deadline order, each at its own time", () => {
  const scheduler = new ManualScheduler(0, 0);
  const seen: string[] = [];
  scheduler.setTimer(() => seen.push(`b@${scheduler.monotonicMs()}`), 20);
  scheduler.setTimer(() => seen.push(`a@${scheduler.monotonicMs()}`), 10);
  scheduler.setTimer(() => seen.push(`c@${scheduler.monotonicMs()}`), 20);
  scheduler.advance(15);
  deepStrictEqual(seen, ["a@10"]);
  strictEqual(scheduler.monotonicMs(), 15);
  scheduler.advance(5);
  deepStrictEqual(seen, ["a@10", "b@20", "c@20"]);
  strictEqual(scheduler.pendingTimers, 0);
});

Deno.test("manual scheduler: a timer set by a callback runs within the same step; cancel is idempotent", () => {
  const scheduler = new ManualScheduler(0, 0);
  const seen: number[] = [];
  scheduler.setTimer(() => {
    seen.push(scheduler.monotonicMs());
    scheduler.setTimer(() => seen.push(scheduler.monotonicMs()), 5);
  }, 5);
  const cancelled = scheduler.setTimer(() => seen.push(-1), 7);
  cancelled.cancel();
  cancelled.cancel();
  scheduler.advance(100);
  deepStrictEqual(seen, [5, 10]);
  strictEqual(scheduler.nextTimerAtMs(), undefined);
});

Deno.test("system scheduler: a delay past the setTimeout range does not fire at once", async () => {
  let fired = false;
  const timer = systemScheduler.setTimer(() => fired = true, TIMER_DELAY_MS_MAX * 3);
  await new Promise((resolve) => setTimeout(resolve, 20));
  strictEqual(fired, false);
  timer.cancel();
});

Deno.test("system scheduler: a short timer fires and can be cancelled", async () => {
  const fired = Promise.withResolvers<void>();
  systemScheduler.setTimer(() => fired.resolve(), 1);
  await fired.promise;
  let ran = false;
  systemScheduler.setTimer(() => ran = true, 1).cancel();
  await new Promise((resolve) => setTimeout(resolve, 10));
  strictEqual(ran, false);
});
