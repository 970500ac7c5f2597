import assert from "node:assert/strict";
import { TokenIssuer } from "../../src/core/tokens.ts";
import { describe, harness } from "./engine_harness.ts";

Deno.test("force-release closes the owner's session, ends all its ownerships as force, grants the head", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 2,
      name: "y",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: b.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  const result = h.engine.forceRelease(h.now(), { name: "x" });
  assert.equal(result.status, "ok");
  assert.deepEqual(result.events.map(describe), [
    "ended s1 x token=1 force held=0",
    "granted s2 x token=3 lease=10000 waited=0",
    "ended s1 y token=2 force held=0",
    "closed s1 admin x",
  ]);
  h.engine.assertInvariants();
  assert.equal(h.engine.stats.releasesTotal.force, 2);
  assert.equal(h.engine.forceRelease(h.now(), { name: "nope" }).status, "not_found");
});

Deno.test("force-release of a queue without an owner is refused", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: b.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.engine.blockGrants("audit_unavailable");
  h.step(() =>
    h.engine.release(h.now(), { sessionId: a.sessionId, requestId: 2, name: "x", token: 1 })
  );
  assert.equal(h.engine.view.getLock("x")?.holder, null);
  assert.equal(h.engine.forceRelease(h.now(), { name: "x" }).status, "no_owner");
});

Deno.test("kicking a waiter by remote address keeps the order of the rest", () => {
  const h = harness();
  const owner = h.open("127.0.0.1:1000");
  const w = ["127.0.0.1:1001", "[::1]:1002", "127.0.0.1:1003"].map((addr) => h.open(addr));
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: owner.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  for (const p of w) {
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: p.sessionId,
        requestId: 1,
        name: "x",
        leaseMs: 0,
        waitMs: null,
      })
    );
  }
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: w[1].sessionId,
      requestId: 2,
      name: "mine",
      leaseMs: 0,
      waitMs: null,
    })
  );
  const result = h.engine.kickWaiter(h.now(), "x", "[::1]:1002");
  assert.equal(result.status, "ok");
  assert.deepEqual(result.events.map(describe), [
    "wait_ended s3 x kicked",
    "ended s3 mine token=2 force held=0",
    "closed s3 admin x",
  ]);
  h.engine.assertInvariants();
  assert.deepEqual(h.engine.view.getLock("x")?.waiters.map((v) => v.remoteAddr), [
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

Deno.test("limits: sessions, claims per session and waiters per lock", () => {
  const h = harness({ sessionsMax: 4, claimsPerSessionMax: 2, waitersPerLockMax: 2 });
  const peers = [h.open(), h.open(), h.open(), h.open()];
  assert.equal(h.engine.openSession(h.now(), "", "127.0.0.1:1"), null, "fifth session refused");
  const a = peers[0];
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 2,
      name: "y",
      leaseMs: 0,
      waitMs: null,
    })
  );
  assert.deepEqual(
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: a.sessionId,
        requestId: 3,
        name: "z",
        leaseMs: 0,
        waitMs: null,
      })
    ),
    [
      "rejected s1 z limit_exceeded",
    ],
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: peers[1].sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: peers[2].sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  assert.deepEqual(
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: peers[3].sessionId,
        requestId: 1,
        name: "x",
        leaseMs: 0,
        waitMs: null,
      })
    ),
    [
      "rejected s4 x limit_exceeded",
    ],
  );
  assert.equal(h.engine.view.lockCount, 2, "nothing was stored for z");
});

Deno.test("paused grants refuse ACQUIRE and hold handoffs until resumed", () => {
  const h = harness();
  const [a, b, c] = [h.open(), h.open(), h.open()];
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: b.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.engine.blockGrants("audit_unavailable");
  assert.deepEqual(
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: c.sessionId,
        requestId: 1,
        name: "y",
        leaseMs: 0,
        waitMs: null,
      })
    ),
    [
      "rejected s3 y grants_blocked:audit_unavailable",
    ],
  );
  assert.deepEqual(
    h.step(() =>
      h.engine.release(h.now(), { sessionId: a.sessionId, requestId: 2, name: "x", token: 1 })
    ),
    [
      "ended s1 x token=1 graceful held=0",
    ],
  );
  assert.equal(h.engine.view.lockCount, 1, "a queue without an owner is still listed");
  assert.deepEqual(h.step(() => h.engine.unblockGrants(h.now(), "audit_unavailable")), [
    "granted s2 x token=2 lease=10000 waited=0",
  ]);
});

Deno.test("tokens are reserved in blocks before they are issued", () => {
  const h = harness();
  const a = h.open();
  for (let i = 0; i < 250; i++) {
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: a.sessionId,
        requestId: 1,
        name: "x",
        leaseMs: 0,
        waitMs: null,
      })
    );
    h.step(() =>
      h.engine.release(h.now(), { sessionId: a.sessionId, requestId: 2, name: "x", token: i + 1 })
    );
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
  assert.deepEqual(
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: a.sessionId,
        requestId: 1,
        name: "x",
        leaseMs: 0,
        waitMs: null,
      })
    ),
    [
      "rejected s1 x grants_blocked:token_store_unavailable",
    ],
  );
  assert.equal(h.engine.view.lockCount, 0);
  assert.equal(h.engine.grantBlock, "token_store_unavailable");
  assert.equal(h.engine.blockDetail("token_store_unavailable"), "disk full");
  assert.deepEqual(
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: b.sessionId,
        requestId: 1,
        name: "y",
        leaseMs: 0,
        waitMs: null,
      })
    ),
    [
      "rejected s2 y grants_blocked:token_store_unavailable",
    ],
    "refused with the true cause while blocked",
  );
  assert.deepEqual(h.step(() => h.engine.retryTokenStore(h.now())), [], "still failing");
  fail = false;
  assert.deepEqual(h.step(() => h.engine.retryTokenStore(h.now())), []);
  assert.equal(h.engine.grantBlock, null);
  assert.deepEqual(
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: a.sessionId,
        requestId: 2,
        name: "x",
        leaseMs: 0,
        waitMs: null,
      })
    ),
    [
      "granted s1 x token=1 lease=15000 waited=0",
    ],
  );
});

Deno.test("a token reservation failing during a hand-off leaves the queue ownerless until a retry grants it", () => {
  let fail = false;
  const h = harness({
    tokens: new TokenIssuer(0, 1, () => {
      if (fail) throw new Error("disk full");
    }),
  });
  const [a, b] = [h.open(), h.open()];
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: b.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  fail = true;
  assert.deepEqual(
    h.step(() =>
      h.engine.release(h.now(), { sessionId: a.sessionId, requestId: 2, name: "x", token: 1 })
    ),
    [
      "ended s1 x token=1 graceful held=0",
    ],
  );
  assert.equal(h.engine.view.holderOf("x"), null, "a queue without an owner");
  fail = false;
  h.clock.advance(300);
  assert.deepEqual(h.step(() => h.engine.retryTokenStore(h.now())), [
    "granted s2 x token=2 lease=10000 waited=300",
  ]);
});

Deno.test("gauges and summaries follow every event exactly", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.clock.advance(2_000);
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: b.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  assert.deepEqual([h.engine.stats.locksHeld, h.engine.stats.waiters], [1, 1]);
  h.clock.advance(3_000);
  h.step(() =>
    h.engine.release(h.now(), { sessionId: a.sessionId, requestId: 2, name: "x", token: 1 })
  );
  const s = h.engine.stats;
  assert.deepEqual([s.locksHeld, s.waiters, s.acquiresTotal], [1, 0, 2]);
  assert.equal(s.holdSecondsSum, 5);
  assert.equal(s.holdSecondsCount, 1);
  assert.equal(s.waitSecondsSum, 3);
  assert.equal(s.waitSecondsCount, 2);
});

Deno.test("a hand-off is a grant to a claim that waited; the grant of a free lock is not one", () => {
  const h = harness();
  const [a, b, c] = [h.open(), h.open(), h.open()];
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: b.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: c.sessionId,
      requestId: 1,
      name: "y",
      leaseMs: 0,
      waitMs: null,
    })
  );
  assert.deepEqual([h.engine.stats.acquiresTotal, h.engine.stats.handoffsTotal], [2, 0]);
  h.step(() =>
    h.engine.release(h.now(), { sessionId: a.sessionId, requestId: 2, name: "x", token: 1 })
  );
  assert.deepEqual([h.engine.stats.acquiresTotal, h.engine.stats.handoffsTotal], [3, 1]);
  h.step(() => h.engine.forceRelease(h.now(), { name: "x" }).events);
  assert.deepEqual([h.engine.stats.acquiresTotal, h.engine.stats.handoffsTotal], [3, 1]);
});
