import assert from "node:assert/strict";
import { ManualClock } from "../../src/clock.ts";
import { LockEngine } from "../../src/core/engine.ts";
import { TokenIssuer } from "../../src/core/tokens.ts";
import type { EngineEvent, Instant, Peer } from "../../src/core/types.ts";

interface Harness {
  clock: ManualClock;
  engine: LockEngine;
  /** The clock's reading as one instant, as the service passes it. */
  now(): Instant;
  reservations: number[];
  open(addr?: string, identity?: string): Peer;
  /** Runs an engine call, checks the invariants, returns the events in a compact form. */
  step(run: () => EngineEvent[]): string[];
  advance(ms: number): string[];
}

let addrCounter = 0;

function harness(options: Partial<ConstructorParameters<typeof LockEngine>[0]> = {}): Harness {
  const clock = new ManualClock();
  const reservations: number[] = [];
  const tokens = new TokenIssuer(0, 100, (highWater) => reservations.push(highWater));
  const engine = new LockEngine({
    tokens,
    ioTimeoutMs: 30_000,
    leaseDefaultMs: 10_000,
    leaseMaxMs: 60_000,
    ...options,
  });
  const now = () => ({ monoMs: clock.monotonicMs(), wallMs: clock.wallMs() });
  const step = (run: () => EngineEvent[]) => {
    const events = run().map(describe);
    engine.assertInvariants();
    return events;
  };
  return {
    clock,
    engine,
    now,
    reservations,
    open(addr = `127.0.0.1:${40000 + addrCounter++}`, identity = "") {
      const peer = engine.openSession(now(), identity, addr);
      assert.ok(peer, "session opened");
      return peer;
    },
    step,
    advance(ms) {
      clock.advance(ms);
      return step(() => engine.tick(now()));
    },
  };
}

/** One line per event: easy to compare whole sequences. */
function describe(event: EngineEvent): string {
  const s = event.peer.sessionId;
  switch (event.type) {
    case "granted":
      return `granted s${s} ${event.name} token=${event.token} lease=${event.leaseMs} waited=${event.waitedMs}`;
    case "queued":
      return `queued s${s} ${event.name} pos=${event.position}`;
    case "ended":
      return `ended s${s} ${event.name} token=${event.token} ${event.reason} held=${event.heldMs}`;
    case "wait_ended":
      return `wait_ended s${s} ${event.name} ${event.cause}`;
    case "rejected": {
      const r = event.rejection;
      return `rejected s${s} ${event.name} ${r.reason}${
        r.reason === "grants_blocked" ? ":" + r.block : ""
      }`;
    }
    case "session_closed":
      return `closed s${s} ${event.cause}${event.name ? " " + event.name : ""}`;
  }
}

Deno.test("a free lock is granted at once with token 1 and the default lease", () => {
  const h = harness();
  const a = h.open();
  assert.deepEqual(
    h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "jobs/nightly", 0, null)),
    [
      "granted s1 jobs/nightly token=1 lease=10000 waited=0",
    ],
  );
  assert.equal(h.engine.stats.locksHeld, 1);
  assert.equal(h.engine.stats.acquiresTotal, 1);
});

Deno.test("waiters are granted in FIFO order with strictly increasing tokens", () => {
  const h = harness();
  const peers = Array.from({ length: 5 }, () => h.open());
  h.step(() => h.engine.acquire(h.now(), peers[0].sessionId, 1, "x", 0, null));
  for (let i = 1; i < 5; i++) {
    assert.deepEqual(h.step(() => h.engine.acquire(h.now(), peers[i].sessionId, 1, "x", 0, null)), [
      `queued s${peers[i].sessionId} x pos=${i}`,
    ]);
  }
  const order: string[] = [];
  let token = 1;
  for (let i = 0; i < 5; i++) {
    h.clock.advance(5);
    const events = h.step(() => h.engine.release(h.now(), peers[i].sessionId, 2, "x", token));
    assert.equal(events[0], `ended s${peers[i].sessionId} x token=${token} graceful held=5`);
    if (i < 4) {
      token++;
      assert.match(events[1], new RegExp(`^granted s${peers[i + 1].sessionId} x token=${token} `));
      order.push(events[1].split(" ")[1]);
    }
  }
  assert.deepEqual(order, ["s2", "s3", "s4", "s5"]);
  assert.equal(h.engine.lockCount, 0, "the idle lock is not stored");
});

Deno.test("a second ACQUIRE for the same name is a duplicate claim and changes nothing", () => {
  const h = harness();
  const a = h.open();
  const b = h.open();
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "x", 0, null));
  assert.deepEqual(h.step(() => h.engine.acquire(h.now(), a.sessionId, 2, "x", 0, null)), [
    "rejected s1 x duplicate_claim",
  ]);
  assert.deepEqual(h.step(() => h.engine.acquire(h.now(), b.sessionId, 2, "x", 0, null)), [
    "rejected s2 x duplicate_claim",
  ]);
  assert.equal(h.engine.getLock("x")?.waiters.length, 1);
});

Deno.test("invalid lock names are rejected without storing anything", () => {
  const h = harness();
  const a = h.open();
  for (const name of ["", ".", "..", "a\u0000b", "tab\there", "x".repeat(1025), "é".repeat(513)]) {
    assert.deepEqual(h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, name, 0, null)), [
      `rejected s1 ${name} invalid_argument`,
    ]);
  }
  assert.equal(h.engine.lockCount, 0);
  assert.deepEqual(
    h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x".repeat(1024), 0, null)).length,
    1,
  );
});

Deno.test("lease expiry ends the ownership and grants the next waiter a larger token", () => {
  const h = harness();
  const a = h.open();
  const b = h.open();
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 1_000, null));
  h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "x", 1_000, null));
  assert.deepEqual(h.advance(999), []);
  h.engine.touch(h.clock.monotonicMs(), b.sessionId);
  assert.deepEqual(h.advance(1), [
    "ended s1 x token=1 expired held=1000",
    "granted s2 x token=2 lease=1000 waited=1000",
  ]);
  assert.equal(h.engine.stats.releasesTotal.expired, 1);
  assert.equal(h.engine.stats.sessionsOpen, 2, "the expired owner's session stays open");
});

Deno.test("a heartbeat renews every ownership of the session", () => {
  const h = harness();
  const a = h.open();
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 1_000, null));
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 2, "y", 2_000, null));
  h.advance(900);
  assert.equal(h.engine.heartbeat(h.clock.monotonicMs(), a.sessionId), 2);
  assert.deepEqual(h.advance(999), [], "renewed lease of x runs to 1900");
  assert.deepEqual(h.advance(1), ["ended s1 x token=1 expired held=1900"]);
  assert.deepEqual(h.advance(999), []);
  assert.deepEqual(h.advance(1), ["ended s1 y token=2 expired held=2900"]);
  assert.equal(h.engine.stats.heartbeatsTotal, 1);
});

Deno.test("leases are clamped to the minimum and the maximum", () => {
  const h = harness();
  const a = h.open();
  assert.match(
    h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 1, null))[0],
    / lease=50 /,
  );
  assert.match(
    h.step(() => h.engine.acquire(h.now(), a.sessionId, 2, "y", 10_000_000, null))[0],
    / lease=60000 /,
  );
});

Deno.test("an idle session is closed at io_timeout: ownerships end io_timeout, waits leave, order kept", () => {
  const h = harness({ ioTimeoutMs: 1_000 });
  const owner = h.open();
  const w1 = h.open();
  const silent = h.open();
  const w3 = h.open();
  h.step(() => h.engine.acquire(h.now(), owner.sessionId, 1, "x", 60_000, null));
  h.step(() => h.engine.acquire(h.now(), w1.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), silent.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), silent.sessionId, 2, "other", 0, null));
  h.step(() => h.engine.acquire(h.now(), w3.sessionId, 1, "x", 0, null));
  h.clock.advance(500);
  h.engine.touch(h.clock.monotonicMs(), owner.sessionId);
  h.clock.advance(1);
  h.engine.touch(h.clock.monotonicMs(), w1.sessionId);
  h.clock.advance(1);
  h.engine.touch(h.clock.monotonicMs(), w3.sessionId);
  assert.deepEqual(h.advance(498), [
    "wait_ended s3 x session_closed",
    "ended s3 other token=2 io_timeout held=1000",
    "closed s3 io_timeout",
  ]);
  assert.deepEqual(h.engine.getLock("x")?.waiters.map((w) => w.sessionId), [2, 4]);
  assert.deepEqual(h.advance(500), [
    "ended s1 x token=1 io_timeout held=1500",
    "granted s2 x token=3 lease=10000 waited=1500",
    "closed s1 io_timeout",
  ]);
  assert.deepEqual(h.advance(1), [
    "ended s2 x token=3 io_timeout held=1",
    "granted s4 x token=4 lease=10000 waited=1501",
    "closed s2 io_timeout",
  ]);
  assert.deepEqual(h.advance(1), [
    "ended s4 x token=4 io_timeout held=1",
    "closed s4 io_timeout",
  ]);
  assert.equal(h.engine.stats.sessionsOpen, 0);
  assert.equal(h.engine.lockCount, 0);
});

Deno.test("closing a session cleanly ends its ownerships as graceful", () => {
  const h = harness();
  const a = h.open();
  const b = h.open();
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "x", 0, null));
  assert.deepEqual(h.step(() => h.engine.closeSession(h.now(), a.sessionId, "client_closed")), [
    "ended s1 x token=1 graceful held=0",
    "granted s2 x token=2 lease=10000 waited=0",
    "closed s1 client_closed",
  ]);
  assert.deepEqual(h.step(() => h.engine.closeSession(h.now(), b.sessionId, "io_error")), [
    "ended s2 x token=2 io_timeout held=0",
    "closed s2 io_error",
  ]);
});

Deno.test("RELEASE with a wrong token or of a lock not owned is refused and changes nothing", () => {
  const h = harness();
  const a = h.open();
  const b = h.open();
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "x", 0, null));
  assert.deepEqual(h.step(() => h.engine.release(h.now(), a.sessionId, 2, "x", 99)), [
    "rejected s1 x not_owner",
  ]);
  assert.deepEqual(h.step(() => h.engine.release(h.now(), a.sessionId, 3, "nope", 1)), [
    "rejected s1 nope not_owner",
  ]);
  assert.deepEqual(h.step(() => h.engine.release(h.now(), b.sessionId, 2, "x", 1)), [
    "rejected s2 x not_owner",
  ]);
  assert.equal(h.engine.getLock("x")?.holder?.token, 1);
});

Deno.test("RELEASE with token 0 of a queued claim cancels the wait", () => {
  const h = harness();
  const [a, b, c] = [h.open(), h.open(), h.open()];
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), c.sessionId, 1, "x", 0, null));
  assert.deepEqual(h.step(() => h.engine.release(h.now(), b.sessionId, 2, "x", 0)), [
    "wait_ended s2 x cancelled",
  ]);
  assert.deepEqual(h.engine.getLock("x")?.waiters.map((w) => w.sessionId), [3]);
});

Deno.test("a try-lock on a held lock fails at once; a wait bound times out", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 60_000, null));
  assert.deepEqual(h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "x", 0, 0)), [
    "wait_ended s2 x timeout",
  ]);
  assert.deepEqual(h.step(() => h.engine.acquire(h.now(), b.sessionId, 2, "x", 0, 250)), [
    "queued s2 x pos=1",
  ]);
  h.engine.touch(h.clock.monotonicMs(), a.sessionId);
  assert.deepEqual(h.advance(249), []);
  assert.deepEqual(h.advance(1), ["wait_ended s2 x timeout"]);
  assert.equal(h.engine.getLock("x")?.waiters.length, 0);
  assert.deepEqual(h.step(() => h.engine.acquire(h.now(), b.sessionId, 3, "free", 0, 0)), [
    "granted s2 free token=2 lease=10000 waited=0",
  ]);
});

Deno.test("force-release closes the owner's session, ends all its ownerships as force, grants the head", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 2, "y", 0, null));
  h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "x", 0, null));
  const result = h.engine.forceRelease(h.now(), "x");
  assert.equal(result.status, "ok");
  assert.deepEqual(result.events.map(describe), [
    "ended s1 x token=1 force held=0",
    "granted s2 x token=3 lease=10000 waited=0",
    "ended s1 y token=2 force held=0",
    "closed s1 admin x",
  ]);
  h.engine.assertInvariants();
  assert.equal(h.engine.stats.releasesTotal.force, 2);
  assert.equal(h.engine.forceRelease(h.now(), "nope").status, "not_found");
});

Deno.test("force-release of a queue without an owner is refused", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "x", 0, null));
  h.engine.blockGrants("audit_unavailable");
  h.step(() => h.engine.release(h.now(), a.sessionId, 2, "x", 1));
  assert.equal(h.engine.getLock("x")?.holder, null);
  assert.equal(h.engine.forceRelease(h.now(), "x").status, "no_owner");
});

Deno.test("kicking a waiter by remote address keeps the order of the rest", () => {
  const h = harness();
  const owner = h.open("127.0.0.1:1000");
  const w = ["127.0.0.1:1001", "[::1]:1002", "127.0.0.1:1003"].map((addr) => h.open(addr));
  h.step(() => h.engine.acquire(h.now(), owner.sessionId, 1, "x", 0, null));
  for (const p of w) h.step(() => h.engine.acquire(h.now(), p.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), w[1].sessionId, 2, "mine", 0, null));
  const result = h.engine.kickWaiter(h.now(), "x", "[::1]:1002");
  assert.equal(result.status, "ok");
  assert.deepEqual(result.events.map(describe), [
    "wait_ended s3 x kicked",
    "ended s3 mine token=2 force held=0",
    "closed s3 admin x",
  ]);
  h.engine.assertInvariants();
  assert.deepEqual(h.engine.getLock("x")?.waiters.map((v) => v.remoteAddr), [
    "127.0.0.1:1001",
    "127.0.0.1:1003",
  ]);
  assert.equal(h.engine.kickWaiter(h.now(), "x", "[::1]:1002").status, "not_found");
  assert.equal(
    h.engine.kickWaiter(h.now(), "x", "127.0.0.1:1000").status,
    "not_found",
    "owner is no waiter",
  );
  assert.equal(h.engine.kickWaiter(h.now(), "nope", "127.0.0.1:1001").status, "not_found");
});

Deno.test("idle locks are not stored: the engine holds nothing once every lock is idle", () => {
  const h = harness();
  const peers = Array.from({ length: 20 }, () => h.open());
  for (const [i, p] of peers.entries()) {
    h.step(() => h.engine.acquire(h.now(), p.sessionId, 1, `lock-${i % 4}`, 0, null));
  }
  assert.equal(h.engine.lockCount, 4);
  for (const p of peers) h.step(() => h.engine.closeSession(h.now(), p.sessionId, "client_closed"));
  assert.equal(h.engine.lockCount, 0);
  assert.equal(h.engine.listLocks().length, 0);
  assert.equal(h.engine.nextDeadlineMs(), undefined, "no deadline is left behind");
  assert.deepEqual(
    [h.engine.stats.locksHeld, h.engine.stats.waiters, h.engine.stats.sessionsOpen],
    [0, 0, 0],
  );
});

Deno.test("limits: sessions, claims per session and waiters per lock", () => {
  const h = harness({ sessionsMax: 4, claimsPerSessionMax: 2, waitersPerLockMax: 2 });
  const peers = [h.open(), h.open(), h.open(), h.open()];
  assert.equal(h.engine.openSession(h.now(), "", "127.0.0.1:1"), null, "fifth session refused");
  const a = peers[0];
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 2, "y", 0, null));
  assert.deepEqual(h.step(() => h.engine.acquire(h.now(), a.sessionId, 3, "z", 0, null)), [
    "rejected s1 z limit_exceeded",
  ]);
  h.step(() => h.engine.acquire(h.now(), peers[1].sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), peers[2].sessionId, 1, "x", 0, null));
  assert.deepEqual(h.step(() => h.engine.acquire(h.now(), peers[3].sessionId, 1, "x", 0, null)), [
    "rejected s4 x limit_exceeded",
  ]);
  assert.equal(h.engine.lockCount, 2, "nothing was stored for z");
});

Deno.test("paused grants refuse ACQUIRE and hold handoffs until resumed", () => {
  const h = harness();
  const [a, b, c] = [h.open(), h.open(), h.open()];
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "x", 0, null));
  h.engine.blockGrants("audit_unavailable");
  assert.deepEqual(h.step(() => h.engine.acquire(h.now(), c.sessionId, 1, "y", 0, null)), [
    "rejected s3 y grants_blocked:audit_unavailable",
  ]);
  assert.deepEqual(h.step(() => h.engine.release(h.now(), a.sessionId, 2, "x", 1)), [
    "ended s1 x token=1 graceful held=0",
  ]);
  assert.equal(h.engine.lockCount, 1, "a queue without an owner is still listed");
  assert.deepEqual(h.step(() => h.engine.unblockGrants(h.now(), "audit_unavailable")), [
    "granted s2 x token=2 lease=10000 waited=0",
  ]);
});

Deno.test("tokens are reserved in blocks before they are issued", () => {
  const h = harness();
  const a = h.open();
  for (let i = 0; i < 250; i++) {
    h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null));
    h.step(() => h.engine.release(h.now(), a.sessionId, 2, "x", i + 1));
  }
  assert.deepEqual(h.reservations, [100, 200, 300]);
  assert.equal(h.engine.lastToken, 250);
});

Deno.test("a failing token reservation refuses the grant, leaves nothing behind and blocks grants until a retry succeeds", () => {
  let fail = true;
  const h = harness({
    tokens: new TokenIssuer(0, 10, () => {
      if (fail) throw new Error("disk full");
    }),
    leaseDefaultMs: 15_000,
  });
  const a = h.open();
  const b = h.open();
  assert.deepEqual(h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null)), [
    "rejected s1 x grants_blocked:token_store_unavailable",
  ]);
  assert.equal(h.engine.lockCount, 0);
  assert.equal(h.engine.grantBlock, "token_store_unavailable");
  assert.equal(h.engine.blockDetail("token_store_unavailable"), "disk full");
  assert.deepEqual(h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "y", 0, null)), [
    "rejected s2 y grants_blocked:token_store_unavailable",
  ], "refused with the true cause while blocked");
  assert.deepEqual(h.step(() => h.engine.retryTokenStore(h.now())), [], "still failing");
  fail = false;
  assert.deepEqual(h.step(() => h.engine.retryTokenStore(h.now())), []);
  assert.equal(h.engine.grantBlock, null);
  assert.deepEqual(h.step(() => h.engine.acquire(h.now(), a.sessionId, 2, "x", 0, null)), [
    "granted s1 x token=1 lease=15000 waited=0",
  ]);
});

Deno.test("a token reservation failing during a hand-off leaves the queue ownerless until a retry grants it", () => {
  let fail = false;
  const h = harness({
    tokens: new TokenIssuer(0, 1, () => {
      if (fail) throw new Error("disk full");
    }),
  });
  const [a, b] = [h.open(), h.open()];
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "x", 0, null));
  fail = true;
  assert.deepEqual(h.step(() => h.engine.release(h.now(), a.sessionId, 2, "x", 1)), [
    "ended s1 x token=1 graceful held=0",
  ]);
  assert.equal(h.engine.holderOf("x"), null, "a queue without an owner");
  fail = false;
  h.clock.advance(300);
  assert.deepEqual(h.step(() => h.engine.retryTokenStore(h.now())), [
    "granted s2 x token=2 lease=10000 waited=300",
  ]);
});

Deno.test("gauges and summaries follow every event exactly", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null));
  h.clock.advance(2_000);
  h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "x", 0, null));
  assert.deepEqual([h.engine.stats.locksHeld, h.engine.stats.waiters], [1, 1]);
  h.clock.advance(3_000);
  h.step(() => h.engine.release(h.now(), a.sessionId, 2, "x", 1));
  const s = h.engine.stats;
  assert.deepEqual([s.locksHeld, s.waiters, s.acquiresTotal], [1, 0, 2]);
  assert.equal(s.holdSecondsSum, 5);
  assert.equal(s.holdSecondsCount, 1);
  assert.equal(s.waitSecondsSum, 3);
  assert.equal(s.waitSecondsCount, 2);
});

Deno.test("listLocks is sorted by name and filters by prefix and predicate", () => {
  const h = harness();
  const a = h.open();
  for (const name of ["b/2", "a", "b/1", "c"]) {
    h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, name, 0, null));
  }
  assert.deepEqual(h.engine.listLocks().map((l) => l.name), ["a", "b/1", "b/2", "c"]);
  assert.deepEqual(h.engine.listLocks({ prefix: "b/" }).map((l) => l.name), ["b/1", "b/2"]);
  assert.deepEqual(
    h.engine.listLocks({ prefix: "b/", matches: (n) => n.endsWith("2") }).map((l) => l.name),
    ["b/2"],
  );
});

Deno.test("a random workload never breaks an invariant and tokens only grow", () => {
  const h = harness({ ioTimeoutMs: 5_000 });
  let seed = 42;
  // mulberry32: small, seeded, well mixed (an LCG's low bits cycle).
  const random = (n: number) => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return (((t ^ (t >>> 14)) >>> 0) % n);
  };
  const sessions: Peer[] = [];
  const tokens = new Map<number, string>();
  let lastToken = 0;
  for (let i = 0; i < 20_000; i++) {
    if (sessions.length < 3 || random(20) === 0) sessions.push(h.open());
    const p = sessions[random(sessions.length)];
    const name = `l${random(5)}`;
    let events: EngineEvent[] = [];
    switch (random(8)) {
      case 0:
      case 1:
      case 2:
        events = h.engine.acquire(
          h.now(),
          p.sessionId,
          i + 1,
          name,
          random(3) * 1000,
          random(2) ? null : random(3000),
        );
        break;
      case 3: {
        const holder = h.engine.getLock(name)?.holder;
        if (holder && holder.sessionId === p.sessionId) {
          events = h.engine.release(h.now(), p.sessionId, i + 1, name, holder.token);
        } else events = h.engine.release(h.now(), p.sessionId, i + 1, name, 0);
        break;
      }
      case 4:
        h.engine.heartbeat(h.clock.monotonicMs(), p.sessionId);
        break;
      case 5:
        h.clock.advance(random(700));
        events = h.engine.tick(h.now());
        break;
      case 6:
        if (random(10) === 0) events = h.engine.forceRelease(h.now(), name).events;
        break;
      case 7:
        if (random(10) === 0) events = h.engine.closeSession(h.now(), p.sessionId, "client_closed");
        break;
    }
    for (const e of events) {
      if (e.type === "granted") {
        assert.ok(e.token > lastToken, "every grant's token is larger than every one before");
        lastToken = e.token;
        tokens.set(e.token, e.name);
      }
      if (e.type === "session_closed") {
        const index = sessions.findIndex((s) => s.sessionId === e.peer.sessionId);
        if (index >= 0) sessions.splice(index, 1);
      }
    }
    h.engine.assertInvariants();
  }
  assert.ok(tokens.size > 1000, `many grants happened (${tokens.size})`);
});

Deno.test("holderOf, queueLengthOf and findWaiter read the owner, the queue length and one waiter of a lock", () => {
  const h = harness();
  const owner = h.open("127.0.0.1:2000");
  const waiter = h.open("[::1]:2001");
  h.step(() => h.engine.acquire(h.now(), owner.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), waiter.sessionId, 1, "x", 0, null));
  assert.equal(h.engine.holderOf("x")?.remoteAddr, "127.0.0.1:2000");
  assert.equal(h.engine.holderOf("idle"), undefined);
  assert.equal(h.engine.queueLengthOf("x"), 1);
  assert.equal(h.engine.findWaiter("x", "[::1]:2001")?.sessionId, waiter.sessionId);
  assert.equal(h.engine.findWaiter("x", "127.0.0.1:2000"), undefined, "the owner is no waiter");
  assert.equal(h.engine.findWaiter("y", "[::1]:2001"), undefined);
  h.engine.blockGrants("audit_unavailable");
  h.step(() => h.engine.release(h.now(), owner.sessionId, 2, "x", 1));
  assert.equal(h.engine.holderOf("x"), null, "a queue without an owner");
});

Deno.test("a hand-off is a grant to a claim that waited; the grant of a free lock is not one", () => {
  const h = harness();
  const [a, b, c] = [h.open(), h.open(), h.open()];
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "x", 0, null));
  h.step(() => h.engine.acquire(h.now(), c.sessionId, 1, "y", 0, null));
  assert.deepEqual([h.engine.stats.acquiresTotal, h.engine.stats.handoffsTotal], [2, 0]);
  h.step(() => h.engine.release(h.now(), a.sessionId, 2, "x", 1));
  assert.deepEqual([h.engine.stats.acquiresTotal, h.engine.stats.handoffsTotal], [3, 1]);
  h.step(() => h.engine.forceRelease(h.now(), "x").events);
  assert.deepEqual([h.engine.stats.acquiresTotal, h.engine.stats.handoffsTotal], [3, 1]);
});

Deno.test("viewVersion grows with every change of an owner or a queue, and only then", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  const versions: number[] = [h.engine.viewVersion];
  const changed = () => {
    const v = h.engine.viewVersion;
    const grew = v > versions[versions.length - 1];
    versions.push(v);
    return grew;
  };
  h.step(() => h.engine.acquire(h.now(), a.sessionId, 1, "x", 0, null));
  assert.ok(changed(), "granted");
  h.step(() => h.engine.acquire(h.now(), b.sessionId, 1, "x", 5_000, null));
  assert.ok(changed(), "queued");
  h.engine.heartbeat(h.now().monoMs, a.sessionId);
  h.step(() => h.engine.acquire(h.now(), b.sessionId, 2, "x", 0, null)); // duplicate: rejected
  assert.ok(!changed(), "a heartbeat and a rejection change nothing shown");
  h.step(() => h.engine.kickWaiter(h.now(), "x", b.remoteAddr).events);
  assert.ok(changed(), "kicked");
  h.advance(10_000);
  assert.ok(changed(), "lease expired");
});

Deno.test("pageLocks sorts by name, held-for or queue length (ties by name), filters, and pages", () => {
  const h = harness();
  const peers = Array.from({ length: 6 }, () => h.open());
  // Held since: b at 0, a at 10, c at 20. Queues: a 2, c 1, b 0.
  h.step(() => h.engine.acquire(h.now(), peers[0].sessionId, 1, "b", 0, null));
  h.clock.advance(10);
  h.step(() => h.engine.acquire(h.now(), peers[1].sessionId, 1, "a", 0, null));
  h.clock.advance(10);
  h.step(() => h.engine.acquire(h.now(), peers[2].sessionId, 1, "c", 0, null));
  h.step(() => h.engine.acquire(h.now(), peers[3].sessionId, 1, "a", 0, null));
  h.step(() => h.engine.acquire(h.now(), peers[4].sessionId, 1, "a", 0, null));
  h.step(() => h.engine.acquire(h.now(), peers[5].sessionId, 1, "c", 0, null));
  const page = (
    sort: "name" | "held_for" | "waiters",
    descending: boolean,
    offset = 0,
    limit = 10,
    prefix?: string,
  ) => {
    const result = h.engine.pageLocks({ sort, descending, offset, limit, prefix });
    return `${result.total}: ${result.locks.map((l) => l.name).join(",")}`;
  };
  assert.equal(page("name", false), "3: a,b,c");
  assert.equal(page("name", true), "3: c,b,a");
  assert.equal(page("held_for", false), "3: c,a,b", "shortest held first");
  assert.equal(page("held_for", true), "3: b,a,c", "longest held first");
  assert.equal(page("waiters", true), "3: a,c,b");
  assert.equal(page("waiters", false), "3: b,c,a");
  assert.equal(page("waiters", true, 1, 1), "3: c");
  assert.equal(page("name", false, 5, 10), "3: ");
  assert.equal(page("name", false, 0, 10, "b"), "1: b");
  const [view] = h.engine.pageLocks({ sort: "name", descending: false, offset: 0, limit: 1 }).locks;
  assert.deepEqual(view, h.engine.getLock("a"), "a page holds the same views as getLock");
});
