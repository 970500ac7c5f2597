/**
 * The service's side of cluster milestone 2 on a manual clock with fake gates (design §1, §3.5
 * and the service-level cases of §3.9): W1 (an ACQUIRED waits for its record), W2 (a floor is
 * written before the next ACQUIRED of a lock whose owner vanished), W3's idle and busy, and the
 * reclaim rule over two leaders of one fake etcd (`FakeRecords`): kept claims with their tokens
 * and places, void ones by ticket, term, window, floor, ACL and a regranted lock, and the higher
 * token winning over a reinstated lower one.
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { LockEngine } from "../../src/core/engine.ts";
import { ServerCounters } from "../../src/counters.ts";
import { AuditLog } from "../../src/log/audit.ts";
import { LockService } from "../../src/service/lock_service.ts";
import { MemorySink } from "../helpers/memory_sink.ts";
import { parseAcl } from "../../src/security/acl.ts";
import { randomTicketKey, Tickets } from "../../src/security/tickets.ts";
import { openTokenIssuer } from "../../src/storage/token_store.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import {
  type Acquired,
  type Queued,
  type Reclaim,
  type ServerMessage,
  WAIT_FOREVER,
} from "../../src/wire/messages.ts";
import { FakeGate, FakeRecords } from "./fake_gate.ts";
import { type Client, type ServiceHarness, serviceHarness, settle } from "./service_harness.ts";

/** One cluster: a fake etcd, one ticket key, one clock; leaders come and go on it. */
class Cluster {
  readonly records = new FakeRecords();
  readonly tickets = new Tickets(randomTicketKey(), "test");
  readonly scheduler = new ManualScheduler();
  #lastToken = 0;
  #leaders: ServiceHarness[] = [];

  /** A leader of `term`: tokens above every token of the terms before (as etcd's mark makes). */
  leader(term: number, options: { acl?: string } = {}) {
    const gate = new FakeGate({ term, records: this.records, tickets: this.tickets });
    const tokens = openTokenIssuer(null, this.scheduler.wallMs());
    if (this.#lastToken > 0) tokens.observe(this.#lastToken + 1_000);
    const h = serviceHarness({
      ownership: gate,
      scheduler: this.scheduler,
      tokens,
      ...(options.acl === undefined ? {} : { acl: parseAcl(options.acl, "test.acl") }),
    });
    // What the cluster node does when its term begins (LockService.leading).
    h.engine.setOrderTerm(term);
    this.#leaders.push(h);
    return { h, gate, crash: () => this.#lastToken = h.engine.lastToken };
  }

  async [Symbol.asyncDispose]() {
    for (const h of this.#leaders) await h[Symbol.asyncDispose]();
  }
}

const V2 = 2;

function types(client: Client): string[] {
  return client.port.frames.map((f) => f.type);
}

function last(client: Client): ServerMessage | undefined {
  return client.port.frames.at(-1);
}

function acquiredOf(frame: ServerMessage | undefined, requestId?: number): Acquired {
  assert.ok(frame?.type === "acquired", `expected ACQUIRED, got ${JSON.stringify(frame)}`);
  if (requestId !== undefined) assert.equal(frame.requestId, requestId);
  return frame;
}

function queuedOf(frame: ServerMessage | undefined, requestId?: number): Queued {
  assert.ok(frame?.type === "queued", `expected QUEUED, got ${JSON.stringify(frame)}`);
  if (requestId !== undefined) assert.equal(frame.requestId, requestId);
  return frame;
}

function errorOf(frame: ServerMessage | undefined, code: keyof typeof WIRE_CODES, rid: number) {
  assert.ok(frame?.type === "error", `expected ERROR ${code}, got ${JSON.stringify(frame)}`);
  assert.equal(frame.code, WIRE_CODES[code].code, frame.message);
  assert.equal(frame.requestId, rid);
  return frame;
}

/** ACQUIRE on a version-2 session; the audit write settles. */
async function acquire(client: Client, requestId: number, name: string, leaseMs = 10_000) {
  client.send({ type: "acquire", requestId, name, leaseMs, waitMs: WAIT_FOREVER });
  await settle();
}

function owned(requestId: number, granted: Acquired, ticket = granted.ticket!): Reclaim {
  return {
    type: "reclaim",
    requestId,
    kind: "owned",
    token: granted.token,
    orderTerm: 0,
    orderSeq: 0,
    leaseMs: granted.leaseMs,
    waitMs: 0,
    ticket,
    mode: "exclusive",
    limit: 1,
    slot: 0,
    name: granted.name,
    value: new Uint8Array(0),
  };
}

function queued(requestId: number, waiting: Queued): Reclaim {
  return {
    type: "reclaim",
    requestId,
    kind: "queued",
    token: 0,
    orderTerm: waiting.orderTerm!,
    orderSeq: waiting.orderSeq!,
    leaseMs: 10_000,
    waitMs: WAIT_FOREVER,
    ticket: waiting.ticket!,
    mode: "exclusive",
    limit: 0,
    slot: 0,
    name: waiting.name,
    value: new Uint8Array(0),
  };
}

/** RESUME on a new session of `h` with the given RECLAIMs; the audit writes settle. */
async function resume(
  h: ServiceHarness,
  prevTerm: number,
  prev: Client,
  reclaims: Reclaim[],
  identity = "",
): Promise<Client> {
  const client = h.open(identity, "resumed", V2);
  client.send(
    {
      type: "resume",
      requestId: 1,
      prevTerm,
      prevSessionId: prev.peer.sessionId,
      claims: reclaims.length,
    },
    ...reclaims,
  );
  await settle();
  return client;
}

function byRequestId(client: Client): Map<number, ServerMessage> {
  return new Map(
    client.port.frames.map((f) => ["requestId" in f ? f.requestId : -1, f] as const),
  );
}

// ---- W1, W2, W3 ------------------------------------------------------------------------------

Deno.test("W1: an ACQUIRED waits for its lock's record; the session's later frames wait behind it", async () => {
  await using cluster = new Cluster();
  const { h, gate } = cluster.leader(5);
  const a = h.open("", "a", V2);
  await acquire(a, 1, "w1");
  a.send({ type: "heartbeat", requestId: 2 });
  await settle();
  assert.deepEqual(a.port.frames, [], "nothing leaves before the record is committed");
  assert.ok(gate.pending);
  gate.commit();
  await settle();
  assert.deepEqual(types(a), ["acquired", "heartbeat_ack"]);
  // The record is there now: the next grant of the lock waits for nothing but its audit record.
  const granted = acquiredOf(a.port.frames[0], 1);
  a.send({ type: "release", requestId: 3, name: "w1", token: granted.token });
  await acquire(a, 4, "w1");
  assert.equal(acquiredOf(last(a), 4).name, "w1");
  assert.equal(gate.pending, false);
});

Deno.test("W1: an ACQUIRED whose record never commits is dropped; later frames still leave", async () => {
  await using cluster = new Cluster();
  const { h, gate } = cluster.leader(5);
  const a = h.open("", "a", V2);
  await acquire(a, 1, "w1/lost");
  a.send({ type: "heartbeat", requestId: 2 });
  gate.fail();
  await settle();
  assert.deepEqual(a.port.frames, [{ type: "heartbeat_ack", requestId: 2, renewed: 1 }]);
});

Deno.test("W2 (#5): a version-2 connection gone without GOODBYE keeps its ownership until its lease ends, then raises the floor before the next ACQUIRED; GOODBYE does not", async () => {
  await using cluster = new Cluster();
  const { h, gate } = cluster.leader(5);
  const [x, y] = [h.open("", "x", V2), h.open("", "y", V2)];
  await acquire(x, 1, "fin");
  gate.commit();
  await settle();
  const tx = acquiredOf(last(x), 1).token;
  await acquire(y, 1, "fin");
  queuedOf(last(y), 1);
  gate.calls.length = 0;
  x.leave(); // FIN without GOODBYE: the session is orphaned, its client may still count on it
  await settle();
  assert.deepEqual(gate.calls, [], "nothing ends yet");
  cluster.scheduler.advance(9_999);
  y.send({ type: "heartbeat", requestId: 2 });
  await settle();
  assert.equal(y.port.frames.length, 2, "no grant while the orphan's lease lasts");
  cluster.scheduler.advance(1);
  await settle();
  assert.deepEqual(gate.calls, [`ended fin ${tx} non-graceful 0`, "beforeDeliver fin"]);
  assert.equal(y.port.frames.length, 2, "the grant waits for the floor");
  gate.commit();
  await settle();
  assert.ok(acquiredOf(last(y), 1).token > tx);
  assert.equal(
    cluster.records.own.get("fin")?.floor,
    tx,
    "the floor is the vanished owner's token",
  );
  const ty = acquiredOf(last(y), 1).token;
  // GOODBYE: a graceful end, no floor, and the next grant waits for nothing.
  const z = h.open("", "z", V2);
  await acquire(z, 1, "fin");
  gate.calls.length = 0;
  y.leave(true);
  await settle();
  assert.deepEqual(gate.calls, [`ended fin ${ty} graceful 0`, "beforeDeliver fin"]);
  assert.ok(acquiredOf(last(z), 1).token > ty);
  assert.equal(gate.pending, false);
  const records = await h.records();
  assert.deepEqual(
    records.filter((r) => r.event === "release").map((r) => [r.token, r.reason]),
    [[tx, "expired"], [ty, "graceful"]],
  );
});

Deno.test("W3: a lock left with no claim is idle; a claim joining its queue makes it busy", async () => {
  await using cluster = new Cluster();
  const { h, gate } = cluster.leader(5);
  const [a, b] = [h.open("", "a", V2), h.open("", "b", V2)];
  await acquire(a, 1, "w3");
  gate.commit();
  await settle();
  await acquire(b, 1, "w3");
  const token = acquiredOf(a.port.frames[0]).token;
  a.send({ type: "release", requestId: 2, name: "w3", token });
  await settle();
  b.send({ type: "release", requestId: 2, name: "w3", token: acquiredOf(last(b)).token });
  await settle();
  assert.deepEqual(gate.calls.filter((c) => /^(idle|busy)/.test(c)), ["busy w3", "idle w3"]);
});

// ---- the reclaim rule over two leaders -----------------------------------------------------

Deno.test("#2: after an uncommitted graceful hand-off and a crash, the successor reclaims and keeps its token", async () => {
  await using cluster = new Cluster();
  const first = cluster.leader(5);
  const [x, y] = [first.h.open("", "x", V2), first.h.open("", "y", V2)];
  await acquire(x, 1, "jobs/a");
  first.gate.commit();
  await settle();
  const held = acquiredOf(last(x), 1);
  await acquire(y, 1, "jobs/a");
  x.send({ type: "release", requestId: 2, name: "jobs/a", token: held.token });
  await settle();
  assert.equal(first.gate.pending, false, "a graceful hand-off writes nothing");
  const handed = acquiredOf(last(y), 1);
  first.crash();
  const next = cluster.leader(6);
  const y2 = await resume(next.h, 5, y, [owned(2, handed)]);
  assert.deepEqual(y2.port.frames[0], {
    type: "resumed",
    requestId: 1,
    outcome: "reclaim",
    windowLeftMs: 5_000,
  });
  const kept = acquiredOf(y2.port.frames[1], 2);
  assert.equal(kept.token, handed.token, "the same token");
  assert.notDeepEqual(kept.ticket, handed.ticket, "a ticket of the new term and session");
  assert.equal(next.h.engine.view.holderOf("jobs/a")?.sessionId, y2.peer.sessionId);
  // X, which released, reclaims all the same (a misbehaving client): the lock is Y's.
  const x2 = await resume(next.h, 5, x, [owned(2, held)]);
  errorOf(byRequestId(x2).get(2), "CLAIM_VOID", 2);
  const records = await next.h.records();
  assert.deepEqual(
    records.map((r) => [r.event, r.token, r.claim, r.prev_term, r.reason]),
    [
      ["reclaim", handed.token, "owned", 5, undefined],
      ["reclaim_void", held.token, "owned", 5, "regranted"],
    ],
  );
  assert.deepEqual(next.h.service.reclaimStats.reclaims.owned, { kept: 1, void: 1 });
  assert.equal(next.h.service.reclaimStats.voids.regranted, 1);
  assert.ok(next.gate.calls.includes("beforeDeliver jobs/a restored"));
});

Deno.test("#4: claims of a term this leader does not take, after the window, or at or below the floor are void", async () => {
  await using cluster = new Cluster();
  const first = cluster.leader(5);
  const a = first.h.open("", "a", V2);
  for (const [i, name] of ["t/term", "t/window", "t/floor", "t/kept"].entries()) {
    await acquire(a, i + 1, name);
  }
  first.gate.commit();
  await settle();
  const grants = new Map(a.port.frames.map((f) => [acquiredOf(f).name, acquiredOf(f)]));
  cluster.records.own.set("t/floor", { term: 5, floor: grants.get("t/floor")!.token });
  first.crash();
  const next = cluster.leader(7); // term 6 never served: 5 is the term before
  next.gate.previousTerm = 5;
  const wrongTerm = await resume(next.h, 4, a, [owned(2, grants.get("t/term")!)]);
  assert.deepEqual(wrongTerm.port.frames[0], {
    type: "resumed",
    requestId: 1,
    outcome: "none",
    windowLeftMs: 0,
  });
  errorOf(wrongTerm.port.frames[1], "CLAIM_VOID", 2);
  const floor = await resume(next.h, 5, a, [owned(2, grants.get("t/floor")!)]);
  errorOf(floor.port.frames[1], "CLAIM_VOID", 2);
  const kept = await resume(next.h, 5, a, [owned(2, grants.get("t/kept")!)]);
  acquiredOf(kept.port.frames[1], 2);
  next.gate.windowOpen = false;
  const late = await resume(next.h, 5, a, [owned(2, grants.get("t/window")!)]);
  assert.equal(late.port.frames[0].type === "resumed" && late.port.frames[0].outcome, "none");
  errorOf(late.port.frames[1], "CLAIM_VOID", 2);
  const records = await next.h.records();
  assert.deepEqual(
    records.filter((r) => r.event === "reclaim_void").map((r) => [r.lock, r.reason]),
    [["t/term", "ticket"], ["t/floor", "floor"], ["t/window", "window"]],
    "a ticket names its term: shown with another one it is not valid",
  );
  assert.equal(next.h.service.reclaimStats.voids.floor, 1);
  assert.equal(next.h.service.reclaimStats.voids.window, 1);
  // A ticket of the right term the gate refuses by its term rule.
  next.gate.windowOpen = true;
  next.gate.previousTerm = 4;
  const refused = await resume(next.h, 5, a, [owned(2, grants.get("t/term")!)]);
  errorOf(byRequestId(refused).get(2), "CLAIM_VOID", 2);
  assert.equal(next.h.service.reclaimStats.voids.term, 1);
});

Deno.test("#6: waiters reclaimed keep their order among new ACQUIREs made meanwhile", async () => {
  await using cluster = new Cluster();
  const first = cluster.leader(5);
  const [holder, w1, w2] = ["h", "w1", "w2"].map((n) => first.h.open("", n, V2));
  await acquire(holder, 1, "q");
  first.gate.commit();
  await settle();
  await acquire(w1, 1, "q");
  await acquire(w2, 1, "q");
  const [q1, q2] = [queuedOf(last(w1), 1), queuedOf(last(w2), 1)];
  first.crash();
  const next = cluster.leader(6);
  const owner = next.h.open("", "owner", V2);
  await acquire(owner, 1, "q");
  next.gate.commit();
  await settle();
  const r1 = await resume(next.h, 5, w1, [queued(2, q1)]);
  assert.deepEqual(
    [queuedOf(r1.port.frames[1], 2).position, r1.port.frames[1]],
    [1, { ...r1.port.frames[1], orderTerm: 5, orderSeq: q1.orderSeq }],
  );
  const newcomer = next.h.open("", "new", V2);
  await acquire(newcomer, 1, "q");
  assert.equal(queuedOf(last(newcomer), 1).position, 2);
  const r2 = await resume(next.h, 5, w2, [queued(2, q2)]);
  assert.equal(queuedOf(r2.port.frames[1], 2).position, 2, "ahead of the newcomer");
  const order: string[] = [];
  for (const client of [owner, r1, r2, newcomer]) {
    const grant = [...byRequestId(client).values()].find((f) => f.type === "acquired");
    assert.ok(grant?.type === "acquired", `${client.peer.clientName} was granted`);
    order.push(client.peer.clientName);
    client.send({ type: "release", requestId: 9, name: "q", token: grant.token });
    next.gate.commit();
    await settle();
  }
  assert.deepEqual(order, ["owner", "resumed", "resumed", "new"]);
  assert.deepEqual(next.h.service.reclaimStats.reclaims.queued, { kept: 2, void: 0 });
});

Deno.test("#9: a forged ticket, another identity's or another session's is void; the rightful client keeps its lock", async () => {
  await using cluster = new Cluster();
  const first = cluster.leader(5);
  const [a, other] = [first.h.open("spiffe://a", "a", V2), first.h.open("spiffe://a", "o", V2)];
  await acquire(a, 1, "secret");
  first.gate.commit();
  await settle();
  const held = acquiredOf(last(a), 1);
  first.crash();
  const next = cluster.leader(6);
  const forged = held.ticket!.map((byte, i) => i === 15 ? byte ^ 1 : byte);
  const tries = [
    await resume(next.h, 5, a, [owned(2, held, forged)], "spiffe://a"),
    await resume(next.h, 5, a, [owned(2, held)], "spiffe://b"),
    await resume(next.h, 5, other, [owned(2, held)], "spiffe://a"),
  ];
  for (const t of tries) errorOf(t.port.frames[1], "CLAIM_VOID", 2);
  assert.equal(next.h.engine.view.holderOf("secret"), undefined, "nothing was restored");
  const rightful = await resume(next.h, 5, a, [owned(2, held)], "spiffe://a");
  assert.equal(acquiredOf(rightful.port.frames[1], 2).token, held.token);
  assert.equal(next.h.service.reclaimStats.voids.ticket, 3);
  assert.deepEqual(
    (await next.h.records()).map((r) => [r.event, r.identity, r.reason]),
    [
      ["reclaim_void", "spiffe://a", "ticket"],
      ["reclaim_void", "spiffe://b", "ticket"],
      ["reclaim_void", "spiffe://a", "ticket"],
      ["reclaim", "spiffe://a", undefined],
    ],
  );
});

Deno.test("#10: a higher-token reclaim beats a reinstated lower one (reclaim_conflict)", async () => {
  await using cluster = new Cluster();
  const first = cluster.leader(5);
  const [x, y] = [first.h.open("", "x", V2), first.h.open("", "y", V2)];
  await acquire(x, 1, "c");
  first.gate.commit();
  await settle();
  const lower = acquiredOf(last(x), 1);
  x.send({ type: "release", requestId: 2, name: "c", token: lower.token });
  await acquire(y, 1, "c");
  const higher = acquiredOf(last(y), 1);
  first.crash();
  const next = cluster.leader(6);
  // X reclaims the lock it released (misbehaving) before Y comes back: kept, for now.
  const x2 = await resume(next.h, 5, x, [owned(2, lower)]);
  acquiredOf(x2.port.frames[1], 2);
  const y2 = await resume(next.h, 5, y, [owned(2, higher)]);
  // The lower ownership ended badly (force): its floor is written before the higher's ACQUIRED.
  assert.ok(next.gate.pending);
  assert.equal(y2.port.frames.length, 1);
  next.gate.commit();
  await settle();
  assert.equal(cluster.records.own.get("c")?.floor, lower.token);
  assert.equal(acquiredOf(y2.port.frames[1], 2).token, higher.token, "the higher token wins");
  errorOf(last(x2), "CLOSED_BY_ADMIN", 0);
  assert.ok(x2.port.closed, "the lower owner's session is closed");
  assert.equal(next.h.engine.view.holderOf("c")?.sessionId, y2.peer.sessionId);
  assert.equal(next.h.service.reclaimStats.conflicts, 1);
  const records = await next.h.records();
  assert.deepEqual(
    records.map((r) => [r.event, r.token, r.reason ?? r.winner_token ?? ""]),
    [
      ["reclaim", lower.token, ""],
      ["reclaim_conflict", lower.token, higher.token],
      ["release", lower.token, "force"],
      ["reclaim", higher.token, ""],
    ],
  );
});

Deno.test("(vi) the ACL decides a reclaim: an owned claim gets CLAIM_VOID, a queued one ACL_DENIED", async () => {
  await using cluster = new Cluster();
  const first = cluster.leader(5);
  const [a, b] = [first.h.open("", "a", V2), first.h.open("", "b", V2)];
  await acquire(a, 1, "locked/x");
  first.gate.commit();
  await settle();
  await acquire(b, 1, "locked/x");
  const [held, waiting] = [acquiredOf(last(a), 1), queuedOf(last(b), 1)];
  first.crash();
  const next = cluster.leader(6, { acl: "deny ** locked/**\nallow ** **\n" });
  const a2 = await resume(next.h, 5, a, [owned(2, held)]);
  errorOf(a2.port.frames[1], "CLAIM_VOID", 2);
  const b2 = await resume(next.h, 5, b, [queued(2, waiting)]);
  errorOf(b2.port.frames[1], "ACL_DENIED", 2);
  assert.equal(next.h.engine.view.lockCount, 0);
  assert.equal(next.h.service.reclaimStats.voids.acl, 2);
});

Deno.test("a void queued claim joins the tail with what is left of its wait", async () => {
  await using cluster = new Cluster();
  const first = cluster.leader(5);
  const [holder, w] = [first.h.open("", "h", V2), first.h.open("", "w", V2)];
  await acquire(holder, 1, "tail");
  first.gate.commit();
  await settle();
  await acquire(w, 1, "tail");
  const waiting = queuedOf(last(w), 1);
  first.crash();
  const next = cluster.leader(6);
  const owner = next.h.open("", "owner", V2);
  await acquire(owner, 1, "tail");
  next.gate.commit();
  next.gate.windowOpen = false;
  const late = await resume(next.h, 5, w, [{ ...queued(2, waiting), waitMs: 300 }]);
  const place = queuedOf(late.port.frames[1], 2);
  assert.deepEqual([place.position, place.orderTerm], [1, 6], "a new place of this term");
  cluster.scheduler.advance(300);
  await settle();
  errorOf(last(late), "WAIT_TIMEOUT", 2);
  assert.deepEqual(next.h.service.reclaimStats.reclaims.queued, { kept: 0, void: 1 });
});

Deno.test("reclaimsDone: once per RESUME, after its last RECLAIM, at another request, or when its session ends", async () => {
  await using cluster = new Cluster();
  const { h, gate } = cluster.leader(6);
  const all = h.open("", "all", V2);
  all.send({ type: "resume", requestId: 1, prevTerm: 5, prevSessionId: 41, claims: 0 });
  const cut = h.open("", "cut", V2);
  cut.send(
    { type: "resume", requestId: 1, prevTerm: 5, prevSessionId: 42, claims: 3 },
    { type: "heartbeat", requestId: 2 },
  );
  const gone = h.open("", "gone", V2);
  gone.send({ type: "resume", requestId: 1, prevTerm: 5, prevSessionId: 43, claims: 2 });
  assert.deepEqual(gate.calls, ["reclaimsDone 5 41", "reclaimsDone 5 42"]);
  gone.leave();
  cut.leave();
  await settle();
  assert.deepEqual(gate.calls, ["reclaimsDone 5 41", "reclaimsDone 5 42", "reclaimsDone 5 43"]);
});

Deno.test("a moved RESUME needs the old session's identity: another one gets none", async () => {
  await using h = serviceHarness();
  const old = h.open("spiffe://a", "old", V2);
  await acquire(old, 1, "mine");
  const held = acquiredOf(last(old), 1);
  const thief = await resume(h, 0, old, [owned(2, held)], "spiffe://b");
  assert.equal(thief.port.frames[0].type === "resumed" && thief.port.frames[0].outcome, "none");
  errorOf(thief.port.frames[1], "CLAIM_VOID", 2);
  assert.equal(h.engine.view.holderOf("mine")?.sessionId, old.peer.sessionId);
  const rightful = await resume(h, 0, old, [owned(2, held)], "spiffe://a");
  assert.equal(
    rightful.port.frames[0].type === "resumed" && rightful.port.frames[0].outcome,
    "moved",
  );
  assert.equal(acquiredOf(rightful.port.frames[1], 2).token, held.token);
  assert.ok(old.port.closed);
});

Deno.test("leading(): a new term's claims take it as their order term, behind restored waiters", async () => {
  await using cluster = new Cluster();
  const gate = Object.assign(
    new FakeGate({ term: 9, records: cluster.records, tickets: cluster.tickets }),
    {
      admit: () => null,
      promise: (_leaseMs: number, deliver: () => void) => deliver(),
      mayAct: () => true,
      mayDecide: () => true,
    },
  );
  const engine = new LockEngine({ tokens: openTokenIssuer(null, cluster.scheduler.wallMs()) });
  const audit = new AuditLog(new MemorySink(), { scheduler: cluster.scheduler });
  const service = new LockService({
    engine,
    audit,
    scheduler: cluster.scheduler,
    counters: new ServerCounters(),
    gate,
  });
  service.notLeader();
  assert.equal(engine.orderTerm, 0);
  service.leading();
  assert.equal(engine.orderTerm, 9);
  service.beginShutdown();
  service.stop();
  await audit.close();
});
