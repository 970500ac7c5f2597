/** Fencing tokens reserved in etcd, on an in-memory etcd with manual time. */

import assert from "node:assert/strict";
import type { ManualScheduler } from "../../src/clock.ts";
import { ClusterTokens, TokensNotReserved } from "../../src/cluster/cluster_tokens.ts";
import type { KeyValue } from "../../src/cluster/etcd.ts";
import { clockTokenFloor } from "../../src/core/tokens.ts";
import { fakeCluster } from "../helpers/cluster_fixture.ts";
import { type FakeEtcd, settle } from "../helpers/fake_etcd.ts";

const WALL_MS = Date.UTC(2026, 0, 1);
const BLOCK = 100;

function tokens(etcd: FakeEtcd, scheduler: ManualScheduler) {
  const fenced: (KeyValue | undefined)[] = [];
  let reserved = 0;
  const t = new ClusterTokens({
    etcd,
    scheduler,
    cluster: "test",
    blockSize: BLOCK,
    requestTimeoutMs: 1_000,
    onFenced: (kv) => fenced.push(kv),
    onReserved: () => reserved++,
  });
  return { t, fenced, reservedCount: () => reserved };
}

/** Makes `name` the leader in etcd and returns its term. */
function elect(etcd: FakeEtcd, name: string): number {
  etcd.deleteDirect("test/leader");
  return etcd.putDirect("test/leader", JSON.stringify({ name, advertise: name, admin: null }))
    .createRevision;
}

Deno.test("a first term starts above the wall-clock floor and stores its first block", async () => {
  const { scheduler, etcd } = fakeCluster(WALL_MS);
  const { t } = tokens(etcd, scheduler);
  const term = elect(etcd, "a");
  await t.begin(term, WALL_MS);
  const floor = clockTokenFloor(WALL_MS);
  assert.equal(t.next(), floor + 1);
  assert.equal(t.next(), floor + 2);
  assert.equal(Number(etcd.peek("test/tokens")!.value), floor + BLOCK);
});

Deno.test("a new term starts above the stored mark even when the wall clock is behind", async () => {
  const { scheduler, etcd } = fakeCluster(WALL_MS);
  const stored = clockTokenFloor(WALL_MS) + 5_000_000;
  etcd.putDirect("test/tokens", String(stored));
  const { t } = tokens(etcd, scheduler);
  await t.begin(elect(etcd, "a"), WALL_MS);
  assert.equal(t.next(), stored + 1);
});

Deno.test("the next block is reserved in the background at half, so grants never wait at normal rates", async () => {
  const { scheduler, etcd } = fakeCluster(WALL_MS);
  const { t, reservedCount } = tokens(etcd, scheduler);
  await t.begin(elect(etcd, "a"), WALL_MS);
  const issued: number[] = [];
  for (let i = 0; i < 5 * BLOCK; i++) {
    issued.push(t.next());
    await settle(); // etcd answers between grants
  }
  for (let i = 1; i < issued.length; i++) assert.equal(issued[i], issued[i - 1] + 1);
  assert.ok(Number(etcd.peek("test/tokens")!.value) >= issued.at(-1)!);
  assert.ok(reservedCount() >= 5);
});

Deno.test("with the block used up and etcd down, next() throws TokensNotReserved; onReserved once it is back", async () => {
  const { scheduler, etcd } = fakeCluster(WALL_MS);
  const { t, reservedCount } = tokens(etcd, scheduler);
  await t.begin(elect(etcd, "a"), WALL_MS);
  etcd.setMode("down");
  for (let i = 0; i < BLOCK; i++) t.next();
  assert.throws(() => t.next(), TokensNotReserved);
  assert.equal(t.ready, false);
  await settle(); // the refusals arrive
  assert.throws(() => t.next(), TokensNotReserved);
  await settle();
  const before = reservedCount();
  etcd.setMode("up");
  scheduler.advance(300); // the retry
  await settle();
  assert.ok(reservedCount() > before);
  assert.equal(t.ready, true);
  assert.ok(t.next() > 0);
});

Deno.test("a deposed leader's reservation fails and reports the new leader key", async () => {
  const { scheduler, etcd } = fakeCluster(WALL_MS);
  const a = tokens(etcd, scheduler);
  const termA = elect(etcd, "a");
  await a.t.begin(termA, WALL_MS);
  const termB = elect(etcd, "b"); // a does not know yet
  for (let i = 0; i <= BLOCK / 2; i++) a.t.next(); // past half: the next reservation
  await settle();
  assert.equal(a.fenced.length, 1);
  assert.equal(a.fenced[0]?.createRevision, termB);
  assert.throws(() => a.t.next(), TokensNotReserved);
  assert.equal(a.t.term, 0);
});

Deno.test("tokens grow across fail-overs: each term starts above everything the last one reserved", async () => {
  const { scheduler, etcd } = fakeCluster(WALL_MS);
  const seen: number[] = [];
  for (let round = 0; round < 4; round++) {
    const { t } = tokens(etcd, scheduler);
    // The wall clock of each new leader is behind the last one's (skewed nodes).
    await t.begin(elect(etcd, `n${round}`), WALL_MS - round * 60_000);
    for (let i = 0; i < BLOCK * 0.7; i++) seen.push(t.next());
    await settle();
    t.end();
  }
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i] > seen[i - 1], `token ${i} went back`);
});

Deno.test("a reservation whose answer was lost is not applied twice, and nothing below the stored mark is issued", async () => {
  const { scheduler, etcd } = fakeCluster(WALL_MS);
  const { t } = tokens(etcd, scheduler);
  const term = elect(etcd, "a");
  const realTxn = etcd.txn.bind(etcd);
  let drop = 1; // the first block's answer is lost after etcd applied it
  etcd.txn = (c, s, f, o) => {
    const result = realTxn(c, s, f, o);
    if (drop-- <= 0) return result;
    return result.then(() => Promise.reject(new Error("connection reset")));
  };
  const begun = t.begin(term, WALL_MS);
  await settle();
  scheduler.advance(300); // retry: the mod-revision compare fails, the stored mark is adopted
  await settle();
  await begun;
  const floor = clockTokenFloor(WALL_MS);
  assert.equal(Number(etcd.peek("test/tokens")!.value), floor + BLOCK);
  assert.equal(t.next(), floor + 1);
  assert.equal(t.reservedThrough, floor + BLOCK);
});

Deno.test("next() before begin() and after end() throws", () => {
  const { scheduler, etcd } = fakeCluster(WALL_MS);
  const { t } = tokens(etcd, scheduler);
  assert.throws(() => t.next(), TokensNotReserved);
  t.end();
  assert.throws(() => t.next(), TokensNotReserved);
});
