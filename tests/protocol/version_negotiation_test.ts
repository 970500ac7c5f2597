/**
 * Protocol versions against a real server (docs/protocol.md, "Versioning"): the server serves
 * versions 1 and 2 and answers each HELLO with WELCOME of that same version (version 2 with its
 * fields); any other version gets UNSUPPORTED_VERSION; requests sent right behind a HELLO of
 * version 2 are read in version 2's layouts; and a version-1 session refuses the types and
 * layouts of version 2 as malformed frames.
 */
import assert from "node:assert/strict";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { encodeFrame } from "../../src/wire/frame.ts";
import { EMPTY_TICKET, type Message } from "../../src/wire/messages.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { startTestServer } from "../helpers/start_server.ts";

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.byteLength;
  }
  return out;
}

function expectClosingError(messages: Message[], code: number, pattern: RegExp): void {
  assert.equal(messages.length, 1, JSON.stringify(messages));
  const [error] = messages;
  assert.ok(error.type === "error", JSON.stringify(error));
  assert.equal(error.code, code);
  assert.equal(error.requestId, 0);
  assert.match(error.message, pattern);
}

/** The server still serves a version-1 session. */
async function stillServes(addr: string): Promise<void> {
  await using ok = await RawClient.session(addr);
  await ok.send({ type: "acquire", requestId: 1, name: "after", leaseMs: 0, waitMs: 0 });
  const granted = await ok.next();
  assert.ok(granted?.type === "acquired", JSON.stringify(granted));
  assert.equal(granted.ticket, EMPTY_TICKET, "a version-1 ACQUIRED decodes with no ticket");
}

Deno.test("HELLO version 2 gets WELCOME version 2 with its term, reclaim window and value limit", async () => {
  await using t = await startTestServer({ ioTimeoutMs: 20_000 });
  await using raw = await RawClient.connect(t.addr);
  await raw.send({ type: "hello", version: 2, clientName: "v2" });
  const welcome = await raw.next();
  assert.ok(welcome?.type === "welcome", JSON.stringify(welcome));
  assert.deepEqual(
    [welcome.version, welcome.term, welcome.reclaimWindowMs, welcome.valueBytesMax],
    [2, 0, 20_000, 1024],
    "a single node: term 0, reclaim while a silent session lives (its I/O timeout), values up to " +
      "-max-lock-value-bytes",
  );
  await stillServes(t.addr);
});

Deno.test("HELLO version 1 gets WELCOME version 1, byte for byte as before version 2", async () => {
  await using t = await startTestServer();
  await using raw = await RawClient.connect(t.addr);
  await raw.send({ type: "hello", version: 1, clientName: "v1" });
  const welcome = await raw.next();
  assert.ok(welcome?.type === "welcome");
  assert.equal(welcome.version, 1);
  assert.deepEqual(
    encodeFrame(welcome),
    encodeFrame({
      type: "welcome",
      version: 1,
      serverVersion: welcome.serverVersion,
      sessionId: welcome.sessionId,
      ioTimeoutMs: welcome.ioTimeoutMs,
      leaseDefaultMs: welcome.leaseDefaultMs,
      leaseMaxMs: welcome.leaseMaxMs,
    }),
  );
});

Deno.test("HELLO version 3 gets UNSUPPORTED_VERSION naming the versions this server speaks", async () => {
  await using t = await startTestServer();
  await using raw = await RawClient.connect(t.addr);
  await raw.send({ type: "hello", version: 3, clientName: "v3" });
  expectClosingError(
    await raw.drainUntilClosed(),
    WIRE_CODES.UNSUPPORTED_VERSION.code,
    /Protocol version 3 is not supported; this server speaks 1 and 2/,
  );
  await stillServes(t.addr);
});

Deno.test("version-2 requests sent right behind HELLO version 2 are read in version 2's layouts", async () => {
  await using t = await startTestServer();
  await using raw = await RawClient.connect(t.addr);
  await raw.sendBytes(concat([
    encodeFrame({ type: "hello", version: 2, clientName: "eager" }),
    encodeFrame({
      type: "acquire",
      requestId: 1,
      name: "v2/lock",
      leaseMs: 0,
      waitMs: 0,
      mode: "shared",
      limit: 3,
      value: new TextEncoder().encode("10.0.0.7:8080"),
    }, 2),
    encodeFrame({ type: "query", requestId: 2, name: "v2/lock" }, 2),
    encodeFrame({ type: "acquire", requestId: 3, name: "v2/plain", leaseMs: 0, waitMs: 0 }, 2),
    encodeFrame({ type: "goodbye", requestId: 4 }, 2),
  ]));
  const frames = await raw.drainUntilClosed();
  assert.deepEqual(
    frames.map((
      f,
    ) => [f.type, "requestId" in f ? f.requestId : 0, f.type === "error" ? f.code : 0]),
    [
      ["welcome", 0, 0],
      // A shared claim cannot ask for a semaphore.
      ["error", 1, WIRE_CODES.INVALID_ARGUMENT.code],
      ["lock_state", 2, 0],
      ["acquired", 3, 0],
    ],
    "GOODBYE closes the session after the replies",
  );
  // Nothing of the refused ACQUIRE was stored; the plain one ended with GOODBYE.
  assert.equal(t.server.context.engine.lockCount, 0);
  await stillServes(t.addr);
});

const v2OnV1: [string, Uint8Array, RegExp][] = [
  [
    "a QUERY (a version-2 type)",
    encodeFrame({ type: "query", requestId: 2, name: "x" }, 2),
    /unknown message type 0x1d/,
  ],
  [
    "a RESUME (the first version-2 type)",
    encodeFrame({ type: "resume", requestId: 2, prevTerm: 1, prevSessionId: 1, claims: 0 }, 2),
    /unknown message type 0x17/,
  ],
  [
    "an ACQUIRE in the version-2 layout",
    encodeFrame({
      type: "acquire",
      requestId: 2,
      name: "x",
      leaseMs: 0,
      waitMs: 0,
      mode: "exclusive",
      limit: 0,
    }, 2),
    /Cannot decode ACQUIRE frame/,
  ],
];

for (const [what, frame, reason] of v2OnV1) {
  Deno.test(`a version-1 session refuses ${what} with MALFORMED_FRAME and closes`, async () => {
    await using t = await startTestServer();
    await using raw = await RawClient.session(t.addr);
    await raw.sendBytes(frame);
    expectClosingError(await raw.drainUntilClosed(), WIRE_CODES.MALFORMED_FRAME.code, reason);
    await stillServes(t.addr);
  });
}
