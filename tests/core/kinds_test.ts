/**
 * Lock kinds in the engine (issue 22): semaphores, shared (read/write) locks, their admission
 * rules, downgrade, server rules, and what grants carry. The harness checks every invariant
 * after each step.
 */

import assert from "node:assert/strict";
import type { EngineEvent, KindRule } from "../../src/core/types.ts";
import { describe, harness } from "./engine_harness.ts";

const SEMAPHORE_8: KindRule = { kind: "semaphore", limit: 8, lockDelayMs: 0 };

Deno.test("a semaphore of 3 grants three owners at once, each with its own token and the lowest free slot; the fourth waits", () => {
  const h = harness();
  const [a, b, c, d] = [h.open(), h.open(), h.open(), h.open()];
  assert.deepEqual(h.acquire(a, "render", { limit: 3 }), [
    "granted s1 render token=1 lease=10000 waited=0 sem3 slot=0",
  ]);
  assert.deepEqual(h.acquire(b, "render", { limit: 3 }), [
    "granted s2 render token=2 lease=10000 waited=0 sem3 slot=1",
  ]);
  assert.deepEqual(h.acquire(c, "render"), [
    "granted s3 render token=3 lease=10000 waited=0 sem3 slot=2",
  ], "limit 0 has no opinion: it joins the semaphore");
  assert.deepEqual(h.acquire(d, "render", { limit: 3 }), ["queued s4 render pos=1"]);
  assert.deepEqual(h.acquire(h.open(), "render", { limit: 3, waitMs: 0 }), [
    "wait_ended s5 render timeout",
  ], "a try-lock on a full semaphore fails at once");
  h.clock.advance(7);
  assert.deepEqual(h.release(b, "render", 2), [
    "ended s2 render token=2 graceful held=7",
    "granted s4 render token=4 lease=10000 waited=7 sem3 slot=1",
  ], "the head takes the freed slot with a larger token");
  const view = h.engine.view.getLock("render")!;
  assert.deepEqual([view.kind, view.limit], ["semaphore", 3]);
  assert.deepEqual(view.holders.map((o) => `${o.sessionId}:${o.slot}:${o.token}`), [
    "1:0:1",
    "3:2:3",
    "4:1:4",
  ], "holders oldest (lowest token) first");
  assert.equal(view.holder?.sessionId, 1, "holder is the oldest owner");
  assert.deepEqual(
    [h.engine.stats.locksHeld, h.engine.stats.owners.semaphore, h.engine.stats.owners.exclusive],
    [1, 3, 0],
  );
});

Deno.test("a semaphore grants the lowest free slot, whichever was freed last", () => {
  const h = harness();
  const owners = [h.open(), h.open(), h.open()];
  for (const p of owners) h.acquire(p, "s", { limit: 3 });
  const [w1, w2] = [h.open(), h.open()];
  h.acquire(w1, "s");
  h.acquire(w2, "s");
  h.engine.blockGrants("audit_unavailable");
  h.release(owners[2], "s", 3);
  h.release(owners[0], "s", 1);
  assert.deepEqual(h.step(() => h.engine.unblockGrants(h.now(), "audit_unavailable")), [
    "granted s4 s token=4 lease=10000 waited=0 sem3 slot=0",
    "granted s5 s token=5 lease=10000 waited=0 sem3 slot=2",
  ], "both freed slots are granted in one pass, lowest first, FIFO");
});

Deno.test("a claim that disagrees with a lock's kind or limit is refused INVALID_ARGUMENT naming the lock's kind and limit", () => {
  const cases: {
    first: { mode?: "exclusive" | "shared"; limit?: number };
    second: { mode?: "exclusive" | "shared"; limit?: number };
    outcome: string;
  }[] = [
    {
      first: { limit: 4 },
      second: { limit: 2 },
      outcome:
        'Cannot acquire lock "k": it is a semaphore with limit 4; this claim asks for limit 2',
    },
    {
      first: { limit: 4 },
      second: { mode: "shared" },
      outcome:
        'Cannot acquire lock "k": it is a semaphore with limit 4, which takes no shared claims',
    },
    {
      first: { limit: 4 },
      second: { mode: "shared", limit: 4 },
      outcome:
        'Cannot acquire lock "k": it is a semaphore with limit 4, which takes no shared claims',
    },
    {
      first: {},
      second: { limit: 3 },
      outcome:
        'Cannot acquire lock "k": it is an exclusive lock (limit 1); this claim asks for limit 3',
    },
    {
      first: { mode: "shared" },
      second: { limit: 3 },
      outcome:
        'Cannot acquire lock "k": it is a shared lock (limit 1); this claim asks for limit 3',
    },
    { first: { limit: 4 }, second: {}, outcome: "granted" },
    { first: { limit: 4 }, second: { limit: 4 }, outcome: "granted" },
    { first: {}, second: { limit: 1 }, outcome: "queued" },
    { first: {}, second: { mode: "shared" }, outcome: "queued" },
    { first: { mode: "shared" }, second: { mode: "shared", limit: 1 }, outcome: "granted" },
    { first: { mode: "shared" }, second: {}, outcome: "queued" },
  ];
  for (const { first, second, outcome } of cases) {
    const h = harness();
    const [a, b] = [h.open(), h.open()];
    assert.match(h.acquire(a, "k", first)[0], /^granted /);
    const events = h.engine.acquire(h.now(), {
      sessionId: b.sessionId,
      requestId: 1,
      name: "k",
      leaseMs: 0,
      waitMs: null,
      ...second,
    });
    h.engine.assertInvariants();
    const [event] = events;
    const got = event.type === "rejected" && event.rejection.reason === "invalid_argument"
      ? event.rejection.problem
      : event.type;
    assert.equal(got, outcome, `${JSON.stringify(first)} then ${JSON.stringify(second)}`);
  }
});

Deno.test("limits outside 0..65536 or not whole, and a shared first claim asking for a semaphore, are refused and store nothing", () => {
  const h = harness();
  const a = h.open();
  const problem = (options: { mode?: "shared"; limit: number }) => {
    const [event] = h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name: "k",
      leaseMs: 0,
      waitMs: null,
      ...options,
    });
    return event.type === "rejected" && event.rejection.reason === "invalid_argument"
      ? event.rejection.problem
      : event.type;
  };
  const notWhole = (limit: number) =>
    `Cannot acquire lock "k": limit ${limit} is not a whole number from 0 to 65536`;
  assert.equal(problem({ limit: 65_537 }), notWhole(65_537));
  assert.equal(problem({ limit: -1 }), notWhole(-1));
  assert.equal(problem({ limit: 2.5 }), notWhole(2.5));
  assert.equal(problem({ limit: NaN }), notWhole(NaN));
  assert.equal(
    problem({ mode: "shared", limit: 3 }),
    'Cannot acquire lock "k": a shared claim cannot ask for limit 3 (a semaphore takes no shared claims)',
  );
  assert.equal(h.engine.view.lockCount, 0);
  assert.equal(problem({ limit: 65_536 }), "granted", "the largest semaphore");
});

Deno.test("a lock's kind holds while it has owners or waiters; the next first claim decides again", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  h.acquire(a, "k", { limit: 2 });
  h.acquire(b, "k");
  h.release(a, "k", 1);
  assert.equal(h.engine.view.getLock("k")?.kind, "semaphore", "b still holds it");
  h.release(b, "k", 2);
  assert.equal(h.engine.view.getLock("k"), undefined, "idle: forgotten");
  assert.deepEqual(h.acquire(a, "k", { mode: "shared" }), [
    "granted s1 k token=3 lease=10000 waited=0 shared gen=0",
  ]);
  assert.deepEqual([h.engine.view.getLock("k")?.kind, h.engine.view.getLock("k")?.limit], [
    "shared",
    1,
  ]);
});

Deno.test("consecutive shared claims at the head are granted together; an exclusive claim waits for every reader", () => {
  const h = harness();
  const [w, r1, r2, r3, w2] = [h.open(), h.open(), h.open(), h.open(), h.open()];
  h.acquire(w, "doc");
  assert.deepEqual(h.acquire(r1, "doc", { mode: "shared" }), ["queued s2 doc pos=1 shared"]);
  assert.equal(h.engine.view.getLock("doc")?.kind, "shared", "the first shared claim made it one");
  assert.equal(h.engine.stats.owners.shared, 1, "its owner counts as a shared lock's");
  h.acquire(r2, "doc", { mode: "shared" });
  h.acquire(r3, "doc", { mode: "shared" });
  h.acquire(w2, "doc");
  assert.deepEqual(h.release(w, "doc", 1), [
    "ended s1 doc token=1 graceful held=0",
    "granted s2 doc token=2 lease=10000 waited=0 shared gen=1",
    "granted s3 doc token=3 lease=10000 waited=0 shared gen=1",
    "granted s4 doc token=4 lease=10000 waited=0 shared gen=1",
  ]);
  assert.deepEqual(h.release(r1, "doc", 2), ["ended s2 doc token=2 graceful held=0"]);
  assert.deepEqual(h.release(r3, "doc", 4), ["ended s4 doc token=4 graceful held=0"]);
  assert.deepEqual(h.release(r2, "doc", 3), [
    "ended s3 doc token=3 graceful held=0",
    "granted s5 doc token=5 lease=10000 waited=0",
  ], "the writer once the last reader left");
  assert.deepEqual(h.acquire(r1, "doc", { mode: "shared" }), ["queued s2 doc pos=1 shared"]);
  assert.deepEqual(h.release(w2, "doc", 5), [
    "ended s5 doc token=5 graceful held=0",
    "granted s2 doc token=6 lease=10000 waited=0 shared gen=5",
  ], "the write generation is the last writer's token");
});

Deno.test("a queued exclusive claim stops later shared claims (no writer starvation), and its leaving lets them join the readers", () => {
  const h = harness();
  const [r1, w, r2, r3] = [h.open(), h.open(), h.open(), h.open()];
  h.acquire(r1, "doc", { mode: "shared" });
  assert.deepEqual(h.acquire(w, "doc", { waitMs: 500 }), ["queued s2 doc pos=1"]);
  assert.deepEqual(h.acquire(r2, "doc", { mode: "shared" }), ["queued s3 doc pos=2 shared"]);
  assert.deepEqual(h.acquire(r3, "doc", { mode: "shared", waitMs: 0 }), [
    "wait_ended s4 doc timeout",
  ], "a shared try-lock behind a writer fails");
  h.engine.touch(h.clock.monotonicMs(), r1.sessionId);
  assert.deepEqual(h.advance(500), [
    "wait_ended s2 doc timeout",
    "granted s3 doc token=2 lease=10000 waited=500 shared gen=0",
  ], "the writer's wait ran out: the reader behind it joins the current one");
});

Deno.test("the write generation is the token of the last exclusive grant while the lock is stored, 0 once it was idle", () => {
  const h = harness();
  const [w, r] = [h.open(), h.open()];
  h.acquire(w, "doc");
  h.acquire(r, "doc", { mode: "shared" });
  assert.deepEqual(h.release(w, "doc", 1), [
    "ended s1 doc token=1 graceful held=0",
    "granted s2 doc token=2 lease=10000 waited=0 shared gen=1",
  ]);
  assert.equal(h.engine.view.getLock("doc")?.writeGeneration, 1);
  assert.equal(h.engine.view.getLock("doc")?.holder?.writeGeneration, 1);
  h.release(r, "doc", 2);
  assert.deepEqual(h.acquire(r, "doc", { mode: "shared" }), [
    "granted s2 doc token=3 lease=10000 waited=0 shared gen=0",
  ], "0: no writer known since the lock was idle (a reader must treat 0 as unknown)");
});

Deno.test("downgrade: an exclusive owner becomes shared in place with its token, and the readers at the head join it", () => {
  const h = harness();
  const [w, r1, r2, w2, r3] = [h.open(), h.open(), h.open(), h.open(), h.open()];
  h.acquire(w, "doc");
  h.acquire(r1, "doc", { mode: "shared" });
  h.acquire(r2, "doc", { mode: "shared" });
  h.acquire(w2, "doc");
  h.acquire(r3, "doc", { mode: "shared" });
  const setMode = (token: number, mode: "shared" | "exclusive", peer = w) =>
    h.step(() =>
      h.engine.setMode(h.now(), {
        sessionId: peer.sessionId,
        requestId: 9,
        name: "doc",
        token,
        mode,
      })
    );
  assert.deepEqual(setMode(7, "shared"), ["rejected s1 doc not_owner"], "a stale token");
  assert.deepEqual(setMode(1, "exclusive"), ["mode s1 doc token=1 exclusive unchanged gen=0"]);
  assert.deepEqual(setMode(1, "shared"), [
    "mode s1 doc token=1 shared gen=1",
    "granted s2 doc token=2 lease=10000 waited=0 shared gen=1",
    "granted s3 doc token=3 lease=10000 waited=0 shared gen=1",
  ], "the writer behind them still waits, and so does the reader behind the writer");
  assert.deepEqual(
    h.engine.view.getLock("doc")?.holders.map((o) => `${o.token}:${o.mode}`),
    ["1:shared", "2:shared", "3:shared"],
  );
  assert.deepEqual(setMode(1, "shared"), ["mode s1 doc token=1 shared unchanged gen=1"]);
  const [upgrade] = h.engine.setMode(h.now(), {
    sessionId: w.sessionId,
    requestId: 9,
    name: "doc",
    token: 1,
    mode: "exclusive",
  });
  assert.deepEqual(upgrade.type === "rejected" && upgrade.rejection, {
    reason: "invalid_argument",
    problem:
      'Cannot upgrade lock "doc" to exclusive: upgrade deadlocks; release then acquire exclusive',
  });
  assert.deepEqual(setMode(0, "shared", r3), ["rejected s5 doc not_owner"], "a waiter");
});

Deno.test("downgrade is refused on a semaphore and on a lock a rule keeps exclusive", () => {
  const rule: KindRule = { kind: "exclusive", limit: 1, lockDelayMs: 0 };
  const h = harness({ kindRule: (name) => name.startsWith("fixed/") ? rule : null });
  const a = h.open();
  h.acquire(a, "sem", { limit: 2 });
  h.acquire(a, "fixed/x");
  const problem = (name: string, token: number) => {
    const [event] = h.engine.setMode(h.now(), {
      sessionId: a.sessionId,
      requestId: 3,
      name,
      token,
      mode: "shared",
    });
    return event.type === "rejected" && event.rejection.reason === "invalid_argument"
      ? event.rejection.problem
      : event.type;
  };
  assert.equal(
    problem("sem", 1),
    'Cannot downgrade lock "sem" to shared: it is a semaphore with limit 2, which takes no shared claims',
  );
  assert.equal(
    problem("fixed/x", 2),
    'Cannot downgrade lock "fixed/x" to shared: it is an exclusive lock (limit 1) by a server rule, which takes no shared claims',
  );
});

Deno.test("a server rule fixes kind and limit before the first claim", () => {
  const rules: Record<string, KindRule> = {
    "render": SEMAPHORE_8,
    "plain": { kind: "exclusive", limit: 1, lockDelayMs: 0 },
    "reports": { kind: "shared", limit: 1, lockDelayMs: 0 },
    "delayed": { kind: null, limit: 0, lockDelayMs: 1000 },
  };
  const h = harness({ kindRule: (name) => rules[name] ?? null });
  const a = h.open();
  const first = (name: string, options: { mode?: "shared"; limit?: number } = {}) => {
    const [event] = h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name,
      leaseMs: 0,
      waitMs: null,
      ...options,
    });
    h.engine.assertInvariants();
    if (event.type === "granted") return `${event.kind}/${event.limit}`;
    return event.type === "rejected" && event.rejection.reason === "invalid_argument"
      ? event.rejection.problem
      : event.type;
  };
  assert.equal(
    first("render", { limit: 1 }),
    'Cannot acquire lock "render": it is a semaphore with limit 8 by a server rule; this claim asks for limit 1',
  );
  assert.equal(first("render"), "semaphore/8", "limit 0: the rule's");
  assert.equal(
    first("plain", { mode: "shared" }),
    'Cannot acquire lock "plain": it is an exclusive lock (limit 1) by a server rule, which takes no shared claims',
  );
  assert.equal(first("plain"), "exclusive/1");
  assert.equal(first("reports"), "shared/1", "a shared rule makes a writer's lock shared");
  assert.equal(first("delayed", { limit: 3 }), "semaphore/3", "a rule without a kind");
});

Deno.test("every grant gets a token larger than every earlier one, whatever the kind", () => {
  const h = harness();
  const peers = Array.from({ length: 6 }, () => h.open());
  const tokens: number[] = [];
  const collect = (events: EngineEvent[]) => {
    for (const e of events) if (e.type === "granted") tokens.push(e.token);
    h.engine.assertInvariants();
  };
  for (const [i, p] of peers.entries()) {
    collect(h.engine.acquire(h.now(), {
      sessionId: p.sessionId,
      requestId: 1,
      name: ["sem", "doc", "x"][i % 3],
      leaseMs: 0,
      waitMs: null,
      limit: i % 3 === 0 ? 2 : 0,
      mode: i % 3 === 1 ? "shared" : "exclusive",
    }));
  }
  for (const p of peers) collect(h.engine.closeSession(h.now(), p.sessionId, "client_closed"));
  assert.deepEqual(tokens, [...tokens].sort((a, b) => a - b));
  assert.equal(new Set(tokens).size, tokens.length);
  assert.equal(tokens.length, 6);
});

Deno.test("force-release of a lock with several owners ends every owner without a token, or the one holding it", () => {
  const h = harness();
  const [a, b, c, w] = [h.open(), h.open(), h.open(), h.open()];
  for (const p of [a, b, c]) h.acquire(p, "sem", { limit: 3 });
  h.acquire(w, "sem");
  const one = h.engine.forceRelease(h.now(), { name: "sem", token: 2 });
  assert.equal(one.status, "ok");
  assert.deepEqual(one.events.map(describe), [
    "ended s2 sem token=2 force held=0",
    "granted s4 sem token=4 lease=10000 waited=0 sem3 slot=1",
    "closed s2 admin sem",
  ]);
  assert.equal(h.engine.forceRelease(h.now(), { name: "sem", token: 2 }).status, "not_holder");
  const all = h.engine.forceRelease(h.now(), { name: "sem" });
  assert.deepEqual(all.events.map(describe), [
    "ended s1 sem token=1 force held=0",
    "closed s1 admin sem",
    "ended s3 sem token=3 force held=0",
    "closed s3 admin sem",
    "ended s4 sem token=4 force held=0",
    "closed s4 admin sem",
  ]);
  h.engine.assertInvariants();
  assert.equal(h.engine.view.lockCount, 0);
});
