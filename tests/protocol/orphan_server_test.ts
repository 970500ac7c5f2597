/**
 * Orphaned sessions on a real server (issue 20, "never two valid holders"), with raw
 * version-2 wire clients on loopback and the server on a manual clock: a holder whose
 * connection is reset (closed with unread bytes) keeps its lock until its lease ends, so the
 * lock is granted to no other client before; a RESUME on a new connection moves the ownership
 * with its token; the admin API shows the orphaned holder as `connected: false`.
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import type { Acquired, Message, Reclaim } from "../../src/wire/messages.ts";
import { WAIT_FOREVER } from "../../src/wire/messages.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { eventually, startTestServer, type TestServer } from "../helpers/start_server.ts";

const LEASE_MS = 5_000;

function acquiredOf(message: Message | null, requestId: number): Acquired {
  assert.ok(message?.type === "acquired", `expected ACQUIRED, got ${JSON.stringify(message)}`);
  assert.equal(message.requestId, requestId);
  return message;
}

/** A server on a manual clock with its admin API, and a v2 holder of `name` with a waiter. */
async function holderAndWaiter(name: string) {
  const scheduler = new ManualScheduler();
  const t = await startTestServer({ adminListen: "127.0.0.1:0" }, { scheduler });
  const holder = await RawClient.session(t.addr, 2);
  const waiter = await RawClient.session(t.addr, 2);
  await holder.send({ type: "acquire", requestId: 1, name, leaseMs: LEASE_MS, waitMs: 0 });
  const granted = acquiredOf(await holder.next(), 1);
  await waiter.send({
    type: "acquire",
    requestId: 1,
    name,
    leaseMs: 30_000,
    waitMs: WAIT_FOREVER,
  });
  assert.equal((await waiter.next())?.type, "queued");
  return { t, scheduler, holder, waiter, granted };
}

/**
 * Resets the holder's connection: a HEARTBEAT whose ACK is left unread, then close (a socket
 * closed with unread bytes sends RST on Linux); waits until the server orphaned the session.
 */
async function reset(t: TestServer, holder: RawClient): Promise<void> {
  await holder.send({ type: "heartbeat", requestId: 2 });
  const engine = t.server.context.engine;
  await eventually(() => engine.stats.heartbeatsTotal >= 1, "the heartbeat reached the server");
  await new Promise((resolve) => setTimeout(resolve, 50)); // the ACK reaches the socket
  await holder[Symbol.asyncDispose]();
  await eventually(() => engine.stats.sessionsOrphaned === 1, "the session is orphaned");
}

/** Moves the server's clock; the waiter heartbeats so the answer shows what came before. */
async function advance(scheduler: ManualScheduler, waiter: RawClient, ms: number, rid: number) {
  scheduler.advance(ms);
  await waiter.send({ type: "heartbeat", requestId: rid });
  const frames: Message[] = [];
  for (;;) {
    const frame = await waiter.next();
    assert.ok(frame !== null, "the waiter's connection stays open");
    if (frame.type === "heartbeat_ack" && frame.requestId === rid) return frames;
    frames.push(frame);
  }
}

async function holderJson(t: TestServer, name: string): Promise<Record<string, unknown>> {
  const response = await fetch(
    `http://${t.server.adminAddr}/api/locks/${encodeURIComponent(name)}`,
  );
  const body = await response.json();
  return body.holder;
}

Deno.test("a reset holder keeps its lock until its lease ends: no other client is granted it before, then it ends as expired", async () => {
  const { t, scheduler, holder, waiter, granted } = await holderAndWaiter("orphan/reset");
  await using _t = t;
  await using _waiter = waiter;
  await reset(t, holder);
  const shown = await holderJson(t, "orphan/reset");
  assert.deepEqual([shown.token, shown.connected], [granted.token, false]);
  assert.deepEqual(await advance(scheduler, waiter, LEASE_MS - 1, 3), [], "nothing granted yet");
  const [next] = await advance(scheduler, waiter, 1, 4);
  assert.ok(acquiredOf(next, 1).token > granted.token);
  const releases = t.audit.records().filter((r) => r.event === "release");
  assert.deepEqual(releases.map((r) => [r.token, r.reason]), [[granted.token, "expired"]]);
  assert.equal(t.server.context.engine.stats.sessionsOrphaned, 0);
});

Deno.test("a RESUME on a new connection moves the reset holder's lock with the same token; the waiter waits on", async () => {
  const { t, scheduler, holder, waiter, granted } = await holderAndWaiter("orphan/resume");
  await using _t = t;
  await using _waiter = waiter;
  const oldSession = holder.welcome!.sessionId;
  await reset(t, holder);
  assert.deepEqual(await advance(scheduler, waiter, 3_000, 3), []);
  await using fresh = await RawClient.session(t.addr, 2);
  const reclaim: Reclaim = {
    type: "reclaim",
    requestId: 2,
    kind: "owned",
    token: granted.token,
    orderTerm: 0,
    orderSeq: 0,
    leaseMs: LEASE_MS,
    waitMs: 0,
    ticket: granted.ticket!,
    mode: "exclusive",
    limit: 1,
    slot: 0,
    name: "orphan/resume",
    value: new Uint8Array(0),
  };
  await fresh.send(
    { type: "resume", requestId: 1, prevTerm: 0, prevSessionId: oldSession, claims: 1 },
    reclaim,
  );
  assert.deepEqual(await fresh.next(), {
    type: "resumed",
    requestId: 1,
    outcome: "moved",
    windowLeftMs: LEASE_MS - 3_000,
  });
  const kept = acquiredOf(await fresh.next(), 2);
  assert.equal(kept.token, granted.token, "the same token");
  const shown = await holderJson(t, "orphan/resume");
  assert.deepEqual([shown.session, shown.connected], [fresh.welcome!.sessionId, undefined]);
  // Past the orphan's lease: the lease was renewed at the move.
  assert.deepEqual(await advance(scheduler, waiter, LEASE_MS - 1, 4), []);
  await fresh.send({ type: "goodbye", requestId: 3 });
  const [next] = await advance(scheduler, waiter, 0, 5);
  assert.ok(acquiredOf(next, 1).token > granted.token);
  const ends = t.audit.records().filter((r) => r.event === "release" || r.event === "reclaim");
  assert.deepEqual(ends.map((r) => [r.event, r.token, r.reason ?? r.prev_session]), [
    ["reclaim", granted.token, oldSession],
    ["release", granted.token, "graceful"],
  ]);
});
