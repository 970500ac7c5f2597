/**
 * Lock kinds and values across a fail-over (issue 22 item 7, issue 23 item 7; docs/cluster.md
 * "Lock kinds, values and watches across a fail-over"), deterministic: in-process lockd nodes on
 * the in-memory etcd and one ManualScheduler, raw version-2 clients on loopback. A crash of the
 * leader is a cut from etcd.
 *
 * - a semaphore's floors are per slot: a slot whose holder expired voids only that slot's stale
 *   holder, not the holders of the other slots;
 * - a semaphore stays reserved while it has room for holders still to reclaim: a reclaimed
 *   waiter is not granted a slot before every holder came back (or the window ended);
 * - a shared lock's readers come back shared with their values and write generation (which their
 *   tickets bind: a forged one is void), the queued writer keeps its place; it is granted at the window's
 *   end (another reader of the last term may still hold the lock until then);
 * - values come back with their ownership;
 */

import assert from "node:assert/strict";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import {
  type Acquired,
  type LockMode,
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
const text = new TextEncoder();

interface Node {
  readonly t: TestServer;
  crash(): void;
}

async function node(fake: FakeCluster, name: string, rulesFile: string | null): Promise<Node> {
  let cut = false;
  const t = await fake.server(
    name,
    { clusterReclaimGraceMs: GRACE_MS, clusterRecordLingerMs: 500, lockRulesFile: rulesFile },
    { dropRequest: () => cut, dropAnswer: () => cut },
  );
  fake.beforeDispose.push(() => cut = false);
  return { t, crash: () => cut = true };
}

const serving = (n: Node) => n.t.server.context.cluster!.serving;

async function untilServing(fake: FakeCluster, n: Node, ms = 4 * FAKE_TTL_MS): Promise<void> {
  for (let t = 0; t < ms && !serving(n); t += 50) await fake.run(50);
  assert.ok(serving(n), `${n.t.server.context.cluster!.node.name} serves`);
}

async function twoNodes(fake: FakeCluster, rulesFile: string | null = null): Promise<[Node, Node]> {
  const n1 = await node(fake, "n1", rulesFile);
  await untilServing(fake, n1);
  const n2 = await node(fake, "n2", rulesFile);
  await fake.run(100);
  return [n1, n2];
}

function next(fake: FakeCluster, client: RawClient): Promise<Message | null> {
  return withTime(fake, client.next(5_000));
}

async function withTime<T>(fake: FakeCluster, pending: Promise<T>): Promise<T> {
  for (let i = 0; i < 20; i++) {
    const run = fake.run(10);
    const done = await Promise.race([pending.then(() => true, () => true), run.then(() => false)]);
    await run;
    if (done) break;
  }
  return await pending;
}

/** Runs `ms` of manual time asserting no message arrives; returns the read still pending. */
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

interface Ask {
  readonly leaseMs?: number;
  readonly waitMs?: number;
  readonly mode?: LockMode;
  readonly limit?: number;
  readonly value?: string;
}

function acquireMsg(requestId: number, name: string, ask: Ask = {}) {
  return {
    type: "acquire" as const,
    requestId,
    name,
    leaseMs: ask.leaseMs ?? 10_000,
    waitMs: ask.waitMs ?? 0,
    mode: ask.mode ?? "exclusive",
    limit: ask.limit ?? 0,
    value: text.encode(ask.value ?? ""),
  };
}

function reclaimOwned(requestId: number, granted: Acquired, value = ""): Reclaim {
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
    mode: granted.mode ?? "exclusive",
    limit: granted.limit ?? 1,
    slot: granted.slot ?? 0,
    name: granted.name,
    value: text.encode(value),
    writeGeneration: granted.writeGeneration ?? 0,
  };
}

function reclaimQueued(requestId: number, queued: Queued, name: string, ask: Ask = {}): Reclaim {
  return {
    type: "reclaim",
    requestId,
    kind: "queued",
    token: 0,
    orderTerm: queued.orderTerm!,
    orderSeq: queued.orderSeq!,
    leaseMs: ask.leaseMs ?? 10_000,
    waitMs: WAIT_FOREVER,
    ticket: queued.ticket!,
    mode: ask.mode ?? "exclusive",
    limit: ask.limit ?? 0,
    slot: 0,
    name,
    value: text.encode(ask.value ?? ""),
  };
}

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

/** The kept ACQUIRED of an owned reclaim: the same token, mode, limit, slot and generation. */
function assertSameGrant(kept: Acquired, before: Acquired): void {
  assert.deepEqual(
    [kept.token, kept.mode, kept.limit, kept.slot, kept.writeGeneration],
    [before.token, before.mode, before.limit, before.slot, before.writeGeneration],
  );
}

function record(fake: FakeCluster, name: string): { t: number; f: number | number[] } | undefined {
  const kv = fake.etcd.peek(`test/own/${name}`);
  return kv === undefined ? undefined : JSON.parse(kv.value);
}

Deno.test("m2 kinds sim: a semaphore's floors are per slot: a slot whose holder expired voids only that holder; the other slots' holders and its successor keep tokens and slots", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using a = await session(n1.t);
  await using b = await session(n1.t);
  await using c = await session(n1.t);
  await using d = await session(n1.t);
  await a.send(acquireMsg(1, "r", { limit: 3, value: "a" }));
  const ga = expect(await next(fake, a), "acquired");
  await b.send(acquireMsg(1, "r", { limit: 3, value: "b" }));
  const gb = expect(await next(fake, b), "acquired");
  await c.send(acquireMsg(1, "r", { limit: 3, leaseMs: 1_000 }));
  const gc = expect(await next(fake, c), "acquired");
  assert.deepEqual([ga.slot, gb.slot, gc.slot], [0, 1, 2]);
  await d.send(acquireMsg(1, "r", { limit: 3, waitMs: WAIT_FOREVER, value: "d" }));
  expect(await next(fake, d), "queued");
  // C falls silent: its lease ends (expired), slot 2's floor rises, D gets slot 2.
  const { pending } = await nothingFor(fake, d, 900);
  await fake.run(300);
  const gd = expect(await withTime(fake, pending), "acquired");
  assert.equal(gd.slot, 2);
  assert.ok(gd.token > gc.token);
  assert.deepEqual(record(fake, "r")?.f, [0, 0, gc.token]);
  // A and B heartbeat meanwhile (their leases are 10 s); the leader crashes.
  n1.crash();
  await untilServing(fake, n2);
  const ra = await resumeAt(fake, n2.t, a, reclaimOwned(2, ga, "a"));
  await using a2 = ra.client;
  assertSameGrant(expect(await next(fake, a2), "acquired"), ga);
  const rc = await resumeAt(fake, n2.t, c, reclaimOwned(2, gc));
  await using c2 = rc.client;
  expectClaimVoid(await next(fake, c2));
  const rb = await resumeAt(fake, n2.t, b, reclaimOwned(2, gb, "b"));
  await using b2 = rb.client;
  assertSameGrant(expect(await next(fake, b2), "acquired"), gb);
  const rd = await resumeAt(fake, n2.t, d, reclaimOwned(2, gd, "d"));
  await using d2 = rd.client;
  assertSameGrant(expect(await next(fake, d2), "acquired"), gd);
  const lock = n2.t.server.context.engine.getLock("r")!;
  assert.deepEqual(
    lock.holders.map((
      h,
    ) => [h.token, h.slot, new TextDecoder().decode(h.value ?? new Uint8Array())]),
    [[ga.token, 0, "a"], [gb.token, 1, "b"], [gd.token, 2, "d"]],
  );
  const voids = n2.t.audit.records().filter((r) => r.event === "reclaim_void");
  assert.deepEqual(voids.map((r) => [r.lock, r.reason]), [["r", "floor"]]);
});

Deno.test("m2 kinds sim: a full semaphore of 3 with a waiter: the waiter's reclaim does not take a slot before every holder came back; all keep tokens, slots and values, the waiter its place", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  const holders: [RawClient, Acquired][] = [];
  for (const v of ["x", "y", "z"]) {
    const client = await session(n1.t);
    await client.send(acquireMsg(1, "r", { limit: 3, value: v }));
    holders.push([client, expect(await next(fake, client), "acquired")]);
  }
  await using w = await session(n1.t);
  await w.send(acquireMsg(1, "r", { limit: 3, waitMs: WAIT_FOREVER }));
  const qw = expect(await next(fake, w), "queued");
  try {
    n1.crash();
    await untilServing(fake, n2);
    const [[x, gx], [y, gy], [z, gz]] = holders;
    const rx = await resumeAt(fake, n2.t, x, reclaimOwned(2, gx, "x"));
    await using x2 = rx.client;
    assertSameGrant(expect(await next(fake, x2), "acquired"), gx);
    // The waiter comes back before the other holders: it waits at its place.
    const rw = await resumeAt(fake, n2.t, w, reclaimQueued(2, qw, "r", { limit: 3 }));
    await using w2 = rw.client;
    expect(await next(fake, w2), "queued");
    const rz = await resumeAt(fake, n2.t, z, reclaimOwned(2, gz, "z"));
    await using z2 = rz.client;
    assertSameGrant(expect(await next(fake, z2), "acquired"), gz);
    const ry = await resumeAt(fake, n2.t, y, reclaimOwned(2, gy, "y"));
    await using y2 = ry.client;
    assertSameGrant(expect(await next(fake, y2), "acquired"), gy);
    const lock = n2.t.server.context.engine.getLock("r")!;
    assert.deepEqual(lock.holders.map((h) => h.slot).sort(), [0, 1, 2]);
    assert.equal(lock.waiters.length, 1);
    // Y lets go: the waiter gets Y's slot with a token above every reclaimed one.
    await y2.send({ type: "release", requestId: 3, name: "r", token: gy.token });
    expect(await next(fake, y2), "released");
    const gw = expect(await next(fake, w2), "acquired");
    assert.equal(gw.slot, gy.slot);
    assert.ok(gw.token > gz.token);
  } finally {
    for (const [client] of holders) await client[Symbol.asyncDispose]();
  }
});

Deno.test("m2 kinds sim: a semaphore not yet full stays reserved for holders still to reclaim until the window ends; then a new claim takes the free slot", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using x = await session(n1.t);
  await using y = await session(n1.t);
  await x.send(acquireMsg(1, "r", { limit: 3 }));
  const gx = expect(await next(fake, x), "acquired");
  await y.send(acquireMsg(1, "r", { limit: 3 }));
  expect(await next(fake, y), "acquired");
  n1.crash();
  await untilServing(fake, n2);
  const rx = await resumeAt(fake, n2.t, x, reclaimOwned(2, gx));
  await using x2 = rx.client;
  assertSameGrant(expect(await next(fake, x2), "acquired"), gx);
  // Y never comes back; a new claim waits for the window's end, not for a free slot.
  await using fresh = await session(n2.t);
  await fresh.send(acquireMsg(1, "r", { limit: 3, waitMs: WAIT_FOREVER }));
  expect(await next(fake, fresh), "queued");
  const { pending } = await nothingFor(fake, fresh, GRACE_MS - 600);
  // The window is the grace or the last term's horizon (its 10 s leases), whichever is later.
  const ownership = n2.t.server.context.cluster!.ownership;
  for (let t = 0; t < 15_000 && ownership.window !== null; t += 100) await fake.run(100);
  assert.equal(ownership.window, null);
  const granted = expect(await withTime(fake, pending), "acquired");
  assert.notEqual(granted.slot, gx.slot);
});

Deno.test("m2 kinds sim: a shared lock's two readers come back shared with their values and write generation; the queued writer keeps its place and is granted at the window's end", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using writer0 = await session(n1.t);
  await writer0.send(acquireMsg(1, "doc", { mode: "exclusive" }));
  const gw0 = expect(await next(fake, writer0), "acquired");
  await using r1 = await session(n1.t);
  await using r2 = await session(n1.t);
  await r1.send(acquireMsg(1, "doc", { mode: "shared", waitMs: WAIT_FOREVER, value: "r1" }));
  expect(await next(fake, r1), "queued");
  await r2.send(acquireMsg(1, "doc", { mode: "shared", waitMs: WAIT_FOREVER, value: "r2" }));
  expect(await next(fake, r2), "queued");
  await writer0.send({ type: "release", requestId: 2, name: "doc", token: gw0.token });
  expect(await next(fake, writer0), "released");
  const g1 = expect(await next(fake, r1), "acquired");
  const g2 = expect(await next(fake, r2), "acquired");
  assert.deepEqual([g1.mode, g2.mode, g1.writeGeneration], ["shared", "shared", gw0.token]);
  await using w = await session(n1.t);
  await w.send(acquireMsg(1, "doc", { mode: "exclusive", waitMs: WAIT_FOREVER }));
  const qw = expect(await next(fake, w), "queued");
  n1.crash();
  await untilServing(fake, n2);
  // The writer comes back first: it must not pass the readers still to reclaim.
  const rw = await resumeAt(fake, n2.t, w, reclaimQueued(2, qw, "doc"));
  await using w2 = rw.client;
  expect(await next(fake, w2), "queued");
  const forged = await resumeAt(fake, n2.t, r1, {
    ...reclaimOwned(2, g1, "r1"),
    writeGeneration: g1.writeGeneration! + 1,
  });
  await using r1forged = forged.client;
  expectClaimVoid(await next(fake, r1forged));
  const s1 = await resumeAt(fake, n2.t, r1, reclaimOwned(2, g1, "r1"));
  await using r1b = s1.client;
  assertSameGrant(expect(await next(fake, r1b), "acquired"), g1);
  const s2 = await resumeAt(fake, n2.t, r2, reclaimOwned(2, g2, "r2"));
  await using r2b = s2.client;
  assertSameGrant(expect(await next(fake, r2b), "acquired"), g2);
  const lock = n2.t.server.context.engine.getLock("doc")!;
  assert.deepEqual(lock.holders.map((h) => [h.token, h.mode]), [
    [g1.token, "shared"],
    [g2.token, "shared"],
  ]);
  assert.equal(lock.waiters.length, 1);
  await r1b.send({ type: "release", requestId: 3, name: "doc", token: g1.token });
  expect(await next(fake, r1b), "released");
  await r2b.send({ type: "release", requestId: 3, name: "doc", token: g2.token });
  expect(await next(fake, r2b), "released");
  // Another reader of the last term may still hold it: the writer waits for the window's end.
  const ownership = n2.t.server.context.cluster!.ownership;
  assert.notEqual(ownership.window, null);
  const { pending } = await nothingFor(fake, w2, 200);
  for (let t = 0; t < 15_000 && ownership.window !== null; t += 100) await fake.run(100);
  const gw = expect(await withTime(fake, pending), "acquired");
  assert.ok(gw.token > g2.token);
});

async function rulesFile(text: string): Promise<string> {
  const path = await Deno.makeTempFile({ suffix: ".rules" });
  await Deno.writeTextFile(path, text);
  return path;
}

Deno.test("m2 kinds sim: a lock-delay started on the old leader is kept with the floor (W2) and holds the new leader's grants back until it ends, past the window", async () => {
  const path = await rulesFile("exclusive d/* lock-delay=6s\n");
  try {
    await using fake = fakeCluster(WALL_MS);
    const [n1, n2] = await twoNodes(fake, path);
    await using x = await session(n1.t);
    await using w = await session(n1.t);
    await x.send(acquireMsg(1, "d/a", { leaseMs: 1_000 }));
    const held = expect(await next(fake, x), "acquired");
    await w.send(acquireMsg(1, "d/a", { waitMs: WAIT_FOREVER }));
    const queued = expect(await next(fake, w), "queued");
    // X falls silent: its lease ends (expired), the lock-delay starts, W waits for it.
    await nothingFor(fake, w, 1_200);
    const expiredAtWallMs = fake.scheduler.wallMs() - 200;
    const stored = record(fake, "d/a") as { t: number; f: number; d?: number };
    assert.equal(stored.f, held.token);
    assert.ok(
      stored.d !== undefined && Math.abs(stored.d - (expiredAtWallMs + 6_000)) <= 200,
      `the delay's end is kept with the floor: ${JSON.stringify(stored)}`,
    );
    n1.crash();
    await untilServing(fake, n2);
    const rw = await resumeAt(fake, n2.t, w, reclaimQueued(2, queued, "d/a"));
    await using w2 = rw.client;
    expect(await next(fake, w2), "queued");
    const ownership = n2.t.server.context.cluster!.ownership;
    for (let t = 0; t < 15_000 && ownership.window !== null; t += 100) await fake.run(100);
    assert.equal(ownership.window, null, "the window ended");
    assert.ok(fake.scheduler.wallMs() < stored.d!, "before the delay's end");
    const { pending } = await nothingFor(fake, w2, stored.d! - fake.scheduler.wallMs() - 100);
    await fake.run(300);
    assert.ok(expect(await withTime(fake, pending), "acquired").token > held.token);
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("m2 kinds sim: the rules file's kinds hold at the new leader: holders of a rule's semaphore (claims with no limit) are reclaimed into it; a claim that disagrees is refused naming the rule", async () => {
  const path = await rulesFile("semaphore jobs/* 2\n");
  try {
    await using fake = fakeCluster(WALL_MS);
    const [n1, n2] = await twoNodes(fake, path);
    await using a = await session(n1.t);
    await using b = await session(n1.t);
    await a.send(acquireMsg(1, "jobs/x"));
    const ga = expect(await next(fake, a), "acquired");
    await b.send(acquireMsg(1, "jobs/x"));
    const gb = expect(await next(fake, b), "acquired");
    assert.deepEqual([ga.limit, ga.slot, gb.limit, gb.slot], [2, 0, 2, 1]);
    n1.crash();
    await untilServing(fake, n2);
    const rb = await resumeAt(fake, n2.t, b, reclaimOwned(2, gb));
    await using b2 = rb.client;
    assertSameGrant(expect(await next(fake, b2), "acquired"), gb);
    const ra = await resumeAt(fake, n2.t, a, reclaimOwned(2, ga));
    await using a2 = ra.client;
    assertSameGrant(expect(await next(fake, a2), "acquired"), ga);
    const lock = n2.t.server.context.engine.getLock("jobs/x")!;
    assert.deepEqual([lock.kind, lock.limit, lock.holders.length], ["semaphore", 2, 2]);
    await using c = await session(n2.t);
    await c.send(acquireMsg(1, "jobs/x", { limit: 3 }));
    const refused = expect(await next(fake, c), "error");
    assert.equal(refused.code, WIRE_CODES.INVALID_ARGUMENT.code);
    assert.match(refused.message, /semaphore with limit 2 by a server rule/);
  } finally {
    await Deno.remove(path);
  }
});

/** On `n`: readers R1 (10 s) and R2 (1 s, falls silent), then a queued writer; R2 expires. */
async function readersOneExpired(fake: FakeCluster, n: Node) {
  const r1 = await session(n.t);
  const r2 = await session(n.t);
  const w = await session(n.t);
  await r1.send(acquireMsg(1, "doc", { mode: "shared" }));
  const g1 = expect(await next(fake, r1), "acquired");
  await r2.send(acquireMsg(1, "doc", { mode: "shared", leaseMs: 1_000 }));
  const g2 = expect(await next(fake, r2), "acquired");
  await w.send(acquireMsg(1, "doc", { waitMs: WAIT_FOREVER }));
  const qw = expect(await next(fake, w), "queued");
  await fake.run(1_300);
  assert.deepEqual(n.t.server.context.engine.getLock("doc")!.holders.map((h) => h.token), [
    g1.token,
  ]);
  return { r1, r2, w, g1, g2, qw };
}

Deno.test("m2 kinds sim: a reader that expired beside an older reader raises the floor only below that reader: the older reader is reclaimed at the next leader", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  const { r1, r2, w, g1, qw } = await readersOneExpired(fake, n1);
  await using _r1 = r1, _r2 = r2, _w = w;
  assert.equal(record(fake, "doc")?.f, g1.token - 1, "below the older reader still holding");
  n1.crash();
  await untilServing(fake, n2);
  const s1 = await resumeAt(fake, n2.t, r1, reclaimOwned(2, g1));
  await using r1b = s1.client;
  assertSameGrant(expect(await next(fake, r1b), "acquired"), g1);
  const sw = await resumeAt(fake, n2.t, w, reclaimQueued(2, qw, "doc"));
  await using w2 = sw.client;
  expect(await next(fake, w2), "queued");
});

Deno.test("m2 kinds sim: a reader's floor that waited for the older readers commits before the writer's ACQUIRED leaves", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1] = await twoNodes(fake);
  const { r1, r2, w, g1, g2 } = await readersOneExpired(fake, n1);
  await using _r1 = r1, _r2 = r2, _w = w;
  fake.etcd.setMode("stall");
  await r1.send({ type: "release", requestId: 2, name: "doc", token: g1.token });
  expect(await next(fake, r1), "released");
  const { pending } = await nothingFor(fake, w, 300);
  assert.equal(record(fake, "doc")?.f, g1.token - 1, "not committed yet");
  fake.etcd.setMode("up");
  const granted = expect(await withTime(fake, pending), "acquired");
  assert.ok(granted.token > g2.token);
  assert.equal(record(fake, "doc")?.f, g2.token, "the expired reader's floor, before the writer");
});

Deno.test("m2 kinds sim: higher token wins per slot: a semaphore slot's stale reclaim (a client that let go) loses to the slot's later holder; the other slot's holder keeps its lock", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using a = await session(n1.t);
  await using b = await session(n1.t);
  await using c = await session(n1.t);
  await a.send(acquireMsg(1, "r", { limit: 2 }));
  const ga = expect(await next(fake, a), "acquired");
  await b.send(acquireMsg(1, "r", { limit: 2 }));
  const gb = expect(await next(fake, b), "acquired");
  // A lets go of slot 0 (graceful: no floor), C takes it.
  await a.send({ type: "release", requestId: 2, name: "r", token: ga.token });
  expect(await next(fake, a), "released");
  await c.send(acquireMsg(1, "r", { limit: 2 }));
  const gc = expect(await next(fake, c), "acquired");
  assert.deepEqual([gb.slot, gc.slot], [1, 0]);
  n1.crash();
  await untilServing(fake, n2);
  const rb = await resumeAt(fake, n2.t, b, reclaimOwned(2, gb));
  await using b2 = rb.client;
  assertSameGrant(expect(await next(fake, b2), "acquired"), gb);
  // A misbehaves: it reclaims the slot it let go of, before C.
  const ra = await resumeAt(fake, n2.t, a, reclaimOwned(3, ga));
  await using a2 = ra.client;
  assertSameGrant(expect(await next(fake, a2), "acquired"), ga);
  const rc = await resumeAt(fake, n2.t, c, reclaimOwned(2, gc));
  await using c2 = rc.client;
  assertSameGrant(expect(await next(fake, c2), "acquired"), gc);
  const lock = n2.t.server.context.engine.getLock("r")!;
  assert.deepEqual(
    lock.holders.map((h) => [h.token, h.slot]).sort((x, y) => x[1] - y[1]),
    [[gc.token, 0], [gb.token, 1]],
  );
  const conflicts = n2.t.audit.records().filter((r) => r.event === "reclaim_conflict");
  assert.deepEqual(conflicts.map((r) => r.token), [ga.token]);
});

Deno.test("m2 kinds sim: a downgraded owner (its write generation is its own token) is reclaimed shared with it", async () => {
  await using fake = fakeCluster(WALL_MS);
  const [n1, n2] = await twoNodes(fake);
  await using x = await session(n1.t);
  await x.send(acquireMsg(1, "doc"));
  const held = expect(await next(fake, x), "acquired");
  await x.send({ type: "downgrade", requestId: 2, name: "doc", token: held.token });
  const shared = expect(await next(fake, x), "acquired");
  assert.deepEqual([shared.mode, shared.token, shared.writeGeneration], [
    "shared",
    held.token,
    held.token,
  ]);
  n1.crash();
  await untilServing(fake, n2);
  const rx = await resumeAt(fake, n2.t, x, reclaimOwned(3, { ...shared, requestId: 1 }));
  await using x2 = rx.client;
  assertSameGrant(expect(await next(fake, x2), "acquired"), shared);
});
