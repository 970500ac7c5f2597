/**
 * Orphaned sessions (issue 20, "never two valid holders"): a version-2 connection that ends
 * without GOODBYE leaves its session orphaned. Its ownerships stay until their leases end (as
 * `expired`), a same-term RESUME moves them, or an operator force-releases one; its waits leave
 * their queues at once; it has no I/O deadline and still counts against the session limit.
 */

import assert from "node:assert/strict";
import { harness } from "./engine_harness.ts";

Deno.test("an orphan keeps its ownership until its lease ends: nobody is granted the lock before, and the end is expired", () => {
  const h = harness({ ioTimeoutMs: 1_000 });
  const [a, b] = [h.open(), h.open()];
  h.acquire(a, "x", { leaseMs: 5_000 });
  h.acquire(b, "x");
  assert.deepEqual(h.step(() => h.engine.orphanSession(h.now(), a.sessionId, "io_error")), []);
  assert.equal(h.engine.view.holderOf("x")?.connected, false);
  assert.deepEqual(
    [h.engine.stats.sessionsOpen, h.engine.stats.sessionsOrphaned],
    [1, 1],
  );
  // Far past the I/O timeout: an orphan has none. The waiter keeps its session alive.
  for (let ms = 0; ms < 4_500; ms += 500) {
    h.engine.touch(h.clock.monotonicMs(), b.sessionId);
    assert.deepEqual(h.advance(500), []);
  }
  h.engine.touch(h.clock.monotonicMs(), b.sessionId);
  assert.deepEqual(h.advance(500), [
    "ended s1 x token=1 expired held=5000",
    "granted s2 x token=2 lease=10000 waited=5000",
    "closed s1 io_error",
  ]);
  assert.equal(h.engine.view.sessionPeer(a.sessionId), undefined);
  assert.deepEqual([h.engine.stats.sessionsOpen, h.engine.stats.sessionsOrphaned], [1, 0]);
});

Deno.test("orphaning drops the session's waits at once (their next waiters move up) and keeps its ownerships", () => {
  const h = harness();
  const [a, b, c] = [h.open(), h.open(), h.open()];
  h.acquire(a, "held");
  h.acquire(b, "wanted");
  h.acquire(a, "wanted");
  h.acquire(c, "wanted");
  assert.deepEqual(h.step(() => h.engine.orphanSession(h.now(), a.sessionId, "io_error")), [
    "wait_ended s1 wanted session_closed",
  ]);
  assert.deepEqual(
    h.engine.view.getLock("wanted")?.waiters.map((w) => w.sessionId),
    [c.sessionId],
  );
  assert.deepEqual(h.engine.view.sessionClaims(a.sessionId).map((claim) => claim.name), ["held"]);
  // Nothing more happens to an orphan that is orphaned again.
  assert.deepEqual(h.step(() => h.engine.orphanSession(h.now(), a.sessionId, "io_error")), []);
});

Deno.test("a session that owns nothing is closed at once instead of orphaned", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  h.acquire(b, "x");
  h.acquire(a, "x");
  assert.deepEqual(h.step(() => h.engine.orphanSession(h.now(), a.sessionId, "io_error")), [
    "wait_ended s1 x session_closed",
    "closed s1 io_error",
  ]);
  assert.deepEqual([h.engine.stats.sessionsOpen, h.engine.stats.sessionsOrphaned], [1, 0]);
});

Deno.test("a same-term move takes an orphan's ownership with its token and a renewed lease; the orphan closes", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  h.acquire(a, "x", { leaseMs: 5_000 });
  h.acquire(b, "x");
  h.step(() => h.engine.orphanSession(h.now(), a.sessionId, "io_error"));
  h.clock.advance(4_000);
  const fresh = h.open();
  const outcome = h.engine.moveClaims(h.now(), {
    fromSessionId: a.sessionId,
    toSessionId: fresh.sessionId,
    requestIds: new Map([["x", 7]]),
  });
  assert.equal(outcome.status, "moved");
  h.engine.assertInvariants();
  assert.deepEqual(outcome.status === "moved" && outcome.events.length, 2);
  const holder = h.engine.view.holderOf("x");
  assert.deepEqual([holder?.sessionId, holder?.token, holder?.connected], [
    fresh.sessionId,
    1,
    true,
  ]);
  assert.equal(h.engine.view.sessionPeer(a.sessionId), undefined, "the orphan is closed");
  h.engine.touch(h.clock.monotonicMs(), b.sessionId);
  assert.deepEqual(h.advance(4_999), [], "the lease was renewed at the move");
  // An orphan is no session for requests: only a move may name it.
  assert.throws(() => h.engine.heartbeat(0, a.sessionId));
});

Deno.test("a force-release ends an orphan's ownership (force) and closes it; shutdown ends orphans as graceful", () => {
  const h = harness();
  const [a, b, c] = [h.open(), h.open(), h.open()];
  h.acquire(a, "x");
  h.acquire(b, "y");
  h.step(() => h.engine.orphanSession(h.now(), a.sessionId, "io_error"));
  h.step(() => h.engine.orphanSession(h.now(), b.sessionId, "io_error"));
  h.acquire(c, "x");
  assert.deepEqual(h.step(() => h.engine.forceRelease(h.now(), { name: "x" }).events), [
    "ended s1 x token=1 force held=0",
    "granted s3 x token=3 lease=10000 waited=0",
    "closed s1 admin x",
  ]);
  assert.deepEqual(h.step(() => h.engine.closeSession(h.now(), b.sessionId, "shutdown")), [
    "ended s2 y token=2 graceful held=0",
    "closed s2 shutdown",
  ]);
  assert.deepEqual([h.engine.stats.sessionsOpen, h.engine.stats.sessionsOrphaned], [1, 0]);
});

Deno.test("orphans count against the session limit until they end", () => {
  const h = harness({ sessionsMax: 2 });
  const a = h.open();
  h.open();
  h.acquire(a, "x", { leaseMs: 1_000 });
  h.step(() => h.engine.orphanSession(h.now(), a.sessionId, "io_error"));
  assert.equal(h.engine.openSession(h.now(), "", "127.0.0.1:1"), null);
  h.advance(1_000);
  assert.notEqual(h.engine.openSession(h.now(), "", "127.0.0.1:1"), null);
});
