/**
 * A leader that cannot prove its leadership decides and audits nothing (issue 19.3). A node
 * frozen past its lease (SIGSTOP, a VM pause) wakes with every timer due: before the fix its
 * deadline timer expired the holder and granted the lock to the next waiter, audited with its old
 * term, seconds after a new leader may have granted the same lock; only the check before the
 * ACQUIRED frame kept the client from hearing of it. Now every decision (the deadline timer,
 * requests, a connection that ended, hand-offs) waits until the node proves its leadership again,
 * or is dropped when it steps down.
 *
 * In-process servers with real loopback sockets on the in-memory etcd and one ManualScheduler:
 * a freeze moves the clock without running any timer, then lets them all run at once.
 */

import assert from "node:assert/strict";
import type { ManualScheduler } from "../../src/clock.ts";
import { HELD_REQUESTS_PER_SESSION_MAX } from "../../src/limits.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { type Message, WAIT_FOREVER } from "../../src/wire/messages.ts";
import { FAKE_TTL_MS, type FakeCluster, fakeCluster } from "../helpers/cluster_fixture.ts";
import { type FakeEtcd, settle } from "../helpers/fake_etcd.ts";
import { RawClient } from "../helpers/raw_client.ts";

const WALL_MS = 1_700_000_000_000;

/** Reads messages until the server closes the connection (settling fake etcd in between). */
async function drain(raw: RawClient): Promise<Message[]> {
  const messages: Message[] = [];
  for (;;) {
    const message = await raw.next(5_000);
    if (message === null) return messages;
    messages.push(message);
  }
}

interface Setup {
  scheduler: ManualScheduler;
  etcd: FakeEtcd;
  holder: RawClient;
  waiter: RawClient;
  token: number;
}

/** One serving node; a holder of "a" (lease 1 s unless given) and a waiter queued behind it. */
async function setup(
  scheduler: ManualScheduler,
  etcd: FakeEtcd,
  addr: string,
  leaseMs = 1_000,
): Promise<Setup> {
  const holder = await RawClient.session(addr);
  await holder.send({ type: "acquire", requestId: 1, name: "a", leaseMs, waitMs: 0 });
  const granted = await holder.next();
  assert.ok(granted?.type === "acquired", JSON.stringify(granted));
  const waiter = await RawClient.session(addr);
  await waiter.send({
    type: "acquire",
    requestId: 1,
    name: "a",
    leaseMs: 1_000,
    waitMs: WAIT_FOREVER,
  });
  return { scheduler, etcd, holder, waiter, token: granted.token };
}

/**
 * One node that leads (keep-alives confirmed at 667 and 1333 ms), a session open to it; then etcd
 * stalls until the node has paused.
 */
async function pausedLeader(fake: FakeCluster) {
  const t = await fake.server("n1");
  await fake.run(1_500);
  const cluster = t.server.context.cluster!;
  const raw = await RawClient.session(t.addr);
  try {
    fake.etcd.setMode("stall");
    await fake.run(1_650);
    assert.equal(cluster.role, "paused");
  } catch (error) {
    await raw[Symbol.asyncDispose]();
    throw error;
  }
  return { t, cluster, raw };
}

for (const order of ["timers first", "sockets first"] as const) {
  Deno.test(`a leader frozen past its lease writes no acquire and no expiry when it wakes (${order})`, async () => {
    await using fake = fakeCluster(WALL_MS);
    const { scheduler, etcd } = fake;
    const t = await fake.server("n1");
    await fake.run(100);
    const cluster = t.server.context.cluster!;
    assert.equal(cluster.serving, true);
    const term = cluster.term;
    const s = await setup(scheduler, etcd, t.addr);
    await using holder = s.holder;
    await using waiter = s.waiter;
    const queued = await waiter.next();
    assert.equal(queued?.type, "queued");
    await fake.run(100);
    const before = t.audit.records().length;

    // SIGSTOP for 3 × TTL: the holder's lease and the node's etcd lease run out, no timer runs.
    // Meanwhile the waiter asks for another lock and heartbeats, and the holder goes away: the
    // frozen node reads all of it when it wakes.
    fake.freeze(3 * FAKE_TTL_MS);
    await waiter.send(
      { type: "acquire", requestId: 2, name: "b", leaseMs: 1_000, waitMs: WAIT_FOREVER },
      { type: "heartbeat", requestId: 3 },
    );
    holder.conn.close();
    // SIGCONT.
    if (order === "timers first") {
      scheduler.advance(0);
      await settle();
    } else {
      await settle();
      scheduler.advance(0);
    }
    await fake.run(1_000);
    const after = t.audit.records().slice(before);
    const decided = after.filter((r) => r.event === "acquire" || r.event === "release");
    // No grant, no expiry, no graceful release: only the step-down's failover ending of the
    // ownership it had (nothing else is true of it: the node cannot prove it led after its
    // lease; the holder's client stopped trusting the lock at its own deadline).
    assert.deepEqual(
      decided.map((r) => [r.event, r.lock, r.token, r.reason, r.term]),
      [["release", "a", s.token, "failover", term]],
      JSON.stringify(after),
    );
    assert.ok(after.some((r) => r.event === "stepped_down" && r.term === term));
    // The waiter heard nothing but NOT_LEADER: no ACQUIRED, no QUEUED, no HEARTBEAT_ACK.
    const heard = await drain(waiter);
    assert.deepEqual(heard.map((m) => m.type), ["error"], JSON.stringify(heard));
    assert.ok(heard[0].type === "error");
    assert.equal(heard[0].code, WIRE_CODES.NOT_LEADER.code);
    assert.equal(t.server.context.engine.stats.releasesTotal.expired, 0);
    assert.equal(t.server.context.engine.stats.releasesTotal.graceful, 0);
  });
}

Deno.test("a paused leader decides nothing until it resumes, then does what waited, in order", async () => {
  await using fake = fakeCluster(WALL_MS);
  const { scheduler, etcd } = fake;
  const t = await fake.server("n1");
  await fake.run(1_500); // keep-alives confirmed at 667 and 1333: safeUntil 3333
  const cluster = t.server.context.cluster!;
  assert.equal(cluster.serving, true);
  // A lease that ends within the node's safeUntil (3200 ≤ 3333), after its pause begins (3133).
  const s = await setup(scheduler, etcd, t.addr, 1_700);
  await using _holder = s.holder;
  await using waiter = s.waiter;
  assert.equal((await waiter.next())?.type, "queued");
  await using leaver = await RawClient.session(t.addr);
  await leaver.send({ type: "acquire", requestId: 1, name: "c", leaseMs: 1_800, waitMs: 0 });
  assert.equal((await leaver.next())?.type, "acquired");
  await settle();
  const before = t.audit.records().length;

  // etcd stops answering (an etcd leader election): the leader pauses at 3133 and may not
  // decide that the lease of "a" ran out at 3200, nor anything else, until it resumes.
  etcd.setMode("stall");
  await fake.run(1_650);
  assert.equal(cluster.role, "paused");
  await waiter.send({ type: "acquire", requestId: 2, name: "b", leaseMs: 1_000, waitMs: 0 });
  leaver.conn.close();
  await fake.run(100);
  assert.equal(cluster.role, "paused");
  assert.deepEqual(t.audit.records().slice(before), [], "a paused leader wrote audit records");
  assert.equal(t.server.context.engine.holderOf("a")?.token, s.token);

  // etcd answers again (its new leader extended every lease, before the node's ran out at
  // 3333): the leader resumes.
  etcd.extendLeases(3_000);
  const resumedAtWallMs = scheduler.wallMs();
  etcd.setMode("up");
  await fake.run(200);
  assert.equal(cluster.role, "leader");
  const after = t.audit.records().slice(before);
  assert.deepEqual(
    after.map((r) => [r.event, r.lock, r.reason ?? ""]),
    [
      ["release", "c", "graceful"], // the connection that ended during the pause
      ["release", "a", "expired"], // the deadline that passed during the pause
      ["acquire", "a", ""], // the hand-off to the waiter
      ["acquire", "b", ""], // the request the waiter sent during the pause
    ],
  );
  for (const record of after) {
    assert.ok(Date.parse(record.ts as string) >= resumedAtWallMs, JSON.stringify(record));
  }
  const replies = [await waiter.next(), await waiter.next()];
  assert.deepEqual(replies.map((m) => m?.type === "acquired" && [m.requestId, m.name]), [
    [1, "a"],
    [2, "b"],
  ]);
});

Deno.test("requests sent to a paused leader wait in the session's reader, bounded, and are answered in order once it resumes", async () => {
  await using fake = fakeCluster(WALL_MS);
  const { etcd } = fake;
  const { t, cluster, raw } = await pausedLeader(fake);
  await using client = raw;
  // Far more than a held session keeps: it stops reading, the rest waits in the kernel.
  const count = 50_000;
  const heartbeats = Array.from({ length: count }, (_, i) => ({
    type: "heartbeat" as const,
    requestId: i + 1,
  }));
  await client.send(...heartbeats);
  await fake.run(50);
  const session = [...t.server.context.connections][0];
  // At most the limit plus one read's worth (64 KiB of 9-byte frames).
  assert.ok(session.heldRequests > 0);
  assert.ok(
    session.heldRequests <= HELD_REQUESTS_PER_SESSION_MAX + Math.ceil(65_536 / 9),
    `${session.heldRequests} requests held`,
  );
  assert.equal(t.server.context.engine.stats.heartbeatsTotal, 0);
  etcd.extendLeases(3_000);
  etcd.setMode("up");
  await fake.run(100);
  assert.equal(cluster.role, "leader");
  for (let i = 1; i <= count; i++) {
    const ack = await client.next();
    assert.ok(ack?.type === "heartbeat_ack" && ack.requestId === i, JSON.stringify(ack));
  }
  assert.equal(t.server.context.engine.stats.heartbeatsTotal, count);
});

Deno.test("a paused leader that finds another node's key steps down with NOT_LEADER naming that node", async () => {
  await using fake = fakeCluster(WALL_MS);
  const { etcd } = fake;
  const { cluster, raw } = await pausedLeader(fake);
  await using client = raw;
  // Meanwhile another node leads (here an operator's hand: the key replaced on n1's lease, so
  // n1's keep-alives still confirm and it reads the key to resume). A closed loopback port.
  const lease = cluster.leadership.leaseId!;
  etcd.deleteDirect("test/leader");
  etcd.putDirect(
    "test/leader",
    JSON.stringify({ name: "n2", advertise: "127.0.0.1:1", admin: null }),
    lease,
  );
  etcd.extendLeases(3_000);
  etcd.setMode("up");
  await fake.run(200);
  const heard = await drain(client);
  const last = heard.at(-1);
  assert.ok(last?.type === "error", JSON.stringify(heard));
  assert.equal(last.code, WIRE_CODES.NOT_LEADER.code);
  // Before the machine, the step-down was reported while the node still knew itself as the
  // leader: the NOT_LEADER named no one.
  assert.equal(last.name, "127.0.0.1:1");
  assert.match(last.message, /stepped down: deposed/);
});
