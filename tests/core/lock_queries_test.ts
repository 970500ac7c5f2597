import assert from "node:assert/strict";
import { harness } from "./engine_harness.ts";

Deno.test("listLocks is sorted by name and filters by prefix and predicate", () => {
  const h = harness();
  const a = h.open();
  for (const name of ["b/2", "a", "b/1", "c"]) {
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: a.sessionId,
        requestId: 1,
        name,
        leaseMs: 0,
        waitMs: null,
      })
    );
  }
  assert.deepEqual(h.engine.view.listLocks().map((l) => l.name), ["a", "b/1", "b/2", "c"]);
  assert.deepEqual(h.engine.view.listLocks({ prefix: "b/" }).map((l) => l.name), ["b/1", "b/2"]);
  assert.deepEqual(
    h.engine.view.listLocks({ prefix: "b/", matches: (n) => n.endsWith("2") }).map((l) => l.name),
    ["b/2"],
  );
});

Deno.test("holderOf, queueLengthOf and findWaiter read the owner, the queue length and one waiter of a lock", () => {
  const h = harness();
  const owner = h.open("127.0.0.1:2000");
  const waiter = h.open("[::1]:2001");
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: owner.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: waiter.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  assert.equal(h.engine.view.holderOf("x")?.remoteAddr, "127.0.0.1:2000");
  assert.equal(h.engine.view.holderOf("idle"), undefined);
  assert.equal(h.engine.view.queueLengthOf("x"), 1);
  assert.equal(h.engine.view.findWaiter("x", "[::1]:2001")?.sessionId, waiter.sessionId);
  assert.equal(
    h.engine.view.findWaiter("x", "127.0.0.1:2000"),
    undefined,
    "the owner is no waiter",
  );
  assert.equal(h.engine.view.findWaiter("y", "[::1]:2001"), undefined);
  h.engine.blockGrants("audit_unavailable");
  h.step(() =>
    h.engine.release(h.now(), { sessionId: owner.sessionId, requestId: 2, name: "x", token: 1 })
  );
  assert.equal(h.engine.view.holderOf("x"), null, "a queue without an owner");
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
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  assert.ok(changed(), "granted");
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: b.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 5_000,
      waitMs: null,
    })
  );
  assert.ok(changed(), "queued");
  h.engine.heartbeat(h.now().monoMs, a.sessionId);
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: b.sessionId,
      requestId: 2,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  ); // duplicate: rejected
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
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: peers[0].sessionId,
      requestId: 1,
      name: "b",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.clock.advance(10);
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: peers[1].sessionId,
      requestId: 1,
      name: "a",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.clock.advance(10);
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: peers[2].sessionId,
      requestId: 1,
      name: "c",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: peers[3].sessionId,
      requestId: 1,
      name: "a",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: peers[4].sessionId,
      requestId: 1,
      name: "a",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: peers[5].sessionId,
      requestId: 1,
      name: "c",
      leaseMs: 0,
      waitMs: null,
    })
  );
  const page = (
    sort: "name" | "held_for" | "waiters",
    descending: boolean,
    offset = 0,
    limit = 10,
    prefix?: string,
  ) => {
    const result = h.engine.view.pageLocks({ sort, descending, offset, limit, prefix });
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
  const [view] =
    h.engine.view.pageLocks({ sort: "name", descending: false, offset: 0, limit: 1 }).locks;
  assert.deepEqual(view, h.engine.view.getLock("a"), "a page holds the same views as getLock");
});
