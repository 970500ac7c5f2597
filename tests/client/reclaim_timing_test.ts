/**
 * Protocol version 2's timing rules in the TypeScript client, in manual time against the
 * in-memory network (fake_network.ts): the silence check on its own timer, and a `suspend` lock
 * on a live connection (suspended at its deadline, held again at an acknowledged heartbeat, lost
 * at LEASE_EXPIRED).
 */
import assert from "node:assert/strict";
import { connectWith } from "../../src/client/client.ts";
import type { LockLostError } from "../../src/client/errors.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { FakeNetwork, settle } from "./fake_network.ts";

const TOKEN = 1_795_426_718_504_001;

/** Moves manual time forward, letting writes and replies through at every timer. */
async function advance(scheduler: ManualScheduler, ms: number): Promise<void> {
  const endMs = scheduler.monotonicMs() + ms;
  for (;;) {
    await settle();
    const next = scheduler.nextTimerAtMs();
    if (next === undefined || next > endMs) break;
    scheduler.advance(next - scheduler.monotonicMs());
  }
  scheduler.advance(endMs - scheduler.monotonicMs());
  await settle();
}

function setup(welcomeV2: { term: number; reclaimWindowMs: number }) {
  const scheduler = new ManualScheduler();
  const net = new FakeNetwork(() => scheduler.monotonicMs());
  net.welcomeV2 = { ...welcomeV2, valueBytesMax: 0 };
  const heartbeats: { conn: number; requestId: number; atMs: number }[] = [];
  let acking = true;
  net.onRequest = (conn, m) => {
    if (m.type === "heartbeat") {
      heartbeats.push({
        conn: net.conns.indexOf(conn),
        requestId: m.requestId,
        atMs: scheduler.monotonicMs(),
      });
      if (acking) conn.send({ type: "heartbeat_ack", requestId: m.requestId, renewed: 1 });
    } else if (m.type === "acquire") {
      conn.send({
        type: "acquired",
        requestId: m.requestId,
        name: m.name,
        token: TOKEN,
        leaseMs: m.leaseMs || 15_000,
        ticket: new Uint8Array(16).fill(3),
      });
    }
  };
  return {
    scheduler,
    net,
    heartbeats,
    setAcking: (on: boolean) => acking = on,
  };
}

Deno.test("silence: with several nodes a connection is left 3 s after an unanswered heartbeat, on its own timer, not at the next heartbeat", async () => {
  const { scheduler, net, heartbeats, setAcking } = setup({ term: 0, reclaimWindowMs: 0 });
  setAcking(false); // a frozen leader
  const connecting = connectWith(
    { addrs: ["127.0.0.1:7400", "127.0.0.1:7401"], scheduler },
    { dial: net.dial, random: () => 0 },
  );
  await settle();
  const client = await connecting;
  // I/O timeout 30 s, nothing owned: a heartbeat every 10 s.
  await advance(scheduler, 11_000);
  assert.equal(heartbeats.length, 1);
  const firstMs = heartbeats[0].atMs;
  await advance(scheduler, firstMs + 2_999 - scheduler.monotonicMs());
  assert.equal(net.conns[0].closed, false);
  await advance(scheduler, 1);
  assert.equal(net.conns[0].closedByClient, true, "left 3 s after it, not at the next heartbeat");
  await advance(scheduler, 10);
  assert.equal(net.conns.length, 2, "reconnected");
  await client.close();
  await advance(scheduler, 2_000);
});

Deno.test("suspend: on a live connection a suspend lock past its deadline is suspended, held again at an acknowledged heartbeat, lost at LEASE_EXPIRED", async () => {
  const { scheduler, net, heartbeats, setAcking } = setup({ term: 0, reclaimWindowMs: 0 });
  const connecting = connectWith({ addr: "127.0.0.1:7400", scheduler, reconnect: false }, {
    dial: net.dial,
  });
  await settle();
  const client = await connecting;
  const acquiring = client.acquire("x", { leaseMs: 3_000, suspend: true });
  await settle();
  const lock = await acquiring;
  const heard: string[] = [];
  lock.addEventListener("suspend", () => heard.push("suspend"));
  lock.addEventListener("resume", () => heard.push("resume"));
  setAcking(false);
  // Heartbeats every 1 s, none answered: the deadline is 0 + 3000 - 300 = 2700 ms.
  await advance(scheduler, 2_699);
  assert.deepEqual([lock.state, heard], ["held", []]);
  await advance(scheduler, 1);
  assert.deepEqual([lock.state, lock.suspended, lock.lost.aborted, heard], [
    "suspended",
    true,
    false,
    ["suspend"],
  ]);
  assert.deepEqual(net.last.sent("release"), [], "not released: it may come back");
  // The ACK of the heartbeat sent at 2 s arrives at 3 s: the lease ran on (no LEASE_EXPIRED
  // before it), confirmed until 2000 + 2700.
  await advance(scheduler, 300);
  const hb = heartbeats.find((h) => h.atMs === 2_000)!;
  net.last.send({ type: "heartbeat_ack", requestId: hb.requestId, renewed: 1 });
  await settle();
  assert.deepEqual([lock.state, heard], ["held", ["suspend", "resume"]]);
  await advance(scheduler, 1_700); // past 4700: suspended again
  assert.equal(lock.state, "suspended");
  net.last.send({
    type: "error",
    requestId: net.last.sent("acquire")[0].requestId,
    code: WIRE_CODES.LEASE_EXPIRED.code,
    name: "x",
    message: "expired",
  });
  await settle();
  assert.equal(lock.state, "lost");
  assert.equal((lock.lost.reason as LockLostError).reason, "expired");
  await client.close();
  await advance(scheduler, 2_000);
});
