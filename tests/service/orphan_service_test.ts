/**
 * Orphaned sessions through the service on a manual clock (issue 20, "never two valid
 * holders"): a version-2 connection that ends without GOODBYE leaves its ownerships to its
 * client until their leases end (then `expired`), so nobody else is granted the lock while the
 * client may still count on it; a RESUME on a new connection moves them (`moved`, the same
 * token); its waits leave at once. GOODBYE, version 1, the I/O timeout of a live connection, an
 * operator's force-release and shutdown still end ownerships at once.
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { LockEngine } from "../../src/core/engine.ts";
import { ServerCounters } from "../../src/counters.ts";
import { AuditLog } from "../../src/log/audit.ts";
import { randomTicketKey, Tickets } from "../../src/security/tickets.ts";
import { LockService } from "../../src/service/lock_service.ts";
import { openTokenIssuer } from "../../src/storage/token_store.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import {
  type Acquired,
  type Queued,
  type Reclaim,
  type ServerMessage,
  WAIT_FOREVER,
} from "../../src/wire/messages.ts";
import { TEST_ACTOR } from "../helpers/start_server.ts";
import { MemorySink } from "../helpers/memory_sink.ts";
import { FakeGate, FakeRecords } from "./fake_gate.ts";
import {
  type Client,
  FramePort,
  type ServiceHarness,
  serviceHarness,
  settle,
} from "./service_harness.ts";

const V2 = 2;

function acquiredOf(frame: ServerMessage | undefined, requestId: number): Acquired {
  assert.ok(frame?.type === "acquired", `expected ACQUIRED, got ${JSON.stringify(frame)}`);
  assert.equal(frame.requestId, requestId);
  return frame;
}

function queuedOf(frame: ServerMessage | undefined, requestId: number): Queued {
  assert.ok(frame?.type === "queued", `expected QUEUED, got ${JSON.stringify(frame)}`);
  assert.equal(frame.requestId, requestId);
  return frame;
}

async function acquire(client: Client, requestId: number, name: string, leaseMs = 10_000) {
  client.send({ type: "acquire", requestId, name, leaseMs, waitMs: WAIT_FOREVER });
  await settle();
}

function owned(requestId: number, granted: Acquired): Reclaim {
  return {
    type: "reclaim",
    requestId,
    kind: "owned",
    token: granted.token,
    orderTerm: 0,
    orderSeq: 0,
    leaseMs: granted.leaseMs,
    waitMs: 0,
    ticket: granted.ticket!,
    mode: "exclusive",
    limit: 1,
    slot: 0,
    name: granted.name,
    value: new Uint8Array(0),
  };
}

function queued(requestId: number, waiting: Queued): Reclaim {
  return {
    ...owned(requestId, { ...waiting, type: "acquired", token: 0, leaseMs: 10_000 }),
    kind: "queued",
    orderTerm: waiting.orderTerm!,
    orderSeq: waiting.orderSeq!,
    waitMs: WAIT_FOREVER,
    ticket: waiting.ticket!,
    limit: 0,
  };
}

/** A holder of `name` (lease 10 s) on a version-2 session, and a waiter behind it. */
async function heldAndWanted(h: ServiceHarness, name: string) {
  const [holder, waiter] = [h.open("", "holder", V2), h.open("", "waiter", V2)];
  await acquire(holder, 1, name);
  const granted = acquiredOf(holder.port.frames.at(-1), 1);
  await acquire(waiter, 1, name);
  queuedOf(waiter.port.frames.at(-1), 1);
  return { holder, waiter, granted };
}

/** Time passes; the waiter keeps its own connection alive with heartbeats. */
async function pass(h: ServiceHarness, ms: number, alive: Client) {
  for (let left = ms; left > 0; left -= 5_000) {
    h.scheduler.advance(Math.min(5_000, left));
    alive.send({ type: "heartbeat", requestId: 99 });
  }
  await settle();
}

async function releases(h: ServiceHarness) {
  return (await h.records()).filter((r) => r.event === "release").map((r) => [r.lock, r.reason]);
}

Deno.test("a version-2 connection gone without GOODBYE: its lock is granted to nobody else until its lease ends, then it ends as expired", async () => {
  await using h = serviceHarness();
  const { holder, waiter, granted } = await heldAndWanted(h, "o/held");
  holder.leave();
  await settle();
  assert.equal(h.engine.view.holderOf("o/held")?.connected, false);
  assert.deepEqual(
    [h.engine.stats.sessionsOpen, h.engine.stats.sessionsOrphaned],
    [1, 1],
  );
  await pass(h, 9_999, waiter);
  assert.ok(waiter.port.frames.every((f) => f.type !== "acquired"), "no grant during the lease");
  assert.deepEqual(await releases(h), []);
  await pass(h, 1, waiter);
  assert.ok(
    acquiredOf(waiter.port.frames.findLast((f) => f.type !== "heartbeat_ack"), 1).token >
      granted.token,
  );
  assert.deepEqual(await releases(h), [["o/held", "expired"]]);
  assert.deepEqual(
    [h.engine.stats.sessionsOpen, h.engine.stats.sessionsOrphaned],
    [1, 0],
  );
});

Deno.test("a RESUME on a new connection moves the orphan's ownership with its token; the lease is renewed and the waiter still waits", async () => {
  await using h = serviceHarness();
  const { holder, waiter, granted } = await heldAndWanted(h, "o/moved");
  holder.leave();
  await pass(h, 6_000, waiter);
  const fresh = h.open("", "holder", V2);
  fresh.send(
    {
      type: "resume",
      requestId: 1,
      prevTerm: 0,
      prevSessionId: holder.peer.sessionId,
      claims: 1,
    },
    owned(2, granted),
  );
  await settle();
  assert.deepEqual(fresh.port.frames[0], {
    type: "resumed",
    requestId: 1,
    outcome: "moved",
    windowLeftMs: 4_000, // what was left of the orphan's lease
  });
  const kept = acquiredOf(fresh.port.frames[1], 2);
  assert.equal(kept.token, granted.token, "the same token");
  const holderNow = h.engine.view.holderOf("o/moved");
  assert.deepEqual([holderNow?.sessionId, holderNow?.connected], [fresh.peer.sessionId, true]);
  assert.equal(h.engine.view.sessionPeer(holder.peer.sessionId), undefined, "the orphan is gone");
  await pass(h, 9_000, waiter);
  fresh.send({ type: "heartbeat", requestId: 3 });
  await pass(h, 9_000, waiter);
  assert.ok(waiter.port.frames.every((f) => f.type !== "acquired"), "the lock stayed held");
  assert.deepEqual(await releases(h), []);
  const records = await h.records();
  assert.deepEqual(
    records.filter((r) => r.event === "reclaim").map((r) => [r.token, r.prev_session]),
    [[granted.token, holder.peer.sessionId]],
  );
  fresh.leave(true);
  await settle();
  assert.deepEqual(await releases(h), [["o/moved", "graceful"]]);
});

Deno.test("an orphan's waits leave their queues at once; a queued RECLAIM of one joins the tail", async () => {
  await using h = serviceHarness();
  const [owner, gone, next] = [
    h.open("", "owner", V2),
    h.open("", "gone", V2),
    h.open("", "next", V2),
  ];
  await acquire(owner, 1, "o/q");
  await acquire(gone, 1, "o/keep");
  const held = acquiredOf(gone.port.frames.at(-1), 1);
  await acquire(gone, 2, "o/q");
  const place = queuedOf(gone.port.frames.at(-1), 2);
  await acquire(next, 1, "o/q");
  gone.leave();
  await settle();
  assert.deepEqual(
    h.engine.view.getLock("o/q")?.waiters.map((w) => w.sessionId),
    [next.peer.sessionId],
  );
  const fresh = h.open("", "gone", V2);
  fresh.send(
    { type: "resume", requestId: 1, prevTerm: 0, prevSessionId: gone.peer.sessionId, claims: 2 },
    owned(2, held),
    queued(3, place),
  );
  await settle();
  assert.equal(acquiredOf(fresh.port.frames[1], 2).token, held.token);
  const tail = queuedOf(fresh.port.frames[2], 3);
  assert.equal(tail.position, 2, "behind the waiter that stayed");
  assert.ok(tail.orderSeq! > place.orderSeq!);
  const voids = (await h.records()).filter((r) => r.event === "reclaim_void");
  assert.deepEqual(voids.map((r) => [r.lock, r.reason]), [["o/q", "floor"]]);
});

Deno.test("unchanged: GOODBYE and version 1 end ownerships at once; so does the I/O timeout of a live version-2 connection", async () => {
  await using h = serviceHarness();
  const polite = h.open("", "polite", V2);
  await acquire(polite, 1, "o/bye");
  polite.leave(true);
  const old = h.open("", "v1", 1);
  h.acquire(old, 1, "o/v1");
  old.leave();
  const silent = h.open("", "silent", V2);
  await acquire(silent, 1, "o/silent", 60_000);
  await settle();
  assert.deepEqual(await releases(h), [["o/bye", "graceful"], ["o/v1", "graceful"]]);
  h.scheduler.advance(h.engine.ioTimeoutMs);
  await settle();
  assert.deepEqual((await releases(h)).at(-1), ["o/silent", "io_timeout"]);
  assert.ok(silent.port.closed);
  const last = silent.port.frames.at(-1);
  assert.ok(last?.type === "error" && last.code === WIRE_CODES.IO_TIMEOUT.code);
  assert.equal(h.engine.stats.sessionsOrphaned, 0);
});

Deno.test("an operator force-release ends an orphaned ownership (force) and grants the waiter; shutdown ends orphans too", async () => {
  await using h = serviceHarness();
  const { holder, waiter, granted } = await heldAndWanted(h, "o/force");
  holder.leave();
  const other = h.open("", "other", V2);
  await acquire(other, 1, "o/shut");
  other.leave();
  await settle();
  const result = h.service.forceRelease("o/force", TEST_ACTOR);
  assert.equal(result.status, "released");
  assert.equal(result.status === "released" && result.holder.connected, false);
  await settle();
  assert.ok(acquiredOf(waiter.port.frames.at(-1), 1).token > granted.token);
  const records = await h.records();
  assert.deepEqual(
    records.filter((r) => r.lock === "o/force" && r.event !== "acquire").map((r) => [
      r.event,
      r.reason ?? "",
    ]),
    [["force_release", ""], ["release", "force"]],
  );
  assert.equal(h.engine.stats.sessionsOrphaned, 1);
  h.service.beginShutdown();
  await settle();
  assert.deepEqual((await releases(h)).at(-1), ["o/shut", "graceful"]);
  assert.equal(h.engine.stats.sessionsOrphaned, 0);
});

Deno.test("cluster mode: a connection that ends while the leader cannot decide is orphaned once it may; a step-down ends the orphan (failover)", async () => {
  const scheduler = new ManualScheduler();
  let decide = true;
  const gate = Object.assign(
    new FakeGate({
      term: 5,
      records: new FakeRecords(),
      tickets: new Tickets(randomTicketKey(), "test"),
    }),
    {
      admit: () => null,
      promise: (_leaseMs: number, deliver: () => void) => deliver(),
      mayAct: () => true,
      mayDecide: () => decide,
    },
  );
  const engine = new LockEngine({ tokens: openTokenIssuer(null, scheduler.wallMs()) });
  const sink = new MemorySink();
  const audit = new AuditLog(sink, { scheduler });
  const service = new LockService({
    engine,
    audit,
    scheduler,
    counters: new ServerCounters(),
    gate,
  });
  service.leading();
  const open = (name: string) => {
    const port = new FramePort(V2);
    const peer = service.openSession("", `127.0.0.1:${name.length + 40_000}`, port, name);
    assert.ok(!("code" in peer));
    return { peer, port };
  };
  const [a, b] = [open("a"), open("bb")];
  service.acquire(a.peer, 1, "c/held", 10_000, null);
  service.acquire(b.peer, 1, "c/wanted", 10_000, null);
  service.acquire(a.peer, 2, "c/wanted", 10_000, null);
  gate.commit();
  await settle();
  decide = false;
  service.connectionLost(a.peer.sessionId, "io_error");
  assert.equal(engine.view.getLock("c/wanted")?.waiters.length, 1, "nothing decided yet");
  assert.equal(engine.stats.sessionsOrphaned, 0);
  decide = true;
  service.decisionsResumed();
  assert.equal(engine.view.getLock("c/wanted")?.waiters.length, 0, "its wait left");
  assert.equal(engine.view.holderOf("c/held")?.connected, false);
  service.closeAllForFailover("", "test");
  await settle();
  assert.deepEqual(
    sink.records().filter((r) => r.event === "release").map((r) => [r.lock, r.reason]),
    [["c/held", "failover"], ["c/wanted", "failover"]],
  );
  assert.equal(engine.stats.sessionsOrphaned, 0);
  service.beginShutdown();
  service.stop();
  await audit.close();
});
