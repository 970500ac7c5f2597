import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { AUDIT_RETRY_MS } from "../../src/limits.ts";
import { ReplyOrder } from "../../src/protocol/reply_order.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import type { Message } from "../../src/wire/messages.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

/** A compact description of a server frame: type, request id, and the error code's name. */
function brief(message: Message | null): string {
  if (message === null) return "closed";
  if (message.type === "error") {
    const name = Object.values(WIRE_CODES).find((info) => info.code === message.code)?.name;
    return `error ${name} #${message.requestId}`;
  }
  return `${message.type} #${"requestId" in message ? message.requestId : 0}`;
}

/** Asserts that nothing arrives within a short real-time window (the frame is held back). */
async function nothingArrives(client: RawClient): Promise<void> {
  await assert.rejects(client.next(50), /no message within/);
}

Deno.test("reply order: an ACQUIRED that waits for its record holds back a later HEARTBEAT_ACK and a later error", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer({}, { scheduler });
  await using a = await RawClient.session(t.addr);
  t.audit.failing = true;
  await a.send(
    { type: "acquire", requestId: 1, name: "x", leaseMs: 0, waitMs: 0 },
    { type: "heartbeat", requestId: 2 },
    { type: "acquire", requestId: 3, name: "x", leaseMs: 0, waitMs: 0 },
    { type: "release", requestId: 4, name: "y", token: 1 },
  );
  await eventually(() => !t.server.context.ready, "the audit outage is seen");
  t.audit.failing = false;
  scheduler.advance(AUDIT_RETRY_MS);
  const got = [await a.next(), await a.next(), await a.next(), await a.next()].map(brief);
  assert.deepEqual(got, [
    "acquired #1",
    "heartbeat_ack #2",
    "error DUPLICATE_CLAIM #3",
    "error NOT_OWNER #4",
  ]);
});

Deno.test("reply order: a LEASE_EXPIRED that waits for its record reaches the client before the ACK of a later heartbeat", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer({ ioTimeoutMs: 60_000 }, { scheduler });
  await using a = await RawClient.session(t.addr);
  await a.send({ type: "acquire", requestId: 1, name: "x", leaseMs: 1_000, waitMs: 0 });
  assert.equal(brief(await a.next()), "acquired #1");
  t.audit.failing = true;
  scheduler.advance(1_000);
  // The lease ended; its release record cannot be written, so LEASE_EXPIRED waits, and so
  // does the ACK of a heartbeat sent after it (it renews nothing: the ownership is gone).
  await a.send({ type: "heartbeat", requestId: 2 });
  await eventually(() => t.server.context.engine.stats.heartbeatsTotal === 1, "heartbeat seen");
  t.audit.failing = false;
  scheduler.advance(AUDIT_RETRY_MS);
  const expired = await a.next();
  assert.equal(brief(expired), "error LEASE_EXPIRED #1");
  assert.deepEqual(await a.next(), { type: "heartbeat_ack", requestId: 2, renewed: 0 });
});

Deno.test("reply order: the closing ERROR of a force-released session comes after its release records are written", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer({}, { scheduler });
  await using a = await RawClient.session(t.addr);
  await a.send({ type: "acquire", requestId: 1, name: "x", leaseMs: 0, waitMs: 0 });
  assert.equal(brief(await a.next()), "acquired #1");
  t.audit.failing = true;
  t.server.context.service.forceRelease("x", { remote_addr: "127.0.0.1:1", auth: "none" });
  await nothingArrives(a);
  t.audit.failing = false;
  scheduler.advance(AUDIT_RETRY_MS);
  assert.deepEqual((await a.drainUntilClosed()).map(brief), ["error CLOSED_BY_ADMIN #0"]);
  assert.deepEqual(t.audit.records().map((r) => r.event), [
    "acquire",
    "force_release",
    "release",
  ]);
});

Deno.test("reply order: errors that need no record keep their place when nothing is held", async () => {
  await using t = await startTestServer();
  await using a = await RawClient.session(t.addr);
  await using b = await RawClient.session(t.addr);
  await a.send({ type: "acquire", requestId: 1, name: "x", leaseMs: 0, waitMs: 0 });
  assert.equal(brief(await a.next()), "acquired #1");
  // b queues, then asks for something it cannot have, then heartbeats: QUEUED, the error and
  // the ACK leave in that order; the grant comes after them when a releases.
  await b.send(
    { type: "acquire", requestId: 1, name: "x", leaseMs: 0, waitMs: 0xffff_ffff },
    { type: "release", requestId: 2, name: "x", token: 99 },
    { type: "heartbeat", requestId: 3 },
  );
  assert.deepEqual([await b.next(), await b.next(), await b.next()].map(brief), [
    "queued #1",
    "error NOT_OWNER #2",
    "heartbeat_ack #3",
  ]);
});

// ---- the queue itself (src/protocol/reply_order.ts), without sockets ------------

/** A reply order over strings that records what it delivers and when it drains. */
function recorder(options: { bytesMax?: number } = {}) {
  const got: string[] = [];
  const overflows: number[] = [];
  const order = new ReplyOrder<string>({
    deliver: (frame) => got.push(frame),
    drained: () => got.push("(drained)"),
    weigh: (frame) => frame === null ? 1 : frame.length,
    bytesMax: options.bytesMax,
    overflowed: (bytes) => overflows.push(bytes),
  });
  return { order, got, overflows };
}

Deno.test("reply order queue: frames sent while nothing waits leave at once, in order", () => {
  const { order, got } = recorder();
  order.send("a");
  order.send("b");
  assert.deepEqual(got, ["a", "b"]);
  assert.equal(order.idle, true);
});

Deno.test("reply order queue: a held place holds back every later frame until it is filled", () => {
  const { order, got } = recorder();
  order.send("a");
  const first = order.hold();
  order.send("b");
  const second = order.hold();
  order.send("c");
  assert.deepEqual(got, ["a"]);
  assert.equal(order.idle, false);
  second("held 2"); // filled out of order: still behind the first place
  assert.deepEqual(got, ["a"]);
  first(null); // nothing to send there: only the wait mattered
  assert.deepEqual(got, ["a", "b", "held 2", "c", "(drained)"]);
  assert.equal(order.idle, true);
});

Deno.test("reply order queue: a place is filled once; a second fill sends nothing", () => {
  const { order, got } = recorder();
  const fill = order.hold();
  fill("x");
  fill("y");
  assert.deepEqual(got, ["x", "(drained)"]);
});

Deno.test("reply order queue: past its byte bound everything waiting is dropped and reported", () => {
  const { order, got, overflows } = recorder({ bytesMax: 10 });
  const fill = order.hold(); // 1 byte
  order.send("abcd"); // 5
  order.send("efghij"); // 11: over
  assert.deepEqual(overflows, [11]);
  assert.equal(order.idle, true);
  fill("late"); // its place was dropped: nothing waits, nothing is sent
  assert.deepEqual(got, ["(drained)"]);
  order.send("next");
  assert.deepEqual(got, ["(drained)", "next"]);
});

Deno.test("reply order queue: a delivery that clears the order (the session closed) ends the drain", () => {
  const got: string[] = [];
  const order: ReplyOrder<string> = new ReplyOrder<string>({
    deliver: (frame) => {
      got.push(frame);
      if (frame === "closes") order.clear();
    },
  });
  const fill = order.hold();
  order.send("closes");
  order.send("never");
  fill("first");
  assert.deepEqual(got, ["first", "closes"]);
  assert.equal(order.idle, true);
});
