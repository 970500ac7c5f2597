/**
 * Cluster mode milestone 2, the engine's part (design §3.3): order keys, restored ownerships
 * and waiters, reservations, and claims moved to a resumed session.
 */

import assert from "node:assert/strict";
import type { TokenSource } from "../../src/core/tokens.ts";
import type {
  EngineEvent,
  Peer,
  RestoreOutcome,
  RestoreOwnershipOptions,
  RestoreWaiterOptions,
} from "../../src/core/types.ts";
import { bytes, describe, type Harness, harness, text } from "./engine_harness.ts";

function restore(
  h: Harness,
  peer: Peer,
  name: string,
  token: number,
  options: Partial<RestoreOwnershipOptions> = {},
): string[] | RestoreOutcome {
  const outcome = h.engine.restoreOwnership(h.now(), {
    sessionId: peer.sessionId,
    requestId: 7,
    name,
    token,
    leaseMs: 0,
    ...options,
  });
  h.engine.assertInvariants();
  return outcome.status === "restored" ? outcome.events.map(describe) : outcome;
}

function restoreWaiter(
  h: Harness,
  peer: Peer,
  name: string,
  term: number,
  seq: number,
  options: Partial<RestoreWaiterOptions> = {},
): string[] {
  return h.step(() =>
    h.engine.restoreWaiter(h.now(), {
      sessionId: peer.sessionId,
      requestId: 8,
      name,
      leaseMs: 0,
      waitMs: null,
      order: { term, seq },
      ...options,
    })
  );
}

const problemOf = (outcome: string[] | RestoreOutcome) =>
  Array.isArray(outcome)
    ? outcome
    : outcome.status === "void"
    ? `void: ${outcome.problem}`
    : `refused: ${outcome.status === "refused" ? outcome.rejection.reason : ""}`;

Deno.test("new claims take the order key [current order term, next sequence]; terms only grow", () => {
  const h = harness();
  const [a, b, c] = [h.open(), h.open(), h.open()];
  h.acquire(a, "x");
  const queued = (events: EngineEvent[]) =>
    events.map((e) => e.type === "queued" ? `${e.orderTerm}:${e.orderSeq}` : e.type);
  assert.deepEqual(
    queued(h.engine.acquire(h.now(), {
      sessionId: b.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })),
    ["0:2"],
  );
  h.engine.setOrderTerm(7);
  assert.equal(h.engine.orderTerm, 7);
  assert.deepEqual(
    queued(h.engine.acquire(h.now(), {
      sessionId: c.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })),
    ["7:3"],
  );
  assert.deepEqual(
    h.engine.view.getLock("x")?.waiters.map((w) => `${w.orderTerm}:${w.orderSeq}`),
    ["0:2", "7:3"],
  );
  assert.throws(() => h.engine.setOrderTerm(6), RangeError);
  h.engine.assertInvariants();
});

Deno.test("restoreOwnership reinstates an owner with its token, mode, value and a fresh lease; not a new grant", () => {
  const h = harness({ tokens: issuerAt(1_000) });
  const [a, b] = [h.open(), h.open()];
  h.clock.advance(40);
  assert.deepEqual(restore(h, a, "leader", 900, { value: bytes("10.0.0.1"), leaseMs: 2_000 }), [
    "granted s1 leader token=900 lease=2000 waited=0 value=10.0.0.1 restored",
  ]);
  const holder = h.engine.view.holderOf("leader")!;
  assert.deepEqual([holder.token, holder.sinceMs, text(holder.value)], [900, 1_040, "10.0.0.1"]);
  assert.deepEqual([h.engine.stats.acquiresTotal, h.engine.stats.reclaimsTotal], [0, 1]);
  assert.deepEqual(h.acquire(b, "leader"), ["queued s2 leader pos=1"]);
  assert.deepEqual(h.release(a, "leader", 900), [
    "ended s1 leader token=900 graceful held=0",
    "granted s2 leader token=1001 lease=10000 waited=0",
  ], "the next grant is a new token above every one issued");
  assert.deepEqual(h.advance(1_999), []);
});

Deno.test("a restored token above the source's last issued one is observed: new grants go above it", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  assert.deepEqual(restore(h, a, "r", 5_000), [
    "granted s1 r token=5000 lease=10000 waited=0 restored",
  ]);
  assert.deepEqual(h.acquire(b, "other"), ["granted s2 other token=5001 lease=10000 waited=0"]);
  assert.deepEqual(h.reservations, [5_100], "a block above the observed token was reserved first");
  const blind: TokenSource = { lastIssued: 10, prepare() {}, next: () => 11 };
  const h2 = harness({ tokens: blind });
  assert.equal(
    problemOf(restore(h2, h2.open(), "r", 11)),
    'void: Cannot restore lock "r": token 11 is above every token issued here',
    "a source that cannot be told refuses it",
  );
  assert.deepEqual(restore(h2, h2.open(), "r", 10), [
    "granted s2 r token=10 lease=10000 waited=0 restored",
  ]);
});

Deno.test("a restore is void beside an owner it cannot share with, in a taken slot, or against the lock's kind", () => {
  const cases: {
    setup: (h: Harness, p: Peer) => void;
    restore: Partial<RestoreOwnershipOptions>;
    outcome: string;
  }[] = [
    {
      setup: (h, p) => h.acquire(p, "k"),
      restore: {},
      outcome: 'void: Cannot restore lock "k": its owners cannot share it with this claim',
    },
    {
      setup: (h, p) => h.acquire(p, "k"),
      restore: { mode: "shared" },
      outcome: 'void: Cannot restore lock "k": its owners cannot share it with this claim',
    },
    {
      setup: (h, p) => h.acquire(p, "k", { mode: "shared" }),
      restore: {},
      outcome: 'void: Cannot restore lock "k": its owners cannot share it with this claim',
    },
    {
      setup: (h, p) => h.acquire(p, "k", { mode: "shared" }),
      restore: { mode: "shared", writeGeneration: 3 },
      outcome: "granted s2 k token=50 lease=10000 waited=0 shared gen=3 restored",
    },
    {
      setup: (h, p) => h.acquire(p, "k", { limit: 3 }),
      restore: { slot: 0 },
      outcome: 'void: Cannot restore lock "k": slot 0 is taken',
    },
    {
      setup: (h, p) => h.acquire(p, "k", { limit: 3 }),
      restore: { slot: 3 },
      outcome: 'void: Cannot restore lock "k": slot 3 is not below its limit 3',
    },
    {
      setup: (h, p) => h.acquire(p, "k", { limit: 3 }),
      restore: { slot: 2, limit: 3 },
      outcome: "granted s2 k token=50 lease=10000 waited=0 sem3 slot=2 restored",
    },
    {
      setup: (h, p) => h.acquire(p, "k", { limit: 3 }),
      restore: { slot: 2, limit: 4 },
      outcome:
        'void: Cannot acquire lock "k": it is a semaphore with limit 3; this claim asks for limit 4',
    },
    {
      setup: (h, p) => h.acquire(p, "k", { mode: "shared" }),
      restore: { slot: 1, mode: "shared" },
      outcome: 'void: Cannot restore lock "k": slot 1 on a lock without slots',
    },
    {
      setup: () => {},
      restore: { slot: 1 },
      outcome: 'void: Cannot restore lock "k": slot 1 on a lock without slots',
    },
    {
      setup: () => {},
      restore: { limit: 3, slot: 3 },
      outcome: 'void: Cannot restore lock "k": slot 3 is not below its limit 3',
    },
    {
      setup: () => {},
      restore: { token: 0 },
      outcome: "refused: invalid_argument",
    },
    {
      setup: () => {},
      restore: { mode: "shared", writeGeneration: 51 },
      outcome: "refused: invalid_argument",
    },
    {
      // A downgraded owner: its generation is its own token.
      setup: () => {},
      restore: { mode: "shared", writeGeneration: 50 },
      outcome: "granted s2 k token=50 lease=10000 waited=0 shared gen=50 restored",
    },
    {
      setup: (h) => h.engine.blockGrants("audit_unavailable"),
      restore: {},
      outcome: "refused: grants_blocked",
    },
  ];
  for (const [i, c] of cases.entries()) {
    const h = harness({ tokens: issuerAt(100) });
    const [a, b] = [h.open(), h.open()];
    c.setup(h, a);
    const got = problemOf(restore(h, b, "k", c.restore.token ?? 50, c.restore));
    assert.deepEqual(got, Array.isArray(got) ? [c.outcome] : c.outcome, `case ${i}`);
  }
});

Deno.test("restoreWaiter puts a reclaimed waiter back at its order key, ahead of newer claims", () => {
  const h = harness();
  const [owner, n1, n2, r1, r2, r3] = Array.from({ length: 6 }, () => h.open());
  h.engine.setOrderTerm(5);
  h.acquire(owner, "q");
  h.acquire(n1, "q");
  h.acquire(n2, "q");
  assert.deepEqual(restoreWaiter(h, r1, "q", 4, 20), ["queued s4 q pos=1 restored order=4:20"]);
  assert.deepEqual(restoreWaiter(h, r2, "q", 4, 9), ["queued s5 q pos=1 restored order=4:9"]);
  assert.deepEqual(restoreWaiter(h, r3, "q", 5, 10, { mode: "exclusive" }), [
    "queued s6 q pos=5 restored order=5:10",
  ]);
  assert.deepEqual(
    h.engine.view.getLock("q")?.waiters.map((w) => `s${w.sessionId}@${w.orderTerm}:${w.orderSeq}`),
    ["s5@4:9", "s4@4:20", "s2@5:2", "s3@5:3", "s6@5:10"],
  );
  const late = h.open();
  assert.deepEqual(
    h.engine.acquire(h.now(), {
      sessionId: late.sessionId,
      requestId: 1,
      name: "q",
      leaseMs: 0,
      waitMs: null,
    }).map((e) => e.type === "queued" ? `${e.orderTerm}:${e.orderSeq}` : e.type),
    ["5:11"],
    "a new claim comes after a restored one of the same term",
  );
  h.engine.assertInvariants();
  assert.deepEqual(h.release(owner, "q", 1), [
    "ended s1 q token=1 graceful held=0",
    "granted s5 q token=2 lease=10000 waited=0",
  ], "the oldest order key goes first");
});

Deno.test("restoreWaiter refuses a key from a later term or one queued already, and grants at the head of a free lock", () => {
  const h = harness();
  const [a, b, c] = [h.open(), h.open(), h.open()];
  h.engine.setOrderTerm(3);
  assert.deepEqual(restoreWaiter(h, a, "q", 4, 1), ["rejected s1 q invalid_argument"]);
  assert.deepEqual(restoreWaiter(h, a, "q", 2, 0), ["rejected s1 q invalid_argument"]);
  assert.deepEqual(restoreWaiter(h, a, "q", 2, 5), [
    "granted s1 q token=1 lease=10000 waited=0",
  ]);
  assert.deepEqual(restoreWaiter(h, b, "q", 2, 6), ["queued s2 q pos=1 restored order=2:6"]);
  assert.deepEqual(restoreWaiter(h, c, "q", 2, 6), ["rejected s3 q invalid_argument"]);
  assert.deepEqual(restoreWaiter(h, c, "q", 2, 7, { waitMs: 0 }), ["wait_ended s3 q timeout"]);
});

Deno.test("a reserved lock grants nothing but restores until its owner is restored; new claims wait behind", () => {
  const h = harness({ tokens: issuerAt(100) });
  const [old, fresh, waiter] = [h.open(), h.open(), h.open()];
  h.engine.reserve({ name: "r", untilMs: 5_000 });
  assert.equal(h.engine.view.getLock("r")?.reservedUntilMs, 5_000, "an idle reserved lock is kept");
  assert.deepEqual(h.acquire(fresh, "r"), ["queued s2 r pos=1"]);
  assert.deepEqual(h.acquire(waiter, "free"), ["granted s3 free token=101 lease=10000 waited=0"]);
  assert.deepEqual(restore(h, old, "r", 90), [
    "granted s1 r token=90 lease=10000 waited=0 restored",
  ]);
  assert.equal(h.engine.view.getLock("r")?.reservedUntilMs, 0, "restoring the owner ended it");
  assert.deepEqual(h.release(old, "r", 90), [
    "ended s1 r token=90 graceful held=0",
    "granted s2 r token=102 lease=10000 waited=0",
  ]);
});

Deno.test("a reservation ends at its deadline, or lifted, or after as many restores as it awaits", () => {
  const h = harness({ tokens: issuerAt(100) });
  const [a, b, c, d] = [h.open(), h.open(), h.open(), h.open()];
  h.engine.reserve({ name: "timed", untilMs: 2_000 });
  h.engine.reserve({ name: "lifted", untilMs: 9_000 });
  h.engine.reserve({ name: "sem", untilMs: 9_000, claims: 2 });
  h.engine.reserve({ name: "idle", untilMs: 1_500 });
  h.acquire(a, "timed");
  h.acquire(b, "lifted");
  assert.deepEqual(restore(h, c, "sem", 10, { limit: 3, slot: 1 }), [
    "granted s3 sem token=10 lease=10000 waited=0 sem3 slot=1 restored",
  ]);
  assert.deepEqual(h.acquire(a, "sem"), ["queued s1 sem pos=1"], "one restore still awaited");
  assert.deepEqual(restore(h, d, "sem", 20, { slot: 0 }), [
    "granted s4 sem token=20 lease=10000 waited=0 sem3 slot=0 restored",
    "granted s1 sem token=101 lease=10000 waited=0 sem3 slot=2",
  ], "the last awaited restore ends the reservation: the head takes the free slot");
  assert.deepEqual(h.step(() => h.engine.liftReservation(h.now(), "lifted")), [
    "granted s2 lifted token=102 lease=10000 waited=0",
  ]);
  for (const p of [a, b, c, d]) h.engine.touch(h.clock.monotonicMs() + 1_000, p.sessionId);
  assert.deepEqual(h.advance(500), [], "the idle reservation ended: forgotten");
  assert.equal(h.engine.view.getLock("idle"), undefined);
  assert.deepEqual(h.advance(500), ["granted s1 timed token=103 lease=10000 waited=1000"]);
  assert.deepEqual(h.step(() => h.engine.liftReservation(h.now(), "nothing")), []);
});

Deno.test("a reservation without a count ends with the restore that fills the lock: a semaphore's last slot; a shared lock's readers never end it", () => {
  const h = harness({ tokens: issuerAt(100) });
  const [a, b, c, w, r1, r2, x] = [
    h.open(),
    h.open(),
    h.open(),
    h.open(),
    h.open(),
    h.open(),
    h.open(),
  ];
  h.engine.reserve({ name: "sem", untilMs: 9_000 });
  h.engine.reserve({ name: "doc", untilMs: 9_000 });
  assert.deepEqual(restore(h, a, "sem", 10, { limit: 3, slot: 0 }), [
    "granted s1 sem token=10 lease=10000 waited=0 sem3 slot=0 restored",
  ]);
  assert.deepEqual(
    h.acquire(w, "sem", { limit: 3 }),
    ["queued s4 sem pos=1"],
    "two slots free, still reserved",
  );
  restore(h, b, "sem", 11, { limit: 3, slot: 2 });
  assert.equal(h.engine.view.getLock("sem")?.reservedUntilMs, 9_000);
  assert.deepEqual(restore(h, c, "sem", 12, { limit: 3, slot: 1 }), [
    "granted s3 sem token=12 lease=10000 waited=0 sem3 slot=1 restored",
  ], "the last slot ends the reservation; the lock is full, the waiter waits");
  assert.equal(h.engine.view.getLock("sem")?.reservedUntilMs, 0);
  restore(h, r1, "doc", 20, { mode: "shared" });
  restore(h, r2, "doc", 21, { mode: "shared" });
  assert.deepEqual(h.acquire(x, "doc"), ["queued s7 doc pos=1"]);
  assert.equal(h.engine.view.getLock("doc")?.reservedUntilMs, 9_000, "readers never fill it");
  assert.deepEqual(h.release(r1, "doc", 20), ["ended s5 doc token=20 graceful held=0"]);
  assert.deepEqual(h.release(r2, "doc", 21), ["ended s6 doc token=21 graceful held=0"]);
  assert.deepEqual(
    h.step(() => h.engine.liftReservation(h.now(), "doc")),
    ["granted s7 doc token=101 lease=10000 waited=0"],
  );
});

Deno.test("moveClaims hands every claim of a session to another with its token, slot, value and place", () => {
  const h = harness();
  const [old, other, resumed] = [h.open(), h.open(), h.open()];
  h.acquire(old, "owned", { value: bytes("v"), leaseMs: 1_000 });
  h.acquire(other, "queued");
  h.acquire(old, "queued");
  h.acquire(other, "late");
  h.clock.advance(900);
  for (const p of [old, other, resumed]) h.engine.touch(h.clock.monotonicMs(), p.sessionId);
  const outcome = h.engine.moveClaims(h.now(), {
    fromSessionId: old.sessionId,
    toSessionId: resumed.sessionId,
    requestIds: new Map([["owned", 41]]),
  });
  assert.equal(outcome.status, "moved");
  assert.deepEqual(outcome.status === "moved" && outcome.events.map(describe), [
    "moved s1->s3 owned owned token=1 req=41",
    "moved s1->s3 queued queued token=0 req=1",
  ]);
  h.engine.assertInvariants();
  const owned = h.engine.view.holderOf("owned")!;
  assert.deepEqual([owned.sessionId, owned.token, owned.requestId, text(owned.value)], [
    3,
    1,
    41,
    "v",
  ]);
  assert.deepEqual(h.engine.view.getLock("queued")?.waiters.map((w) => w.sessionId), [3]);
  assert.deepEqual(h.advance(999), [], "the lease was renewed by the move");
  assert.deepEqual(h.step(() => h.engine.closeSession(h.now(), old.sessionId, "io_error")), [
    "closed s1 io_error",
  ], "the old session owns nothing any more");
  const refused = h.engine.moveClaims(h.now(), {
    fromSessionId: other.sessionId,
    toSessionId: resumed.sessionId,
  });
  assert.deepEqual(refused, {
    status: "refused",
    problem:
      'Cannot move the claims of session 2 to session 3: it has a claim on lock "queued" already',
  });
  assert.deepEqual(h.release(other, "queued", 2), [
    "ended s2 queued token=2 graceful held=1899",
    "granted s3 queued token=4 lease=10000 waited=1899",
  ]);
});

/** A token issuer whose last token is `last` (reservations are not recorded). */
function issuerAt(last: number): TokenSource {
  let issued = last;
  return {
    get lastIssued() {
      return issued;
    },
    prepare() {},
    next: () => ++issued,
    observe(token: number) {
      if (token > issued) issued = token;
    },
  };
}
