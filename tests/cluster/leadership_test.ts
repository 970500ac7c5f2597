/**
 * Election and self-fencing on an in-memory etcd with manual time: who leads, when a leader
 * pauses, resumes and steps down, and that the arithmetic holds when timers did not run.
 */

import assert from "node:assert/strict";
import type { Scheduler } from "../../src/clock.ts";
import type { LeadershipEvent } from "../../src/cluster/leadership.ts";
import {
  FAKE_TTL_MS as TTL_MS,
  type FakeCluster,
  fakeCluster,
  type FakeLeadership,
} from "../helpers/cluster_fixture.ts";
import { settle } from "../helpers/fake_etcd.ts";

const MARGIN_MS = 200;

/** Node "a" alone: it leads, and one keep-alive is confirmed (at 667 ms). */
async function confirmedLeader(fake: FakeCluster): Promise<FakeLeadership> {
  const a = fake.leadership("a");
  a.leadership.start();
  await settle();
  await fake.run(700);
  return a;
}

function types(events: LeadershipEvent[]): string[] {
  return events.map((e) => e.type === "stepped_down" ? `stepped_down:${e.reason}` : e.type);
}

Deno.test("a lone node leads; its term is the create revision of the leader key", async () => {
  await using fake = fakeCluster();
  const { etcd } = fake;
  const a = fake.leadership("a");
  a.leadership.start();
  await settle();
  const key = etcd.peek("test/leader");
  assert.ok(key !== undefined);
  assert.equal(a.leadership.role, "leader");
  assert.equal(a.leadership.term, key.createRevision);
  assert.equal(key.lease, a.leadership.leaseId);
  assert.deepEqual(JSON.parse(key.value), { name: "a", advertise: "a:7400", admin: "a:7401" });
  assert.ok(a.leadership.serving());
  assert.equal(a.leadership.safeUntilMs, TTL_MS);
  assert.equal(a.leadership.leader?.advertise, "a:7400");
  assert.deepEqual(types(a.events), ["elected", "leader_changed"]);
});

Deno.test("keep-alives go out every TTL/3 and move safeUntil to their send time + TTL", async () => {
  await using fake = fakeCluster();
  const { etcd } = fake;
  etcd.latencyMs = 5; // processed 5 ms after the send: safeUntil still counts from the send
  const a = fake.leadership("a");
  a.leadership.start();
  await fake.run(2_100);
  const granted = etcd.requests.find((r) => r.op === "grant")!.sentAtMs;
  const sends = etcd.requests.filter((r) => r.op === "keepalive").map((r) => r.sentAtMs);
  assert.equal(sends.length, 3);
  // The first goes TTL/3 after the grant's answer (5 ms, seen at the next 10 ms step).
  assert.equal(Math.round(sends[0] - granted), 677);
  assert.deepEqual([sends[1] - sends[0], sends[2] - sends[1]].map(Math.round), [667, 667]);
  assert.equal(a.leadership.safeUntilMs, sends[2] + TTL_MS);
  assert.equal(a.leadership.role, "leader");
});

Deno.test("a standby sees the leader, and campaigns when the key goes with the leader's lease", async () => {
  await using fake = fakeCluster();
  const a = fake.leadership("a");
  const b = fake.leadership("b");
  a.leadership.start();
  await settle();
  b.leadership.start();
  await settle();
  assert.equal(b.leadership.role, "standby");
  assert.equal(b.leadership.leader?.name, "a");
  assert.equal(b.leadership.serving(), false);
  const termA = a.leadership.term;
  await fake.run(1_000);
  // a dies without a word (SIGKILL): its lease runs out, then b is elected.
  const safeUntilA = a.leadership.safeUntilMs;
  a.leadership.close();
  await fake.run(3_000);
  assert.equal(b.leadership.role, "leader");
  assert.ok(b.leadership.term > termA);
  assert.ok(
    b.leadership.electedAtMs >= safeUntilA,
    `b elected at ${b.leadership.electedAtMs}, before a's safeUntil ${safeUntilA}`,
  );
  assert.deepEqual(types(b.events), [
    "leader_changed",
    "leader_changed",
    "elected",
    "leader_changed",
  ]);
});

Deno.test("a leader whose keep-alives go unanswered pauses before safeUntil − margin", async () => {
  await using fake = fakeCluster();
  const { etcd } = fake;
  const a = await confirmedLeader(fake); // one keep-alive confirmed at 667
  const lastConfirmedSend = 2_000 / 3;
  etcd.setMode("stall");
  const pauseAt = lastConfirmedSend + TTL_MS - MARGIN_MS;
  await fake.run(pauseAt - 700 - 10, 5);
  assert.equal(a.leadership.role, "leader");
  assert.ok(a.leadership.serving());
  await fake.run(15, 5);
  assert.equal(a.leadership.role, "paused");
  assert.equal(a.leadership.serving(), false);
  assert.deepEqual(types(a.events).slice(-1), ["paused"]);
});

Deno.test("a paused leader resumes without a leader change once a newer keep-alive is confirmed and its key reads back", async () => {
  await using fake = fakeCluster();
  const { etcd } = fake;
  const a = fake.leadership("a");
  const b = fake.leadership("b");
  a.leadership.start();
  await settle();
  b.leadership.start();
  await settle();
  await fake.run(700);
  const term = a.leadership.term;
  // etcd stalls (an etcd leader election); the new etcd leader extends every lease.
  etcd.setMode("stall");
  await fake.run(1_850);
  assert.equal(a.leadership.role, "paused");
  etcd.extendLeases(3_000);
  const getsBefore = etcd.count("get");
  etcd.setMode("up");
  await fake.run(300);
  assert.equal(a.leadership.role, "leader");
  assert.equal(a.leadership.term, term);
  assert.ok(etcd.count("get") > getsBefore, "resumed without reading the key");
  assert.ok(a.leadership.serving());
  const resumed = a.events.find((e) => e.type === "resumed");
  assert.ok(resumed !== undefined && resumed.type === "resumed" && resumed.pausedMs > 0);
  assert.equal(b.leadership.role, "standby");
  assert.equal(b.leadership.leader?.term, term);
  assert.ok(!types(a.events).some((t) => t.startsWith("stepped_down")));
  a.leadership.close();
});

Deno.test("a paused leader does not resume on a confirmation of a keep-alive sent before the pause", async () => {
  await using fake = fakeCluster();
  const { etcd } = fake;
  const a = await confirmedLeader(fake);
  etcd.setMode("stall");
  await fake.run(1_790); // paused at 2466; keep-alives sent since then are stalled
  assert.equal(a.leadership.role, "paused");
  a.leadership.serving(); // nothing changes while etcd says nothing
  assert.equal(a.leadership.role, "paused");
});

Deno.test("a leader frozen past safeUntil pauses at its first check, before any timer runs", async () => {
  await using fake = fakeCluster();
  const a = await confirmedLeader(fake);
  assert.ok(a.leadership.serving());
  fake.freeze(3 * TTL_MS); // SIGSTOP for 3 × TTL: no timer ran
  assert.equal(a.leadership.role, "leader"); // nothing noticed yet...
  assert.equal(a.leadership.serving(), false); // ...but the check before a frame does
  assert.equal(a.leadership.role, "paused");
  // On waking, its lease is gone: it steps down instead of resuming, and (alone) is elected
  // again in a new term.
  const term = a.leadership.term;
  await fake.run(200);
  assert.deepEqual(types(a.events).slice(2), [
    "paused",
    "stepped_down:lease_expired",
    "leader_changed",
    "elected",
    "leader_changed",
  ]);
  assert.ok(a.leadership.term > term);
});

Deno.test("a paused leader whose key another node now holds steps down as deposed", async () => {
  await using fake = fakeCluster();
  const { etcd } = fake;
  const a = await confirmedLeader(fake);
  etcd.setMode("stall");
  await fake.run(1_800);
  assert.equal(a.leadership.role, "paused");
  // Meanwhile an operator replaced the key (same lease, so the keep-alive still confirms).
  etcd.deleteDirect("test/leader");
  etcd.putDirect("test/leader", JSON.stringify({ name: "x", advertise: "x:1", admin: null }));
  etcd.extendLeases(3_000);
  etcd.setMode("up");
  await fake.run(200);
  assert.ok(types(a.events).includes("stepped_down:deposed"), types(a.events).join());
  assert.equal(a.leadership.leader?.name, "x");
});

Deno.test("a leader steps down when its key is deleted (watch), then campaigns again", async () => {
  await using fake = fakeCluster();
  const { etcd } = fake;
  const a = fake.leadership("a");
  a.leadership.start();
  await fake.run(100);
  const term = a.leadership.term;
  etcd.deleteDirect("test/leader");
  await fake.run(100);
  assert.ok(types(a.events).includes("stepped_down:key_lost"));
  assert.equal(a.leadership.role, "leader"); // re-elected with a new lease and term
  assert.ok(a.leadership.term > term);
});

Deno.test("a paused leader cut off from etcd gives up at safeUntil + TTL (etcd_unreachable)", async () => {
  await using fake = fakeCluster();
  const { etcd } = fake;
  const a = await confirmedLeader(fake);
  const safeUntil = a.leadership.safeUntilMs;
  etcd.setMode("down");
  await fake.run(safeUntil + TTL_MS - 700 - 20);
  assert.equal(a.leadership.role, "paused");
  await fake.run(40);
  assert.ok(types(a.events).includes("stepped_down:etcd_unreachable"));
  assert.equal(a.leadership.role, "starting");
  const stepped = a.events.find((e) => e.type === "stepped_down");
  assert.ok(stepped?.type === "stepped_down" && stepped.pausedMs! >= TTL_MS + MARGIN_MS - 20);
});

Deno.test("resign hands over at once: the key is deleted and a standby is elected within a round trip", async () => {
  await using fake = fakeCluster();
  const { etcd } = fake;
  const a = fake.leadership("a");
  const b = fake.leadership("b");
  a.leadership.start();
  await settle();
  b.leadership.start();
  await fake.run(500);
  const leaseA = a.leadership.leaseId!;
  await a.leadership.resign();
  await settle();
  assert.equal(a.leadership.role, "stopped");
  assert.equal(etcd.leaseExists(leaseA), false);
  assert.equal(b.leadership.role, "leader");
  assert.deepEqual(types(a.events).slice(-1), ["stepped_down:shutdown"]);
});

Deno.test("a campaign whose answer was lost still makes the node leader (the read finds its key)", async () => {
  await using fake = fakeCluster();
  const a = fake.leadership("a");
  a.leadership.start();
  await settle(); // the lease is granted, the read done, the campaign sent
  assert.equal(a.leadership.role, "leader");
  a.leadership.close();

  // Now with the campaign's answer lost: etcd stalls right after the grant.
  await using fake2 = fakeCluster();
  const etcd2 = fake2.etcd;
  const c = fake2.leadership("c");
  const realTxn = etcd2.txn.bind(etcd2);
  let dropped = false;
  etcd2.txn = (compare, success, failure, options) => {
    const result = realTxn(compare, success, failure, options);
    if (dropped) return result;
    dropped = true;
    return result.then(() => Promise.reject(new Error("connection reset")));
  };
  c.leadership.start();
  await fake2.run(400);
  assert.equal(c.leadership.role, "leader");
  assert.equal(c.leadership.term, etcd2.peek("test/leader")!.createRevision);
});

Deno.test("a standby whose watch went silent still sees the deletion by re-reading every TTL", async () => {
  await using fake = fakeCluster();
  const { etcd } = fake;
  const a = fake.leadership("a");
  const b = fake.leadership("b");
  a.leadership.start();
  await settle();
  b.leadership.start();
  await fake.run(100);
  // Black-hole the watch streams for a moment (they stay silent), then etcd answers again.
  etcd.setMode("stall");
  etcd.setMode("up");
  a.leadership.close();
  await fake.run(2_000 + 2_000 + 100);
  assert.equal(b.leadership.role, "leader");
});

Deno.test("a standby whose lease expired while etcd was unreachable gets a new one", async () => {
  await using fake = fakeCluster();
  const { etcd } = fake;
  const a = fake.leadership("a");
  const b = fake.leadership("b");
  a.leadership.start();
  await settle();
  b.leadership.start();
  await fake.run(100);
  const leaseB = b.leadership.leaseId!;
  etcd.setMode("down");
  await fake.run(3_000);
  etcd.setMode("up");
  await fake.run(1_000);
  assert.ok(b.leadership.leaseId !== null && b.leadership.leaseId !== leaseB);
  a.leadership.close();
});

Deno.test("a win reported by the watch before the campaign's answer elects the node once", async () => {
  await using fake = fakeCluster();
  const { etcd } = fake;
  // Answers come 5 ms after etcd processed the request; the watch stream carries the change
  // at once: the standby sees its own key before it reads that its campaign won.
  etcd.answerDelayMs = 5;
  const a = fake.leadership("a");
  const b = fake.leadership("b");
  a.leadership.start();
  await fake.run(100);
  b.leadership.start();
  await fake.run(100);
  assert.equal(b.leadership.role, "standby");
  const resigned = a.leadership.resign();
  await fake.run(100);
  await resigned;
  assert.equal(b.leadership.role, "leader");
  const elected = b.events.filter((e) => e.type === "elected");
  assert.deepEqual(elected, [{ type: "elected", term: b.leadership.term }]);
});

// ---- regressions found while turning leadership into a state machine ---------------------

Deno.test("a pause timer that fires a little early still pauses the leader at its deadline, with nothing asking serving()", async () => {
  await using fake = fakeCluster();
  const { scheduler, etcd } = fake;
  // Real timers count whole milliseconds: setTimeout(f, 1333.4) may run f at 1333.
  const truncating: Scheduler = {
    monotonicMs: () => scheduler.monotonicMs(),
    wallMs: () => scheduler.wallMs(),
    setTimer: (callback, delayMs) =>
      scheduler.setTimer(callback, delayMs >= 1 ? Math.floor(delayMs) : delayMs),
  };
  const { leadership: a, events } = fake.leadership("a", { scheduler: truncating, admin: null });
  a.start();
  await settle();
  // Steps of 10.3 ms: the answers are read at fractional times, so the pause timers are armed
  // for fractional delays...
  await fake.run(1_000, 10.3);
  etcd.setMode("stall"); // ...and then no confirmation comes
  const deadlineMs = a.safeUntilMs - MARGIN_MS;
  await fake.run(deadlineMs - scheduler.monotonicMs() - 20, 10.3);
  assert.equal(a.role, "leader");
  await fake.run(20.5, 0.25);
  // Before the fix the timer found the deadline 0.x ms ahead, and nothing armed it again: the
  // node stayed in role "leader" (shown to operators, no faster re-checks, no pause limit).
  assert.equal(a.role, "paused");
  assert.deepEqual(types(events).slice(-1), ["paused"]);
  a.close();
});

Deno.test("a late failure of a read from before a step-down does not cancel the retries of the new lease", async () => {
  await using fake = fakeCluster();
  const { etcd } = fake;
  let getDelayMs = 0;
  const client = etcd.client({ requestDelayMs: (op) => op === "get" ? getDelayMs : 0 });
  const { leadership: a, events } = fake.leadership("a", { etcd: client, admin: null });
  a.start();
  await fake.run(100);
  assert.equal(a.role, "leader");
  // The watch breaks: the leader reads the key again, and that read will time out (TTL/2).
  getDelayMs = 5_000;
  client.breakWatches();
  await fake.run(300);
  // Meanwhile it steps down (its key is gone), and etcd refuses its new lease for a while.
  etcd.setMode("down");
  a.deposed(undefined);
  assert.equal(a.role, "starting");
  await fake.run(1_500); // the old read fails in here
  etcd.setMode("up");
  getDelayMs = 0;
  await fake.run(5_000);
  // Before the fix the old read's failure replaced the grant's retry timer with one for the old
  // lease, which did nothing: the node stayed "starting" without a lease for good.
  assert.equal(a.role, "leader", types(events).join());
  assert.ok(a.leaseId !== null);
  a.close();
  client.close();
});

Deno.test("a leader deposed by a read starts no watch until it has a new lease", async () => {
  await using fake = fakeCluster();
  const { scheduler, etcd } = fake;
  let silent = false;
  let dropKeepAliveAnswers = false;
  let grantDelayMs = 0;
  const client = etcd.client({
    dropWatchBatch: () => silent,
    dropAnswer: (op) => op === "keepalive" && dropKeepAliveAnswers,
    requestDelayMs: (op) => op === "grant" ? grantDelayMs : 0,
    scheduler,
  });
  const { leadership: a, events } = fake.leadership("a", { etcd: client, admin: null });
  a.start();
  await fake.run(100);
  const leaseA = a.leaseId!;
  // Its watch goes silent; an operator replaces the key (on a's lease, so keep-alives still
  // confirm); a keep-alive fails, the next succeeds: a reads the key again and is deposed.
  silent = true;
  etcd.deleteDirect("test/leader");
  etcd.putDirect(
    "test/leader",
    JSON.stringify({ name: "x", advertise: "x:1", admin: null }),
    leaseA,
  );
  dropKeepAliveAnswers = true;
  grantDelayMs = 1_000; // the new lease takes a while
  await fake.run(700); // the keep-alive at 667 goes unanswered (times out at 1333)
  dropKeepAliveAnswers = false;
  silent = false;
  await fake.run(800);
  assert.ok(types(events).includes("stepped_down:deposed"), types(events).join());
  // The key changes again while the new lease is on its way.
  etcd.putDirect("test/leader", JSON.stringify({ name: "y", advertise: "y:1", admin: null }));
  await fake.run(50);
  // Before the fix the read's watch was started for the lease-less next life: its events made
  // the node a "standby" without a lease.
  assert.equal(a.role, "starting");
  assert.equal(a.leaseId, null);
  a.close();
  client.close();
});

Deno.test("a late answer of an older campaign does not elect a leader again with an older term", async () => {
  await using fake = fakeCluster();
  const { scheduler, etcd } = fake;
  let txnDelayMs = 0;
  const client = etcd.client({
    dropWatchBatch: () => true, // silent watch: b learns only from answers and reads
    answerDelayMs: (op) => op === "txn" ? txnDelayMs : 0,
    scheduler,
  });
  const { leadership: b, events } = fake.leadership("b", { etcd: client, admin: null });
  etcd.putDirect("test/leader", JSON.stringify({ name: "x", advertise: "x:1", admin: null }));
  b.start();
  await fake.run(100);
  assert.equal(b.role, "standby");
  // The key goes; b's re-read (every TTL) finds it absent and campaigns: that answer is slow
  // (but within the request's timeout, TTL/2).
  etcd.deleteDirect("test/leader");
  txnDelayMs = 900;
  for (let i = 0; i < 300 && etcd.peek("test/leader") === undefined; i++) await fake.run(10);
  const first = etcd.peek("test/leader")!;
  assert.equal(first.lease, b.leaseId);
  assert.equal(b.role, "standby");
  // An operator deletes b's new key before b heard it won; b's watch breaks, it reads again and
  // wins a second time, and hears of that win first.
  etcd.deleteDirect("test/leader");
  txnDelayMs = 0;
  client.breakWatches();
  await fake.run(400);
  const second = etcd.peek("test/leader")!;
  assert.ok(second.createRevision > first.createRevision);
  assert.equal(b.term, second.createRevision);
  await fake.run(600); // the first campaign's answer arrives
  // Before the fix b was elected again, with the older term.
  assert.deepEqual(events.filter((e) => e.type === "elected"), [
    { type: "elected", term: second.createRevision },
  ]);
  assert.equal(b.term, second.createRevision);
  b.close();
  client.close();
});
