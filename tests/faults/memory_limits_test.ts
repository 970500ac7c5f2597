/**
 * Issue 9.13, memory and limits: a global cap on stored claims (`-max-claims`), connections
 * without HELLO bounded apart from sessions (`-max-handshakes`, in tests/protocol/
 * error_cases_test.ts with the other LIMIT_EXCEEDED rows), and partial frames that do not pin
 * memory: a frame's buffer holds what arrived (not what its header announces), a stalled frame
 * is cut down to those bytes, a connection that goes quiet waits with the small read buffer,
 * and frames larger than any valid request share one ration (`lockd_partial_frame_bytes`).
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { LockEngine } from "../../src/core/engine.ts";
import { TokenIssuer } from "../../src/core/tokens.ts";
import {
  FRAME_READER_PARTIAL_BYTES_MIN,
  PARTIAL_FRAME_STALL_MS,
  READ_BUFFER_BYTES_MIN,
} from "../../src/limits.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import type { Session } from "../../src/protocol/session.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { eventually, startTestServer, type TestServer } from "../helpers/start_server.ts";

/** The beginning of an ACQUIRE frame of `frameBytes`, `sentBytes` of its body included. */
function frameStart(frameBytes: number, sentBytes: number): Uint8Array {
  const bytes = new Uint8Array(4 + sentBytes);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, frameBytes);
  bytes[4] = 0x10; // ACQUIRE
  view.setUint32(5, 1); // request id
  view.setUint16(17, frameBytes - 15); // the name fills the rest
  bytes.fill(0x78, 19);
  return bytes;
}

function onlySession(t: TestServer): Session {
  const [session] = t.server.context.connections;
  assert.ok(session !== undefined);
  return session;
}

Deno.test("the header of a 64 KiB frame and 16 bytes of it pin about those bytes, not 64 KiB", async () => {
  await using t = await startTestServer({}, { scheduler: new ManualScheduler() });
  await using raw = await RawClient.session(t.addr);
  await raw.sendBytes(frameStart(65_536, 16));
  const session = onlySession(t);
  await eventually(() => session.readBytes !== READ_BUFFER_BYTES_MIN, "the bytes were read");
  // The small read buffer, and a partial buffer of its smallest size (it held 65,540 bytes).
  assert.equal(session.readBytes, READ_BUFFER_BYTES_MIN + FRAME_READER_PARTIAL_BYTES_MIN);
  assert.equal(t.server.context.counters.partialFrameBytes, 0, "no ration needed yet");
});

Deno.test("a connection stalled in the middle of a large frame keeps only the bytes that arrived, and its frame is still served when the rest comes", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer({}, { scheduler });
  const counters = t.server.context.counters;
  await using raw = await RawClient.session(t.addr);
  // 40,004 bytes of a 65,540-byte frame in one write: the server reads them in growing reads.
  const sent = 40_000;
  await raw.sendBytes(frameStart(65_536, sent));
  const session = onlySession(t);
  await eventually(() => session.readBytes >= 4 + sent, "the bytes were read");
  await eventually(() => session.readBytes - READ_BUFFER_BYTES_MIN >= 4 + sent, "all of them");
  const beforeStall = session.readBytes;
  assert.ok(
    counters.partialFrameBytes > 0,
    "a frame larger than any request takes from the ration",
  );

  // Nothing more arrives: after the stall time the frame keeps exactly what arrived, and the
  // pending read waits with the small buffer (a read that filled 64 KiB would have kept one).
  scheduler.advance(PARTIAL_FRAME_STALL_MS);
  assert.equal(session.readBytes, READ_BUFFER_BYTES_MIN + 4 + sent);
  assert.ok(session.readBytes <= beforeStall);
  const rationed = counters.partialFrameBytes;
  assert.ok(rationed > 0 && rationed <= 4 + sent, `${rationed}`);

  // The rest of the frame arrives: it is an ACQUIRE with a name far too long, answered as such.
  await raw.sendBytes(new Uint8Array(65_536 - sent).fill(0x78));
  const reply = await raw.next();
  assert.ok(reply?.type === "error" && reply.code === WIRE_CODES.INVALID_ARGUMENT.code);
  assert.equal(reply.requestId, 1);
  await raw.send({ type: "heartbeat", requestId: 2 });
  assert.deepEqual(await raw.next(), { type: "heartbeat_ack", requestId: 2, renewed: 0 });
  assert.equal(counters.partialFrameBytes, 0, "the ration is given back");
  assert.equal(session.readBytes, READ_BUFFER_BYTES_MIN, "back to the small read buffer");
});

Deno.test("a connection that closes in the middle of a large frame gives its ration back", async () => {
  await using t = await startTestServer({}, { scheduler: new ManualScheduler() });
  const counters = t.server.context.counters;
  const raw = await RawClient.session(t.addr);
  await raw.sendBytes(frameStart(65_536, 50_000));
  await eventually(() => counters.partialFrameBytes > 40_000, "the frame holds ration");
  await raw[Symbol.asyncDispose]();
  await eventually(() => t.server.context.connections.size === 0, "closed");
  assert.equal(counters.partialFrameBytes, 0);
});

Deno.test("-max-claims bounds owned and queued claims of all sessions together; a release makes room", () => {
  const engine = new LockEngine({
    tokens: new TokenIssuer(0, Number.MAX_SAFE_INTEGER, () => {}),
    claimsMax: 3,
  });
  const now = { monoMs: 1_000, wallMs: Date.UTC(2026, 0, 1) };
  const a = engine.openSession(now, "", "127.0.0.1:1")!.sessionId;
  const b = engine.openSession(now, "", "127.0.0.1:2")!.sessionId;
  assert.equal(
    engine.acquire(now, { sessionId: a, requestId: 1, name: "x", leaseMs: 0, waitMs: null })[0]
      .type,
    "granted",
  );
  assert.equal(
    engine.acquire(now, { sessionId: a, requestId: 2, name: "y", leaseMs: 0, waitMs: null })[0]
      .type,
    "granted",
  );
  assert.equal(
    engine.acquire(now, { sessionId: b, requestId: 1, name: "x", leaseMs: 0, waitMs: null })[0]
      .type,
    "queued",
  );
  const refused = engine.acquire(now, {
    sessionId: b,
    requestId: 2,
    name: "z",
    leaseMs: 0,
    waitMs: null,
  });
  assert.deepEqual(refused.map((e) => e.type === "rejected" && e.rejection), [
    { reason: "limit_exceeded", limit: "claims", max: 3 },
  ]);
  // A try-lock of a held lock stores nothing and is answered as usual.
  assert.equal(
    engine.acquire(now, { sessionId: b, requestId: 3, name: "y", leaseMs: 0, waitMs: 0 })[0].type,
    "wait_ended",
  );
  const token = engine.view.getLock("y")!.holder!.token;
  engine.release(now, { sessionId: a, requestId: 3, name: "y", token });
  assert.equal(
    engine.acquire(now, { sessionId: b, requestId: 4, name: "z", leaseMs: 0, waitMs: null })[0]
      .type,
    "granted",
  );
  engine.assertInvariants();
});
