import assert from "node:assert/strict";
import type { EngineEvent, KindRule, Peer } from "../../src/core/types.ts";
import { bytes, EventModel, harness, seededRandom } from "./engine_harness.ts";

Deno.test("a free lock is granted at once with token 1 and the default lease", () => {
  const h = harness();
  const a = h.open();
  assert.deepEqual(
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: a.sessionId,
        requestId: 1,
        name: "jobs/nightly",
        leaseMs: 0,
        waitMs: null,
      })
    ),
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
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: peers[0].sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  for (let i = 1; i < 5; i++) {
    assert.deepEqual(
      h.step(() =>
        h.engine.acquire(h.now(), {
          sessionId: peers[i].sessionId,
          requestId: 1,
          name: "x",
          leaseMs: 0,
          waitMs: null,
        })
      ),
      [
        `queued s${peers[i].sessionId} x pos=${i}`,
      ],
    );
  }
  const order: string[] = [];
  let token = 1;
  for (let i = 0; i < 5; i++) {
    h.clock.advance(5);
    const events = h.step(() =>
      h.engine.release(h.now(), { sessionId: peers[i].sessionId, requestId: 2, name: "x", token })
    );
    assert.equal(events[0], `ended s${peers[i].sessionId} x token=${token} graceful held=5`);
    if (i < 4) {
      token++;
      assert.match(events[1], new RegExp(`^granted s${peers[i + 1].sessionId} x token=${token} `));
      order.push(events[1].split(" ")[1]);
    }
  }
  assert.deepEqual(order, ["s2", "s3", "s4", "s5"]);
  assert.equal(h.engine.view.lockCount, 0, "the idle lock is not stored");
});

Deno.test("a second ACQUIRE for the same name is a duplicate claim and changes nothing", () => {
  const h = harness();
  const a = h.open();
  const b = h.open();
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
      "rejected s1 x duplicate_claim",
    ],
  );
  assert.deepEqual(
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: b.sessionId,
        requestId: 2,
        name: "x",
        leaseMs: 0,
        waitMs: null,
      })
    ),
    [
      "rejected s2 x duplicate_claim",
    ],
  );
  assert.equal(h.engine.view.getLock("x")?.waiters.length, 1);
});

Deno.test("invalid lock names are rejected without storing anything", () => {
  const h = harness();
  const a = h.open();
  for (const name of ["", ".", "..", "a\u0000b", "tab\there", "x".repeat(1025), "é".repeat(513)]) {
    assert.deepEqual(
      h.step(() =>
        h.engine.acquire(h.now(), {
          sessionId: a.sessionId,
          requestId: 1,
          name,
          leaseMs: 0,
          waitMs: null,
        })
      ),
      [
        `rejected s1 ${name} invalid_argument`,
      ],
    );
  }
  assert.equal(h.engine.view.lockCount, 0);
  assert.deepEqual(
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: a.sessionId,
        requestId: 1,
        name: "x".repeat(1024),
        leaseMs: 0,
        waitMs: null,
      })
    ).length,
    1,
  );
});

Deno.test("lease expiry ends the ownership and grants the next waiter a larger token", () => {
  const h = harness();
  const a = h.open();
  const b = h.open();
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 1_000,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: b.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 1_000,
      waitMs: null,
    })
  );
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
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 1_000,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 2,
      name: "y",
      leaseMs: 2_000,
      waitMs: null,
    })
  );
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
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: a.sessionId,
        requestId: 1,
        name: "x",
        leaseMs: 1,
        waitMs: null,
      })
    )[0],
    / lease=50 /,
  );
  assert.match(
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: a.sessionId,
        requestId: 2,
        name: "y",
        leaseMs: 10_000_000,
        waitMs: null,
      })
    )[0],
    / lease=60000 /,
  );
});

Deno.test("an idle session is closed at io_timeout: ownerships end io_timeout, waits leave, order kept", () => {
  const h = harness({ ioTimeoutMs: 1_000 });
  const owner = h.open();
  const w1 = h.open();
  const silent = h.open();
  const w3 = h.open();
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: owner.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 60_000,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: w1.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: silent.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: silent.sessionId,
      requestId: 2,
      name: "other",
      leaseMs: 0,
      waitMs: null,
    })
  );
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: w3.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
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
  assert.deepEqual(h.engine.view.getLock("x")?.waiters.map((w) => w.sessionId), [2, 4]);
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
  assert.equal(h.engine.view.lockCount, 0);
});

Deno.test("closing a session cleanly ends its ownerships as graceful", () => {
  const h = harness();
  const a = h.open();
  const b = h.open();
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
  assert.deepEqual(
    h.step(() =>
      h.engine.release(h.now(), { sessionId: a.sessionId, requestId: 2, name: "x", token: 99 })
    ),
    [
      "rejected s1 x not_owner",
    ],
  );
  assert.deepEqual(
    h.step(() =>
      h.engine.release(h.now(), { sessionId: a.sessionId, requestId: 3, name: "nope", token: 1 })
    ),
    [
      "rejected s1 nope not_owner",
    ],
  );
  assert.deepEqual(
    h.step(() =>
      h.engine.release(h.now(), { sessionId: b.sessionId, requestId: 2, name: "x", token: 1 })
    ),
    [
      "rejected s2 x not_owner",
    ],
  );
  assert.equal(h.engine.view.getLock("x")?.holder?.token, 1);
});

Deno.test("RELEASE with token 0 of a queued claim cancels the wait", () => {
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
      name: "x",
      leaseMs: 0,
      waitMs: null,
    })
  );
  assert.deepEqual(
    h.step(() =>
      h.engine.release(h.now(), { sessionId: b.sessionId, requestId: 2, name: "x", token: 0 })
    ),
    [
      "wait_ended s2 x cancelled",
    ],
  );
  assert.deepEqual(h.engine.view.getLock("x")?.waiters.map((w) => w.sessionId), [3]);
});

Deno.test("a try-lock on a held lock fails at once; a wait bound times out", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  h.step(() =>
    h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name: "x",
      leaseMs: 60_000,
      waitMs: null,
    })
  );
  assert.deepEqual(
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: b.sessionId,
        requestId: 1,
        name: "x",
        leaseMs: 0,
        waitMs: 0,
      })
    ),
    [
      "wait_ended s2 x timeout",
    ],
  );
  assert.deepEqual(
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: b.sessionId,
        requestId: 2,
        name: "x",
        leaseMs: 0,
        waitMs: 250,
      })
    ),
    [
      "queued s2 x pos=1",
    ],
  );
  h.engine.touch(h.clock.monotonicMs(), a.sessionId);
  assert.deepEqual(h.advance(249), []);
  assert.deepEqual(h.advance(1), ["wait_ended s2 x timeout"]);
  assert.equal(h.engine.view.getLock("x")?.waiters.length, 0);
  assert.deepEqual(
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: b.sessionId,
        requestId: 3,
        name: "free",
        leaseMs: 0,
        waitMs: 0,
      })
    ),
    [
      "granted s2 free token=2 lease=10000 waited=0",
    ],
  );
});

Deno.test("idle locks are not stored: the engine holds nothing once every lock is idle", () => {
  const h = harness();
  const peers = Array.from({ length: 20 }, () => h.open());
  for (const [i, p] of peers.entries()) {
    h.step(() =>
      h.engine.acquire(h.now(), {
        sessionId: p.sessionId,
        requestId: 1,
        name: `lock-${i % 4}`,
        leaseMs: 0,
        waitMs: null,
      })
    );
  }
  assert.equal(h.engine.view.lockCount, 4);
  for (const p of peers) h.step(() => h.engine.closeSession(h.now(), p.sessionId, "client_closed"));
  assert.equal(h.engine.view.lockCount, 0);
  assert.equal(h.engine.view.listLocks().length, 0);
  assert.equal(h.engine.nextDeadlineMs(), undefined, "no deadline is left behind");
  assert.deepEqual(
    [h.engine.stats.locksHeld, h.engine.stats.waiters, h.engine.stats.sessionsOpen],
    [0, 0, 0],
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
        events = h.engine.acquire(h.now(), {
          sessionId: p.sessionId,
          requestId: i + 1,
          name,
          leaseMs: random(3) * 1000,
          waitMs: random(2) ? null : random(3000),
        });
        break;
      case 3: {
        const holder = h.engine.view.getLock(name)?.holder;
        events = h.engine.release(h.now(), {
          sessionId: p.sessionId,
          requestId: i + 1,
          name,
          token: holder && holder.sessionId === p.sessionId ? holder.token : 0,
        });
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
        if (random(10) === 0) events = h.engine.forceRelease(h.now(), { name }).events;
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

Deno.test("a random workload of every kind, downgrades, lock-delays, values, restores, reservations, moved claims and orphaned sessions never breaks an invariant, and the events tell every change", () => {
  const rules: Record<string, KindRule> = {
    "d/x": { kind: null, limit: 0, lockDelayMs: 300 },
    "d/sem": { kind: "semaphore", limit: 3, lockDelayMs: 200 },
    "r/rw": { kind: "shared", limit: 1, lockDelayMs: 0 },
    "r/only": { kind: "exclusive", limit: 1, lockDelayMs: 0 },
  };
  const h = harness({ ioTimeoutMs: 5_000, valueBytesMax: 6, kindRule: (n) => rules[n] ?? null });
  const random = seededRandom(7);
  const names = ["e", "rw", "m2", "m5", "m8", "d/x", "d/sem", "r/rw", "r/only"];
  /** The limit each semaphore name asks for (others have no opinion, or 1). */
  const limitOf = (name: string) => name.startsWith("m") ? Number(name.slice(1)) : 0;
  const model = new EventModel();
  const sessions: Peer[] = [];
  /** Orphaned sessions (only a move names them) and every one ever orphaned. */
  const orphans: Peer[] = [];
  const orphaned = new Set<number>();
  const counts = new Map<string, number>();
  const count = (what: string) => counts.set(what, (counts.get(what) ?? 0) + 1);
  let maxToken = 0;
  let orderTerm = 0;
  for (let i = 0; i < 30_000; i++) {
    if (sessions.length < 4 || random(15) === 0) sessions.push(h.open());
    const p = sessions[random(sessions.length)];
    const name = names[random(names.length)];
    const own = h.engine.view.holdersOf(name).find((o) => o.sessionId === p.sessionId);
    const requestId = i + 1;
    let events: EngineEvent[] = [];
    const op = random(20);
    switch (op) {
      case 0:
      case 1:
      case 2:
      case 3:
      case 4: {
        // Mostly agreeing claims; now and then a disagreeing limit or mode.
        const wrong = random(25) === 0;
        const limit = wrong ? 1 + random(9) : random(2) ? limitOf(name) : 0;
        events = h.engine.acquire(h.now(), {
          sessionId: p.sessionId,
          requestId,
          name,
          leaseMs: random(3) * 400,
          waitMs: random(3) ? null : random(1_500),
          mode: limitOf(name) === 0 && random(2) ? "shared" : wrong ? "shared" : "exclusive",
          limit,
          value: random(3) === 0 ? bytes("v".repeat(random(8))) : null,
        });
        break;
      }
      case 5:
      case 6:
        events = h.engine.release(h.now(), {
          sessionId: p.sessionId,
          requestId,
          name,
          token: own?.token ?? (random(4) === 0 ? 1 + random(maxToken + 1) : 0),
        });
        break;
      case 7:
        h.engine.heartbeat(h.clock.monotonicMs(), p.sessionId);
        break;
      case 8:
      case 9:
        h.clock.advance(random(500));
        events = h.engine.tick(h.now());
        break;
      case 10:
        events = h.engine.setValue(h.now(), {
          sessionId: p.sessionId,
          requestId,
          name,
          token: own?.token ?? random(maxToken + 1),
          value: bytes("w".repeat(random(8))),
        });
        break;
      case 11:
        events = h.engine.setMode(h.now(), {
          sessionId: p.sessionId,
          requestId,
          name,
          token: own?.token ?? random(maxToken + 1),
          mode: random(3) === 0 ? "exclusive" : "shared",
        });
        break;
      case 12: {
        if (random(6) !== 0) break;
        const holders = h.engine.view.holdersOf(name);
        const token = random(2) && holders.length > 0
          ? holders[random(holders.length)].token
          : undefined;
        events = h.engine.forceRelease(h.now(), { name, token }).events;
        break;
      }
      case 13: {
        if (random(8) !== 0) break;
        if (random(2) === 0) {
          // A version-2 connection gone without GOODBYE: no requests from it any more.
          events = h.engine.orphanSession(h.now(), p.sessionId, "io_error");
          sessions.splice(sessions.indexOf(p), 1);
          if (h.engine.view.sessionPeer(p.sessionId) !== undefined) orphans.push(p);
          count("orphaned");
          break;
        }
        const causes = ["client_closed", "io_error", "io_timeout", "shutdown", "failover"] as const;
        events = h.engine.closeSession(h.now(), p.sessionId, causes[random(causes.length)]);
        break;
      }
      case 14: {
        const waiter = h.engine.view.getLock(name)?.waiters[0];
        if (waiter !== undefined && random(4) === 0) {
          events = h.engine.kickWaiter(h.now(), name, waiter.remoteAddr).events;
        }
        break;
      }
      case 15: {
        const limit = limitOf(name) || (name === "d/sem" ? 3 : 0);
        const outcome = h.engine.restoreOwnership(h.now(), {
          sessionId: p.sessionId,
          requestId,
          name,
          token: 1 + random(h.engine.lastToken + 3),
          leaseMs: random(2) * 500,
          mode: limit === 0 && random(2) ? "shared" : "exclusive",
          limit,
          slot: random(Math.max(limit, 1) + 1),
          value: random(2) ? bytes("r") : null,
        });
        count(`restore ${outcome.status}`);
        if (outcome.status === "restored") events = outcome.events;
        break;
      }
      case 16:
        events = h.engine.restoreWaiter(h.now(), {
          sessionId: p.sessionId,
          requestId,
          name,
          leaseMs: 0,
          waitMs: random(2) ? null : random(1_000),
          mode: limitOf(name) === 0 && random(2) ? "shared" : "exclusive",
          limit: limitOf(name),
          order: { term: random(orderTerm + 1), seq: 1 + random(i + 1) },
        });
        break;
      case 17:
        if (random(3) === 0) {
          h.engine.reserve({
            name,
            untilMs: h.clock.monotonicMs() + random(800),
            claims: 1 + random(2),
          });
          count("reserve");
        } else events = h.engine.liftReservation(h.now(), name);
        break;
      case 18: {
        const to = sessions[random(sessions.length)];
        const from = orphans.length > 0 && random(2) === 0 ? orphans[random(orphans.length)] : p;
        const outcome = h.engine.moveClaims(h.now(), {
          fromSessionId: from.sessionId,
          toSessionId: to.sessionId,
          requestIds: new Map([[name, requestId]]),
        });
        count(`move ${outcome.status}`);
        if (outcome.status === "moved") events = outcome.events;
        break;
      }
      case 19:
        if (random(50) === 0) h.engine.setOrderTerm(++orderTerm);
        else if (random(40) === 0) h.engine.blockGrants("audit_unavailable");
        else events = h.engine.unblockGrants(h.now(), "audit_unavailable");
        break;
    }
    for (const e of events) {
      count(e.type === "granted" && e.restored ? "restored" : e.type);
      if (e.type === "granted" && !e.restored) {
        assert.ok(e.token > maxToken, "a new grant's token is above every token seen before");
      }
      if (e.type === "granted") maxToken = Math.max(maxToken, e.token);
      if (e.type === "ended" && e.delayedUntilMs !== 0) count("delayed");
      if (e.type === "session_closed") {
        for (const list of [sessions, orphans]) {
          const index = list.findIndex((s) => s.sessionId === e.peer.sessionId);
          if (index >= 0) list.splice(index, 1);
        }
      }
      if (e.type === "session_closed" && orphaned.has(e.peer.sessionId)) count("orphan closed");
    }
    for (const o of orphans) orphaned.add(o.sessionId);
    h.engine.assertInvariants();
    model.apply(events);
    model.check(h.engine);
  }
  // Every feature was exercised, not just reached.
  for (
    const what of [
      "granted",
      "queued",
      "ended",
      "wait_ended",
      "rejected",
      "value_changed",
      "mode_changed",
      "claim_moved",
      "restored",
      "restore void",
      "delayed",
      "reserve",
      "orphaned",
      "orphan closed",
    ]
  ) {
    assert.ok((counts.get(what) ?? 0) > 20, `${what} happened (${counts.get(what) ?? 0} times)`);
  }
  const owners = h.engine.stats.owners;
  assert.ok(h.engine.stats.acquiresTotal > 2_000, `${h.engine.stats.acquiresTotal} grants`);
  assert.ok(owners.exclusive + owners.shared + owners.semaphore >= 0);
});
