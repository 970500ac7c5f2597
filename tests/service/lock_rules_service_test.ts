/**
 * Lock rules (issue 22 item 4) through the LockService: a rule fixes a lock's kind and limit when
 * the lock gets its first claim, gives a lock-delay after non-graceful ends only, and a reload
 * (setLockRules) leaves locks that have claims as they are.
 */

import assert from "node:assert/strict";
import { parseLockRules } from "../../src/security/lock_rules.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import type { ServerMessage } from "../../src/wire/messages.ts";
import { TEST_ACTOR } from "../helpers/start_server.ts";
import { serviceHarness } from "./service_harness.ts";

const RULES = `
semaphore  render/*      3
shared     reports/**
exclusive  payments/**   lock-delay=5s
lock-delay leases/**     2s
`;

function acquired(frames: ServerMessage[]): number[] {
  return frames.filter((f) => f.type === "acquired").map((f) => f.requestId);
}

function errorOf(frames: ServerMessage[]): { code: number; message: string } {
  const error = frames.find((f) => f.type === "error");
  assert.ok(error !== undefined && error.type === "error", JSON.stringify(frames));
  return { code: error.code, message: error.message };
}

Deno.test("lock rules via the service: a semaphore rule fixes the limit; a version-1 claim (limit 1) is refused naming it", async () => {
  await using h = serviceHarness({ lockRules: parseLockRules(RULES, "farm.rules") });
  const plain = h.open();
  h.acquire(plain, 1, "render/a");
  assert.deepEqual(errorOf(plain.port.take()), {
    code: WIRE_CODES.INVALID_ARGUMENT.code,
    message:
      'Cannot acquire lock "render/a": it is a semaphore with limit 3 by a server rule; this claim asks for limit 1',
  });
  const clients = [h.open(), h.open(), h.open(), h.open()];
  clients.forEach((c, i) => h.acquire(c, 10 + i, "render/a", { limit: 0 }));
  const view = h.engine.view.getLock("render/a")!;
  assert.equal(view.kind, "semaphore");
  assert.equal(view.limit, 3);
  assert.deepEqual(view.holders.map((holder) => holder.slot), [0, 1, 2]);
  assert.equal(view.queueLength, 1, "the fourth waits for a slot");
  await h.records();
  assert.deepEqual(clients.map((c) => acquired(c.port.take())), [[10], [11], [12], []]);
});

Deno.test("lock rules via the service: a shared rule takes version-1 writers and shared readers; an exclusive rule refuses shared claims", async () => {
  await using h = serviceHarness({ lockRules: parseLockRules(RULES, "farm.rules") });
  const writer = h.open();
  const readers = [h.open(), h.open()];
  h.acquire(writer, 1, "reports/q1");
  readers.forEach((r, i) => h.acquire(r, 2 + i, "reports/q1", { mode: "shared" }));
  assert.equal(h.engine.view.getLock("reports/q1")!.kind, "shared");
  assert.equal(h.engine.view.getLock("reports/q1")!.queueLength, 2);
  const token = h.engine.view.holderOf("reports/q1")!.token;
  h.service.release(writer.peer, 9, "reports/q1", token);
  await h.records();
  assert.deepEqual(
    h.engine.view.getLock("reports/q1")!.holders.map((holder) => holder.mode),
    ["shared", "shared"],
    "the readers are granted together",
  );

  const reader = h.open();
  h.acquire(reader, 1, "payments/eu", { mode: "shared" });
  assert.deepEqual(errorOf(reader.port.take()), {
    code: WIRE_CODES.INVALID_ARGUMENT.code,
    message:
      'Cannot acquire lock "payments/eu": it is an exclusive lock (limit 1) by a server rule, which takes no shared claims',
  });
  assert.equal(h.engine.view.getLock("payments/eu"), undefined, "nothing was stored");
});

Deno.test("lock rules via the service: a lock-delay follows a force-release and an expiry, never a graceful release", async () => {
  await using h = serviceHarness({ lockRules: parseLockRules(RULES, "farm.rules") });
  const [a, b] = [h.open(), h.open()];
  // Graceful: the waiter gets the lock at once.
  h.acquire(a, 1, "payments/eu");
  h.acquire(b, 1, "payments/eu");
  h.service.release(a.peer, 2, "payments/eu", h.engine.view.holderOf("payments/eu")!.token);
  await h.records();
  assert.equal(h.engine.view.holderOf("payments/eu")?.sessionId, b.peer.sessionId);
  assert.equal(h.engine.stats.lockDelaysTotal, 0);

  // Force: nothing is granted for 5 s.
  const c = h.open();
  h.acquire(c, 1, "payments/eu");
  const result = h.service.forceRelease("payments/eu", TEST_ACTOR);
  assert.equal(result.status, "released");
  await h.records();
  const delayed = h.engine.view.getLock("payments/eu")!;
  assert.equal(delayed.holder, null);
  assert.equal(delayed.delayedUntilMs, h.scheduler.monotonicMs() + 5_000);
  assert.equal(h.engine.stats.lockDelaysTotal, 1);
  assert.equal(h.engine.stats.lockDelaysActive, 1);
  h.scheduler.advance(4_999);
  await h.records();
  assert.equal(h.engine.view.holderOf("payments/eu"), null, "still delayed");
  h.scheduler.advance(1);
  await h.records();
  assert.equal(h.engine.view.holderOf("payments/eu")?.sessionId, c.peer.sessionId);
  assert.equal(h.engine.stats.lockDelaysActive, 0);

  // Expiry of a lease on a lock-delay-only rule (kind left to the first claim).
  const [d, e] = [h.open(), h.open()];
  h.service.acquire(d.peer, 1, "leases/db", 1_000, null);
  h.acquire(e, 1, "leases/db");
  h.scheduler.advance(1_000);
  await h.records();
  const lease = h.engine.view.getLock("leases/db")!;
  assert.equal(lease.kind, "exclusive");
  assert.equal(lease.holder, null);
  assert.equal(lease.delayedUntilMs, h.scheduler.monotonicMs() + 2_000);
  assert.equal(h.engine.stats.lockDelaysTotal, 2);
  h.scheduler.advance(2_000);
  await h.records();
  assert.equal(h.engine.view.holderOf("leases/db")?.sessionId, e.peer.sessionId);
});

Deno.test("lock rules via the service: a reload leaves a lock with claims as it is; its next first claim takes the new rule", async () => {
  await using h = serviceHarness({ lockRules: parseLockRules(RULES, "farm.rules") });
  const [a, b] = [h.open(), h.open()];
  h.acquire(a, 1, "render/a", { limit: 0 });
  h.service.setLockRules(parseLockRules("semaphore render/* 5\n", "farm.rules"));
  h.acquire(b, 1, "render/a", { limit: 0 });
  assert.equal(h.engine.view.getLock("render/a")!.limit, 3, "the lock keeps its limit");
  for (const client of [a, b]) {
    const token = h.engine.view.holdersOf("render/a")
      .find((holder) => holder.sessionId === client.peer.sessionId)!.token;
    h.service.release(client.peer, 2, "render/a", token);
  }
  await h.records();
  assert.equal(h.engine.view.getLock("render/a"), undefined, "idle: dropped");
  h.acquire(a, 3, "render/a", { limit: 0 });
  assert.equal(
    h.engine.view.getLock("render/a")!.limit,
    5,
    "the next first claim reads the new rule",
  );
  assert.equal(h.service.lockRules.ruleCount, 1);

  // Rules that no longer name a lock: its next first claim decides, as without a file.
  h.service.setLockRules(parseLockRules("", "farm.rules"));
  const c = h.open();
  h.acquire(c, 1, "reports/q2");
  h.acquire(h.open(), 1, "reports/q3", { mode: "shared" });
  assert.equal(h.engine.view.getLock("reports/q2")!.kind, "exclusive");
  assert.equal(h.engine.view.getLock("reports/q3")!.kind, "shared");
});
