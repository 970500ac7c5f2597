/**
 * The ownership records batcher (design §3.1, deterministic test #12) on an in-memory etcd with
 * manual time: W1 (a grant waits for its record, the fast path allocates nothing), W2 (a floor
 * commits before the next ACQUIRED), W3 (linger, cancel, re-put while a delete is in flight),
 * coalescing, the 128-operation split, a deposed leader's failed compare, unknown outcomes, the
 * hand-over flush, and the takeover read (pages at one revision, untrusted values).
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { type Etcd, EtcdError, type KeyValue } from "../../src/cluster/etcd.ts";
import { prefixRangeEnd } from "../../src/cluster/etcd_http.ts";
import { formatOwnershipRecord, parseOwnershipRecord } from "../../src/cluster/ownership_record.ts";
import {
  OwnershipRecords,
  type OwnershipRecordsOptions,
  RecordsNotCommitted,
} from "../../src/cluster/ownership_records.ts";
import { CLUSTER_RECORD_TXN_OPS_MAX, TOKEN_MAX } from "../../src/limits.ts";
import { FakeEtcd, settle } from "../helpers/fake_etcd.ts";

const WALL_MS = Date.UTC(2026, 0, 1);
const LINGER_MS = 2_000;
const RETRY_MS = 250;

/** Makes `name` the leader in etcd and returns its term. */
function elect(etcd: FakeEtcd, name: string): number {
  etcd.deleteDirect("test/leader");
  return etcd.putDirect("test/leader", JSON.stringify({ name, advertise: name, admin: null }))
    .createRevision;
}

interface Setup {
  scheduler: ManualScheduler;
  etcd: FakeEtcd;
  records: OwnershipRecords;
  term: number;
  /** Locks the "engine" reports idle. */
  idle: Set<string>;
  deposed: (KeyValue | undefined)[];
  retries: unknown[];
}

async function setup(
  options: Partial<OwnershipRecordsOptions> & { prepare?: (etcd: FakeEtcd) => void } = {},
): Promise<Setup> {
  const scheduler = new ManualScheduler(WALL_MS, 0);
  const etcd = new FakeEtcd(scheduler);
  options.prepare?.(etcd);
  const term = elect(etcd, "a");
  const idle = new Set<string>();
  const deposed: (KeyValue | undefined)[] = [];
  const retries: unknown[] = [];
  const records = new OwnershipRecords({
    etcd,
    scheduler,
    cluster: "test",
    requestTimeoutMs: 1_000,
    lingerMs: LINGER_MS,
    retryMs: RETRY_MS,
    isIdle: (name) => idle.has(name),
    onDeposed: (kv) => deposed.push(kv),
    onRetry: (error) => retries.push(error),
    ...options,
  });
  records.begin(term, await records.load());
  return { scheduler, etcd, records, term, idle, deposed, retries };
}

function stored(etcd: FakeEtcd, name: string): unknown {
  const kv = etcd.peek(`test/own/${name}`);
  return kv === undefined ? undefined : JSON.parse(kv.value);
}

/** Tracks a promise's outcome without awaiting it. */
function track(promise: Promise<void> | null): { state: string; error?: unknown } {
  const out: { state: string; error?: unknown } = { state: "pending" };
  assert.ok(promise !== null, "expected a wait, got the fast path");
  promise.then(() => (out.state = "resolved"), (error) => {
    out.state = "rejected";
    out.error = error;
  });
  return out;
}

/** Sizes of the write transactions etcd saw (the records' txns, in order). */
function txnSizes(etcd: FakeEtcd, sizes: number[]): void {
  const txn = etcd.txn.bind(etcd);
  etcd.txn = (compare, success, failure, options) => {
    sizes.push(success.length);
    return txn(compare, success, failure, options);
  };
}

Deno.test("W1: a cold grant waits for one commit of {t: term, f: 0}; the next grant is the fast path", async () => {
  const { etcd, records, term } = await setup();
  assert.equal(records.state("jobs/a"), "absent");
  const wait = track(records.beforeDeliver("jobs/a"));
  assert.equal(records.state("jobs/a"), "putting");
  assert.equal(records.stats.grantsWaitingCommit, 1);
  await settle();
  assert.equal(wait.state, "resolved");
  assert.deepEqual(stored(etcd, "jobs/a"), { t: term, f: 0 });
  assert.equal(records.state("jobs/a"), "present");
  const txns = etcd.count("txn");
  assert.equal(records.beforeDeliver("jobs/a"), null);
  assert.equal(records.beforeDeliver("jobs/a", true), null);
  await settle();
  assert.equal(etcd.count("txn"), txns, "no write for a grant on a present record");
  const stats = records.stats;
  assert.equal(stats.records, 1);
  assert.deepEqual(stats.commits, { held: 1, floor: 0, delete: 0 });
  assert.equal(stats.grantsWaitingCommit, 0);
  assert.equal(stats.batchOpsSum, 1);
  assert.equal(stats.commitSecondsCount, 1);
});

Deno.test("W1: a record of an earlier term is rewritten for a fresh grant but not for a restored one", async () => {
  const { etcd, records, term } = await setup({
    prepare: (etcd) => {
      etcd.putDirect("test/own/old", formatOwnershipRecord({ term: 1, floors: [40] }));
    },
  });
  assert.ok(term > 1);
  assert.equal(records.state("old"), "present");
  assert.equal(records.floor("old"), 40);
  assert.equal(records.beforeDeliver("old", true), null, "a reclaim kept: no write");
  const wait = track(records.beforeDeliver("old"));
  await settle();
  assert.equal(wait.state, "resolved");
  assert.deepEqual(stored(etcd, "old"), { t: term, f: 40 }, "the floor is kept, the term moves");
  assert.equal(records.beforeDeliver("old"), null);
});

Deno.test("coalescing: operations queued while a transaction is in flight go out as one, one key once", async () => {
  const { scheduler, etcd, records, term } = await setup();
  const sizes: number[] = [];
  txnSizes(etcd, sizes);
  etcd.latencyMs = 10;
  const first = track(records.beforeDeliver("a"));
  await settle();
  // In flight: everything below waits for the next batch.
  const b = track(records.beforeDeliver("b"));
  const c = track(records.beforeDeliver("c"));
  const b2 = track(records.beforeDeliver("b"));
  records.ended("a", 5, false);
  records.ended("a", 9, false);
  records.ended("a", 7, false);
  const a2 = track(records.beforeDeliver("a"));
  assert.equal(records.state("a"), "putting");
  scheduler.advance(10);
  await settle();
  assert.equal(first.state, "resolved");
  assert.equal(a2.state, "pending", "the floor of a waits for the second batch");
  scheduler.advance(10);
  await settle();
  assert.deepEqual(sizes, [1, 3], "a; then a, b, c once each");
  for (const w of [b, c, b2, a2]) assert.equal(w.state, "resolved");
  assert.deepEqual(stored(etcd, "a"), { t: term, f: 9 });
  assert.deepEqual(stored(etcd, "b"), { t: term, f: 0 });
  assert.deepEqual(records.stats.commits, { held: 3, floor: 1, delete: 0 });
  assert.equal(records.stats.batchOpsSum, 4);
  assert.equal(records.stats.batchOpsCount, 2);
});

Deno.test("split: 300 cold names go out as 128 + 128 + 44, one transaction in flight at a time", async () => {
  const { scheduler, etcd, records } = await setup();
  assert.ok(CLUSTER_RECORD_TXN_OPS_MAX <= etcd.maxTxnOps, "within etcd's --max-txn-ops");
  const sizes: number[] = [];
  txnSizes(etcd, sizes);
  etcd.latencyMs = 5;
  const waits = Array.from({ length: 300 }, (_, i) => track(records.beforeDeliver(`n/${i}`)));
  assert.equal(records.stats.grantsWaitingCommit, 300);
  await settle();
  assert.deepEqual(sizes, [128], "one in flight");
  scheduler.advance(5);
  await settle();
  assert.deepEqual(sizes, [128, 128]);
  assert.equal(waits.filter((w) => w.state === "resolved").length, 128);
  scheduler.advance(5);
  await settle();
  assert.deepEqual(sizes, [128, 128, 44]);
  scheduler.advance(5);
  await settle();
  assert.ok(waits.every((w) => w.state === "resolved"));
  assert.equal(records.stats.records, 300);
  assert.equal(records.stats.grantsWaitingCommit, 0);
});

Deno.test("a transaction larger than etcd allows is refused by the fake (so the split is checked)", async () => {
  const { etcd, records, retries } = await setup({ txnOpsMax: 200 });
  const wait = track(records.beforeDeliver("x"));
  for (let i = 0; i < 199; i++) records.beforeDeliver(`y/${i}`)?.catch(() => {});
  await settle();
  assert.equal(wait.state, "pending");
  assert.ok(retries[0] instanceof EtcdError);
  assert.match((retries[0] as Error).message, /too many operations/);
  assert.equal(etcd.peek("test/own/x"), undefined);
  records.end();
  await settle();
  assert.equal(wait.state, "rejected");
});

Deno.test("deposed: a failed term compare refuses the waiting grants, writes nothing and reports the new leader", async () => {
  const { etcd, records, deposed } = await setup();
  const newTerm = elect(etcd, "b");
  const wait = track(records.beforeDeliver("jobs/x"));
  await settle();
  assert.equal(wait.state, "rejected");
  assert.ok(wait.error instanceof RecordsNotCommitted);
  assert.equal(etcd.peek("test/own/jobs/x"), undefined);
  assert.equal(deposed.length, 1);
  assert.equal(deposed[0]?.createRevision, newTerm);
  assert.equal(records.term, 0);
  assert.equal(records.stats.grantsWaitingCommit, 0);
  // A later grant is refused too, without a request.
  const txns = etcd.count("txn");
  const later = track(records.beforeDeliver("jobs/y"));
  await settle();
  assert.equal(later.state, "rejected");
  assert.equal(etcd.count("txn"), txns);
});

Deno.test("unknown outcome: an unanswered transaction is sent again after the retry delay, later ones wait", async () => {
  const { scheduler, etcd, records, retries, term } = await setup();
  etcd.setMode("down");
  const a = track(records.beforeDeliver("a"));
  await settle();
  assert.equal(retries.length, 1);
  const b = track(records.beforeDeliver("b"));
  etcd.setMode("up");
  await settle();
  assert.equal(a.state, "pending");
  assert.equal(b.state, "pending");
  scheduler.advance(RETRY_MS);
  await settle();
  assert.equal(a.state, "resolved");
  assert.equal(b.state, "resolved");
  assert.deepEqual(stored(etcd, "a"), { t: term, f: 0 });
  assert.deepEqual(stored(etcd, "b"), { t: term, f: 0 });
});

Deno.test("unknown outcome: a transaction that landed but whose answer was lost is idempotent when sent again", async () => {
  const scheduler = new ManualScheduler(WALL_MS, 0);
  const fake = new FakeEtcd(scheduler);
  const term = elect(fake, "a");
  let txns = 0;
  const etcd = fake.client({ dropAnswer: (op) => op === "txn" && ++txns === 2, scheduler });
  const retries: unknown[] = [];
  const records = new OwnershipRecords({
    etcd,
    scheduler,
    cluster: "test",
    requestTimeoutMs: 1_000,
    lingerMs: LINGER_MS,
    retryMs: RETRY_MS,
    isIdle: () => false,
    onDeposed: () => assert.fail("not deposed"),
    onRetry: (error) => retries.push(error),
  });
  records.begin(term, await records.load());
  records.beforeDeliver("k")?.catch(() => {});
  await settle();
  records.ended("k", 12, false);
  const wait = track(records.beforeDeliver("k"));
  await settle();
  assert.deepEqual(JSON.parse(fake.peek("test/own/k")!.value), { t: term, f: 12 }, "it landed");
  assert.equal(wait.state, "pending", "but nobody heard so");
  scheduler.advance(1_000);
  await settle();
  assert.equal(retries.length, 1);
  scheduler.advance(RETRY_MS);
  await settle();
  assert.equal(wait.state, "resolved");
  assert.deepEqual(JSON.parse(fake.peek("test/own/k")!.value), { t: term, f: 12 });
  assert.equal(records.floor("k"), 12);
});

Deno.test("W2: a non-graceful end commits the floor before the next ACQUIRED of the lock, graceful ends write nothing", async () => {
  const { etcd, records, term } = await setup();
  track(records.beforeDeliver("L"));
  await settle();
  const txns = etcd.count("txn");
  records.ended("L", 100, true);
  assert.equal(records.beforeDeliver("L"), null, "a graceful hand-off: no write, no wait");
  assert.equal(etcd.count("txn"), txns);
  // The push hand-off of an expiry: ended, then the successor's grant in the same engine step.
  records.ended("L", 101, false);
  assert.equal(records.state("L"), "putting");
  const order: string[] = [];
  const next = records.beforeDeliver("L");
  assert.ok(next !== null);
  const done = next.then(() =>
    order.push(`ACQUIRED after f=${JSON.parse(etcd.peek("test/own/L")!.value).f}`)
  );
  await settle();
  await done;
  assert.deepEqual(order, ["ACQUIRED after f=101"]);
  assert.deepEqual(stored(etcd, "L"), { t: term, f: 101 });
  // A lower or equal token (or one of a lock without a record) changes nothing.
  records.ended("L", 90, false);
  records.ended("L", 101, false);
  records.ended("never-held", 5, false);
  assert.equal(records.beforeDeliver("L"), null);
  assert.equal(records.state("never-held"), "absent");
  await settle();
  assert.equal(etcd.count("txn"), txns + 1);
  assert.deepEqual(records.stats.commits, { held: 1, floor: 1, delete: 0 });
});

Deno.test("W2: floors are kept per slot, and a one-slot record stays a number", async () => {
  const { etcd, records, term } = await setup();
  track(records.beforeDeliver("sem"));
  await settle();
  records.ended("sem", 30, false, 2);
  await settle();
  assert.deepEqual(stored(etcd, "sem"), { t: term, f: [0, 0, 30] });
  records.ended("sem", 20, false, 0);
  records.ended("sem", 25, false, 2);
  await settle();
  assert.deepEqual(stored(etcd, "sem"), { t: term, f: [20, 0, 30] });
  assert.equal(records.floor("sem", 2), 30);
  assert.equal(records.floor("sem", 5), 0);
});

Deno.test("W3: an idle lock's record is deleted after the linger, not before", async () => {
  const { scheduler, etcd, records, idle } = await setup();
  track(records.beforeDeliver("L"));
  await settle();
  idle.add("L");
  records.idle("L");
  scheduler.advance(LINGER_MS - 1);
  await settle();
  assert.equal(records.state("L"), "present");
  scheduler.advance(1);
  assert.equal(records.state("L"), "deleting");
  await settle();
  assert.equal(records.state("L"), "absent");
  assert.equal(etcd.peek("test/own/L"), undefined);
  assert.equal(records.stats.records, 0);
  assert.deepEqual(records.stats.commits, { held: 1, floor: 0, delete: 1 });
  assert.equal(scheduler.pendingTimers, 0, "no timer left");
});

Deno.test("W3: a grant during the linger cancels the delete; an engine that says busy keeps the record", async () => {
  const { scheduler, etcd, records, idle } = await setup();
  track(records.beforeDeliver("A"));
  track(records.beforeDeliver("B"));
  track(records.beforeDeliver("C"));
  await settle();
  const txns = etcd.count("txn");
  idle.add("A");
  idle.add("C");
  for (const name of ["A", "B", "C"]) records.idle(name);
  scheduler.advance(1_000);
  assert.equal(records.beforeDeliver("A"), null, "a grant meanwhile: fast path, linger ends");
  records.busy("C");
  scheduler.advance(LINGER_MS * 3);
  await settle();
  assert.equal(etcd.count("txn"), txns, "no delete: A granted, B not idle, C busy");
  for (const name of ["A", "B", "C"]) assert.equal(records.state(name), "present");
});

Deno.test("W3: a grant while the delete is in flight re-puts the record and waits for it", async () => {
  const { scheduler, etcd, records, idle, term } = await setup();
  track(records.beforeDeliver("L"));
  await settle();
  idle.add("L");
  records.idle("L");
  etcd.latencyMs = 10;
  scheduler.advance(LINGER_MS);
  await settle();
  assert.equal(records.state("L"), "deleting");
  idle.delete("L");
  const order: string[] = [];
  const wait = records.beforeDeliver("L");
  assert.ok(wait !== null);
  const done = wait.then(() => order.push(`delivered, record ${etcd.peek("test/own/L")?.value}`));
  assert.equal(records.state("L"), "putting");
  scheduler.advance(10);
  await settle();
  assert.equal(etcd.peek("test/own/L"), undefined, "the delete landed");
  assert.deepEqual(order, []);
  scheduler.advance(10);
  await settle();
  await done;
  assert.deepEqual(order, [`delivered, record {"t":${term},"f":0}`]);
  assert.equal(records.state("L"), "present");
  assert.deepEqual(records.stats.commits, { held: 2, floor: 0, delete: 1 });
});

Deno.test("W3: a delete queued behind another transaction is dropped by a grant before it is sent", async () => {
  const { scheduler, etcd, records, idle } = await setup({ lingerMs: 0 });
  track(records.beforeDeliver("L"));
  await settle();
  etcd.latencyMs = 10;
  track(records.beforeDeliver("other"));
  idle.add("L");
  records.idle("L");
  scheduler.advance(0);
  assert.equal(records.state("L"), "deleting");
  assert.equal(records.beforeDeliver("L"), null, "the record is committed: nothing to wait for");
  scheduler.advance(20);
  await settle();
  assert.equal(records.state("L"), "present");
  assert.ok(etcd.peek("test/own/L") !== undefined);
});

Deno.test("handover: pending puts commit and idle records go without linger; busy records stay", async () => {
  const { etcd, records, idle } = await setup();
  for (const name of ["idle1", "idle2", "held"]) track(records.beforeDeliver(name));
  await settle();
  idle.add("idle1");
  idle.add("idle2");
  records.idle("idle1");
  records.ended("held", 77, false);
  const cold = track(records.beforeDeliver("cold"));
  let flushed = false;
  const flush = records.flushForHandover().then(() => (flushed = true));
  await settle();
  await flush;
  assert.ok(flushed);
  assert.equal(cold.state, "resolved");
  assert.equal(etcd.peek("test/own/idle1"), undefined);
  assert.equal(etcd.peek("test/own/idle2"), undefined);
  assert.equal(JSON.parse(etcd.peek("test/own/held")!.value).f, 77);
  assert.ok(etcd.peek("test/own/cold") !== undefined);
  assert.equal(records.stats.records, 2);
});

Deno.test("end: grants waiting for a commit are refused and the mirror is dropped", async () => {
  const { etcd, records } = await setup();
  etcd.setMode("stall");
  const wait = track(records.beforeDeliver("x"));
  records.end();
  await settle();
  assert.equal(wait.state, "rejected");
  assert.ok(wait.error instanceof RecordsNotCommitted);
  assert.equal(records.state("x"), "absent");
  assert.equal(records.stats.grantsWaitingCommit, 0);
  await assert.rejects(records.flushForHandover(), RecordsNotCommitted);
});

Deno.test("load: pages at the first page's revision, so a write during the read is not half-seen", async () => {
  const scheduler = new ManualScheduler(WALL_MS, 0);
  const fake = new FakeEtcd(scheduler);
  for (let i = 0; i < 10; i++) {
    fake.putDirect(`test/own/k${i}`, formatOwnershipRecord({ term: 3, floors: [i] }));
  }
  fake.putDirect("test/own", "not under the prefix");
  fake.putDirect("test/own0", "not under the prefix");
  fake.putDirect("test/leader", "{}");
  let pages = 0;
  const etcd: Etcd = {
    ...fake.client(),
    range: async (prefix, options) => {
      const page = await fake.range(prefix, options);
      if (++pages === 1) {
        fake.putDirect("test/own/k9", formatOwnershipRecord({ term: 4, floors: [99] }));
        fake.putDirect("test/own/z", formatOwnershipRecord({ term: 4, floors: [1] }));
        fake.deleteDirect("test/own/k8");
      }
      return page;
    },
  };
  const records = new OwnershipRecords({
    etcd,
    scheduler,
    cluster: "test",
    requestTimeoutMs: 1_000,
    lingerMs: LINGER_MS,
    pageKeys: 3,
    isIdle: () => false,
    onDeposed: () => {},
  });
  const loaded = await records.load();
  assert.equal(loaded.pages, 4);
  assert.deepEqual([...loaded.floors.keys()], Array.from({ length: 10 }, (_, i) => `k${i}`));
  assert.equal(loaded.floors.get("k9"), 9);
  assert.deepEqual(loaded.records.get("k9"), { term: 3, floors: [9] });
  assert.deepEqual(loaded.invalid, []);
});

Deno.test("load: starts over when the revision is compacted between pages", async () => {
  const scheduler = new ManualScheduler(WALL_MS, 0);
  const fake = new FakeEtcd(scheduler);
  for (let i = 0; i < 5; i++) fake.putDirect(`test/own/k${i}`, `{"t":2,"f":${i}}`);
  let pages = 0;
  const etcd: Etcd = {
    ...fake.client(),
    range: async (prefix, options) => {
      const page = await fake.range(prefix, options);
      if (++pages === 1) {
        fake.putDirect("test/own/k5", `{"t":2,"f":5}`);
        fake.compact();
      }
      return page;
    },
  };
  const records = new OwnershipRecords({
    etcd,
    scheduler,
    cluster: "test",
    requestTimeoutMs: 1_000,
    lingerMs: LINGER_MS,
    pageKeys: 2,
    isIdle: () => false,
    onDeposed: () => {},
  });
  const loaded = await records.load();
  assert.equal(loaded.floors.size, 6, "the second attempt reads the newest revision");
  assert.equal(loaded.revision, fake.revision);
});

Deno.test("load: untrusted values: a bad record reserves its lock with floor TOKEN_MAX, a bad name is skipped", async () => {
  const { records, etcd, term } = await setup({
    prepare: (etcd) => {
      etcd.putDirect("test/own/good", `{"t":2,"f":7,"x":"a later field"}`);
      etcd.putDirect("test/own/slots", `{"t":2,"f":[1,9,3]}`);
      etcd.putDirect("test/own/bad", `{"t":2,"f":-1}`);
      etcd.putDirect("test/own/..", `{"t":2,"f":1}`);
    },
  });
  const loaded = await records.load();
  assert.deepEqual(Object.fromEntries(loaded.floors), {
    good: 7,
    slots: 9,
    bad: TOKEN_MAX,
  });
  assert.deepEqual([...loaded.invalid].sort(), ["test/own/..", "test/own/bad"]);
  // The bad record is present for the mirror, of no term: the first fresh grant rewrites it.
  assert.equal(records.state("bad"), "present");
  track(records.beforeDeliver("bad"));
  await settle();
  assert.deepEqual(stored(etcd, "bad"), { t: term, f: 0 });
});

Deno.test("parseOwnershipRecord accepts exactly the stored forms", () => {
  const cases: [string, ReturnType<typeof parseOwnershipRecord>][] = [
    [`{"t":5,"f":0}`, { term: 5, floors: [0] }],
    [`{"f":12,"t":5}`, { term: 5, floors: [12] }],
    [`{"t":5,"f":[0,3]}`, { term: 5, floors: [0, 3] }],
    [`{"t":5,"f":1,"later":{"x":1}}`, { term: 5, floors: [1] }],
    [`{"t":5,"f":${Number.MAX_SAFE_INTEGER}}`, { term: 5, floors: [Number.MAX_SAFE_INTEGER] }],
    [`{"t":0,"f":1}`, null],
    [`{"t":5}`, null],
    [`{"f":1}`, null],
    [`{"t":"5","f":1}`, null],
    [`{"t":5,"f":"1"}`, null],
    [`{"t":5,"f":1.5}`, null],
    [`{"t":5,"f":-1}`, null],
    [`{"t":5,"f":9007199254740992}`, null],
    [`{"t":5,"f":[]}`, null],
    [`{"t":5,"f":[1,"2"]}`, null],
    [`{"t":5,"f":null}`, null],
    [`[5,1]`, null],
    [`null`, null],
    [`5`, null],
    [``, null],
    [`{"t":5,"f":1`, null],
    [`{"t":5,"f":[${"1,".repeat(40_000)}1]}`, null],
  ];
  for (const [text, expected] of cases) {
    assert.deepEqual(parseOwnershipRecord(text), expected, text.slice(0, 40));
  }
  for (const record of [{ term: 9, floors: [4] }, { term: 9, floors: [4, 0, 2] }]) {
    assert.deepEqual(parseOwnershipRecord(formatOwnershipRecord(record)), record);
  }
  assert.equal(formatOwnershipRecord({ term: 9, floors: [4] }), `{"t":9,"f":4}`);
});

Deno.test("W3: a put still queued for a lock that went idle is dropped; a later grant puts it again", async () => {
  const { scheduler, etcd, records, idle, term } = await setup({ lingerMs: 0 });
  etcd.latencyMs = 10;
  track(records.beforeDeliver("busy"));
  await settle();
  // Queued behind "busy": the grant's session dies before the commit and the lock is idle.
  const lost = track(records.beforeDeliver("cold"));
  idle.add("cold");
  records.idle("cold");
  scheduler.advance(0);
  assert.equal(records.state("cold"), "absent", "nothing to write for it any more");
  const again = track(records.beforeDeliver("cold"));
  assert.equal(records.state("cold"), "putting");
  for (let i = 0; i < 3; i++) {
    scheduler.advance(10);
    await settle();
  }
  assert.equal(lost.state, "resolved");
  assert.equal(again.state, "resolved");
  assert.deepEqual(stored(etcd, "cold"), { t: term, f: 0 });
});

Deno.test("the range end of a prefix is its bytes with the last one below 0xff incremented", () => {
  const text = (bytes: Uint8Array) => Array.from(bytes).join(",");
  assert.equal(text(prefixRangeEnd("a/own/")), text(new TextEncoder().encode("a/own0")));
  // "é" is C3 A9: the end is C3 AA, below every key that starts with "é".
  assert.equal(text(prefixRangeEnd("é")), "195,170");
  assert.equal(text(prefixRangeEnd("\u{10ffff}")), "244,143,191,192");
});

Deno.test("W2 with a lock-delay: its end is kept with the floor (the larger of two), survives a W1 re-put, is read back at takeover; W3 keeps the record while the delay runs, then deletes it", async () => {
  const delayed = new Set<string>();
  const idle = new Set<string>();
  const { etcd, records, term, scheduler } = await setup({
    isIdle: (name) => !idle.has(name) ? false : delayed.has(name) ? "later" : true,
  });
  records.beforeDeliver("d/a");
  await settle();
  records.ended("d/a", 7, false, 0, WALL_MS + 6_000);
  records.ended("d/a", 8, false, 0, WALL_MS + 5_000);
  await settle();
  assert.deepEqual(stored(etcd, "d/a"), { t: term, f: 8, d: WALL_MS + 6_000 });
  records.ended("d/a", 9, true, 0, WALL_MS + 9_000);
  await settle();
  assert.deepEqual(stored(etcd, "d/a"), { t: term, f: 8, d: WALL_MS + 6_000 }, "graceful: none");
  const loaded = await records.load();
  assert.deepEqual(loaded.records.get("d/a"), {
    term,
    floors: [8],
    delayUntilWallMs: WALL_MS + 6_000,
  });
  assert.deepEqual(parseOwnershipRecord('{"t":3,"f":[1,2],"d":0}'), { term: 3, floors: [1, 2] });
  assert.equal(parseOwnershipRecord('{"t":3,"f":1,"d":-1}'), null, "a bad delay end");
  idle.add("d/a");
  delayed.add("d/a");
  records.idle("d/a");
  await scheduler.advance(LINGER_MS * 2 + 10);
  await settle();
  assert.notEqual(stored(etcd, "d/a"), undefined, "kept while the delay runs");
  delayed.delete("d/a");
  await scheduler.advance(LINGER_MS + 10);
  await settle();
  assert.equal(stored(etcd, "d/a"), undefined, "deleted once the delay ended");
});

Deno.test("W3 with a lingering lock-delay and a linger of 0: the record is asked about again after the retry delay, not in a loop", async () => {
  let asked = 0;
  let delayed = true;
  const { etcd, records, scheduler } = await setup({
    lingerMs: 0,
    isIdle: () => {
      asked++;
      return delayed ? "later" : true;
    },
  });
  records.beforeDeliver("d/b");
  await settle();
  records.ended("d/b", 5, false, 0, WALL_MS + 1_000);
  records.idle("d/b");
  await scheduler.advance(RETRY_MS * 4 + 10);
  await settle();
  assert.ok(asked >= 3 && asked <= 6, `asked ${asked} times in four retry delays`);
  assert.notEqual(stored(etcd, "d/b"), undefined);
  delayed = false;
  await scheduler.advance(RETRY_MS + 10);
  await settle();
  assert.equal(stored(etcd, "d/b"), undefined);
});
