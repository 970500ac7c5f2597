/**
 * Lock-delay (issue 22 item 4, the engine's part): after a non-graceful end of an ownership of
 * a lock whose rule gives a delay, nothing is granted until the delay has passed.
 */

import assert from "node:assert/strict";
import type { CloseCause, KindRule } from "../../src/core/types.ts";
import { harness } from "./engine_harness.ts";

const DELAYED: KindRule = { kind: null, limit: 0, lockDelayMs: 2_000 };
const delayedHarness = (options = {}) =>
  harness({ kindRule: (name) => name.startsWith("d/") ? DELAYED : null, ...options });

Deno.test("after a lease expiry the lock grants nothing until the lock-delay has passed; the end says until when", () => {
  const h = delayedHarness();
  const [a, b] = [h.open(), h.open()];
  h.acquire(a, "d/x", { leaseMs: 1_000 });
  h.acquire(b, "d/x");
  h.engine.touch(h.clock.monotonicMs(), b.sessionId);
  assert.deepEqual(h.advance(1_000), ["ended s1 d/x token=1 expired held=1000 delayed=4000"]);
  assert.equal(h.engine.view.getLock("d/x")?.delayedUntilMs, 4_000);
  assert.deepEqual(
    [h.engine.stats.lockDelaysTotal, h.engine.stats.lockDelaysActive],
    [1, 1],
  );
  const c = h.open();
  assert.deepEqual(h.acquire(c, "d/x", { waitMs: 0 }), ["wait_ended s3 d/x timeout"]);
  assert.deepEqual(h.advance(1_999), []);
  assert.deepEqual(h.advance(1), ["granted s2 d/x token=2 lease=10000 waited=3000"]);
  assert.deepEqual(
    [h.engine.stats.lockDelaysActive, h.engine.view.getLock("d/x")?.delayedUntilMs],
    [0, 0],
  );
});

Deno.test("every non-graceful end starts a lock-delay (io_timeout, force, failover), a graceful one never", () => {
  const cases: { end: string; cause: CloseCause | "release" | "force"; delayed: boolean }[] = [
    { end: "release", cause: "release", delayed: false },
    { end: "clean close", cause: "client_closed", delayed: false },
    { end: "shutdown", cause: "shutdown", delayed: false },
    { end: "io error", cause: "io_error", delayed: true },
    { end: "io timeout", cause: "io_timeout", delayed: true },
    { end: "operator", cause: "force", delayed: true },
    { end: "fail-over", cause: "failover", delayed: true },
  ];
  for (const { end, cause, delayed } of cases) {
    const h = delayedHarness();
    const [a, b] = [h.open(), h.open()];
    h.acquire(a, "d/x");
    h.acquire(b, "d/x");
    if (cause === "release") h.release(a, "d/x", 1);
    else if (cause === "force") {
      h.step(() => h.engine.forceRelease(h.now(), { name: "d/x" }).events);
    } else h.step(() => h.engine.closeSession(h.now(), a.sessionId, cause));
    const holder = h.engine.view.holderOf("d/x");
    assert.equal(holder === null, delayed, `${end}: ${delayed ? "delayed" : "handed off"}`);
    assert.equal(h.engine.stats.lockDelaysTotal, delayed ? 1 : 0, end);
  }
});

Deno.test("no lock-delay without a rule that gives one", () => {
  const h = delayedHarness();
  const [a, b] = [h.open(), h.open()];
  h.acquire(a, "plain", { leaseMs: 1_000 });
  h.acquire(b, "plain");
  h.engine.touch(h.clock.monotonicMs() + 1_000, b.sessionId);
  assert.deepEqual(h.advance(1_000), [
    "ended s1 plain token=1 expired held=1000",
    "granted s2 plain token=2 lease=10000 waited=1000",
  ]);
});

Deno.test("an idle lock under a lock-delay is kept until the delay ends, then forgotten", () => {
  const h = delayedHarness();
  const a = h.open();
  h.acquire(a, "d/x");
  h.step(() => h.engine.closeSession(h.now(), a.sessionId, "io_error"));
  const view = h.engine.view.getLock("d/x");
  assert.deepEqual(
    [view?.holder, view?.queueLength, view?.delayedUntilMs],
    [null, 0, 3_000],
    "stored without owner or waiter while the delay holds",
  );
  assert.equal(h.engine.nextDeadlineMs(), 3_000);
  assert.deepEqual(h.advance(2_000), []);
  assert.equal(h.engine.view.lockCount, 0);
  assert.equal(h.engine.nextDeadlineMs(), undefined);
});

Deno.test("a second non-graceful end extends the delay; a semaphore's other owners keep their slots meanwhile", () => {
  const h = delayedHarness();
  const [a, b, c, w] = [h.open(), h.open(), h.open(), h.open()];
  for (const p of [a, b, c]) h.acquire(p, "d/sem", { limit: 3 });
  h.acquire(w, "d/sem");
  h.step(() => h.engine.closeSession(h.now(), a.sessionId, "io_error"));
  h.clock.advance(500);
  for (const p of [b, c, w]) h.engine.touch(h.clock.monotonicMs(), p.sessionId);
  h.step(() => h.engine.closeSession(h.now(), b.sessionId, "io_timeout"));
  assert.equal(h.engine.view.getLock("d/sem")?.delayedUntilMs, 3_500);
  assert.deepEqual(h.engine.view.holdersOf("d/sem").map((o) => o.slot), [2]);
  assert.deepEqual(h.advance(1_500), [], "the first delay's end passed: still held");
  assert.deepEqual(h.advance(500), [
    "granted s4 d/sem token=4 lease=10000 waited=2500 sem3 slot=0",
  ]);
  assert.deepEqual([h.engine.stats.lockDelaysTotal, h.engine.stats.lockDelaysActive], [2, 0]);
});

Deno.test("a reloaded rule applies to the next non-graceful end", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  h.acquire(a, "d/x");
  h.acquire(b, "d/x");
  h.engine.setKindRule(() => DELAYED);
  assert.deepEqual(h.step(() => h.engine.closeSession(h.now(), a.sessionId, "io_error")), [
    "ended s1 d/x token=1 io_timeout held=0 delayed=3000",
    "closed s1 io_error",
  ]);
});
