/**
 * Cluster milestone 2, deterministic (design §3.9 "Deterministic tests"): in-process lockd nodes
 * on the in-memory etcd and one ManualScheduler, raw version-2 clients on loopback. A crash of the
 * leader is a cut from etcd (its lease runs out, a standby takes over; the old node steps down).
 *
 * - the lazy-records hole: a holder that expired on the old leader is void at the new one (its
 *   floor committed before the successor heard ACQUIRED), the successor keeps its token;
 * - an uncommitted graceful hand-off, then a crash: the successor reclaims and keeps its token;
 * - a late ACQUIRED (a frozen old leader) reclaimed after the window, once the new leader granted
 *   the lock again: void, and the new token is above it;
 * - a τ₋₁ ticket after a crash inside the window: kept;
 * - queue order restored by order key with new ACQUIREs interleaved; the window's end grants the
 *   head by order key;
 * - a planned hand-over ends the window as soon as its listed sessions resumed;
 * - a forged ticket: void.
 */

import assert from "node:assert/strict";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import {
  type Acquired,
  type Message,
  type Queued,
  type Reclaim,
  WAIT_FOREVER,
} from "../../src/wire/messages.ts";
import { FAKE_TTL_MS, type FakeCluster, fakeCluster } from "../helpers/cluster_fixture.ts";
import { RawClient } from "../helpers/raw_client.ts";
import type { TestServer } from "../helpers/start_server.ts";

const WALL_MS = 1_700_000_000_000;
const GRACE_MS = 2_000;

interface Node {
  readonly t: TestServer;
  /** Cuts the node from etcd for good: to the cluster, a crash. */
  crash(): void;
}

async function node(fake: FakeCluster, name: string): Promise<Node> {
  let cut = false;
  const t = await fake.server(
    name,
    { clusterReclaimGraceMs: GRACE_MS, clusterRecordLingerMs: 500 },
    { dropRequest: () => cut, dropAnswer: () => cut },
  );
  // The fixture's shutdown hands over through etcd: the link works again by then.
  fake.beforeDispose.push(() => cut = false);
  return { t, crash: () => cut = true };
}

const serving = (n: Node) => n.t.server.context.cluster!.serving;

/** Runs manual time until `n` serves (at most `ms`). */
async function untilServing(fake: FakeCluster, n: Node, ms = 4 * FAKE_TTL_MS): Promise<void> {
  for (let t = 0; t < ms && !serving(n); t += 50) await fake.run(50);
  assert.ok(serving(n), `${n.t.server.context.cluster!.node.name} serves`);
}

/** Two nodes, the first one serving. */
async function twoNodes(fake: FakeCluster): Promise<[Node, Node]> {
  const n1 = await node(fake, "n1");
  await untilServing(fake, n1);
  const n2 = await node(fake, "n2");
  await fake.run(100);
  return [n1, n2];
}

/** The next message, letting manual time run while it is awaited. */
function next(fake: FakeCluster, client: RawClient): Promise<Message | null> {
  return withTime(fake, client.next(5_000));
}

/** Awaits `pending`, letting manual time run meanwhile (200 ms of it at most). */
async function withTime<T>(fake: FakeCluster, pending: Promise<T>): Promise<T> {
  for (let i = 0; i < 20; i++) {
    const run = fake.run(10);
    const done = await Promise.race([pending.then(() => true, () => true), run.then(() => false)]);
    await run;
    if (done) break;
  }
  return await pending;
}

/**
 * Runs `ms` of manual time, asserting that no message arrives meanwhile; returns the read still
 * pending (the next message, to be awaited with `withTime`).
 */
async function nothingFor(
  fake: FakeCluster,
  client: RawClient,
  ms: number,
): Promise<{ pending: Promise<Message | null> }> {
  let got: Message | null | "none" = "none";
  const message = client.next(30_000);
  message.then((m) => got = m, () => {});
  await fake.run(ms);
  assert.equal(got, "none", `nothing expected, got ${JSON.stringify(got)}`);
  return { pending: message };
}

function expect<T extends Message["type"]>(
  message: Message | null,
  type: T,
): Extract<Message, { type: T }> {
  assert.ok(message?.type === type, `expected ${type}, got ${JSON.stringify(message)}`);
  return message as Extract<Message, { type: T }>;
}

async function session(t: TestServer): Promise<RawClient> {
  return await RawClient.session(t.addr, 2);
}

function acquireMsg(requestId: number, name: string, leaseMs: number, waitMs: number) {
  return { type: "acquire" as const, requestId, name, leaseMs, waitMs };
}

function reclaimOwned(requestId: number, granted: Acquired, ticket = granted.ticket!): Reclaim {
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
    limit: granted.limit ?? 1,
    slot: granted.slot ?? 0,
    name: granted.name,
    value: new Uint8Array(0),
  };
}

function reclaimQueued(requestId: number, queued: Queued, name: string): Reclaim {
  return {
    type: "reclaim",
    requestId,
    kind: "queued",
    token: 0,
    orderTerm: queued.orderTerm!,
    orderSeq: queued.orderSeq!,
    leaseMs: 10_000,
    waitMs: WAIT_FOREVER,
    ticket: queued.ticket!,
    mode: "exclusive",
    limit: 0,
    slot: 0,
    name,
    value: new Uint8Array(0),
  };
}

/** RESUME of `old`'s session with `reclaims` at `t`: the new session and the RESUMED outcome. */
async function resumeAt(
  fake: FakeCluster,
  t: TestServer,
  old: RawClient,
  ...reclaims: Reclaim[]
): Promise<{ client: RawClient; outcome: string }> {
  const client = await session(t);
  await client.send({
    type: "resume",
    requestId: 100,
    prevTerm: old.welcome!.term!,
    prevSessionId: old.welcome!.sessionId,
    claims: reclaims.length,
  }, ...reclaims);
  const resumed = expect(await next(fake, client), "resumed");
  return { client, outcome: String(resumed.outcome) };
}

function expectClaimVoid(message: Message | null): void {
  const error = expect(message, "error");
  assert.equal(error.code, WIRE_CODES.CLAIM_VOID.code, JSON.stringify(error));
}

function record(fake: FakeCluster, name: string): { t: number; f: number } | undefined {
  const kv = fake.etcd.peek(`test/own/${name}`);
  return kv === undefined ? undefined : JSON.parse(kv.value);
}

Deno.test("m2 sim: the lazy-records hole: an expired holder's floor commits before its successor hears ACQUIRED; at the new leader the holder is void, the successor keeps its token", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using x = await session(n1.t);
  await using y = await session(n1.t);
  await x.send(acquireMsg(1, "a", 1_000, 0));
  const held = expect(await next(fake, x), "acquired");
  await y.send(acquireMsg(1, "a", 10_000, WAIT_FOREVER));
  expect(await next(fake, y), "queued");
  // X falls silent: its lease runs out on n1 while etcd holds every answer back.
  fake.etcd.setMode("stall");
  const { pending } = await nothingFor(fake, y, 1_100);
  assert.equal(record(fake, "a")?.f, 0, "no floor committed yet");
  fake.etcd.setMode("up");
  const granted = expect(await withTime(fake, pending), "acquired");
  assert.equal(record(fake, "a")?.f, held.token, "the floor committed before Y heard");
  n1.crash();
  await untilServing(fake, n2);
  const xs = await resumeAt(fake, n2.t, x, reclaimOwned(2, held));
  await using x2 = xs.client;
  assert.equal(xs.outcome, "reclaim");
  expectClaimVoid(await next(fake, x2));
  const ys = await resumeAt(fake, n2.t, y, reclaimOwned(2, granted));
  await using y2 = ys.client;
  assert.equal(expect(await next(fake, y2), "acquired").token, granted.token);
  const voids = n2.t.audit.records().filter((r) => r.event === "reclaim_void");
  assert.deepEqual(voids.map((r) => [r.lock, r.reason]), [["a", "floor"]]);
});

Deno.test("m2 sim: an uncommitted graceful hand-off, then a crash: the successor reclaims and keeps its token", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using x = await session(n1.t);
  await using y = await session(n1.t);
  await x.send(acquireMsg(1, "a", 10_000, 0));
  const held = expect(await next(fake, x), "acquired");
  await y.send(acquireMsg(1, "a", 10_000, WAIT_FOREVER));
  expect(await next(fake, y), "queued");
  // n1 is cut from etcd: the graceful hand-off needs no commit and still leaves.
  n1.crash();
  await x.send({ type: "release", requestId: 2, name: "a", token: held.token });
  expect(await next(fake, x), "released");
  const granted = expect(await next(fake, y), "acquired");
  assert.ok(granted.token > held.token);
  await untilServing(fake, n2);
  const ys = await resumeAt(fake, n2.t, y, reclaimOwned(2, granted));
  await using y2 = ys.client;
  assert.equal(ys.outcome, "reclaim");
  assert.equal(expect(await next(fake, y2), "acquired").token, granted.token);
  assert.equal(n2.t.server.context.engine.holderOf("a")?.token, granted.token);
});

Deno.test("m2 sim: a late ACQUIRED reclaimed after the new leader's window, once it granted the lock again: void, and fenced by a larger token", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using y = await session(n1.t);
  // A lease within the leader's own etcd lease: no horizon, the window is the grace.
  await y.send(acquireMsg(1, "a", 1_000, 0));
  const late = expect(await next(fake, y), "acquired");
  n1.crash();
  await untilServing(fake, n2);
  // Y is frozen through the window: the lock stays reserved, then goes to W.
  await using w = await session(n2.t);
  await w.send(acquireMsg(1, "a", 10_000, WAIT_FOREVER));
  expect(await next(fake, w), "queued");
  await fake.run(GRACE_MS + 100);
  const regranted = expect(await next(fake, w), "acquired");
  assert.ok(regranted.token > late.token, "fenced: the new token is above the late one");
  const ys = await resumeAt(fake, n2.t, y, reclaimOwned(2, late));
  await using y2 = ys.client;
  assert.equal(ys.outcome, "none");
  expectClaimVoid(await next(fake, y2));
  assert.equal(n2.t.server.context.engine.holderOf("a")?.token, regranted.token);
});

Deno.test("m2 sim: a τ₋₁ ticket after a crash inside the window is kept at the next leader", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  const n3 = await node(fake, "n3");
  await fake.run(100);
  await using x = await session(n1.t);
  await x.send(acquireMsg(1, "a", 10_000, 0));
  const held = expect(await next(fake, x), "acquired");
  n1.crash();
  const next2 = await Promise.race([
    untilServing(fake, n2).then(() => n2),
    untilServing(fake, n3).then(() => n3),
  ]).catch(() => (serving(n2) ? n2 : n3));
  const other = next2 === n2 ? n3 : n2;
  // The second leader crashes inside its window, before X reclaimed.
  assert.ok(next2.t.server.context.cluster!.ownership.window !== null);
  next2.crash();
  await untilServing(fake, other);
  const xs = await resumeAt(fake, other.t, x, reclaimOwned(2, held));
  await using x2 = xs.client;
  assert.equal(xs.outcome, "reclaim");
  assert.equal(expect(await next(fake, x2), "acquired").token, held.token);
});

Deno.test("m2 sim: reclaimed waiters keep their order by order key, ahead of new ACQUIREs interleaved with their reclaims; the holder's release grants the first", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using x = await session(n1.t);
  await using w1 = await session(n1.t);
  await using w2 = await session(n1.t);
  await x.send(acquireMsg(1, "a", 10_000, 0));
  const held = expect(await next(fake, x), "acquired");
  await w1.send(acquireMsg(1, "a", 10_000, WAIT_FOREVER));
  const q1 = expect(await next(fake, w1), "queued");
  await w2.send(acquireMsg(1, "a", 10_000, WAIT_FOREVER));
  const q2 = expect(await next(fake, w2), "queued");
  n1.crash();
  await untilServing(fake, n2);
  await using fresh = await session(n2.t);
  await fresh.send(acquireMsg(1, "a", 10_000, WAIT_FOREVER));
  expect(await next(fake, fresh), "queued");
  const r2 = await resumeAt(fake, n2.t, w2, reclaimQueued(2, q2, "a"));
  await using w2b = r2.client;
  expect(await next(fake, w2b), "queued");
  const r1 = await resumeAt(fake, n2.t, w1, reclaimQueued(2, q1, "a"));
  await using w1b = r1.client;
  expect(await next(fake, w1b), "queued");
  const rx = await resumeAt(fake, n2.t, x, reclaimOwned(2, held));
  await using x2 = rx.client;
  expect(await next(fake, x2), "acquired");
  const waiters = n2.t.server.context.engine.getLock("a")!.waiters.map((w) => w.sessionId);
  assert.deepEqual(waiters, [w1b, w2b, fresh].map((c) => c.welcome!.sessionId));
  await x2.send({ type: "release", requestId: 3, name: "a", token: held.token });
  expect(await next(fake, x2), "released");
  assert.ok(expect(await next(fake, w1b), "acquired").token > held.token);
});

Deno.test("m2 sim: a holder that never reclaims: the window's end grants the head by order key", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using x = await session(n1.t);
  await using w1 = await session(n1.t);
  // A lease within the leader's own etcd lease: no horizon, the window is the grace.
  await x.send(acquireMsg(1, "a", 1_000, 0));
  const held = expect(await next(fake, x), "acquired");
  await w1.send(acquireMsg(1, "a", 10_000, WAIT_FOREVER));
  const q1 = expect(await next(fake, w1), "queued");
  n1.crash();
  await untilServing(fake, n2);
  await using fresh = await session(n2.t);
  await fresh.send(acquireMsg(1, "a", 10_000, WAIT_FOREVER));
  expect(await next(fake, fresh), "queued");
  const r1 = await resumeAt(fake, n2.t, w1, reclaimQueued(2, q1, "a"));
  await using w1b = r1.client;
  expect(await next(fake, w1b), "queued");
  const { pending } = await nothingFor(fake, w1b, GRACE_MS - 500);
  await fake.run(600);
  assert.ok(expect(await withTime(fake, pending), "acquired").token > held.token);
  assert.equal(n2.t.server.context.cluster!.ownership.window, null);
});

Deno.test("m2 sim: a planned hand-over ends the new leader's window once every listed session resumed", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using x = await session(n1.t);
  await x.send(acquireMsg(1, "a", 10_000, 0));
  const held = expect(await next(fake, x), "acquired");
  const stopping = n1.t.server.shutdown();
  await fake.run(200);
  await stopping;
  await untilServing(fake, n2);
  const cluster = n2.t.server.context.cluster!;
  assert.ok(cluster.ownership.window !== null, "the window is open");
  const xs = await resumeAt(fake, n2.t, x, reclaimOwned(2, held));
  await using x2 = xs.client;
  assert.equal(expect(await next(fake, x2), "acquired").token, held.token);
  await fake.run(10);
  assert.equal(cluster.ownership.window, null, "closed early");
});

Deno.test("m2 sim: a forged ticket is void", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using x = await session(n1.t);
  await x.send(acquireMsg(1, "a", 10_000, 0));
  const held = expect(await next(fake, x), "acquired");
  n1.crash();
  await untilServing(fake, n2);
  const forged = held.ticket!.slice();
  forged[0] ^= 1;
  const xs = await resumeAt(fake, n2.t, x, reclaimOwned(2, held, forged));
  await using x2 = xs.client;
  expectClaimVoid(await next(fake, x2));
  const voids = n2.t.audit.records().filter((r) => r.event === "reclaim_void");
  assert.deepEqual(voids.map((r) => r.reason), ["ticket"]);
});

Deno.test("m2 sim: records: a grant of a free lock commits one before its ACQUIRED (W1); reuse within the linger writes nothing; an idle lock's record goes after the linger (W3)", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1] = await twoNodes(fake);
  await using x = await session(n1.t);
  fake.etcd.setMode("stall");
  await x.send(acquireMsg(1, "c", 1_000, 0));
  const { pending } = await nothingFor(fake, x, 200);
  assert.equal(record(fake, "c"), undefined);
  fake.etcd.setMode("up");
  const first = expect(await withTime(fake, pending), "acquired");
  const term = n1.t.server.context.cluster!.term;
  assert.deepEqual(record(fake, "c"), { t: term, f: 0 });
  const revision = fake.etcd.peek("test/own/c")!.modRevision;
  await x.send({ type: "release", requestId: 2, name: "c", token: first.token });
  expect(await next(fake, x), "released");
  await fake.run(300);
  await x.send(acquireMsg(3, "c", 1_000, 0));
  const again = expect(await next(fake, x), "acquired");
  assert.equal(fake.etcd.peek("test/own/c")!.modRevision, revision, "no write within the linger");
  await x.send({ type: "release", requestId: 4, name: "c", token: again.token });
  expect(await next(fake, x), "released");
  await fake.run(700);
  assert.equal(record(fake, "c"), undefined, "deleted after the linger");
  assert.equal(n1.t.server.context.cluster!.ownership.recordStats.records, 0);
});

Deno.test("m2 sim: an operator lifts a reservation: audited, the head waiter is granted at once; a lock not reserved is refused and nothing is audited", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using x = await session(n1.t);
  await x.send(acquireMsg(1, "a", 1_000, 0));
  const held = expect(await next(fake, x), "acquired");
  n1.crash();
  await untilServing(fake, n2);
  await using w = await session(n2.t);
  await w.send(acquireMsg(1, "a", 10_000, WAIT_FOREVER));
  expect(await next(fake, w), "queued");
  const service = n2.t.server.context.service;
  const actor = { remote_addr: "127.0.0.1:9", auth: "none" as const };
  assert.equal(service.liftReservation("b", actor), "not_reserved");
  assert.equal(service.liftReservation("a", actor), "lifted");
  assert.ok(expect(await next(fake, w), "acquired").token > held.token);
  const lifted = n2.t.audit.records().filter((r) => r.event === "reservation_lifted");
  assert.deepEqual(lifted.map((r) => [r.lock, r.by, r.actor]), [["a", "operator", actor]]);
  assert.equal(service.liftReservation("a", actor), "not_reserved");
});

Deno.test("m2 sim: status: the first leader of a cluster serves at once (no window); after a crash the next one says reclaiming until T, everywhere; a standby says whom it stands by", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  assert.equal(n1.t.server.context.cluster!.status.phase, "serving");
  assert.equal(n2.t.server.context.cluster!.status.phase, "standby");
  await using x = await session(n1.t);
  await x.send(acquireMsg(1, "a", 1_000, 0));
  expect(await next(fake, x), "acquired");
  n1.crash();
  await untilServing(fake, n2);
  const status = n2.t.server.context.cluster!.status;
  assert.equal(status.phase, "reclaiming");
  assert.equal(status.reservedLocks, 1);
  const leftMs = status.untilWallMs! - fake.scheduler.wallMs();
  assert.ok(leftMs > 0 && leftMs <= GRACE_MS, `the window ends in ${leftMs} ms`);
  await fake.run(GRACE_MS);
  assert.equal(n2.t.server.context.cluster!.status.phase, "serving");
});

Deno.test("m2 sim: the window lasts as long as the last term's horizon, then the horizon in etcd is this term's own (the next leader does not wait for promises that ran out)", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using x = await session(n1.t);
  // A lease longer than the leader's own etcd lease: published as the term's horizon.
  await x.send(acquireMsg(1, "a", 10_000, 0));
  expect(await next(fake, x), "acquired");
  assert.equal(JSON.parse(fake.etcd.peek("test/horizon")!.value).lease_ms, 10_000);
  n1.crash();
  await untilServing(fake, n2);
  const cluster = n2.t.server.context.cluster!;
  const window = cluster.ownership.window!;
  const leftMs = window.endsAtMs - fake.scheduler.monotonicMs();
  assert.ok(leftMs > GRACE_MS && leftMs <= 10_000, `the window ends in ${leftMs} ms`);
  await fake.run(leftMs + 100);
  assert.equal(cluster.ownership.window, null);
  assert.deepEqual(JSON.parse(fake.etcd.peek("test/horizon")!.value), {
    term: cluster.term,
    lease_ms: 0,
  });
  assert.equal(JSON.parse(fake.etcd.peek("test/terms")!.value).closed, true);
});

Deno.test("m2 sim: a HELLO held while the next leader takes over is held on past 1.5 × TTL until it serves (2 × TTL at most), then WELCOMEd", async () => {
  await using fake = fakeCluster(WALL_MS);
  const n1 = await node(fake, "n1");
  await untilServing(fake, n1);
  // n2 reads the records slowly: its takeover ends well after the election.
  let slow = true;
  fake.beforeDispose.push(() => slow = false);
  const n2t = await fake.server("n2", { clusterReclaimGraceMs: GRACE_MS }, {
    requestDelayMs: (op) => !slow ? 0 : op === "range" ? 900 : op === "txn" ? 300 : 0,
  });
  const n2: Node = { t: n2t, crash: () => {} };
  await fake.run(100);
  // n1 dies unannounced: its listener and its etcd traffic stop, its lease runs out.
  n1.t.server.context.cluster!.close();
  await n1.t.server.shutdown();
  await using client = await RawClient.connect(n2.t.addr);
  await client.send({ type: "hello", version: 2, clientName: "held" });
  let answer: Message | null | undefined;
  client.next(30_000).then((m) => answer = m, () => answer = null);
  let servedAtMs = -1;
  for (let t = 0; t < 2 * FAKE_TTL_MS + 500 && answer === undefined; t += 50) {
    await fake.run(50);
    if (servedAtMs < 0 && serving(n2)) servedAtMs = t;
  }
  assert.ok(servedAtMs > 1.5 * FAKE_TTL_MS, `served ${servedAtMs} ms after the HELLO`);
  assert.equal(answer?.type, "welcome", JSON.stringify(answer));
});

Deno.test("m2 sim: after a leader that kept no records (a rolling upgrade from milestone 1), the new leader grants nothing until that leader's published promises ran out", async () => {
  await using fake = fakeCluster(WALL_MS);
  // What a milestone-1 leader leaves: a horizon, no `terms`, no records.
  await fake.etcd.txn([], [{
    type: "put",
    key: "test/horizon",
    value: JSON.stringify({ term: 1, lease_ms: 5_000 }),
  }], []);
  const n1 = await node(fake, "n1");
  let servedAtMs = -1;
  for (let t = 0; t < 8_000 && servedAtMs < 0; t += 50) {
    await fake.run(50);
    if (serving(n1)) servedAtMs = t;
  }
  assert.ok(servedAtMs >= 4_500, `served ${servedAtMs} ms after start`);
  assert.equal(n1.t.server.context.cluster!.status.phase, "serving");
});
