import assert from "node:assert/strict";
import fc from "fast-check";
import { ProtocolError, WIRE_CODES } from "../../src/wire/codes.ts";
import { cutUtf8, encodeFrame, FrameWriter } from "../../src/wire/frame.ts";
import { decodeFrameBody, FrameReader } from "../../src/wire/frame_reader.ts";
import {
  CLAIM_KINDS,
  type DecodedMessage,
  EMPTY_TICKET,
  EMPTY_VALUE,
  END_REASONS,
  FIRST_V2_TYPE,
  LOCK_EVENTS,
  LOCK_KINDS,
  LOCK_MODES,
  type Message,
  MessageType,
  PROTOCOL_VERSION,
  PROTOCOL_VERSIONS,
  RESUME_OUTCOMES,
  WAIT_FOREVER,
  WATCH_END_REASONS,
  withNeutral,
} from "../../src/wire/messages.ts";
import {
  CLIENT_NAME_BYTES_MAX,
  ERROR_MESSAGE_BYTES_MAX,
  FRAME_BYTES_MAX_DEFAULT,
  LOCK_NAME_BYTES_MAX,
  WRITE_BUFFER_BYTES_MAX,
} from "../../src/limits.ts";

const MALFORMED = WIRE_CODES.MALFORMED_FRAME.code;
const U32_MAX = 0xffff_ffff;

/** Pushes `chunks` one after the other and drains the reader after each push. */
function decodeChunks(chunks: Uint8Array[], reader = new FrameReader()): DecodedMessage[] {
  const out: DecodedMessage[] = [];
  for (const chunk of chunks) {
    reader.push(chunk);
    for (let msg = reader.next(); msg !== null; msg = reader.next()) out.push(msg);
  }
  return out;
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.byteLength;
  }
  return out;
}

function bytes(...values: number[]): Uint8Array {
  return Uint8Array.from(values);
}

function expectMalformed(fn: () => unknown, reason: RegExp): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof ProtocolError, `expected ProtocolError, got ${error}`);
    assert.equal(error.code, MALFORMED);
    assert.match(error.message, reason);
    return true;
  });
}

// ---------------------------------------------------------------------------
// Round trips

const examples: [string, Message][] = [
  ["a HELLO with the current version", {
    type: "hello",
    version: PROTOCOL_VERSION,
    clientName: "worker-7",
  }],
  ["a HELLO with an empty client name and the largest version", {
    type: "hello",
    version: 0xffff,
    clientName: "",
  }],
  ["a WELCOME with every number set", {
    type: "welcome",
    version: 1,
    serverVersion: "lockd 0.1.0",
    sessionId: 42,
    ioTimeoutMs: 30_000,
    leaseDefaultMs: 15_000,
    leaseMaxMs: 300_000,
  }],
  ["a WELCOME whose session id needs the high word", {
    type: "welcome",
    version: 1,
    serverVersion: "",
    sessionId: Number.MAX_SAFE_INTEGER,
    ioTimeoutMs: U32_MAX,
    leaseDefaultMs: 0,
    leaseMaxMs: U32_MAX,
  }],
  ["an ACQUIRE with a bounded wait", {
    type: "acquire",
    requestId: 7,
    name: "jobs/nightly",
    leaseMs: 10_000,
    waitMs: 5_000,
  }],
  ["an ACQUIRE that waits forever with the default lease", {
    type: "acquire",
    requestId: U32_MAX,
    name: "a",
    leaseMs: 0,
    waitMs: WAIT_FOREVER,
  }],
  ["an ACQUIRE with a multi-byte UTF-8 name", {
    type: "acquire",
    requestId: 1,
    name: "verrou/é/锁/🔒",
    leaseMs: 50,
    waitMs: 0,
  }],
  ["an ACQUIRE whose name starts with a byte-order mark", {
    type: "acquire",
    requestId: 1,
    name: "\ufeffbom",
    leaseMs: 1,
    waitMs: 1,
  }],
  ["a QUEUED at the head of the line", {
    type: "queued",
    requestId: 7,
    name: "jobs/nightly",
    position: 1,
  }],
  ["an ACQUIRED with a large token", {
    type: "acquired",
    requestId: 7,
    name: "jobs/nightly",
    token: 2 ** 40 + 5,
    leaseMs: 10_000,
  }],
  ["a RELEASE of an ownership", {
    type: "release",
    requestId: 8,
    name: "jobs/nightly",
    token: 131_073,
  }],
  ["a RELEASE that cancels a queued claim", {
    type: "release",
    requestId: 9,
    name: "jobs/nightly",
    token: 0,
  }],
  ["a RELEASED", { type: "released", requestId: 8, name: "jobs/nightly" }],
  ["a HEARTBEAT", { type: "heartbeat", requestId: 9 }],
  ["a HEARTBEAT_ACK", { type: "heartbeat_ack", requestId: 9, renewed: 3 }],
  ["an ERROR for a request", {
    type: "error",
    requestId: 7,
    code: WIRE_CODES.WAIT_TIMEOUT.code,
    name: "jobs/nightly",
    message: 'Cannot acquire lock "jobs/nightly": wait timed out after 5000 ms',
  }],
  ["a server-initiated ERROR with an empty name", {
    type: "error",
    requestId: 0,
    code: 0xff,
    name: "",
    message: "",
  }],
];

for (const [what, msg] of examples) {
  Deno.test(`${what} round-trips through the codec`, () => {
    const frame = encodeFrame(msg);
    const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
    assert.equal(
      view.getUint32(0),
      frame.byteLength - 4,
      "length prefix counts the bytes after it",
    );
    assert.deepEqual(decodeChunks([frame]), [withNeutral(msg)]);
    assert.deepEqual(decodeFrameBody(frame[4], frame.subarray(5)), withNeutral(msg));
  });
}

Deno.test("every message type has a round-trip example", () => {
  const byteOf: Record<Message["type"], number> = {
    hello: MessageType.HELLO,
    welcome: MessageType.WELCOME,
    acquire: MessageType.ACQUIRE,
    queued: MessageType.QUEUED,
    acquired: MessageType.ACQUIRED,
    release: MessageType.RELEASE,
    released: MessageType.RELEASED,
    heartbeat: MessageType.HEARTBEAT,
    heartbeat_ack: MessageType.HEARTBEAT_ACK,
    resume: MessageType.RESUME,
    resumed: MessageType.RESUMED,
    reclaim: MessageType.RECLAIM,
    goodbye: MessageType.GOODBYE,
    set_value: MessageType.SET_VALUE,
    value_set: MessageType.VALUE_SET,
    query: MessageType.QUERY,
    lock_state: MessageType.LOCK_STATE,
    watch: MessageType.WATCH,
    watching: MessageType.WATCHING,
    unwatch: MessageType.UNWATCH,
    watch_ended: MessageType.WATCH_ENDED,
    error: MessageType.ERROR,
  };
  const v1Types = Object.keys(byteOf).filter((type) =>
    byteOf[type as Message["type"]] < FIRST_V2_TYPE || type === "error"
  );
  const covered = new Set(examples.map(([, msg]) => msg.type));
  assert.deepEqual([...covered].sort(), v1Types.sort());
  const coveredV2 = new Set(examplesV2.map(([, msg]) => msg.type));
  assert.deepEqual([...coveredV2].sort(), Object.keys(byteOf).sort());
  for (const [, msg] of examples) assert.equal(encodeFrame(msg)[4], byteOf[msg.type]);
  for (const [, msg] of examplesV2) assert.equal(encodeFrame(msg, 2)[4], byteOf[msg.type]);
  assert.deepEqual(Object.values(MessageType).sort(), Object.values(byteOf).sort());
  assert.deepEqual(PROTOCOL_VERSIONS, [1, 2]);
});

// ---------------------------------------------------------------------------
// Version 2

const TICKET = Uint8Array.from({ length: 16 }, (_, i) => 0xa0 + i);
const VALUE = utf8Bytes("10.0.0.7:8080");

function utf8Bytes(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}

/** Decodes `frames` with a reader fixed to version 2. */
function decodeV2(...frames: Uint8Array[]): DecodedMessage[] {
  const reader = new FrameReader();
  reader.version = 2;
  return decodeChunks([concat(frames)], reader);
}

const examplesV2: [string, Message][] = [
  ["a HELLO asking for version 2", { type: "hello", version: 2, clientName: "worker-7" }],
  ["a version-2 WELCOME of a cluster leader", {
    type: "welcome",
    version: 2,
    serverVersion: "0.2.0",
    sessionId: 42,
    ioTimeoutMs: 30_000,
    leaseDefaultMs: 15_000,
    leaseMaxMs: 300_000,
    term: 7,
    reclaimWindowMs: 8_000,
    valueBytesMax: 1_024,
  }],
  ["a version-2 WELCOME of a single node", {
    type: "welcome",
    version: 2,
    serverVersion: "",
    sessionId: Number.MAX_SAFE_INTEGER,
    ioTimeoutMs: U32_MAX,
    leaseDefaultMs: 0,
    leaseMaxMs: U32_MAX,
    term: 0,
    reclaimWindowMs: 0,
    valueBytesMax: 0,
  }],
  ["a version-2 ACQUIRE of a shared lock with a value", {
    type: "acquire",
    requestId: 7,
    name: "reports/daily",
    leaseMs: 10_000,
    waitMs: WAIT_FOREVER,
    mode: "shared",
    limit: 0,
    value: VALUE,
  }],
  ["a version-2 ACQUIRE of a semaphore slot with a binary value", {
    type: "acquire",
    requestId: U32_MAX,
    name: "jobs/render-1",
    leaseMs: 0,
    waitMs: 0,
    mode: "exclusive",
    limit: 8,
    value: Uint8Array.from([0, 0xff, 0xfe, 0xc0, 0xaf]), // not UTF-8, and need not be
  }],
  ["a version-2 ACQUIRE with every field neutral", {
    type: "acquire",
    requestId: 1,
    name: "a",
    leaseMs: 50,
    waitMs: 0,
    mode: "exclusive",
    limit: 0,
    value: EMPTY_VALUE,
  }],
  ["a version-2 QUEUED with its order and ticket", {
    type: "queued",
    requestId: 7,
    name: "jobs/nightly",
    position: 1,
    orderTerm: 7,
    orderSeq: 2 ** 40 + 3,
    ticket: TICKET,
  }],
  ["a version-2 QUEUED without a ticket", {
    type: "queued",
    requestId: 7,
    name: "jobs/nightly",
    position: U32_MAX,
    orderTerm: 0,
    orderSeq: 0,
    ticket: EMPTY_TICKET,
  }],
  ["a version-2 ACQUIRED of a semaphore slot", {
    type: "acquired",
    requestId: 7,
    name: "jobs/render-1",
    token: 1_795_426_718_504_001,
    leaseMs: 10_000,
    ticket: TICKET,
    mode: "exclusive",
    limit: 8,
    slot: 5,
    writeGeneration: 0,
  }],
  ["a version-2 ACQUIRED of a shared lock", {
    type: "acquired",
    requestId: 8,
    name: "reports/daily",
    token: 1_795_426_718_504_009,
    leaseMs: 10_000,
    ticket: EMPTY_TICKET,
    mode: "shared",
    limit: 1,
    slot: 0,
    writeGeneration: 1_795_426_718_504_007,
  }],
  ["a RELEASE in version 2", { type: "release", requestId: 8, name: "a", token: 131_073 }],
  ["a RELEASED in version 2", { type: "released", requestId: 8, name: "a" }],
  ["a HEARTBEAT in version 2", { type: "heartbeat", requestId: 9 }],
  ["a HEARTBEAT_ACK in version 2", { type: "heartbeat_ack", requestId: 9, renewed: 3 }],
  ["an ERROR CLAIM_VOID", {
    type: "error",
    requestId: 12,
    code: WIRE_CODES.CLAIM_VOID.code,
    name: "jobs/nightly",
    message: "void",
  }],
  ["a RESUME", {
    type: "resume",
    requestId: 1,
    prevTerm: 6,
    prevSessionId: 2 ** 40 + 1,
    claims: 0xffff,
  }],
  ["a RESUMED", { type: "resumed", requestId: 1, outcome: "reclaim", windowLeftMs: 7_250 }],
  ["a RESUMED whose outcome names nothing", {
    type: "resumed",
    requestId: 1,
    outcome: 9,
    windowLeftMs: 0,
  }],
  ["a RECLAIM of an owned claim", {
    type: "reclaim",
    requestId: 2,
    kind: "owned",
    token: 1_795_426_718_504_001,
    orderTerm: 0,
    orderSeq: 0,
    leaseMs: 10_000,
    waitMs: 0,
    ticket: TICKET,
    mode: "exclusive",
    limit: 8,
    slot: 5,
    name: "jobs/render-1",
    value: VALUE,
  }],
  ["a RECLAIM of a queued claim whose kind names nothing", {
    type: "reclaim",
    requestId: 3,
    kind: 0,
    token: 0,
    orderTerm: 6,
    orderSeq: 12,
    leaseMs: 0,
    waitMs: WAIT_FOREVER,
    ticket: EMPTY_TICKET,
    mode: 2,
    limit: 0,
    slot: 0,
    name: "é/锁",
    value: EMPTY_VALUE,
  }],
  ["a GOODBYE", { type: "goodbye", requestId: 4 }],
  ["a SET_VALUE", {
    type: "set_value",
    requestId: 5,
    token: 1_795_426_718_504_001,
    name: "service/leader",
    value: VALUE,
  }],
  ["a SET_VALUE that clears the value", {
    type: "set_value",
    requestId: 5,
    token: 1,
    name: "service/leader",
    value: EMPTY_VALUE,
  }],
  ["a VALUE_SET", { type: "value_set", requestId: 5, name: "service/leader" }],
  ["a QUERY", { type: "query", requestId: 6, name: "service/leader" }],
  ["a LOCK_STATE of an idle lock", {
    type: "lock_state",
    requestId: 6,
    event: "state",
    reason: "none",
    kind: "none",
    limit: 0,
    queueLength: 0,
    owners: 0,
    name: "service/leader",
    holders: [],
  }],
  ["a LOCK_STATE of a shared lock with two holders", {
    type: "lock_state",
    requestId: 6,
    event: "ended",
    reason: "io_timeout",
    kind: "shared",
    limit: 1,
    queueLength: U32_MAX,
    owners: 3,
    name: "reports/daily",
    holders: [{
      token: 1_795_426_718_504_001,
      heldMs: 12_000,
      leaseMs: 10_000,
      mode: "shared",
      slot: 0,
      identity: "CN=reporter",
      clientName: "reporter@build-7:4242",
      value: VALUE,
    }, {
      token: 1_795_426_718_504_009,
      heldMs: 0,
      leaseMs: 50,
      mode: 7,
      slot: U32_MAX,
      identity: "",
      clientName: "",
      value: EMPTY_VALUE,
    }],
  }],
  ["a LOCK_STATE whose enums name nothing", {
    type: "lock_state",
    requestId: 6,
    event: 5,
    reason: 6,
    kind: 4,
    limit: 0,
    queueLength: 0,
    owners: 0,
    name: "x",
    holders: [],
  }],
  ["a WATCH", { type: "watch", requestId: 7, pattern: "service/**" }],
  ["a WATCHING", { type: "watching", requestId: 7, locks: 3 }],
  ["an UNWATCH", { type: "unwatch", requestId: 7 }],
  ["a WATCH_ENDED", { type: "watch_ended", requestId: 7, reason: "too_many_locks" }],
  ["a WATCH_ENDED whose reason names nothing", {
    type: "watch_ended",
    requestId: 7,
    reason: 0xff,
  }],
];

for (const [what, msg] of examplesV2) {
  Deno.test(`${what} round-trips through the version-2 codec`, () => {
    const frame = encodeFrame(msg, 2);
    const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
    assert.equal(view.getUint32(0), frame.byteLength - 4);
    assert.deepEqual(decodeV2(frame), [msg]);
    assert.deepEqual(decodeFrameBody(frame[4], frame.subarray(5), 2), msg);
  });
}

Deno.test("messages version 2 did not change have the same bytes in both versions", () => {
  for (const [, msg] of examplesV2) {
    if (["welcome", "acquire", "queued", "acquired"].includes(msg.type)) continue;
    if (MessageType[msg.type.toUpperCase() as keyof typeof MessageType] >= FIRST_V2_TYPE) continue;
    assert.deepEqual(encodeFrame(msg, 2), encodeFrame(msg, 1), msg.type);
  }
});

Deno.test("a version-1 frame of a changed message decodes with the neutral version-2 fields, shared", () => {
  const [acquire, queued, acquired, welcome] = decodeChunks([concat([
    encodeFrame({ type: "acquire", requestId: 1, name: "a", leaseMs: 0, waitMs: 0 }),
    encodeFrame({ type: "queued", requestId: 1, name: "a", position: 1 }),
    encodeFrame({ type: "acquired", requestId: 1, name: "a", token: 5, leaseMs: 50 }),
    encodeFrame({
      type: "welcome",
      version: 1,
      serverVersion: "",
      sessionId: 1,
      ioTimeoutMs: 1,
      leaseDefaultMs: 1,
      leaseMaxMs: 1,
    }),
  ])]);
  assert.ok(acquire.type === "acquire" && queued.type === "queued");
  assert.ok(acquired.type === "acquired" && welcome.type === "welcome");
  assert.deepEqual([acquire.mode, acquire.limit], ["exclusive", 0]);
  // The shared constants themselves: a version-1 frame allocates nothing for them.
  assert.equal(acquire.value, EMPTY_VALUE);
  assert.equal(queued.ticket, EMPTY_TICKET);
  assert.equal(acquired.ticket, EMPTY_TICKET);
  assert.deepEqual([queued.orderTerm, queued.orderSeq], [0, 0]);
  assert.deepEqual(
    [acquired.mode, acquired.limit, acquired.slot, acquired.writeGeneration],
    ["exclusive", 1, 0, 0],
  );
  assert.deepEqual([welcome.term, welcome.reclaimWindowMs, welcome.valueBytesMax], [0, 0, 0]);
  assert.ok(Object.isFrozen(EMPTY_TICKET) && Object.isFrozen(EMPTY_VALUE));
});

Deno.test("version-1 frames stay byte for byte what they were: neutral version-2 fields add nothing", () => {
  const neutral: Message[] = [
    {
      type: "acquire",
      requestId: 7,
      name: "jobs/nightly",
      leaseMs: 10_000,
      waitMs: 5_000,
      mode: "exclusive",
      limit: 0,
      value: EMPTY_VALUE,
    },
    {
      type: "queued",
      requestId: 7,
      name: "jobs/nightly",
      position: 1,
      orderTerm: 0,
      orderSeq: 0,
      ticket: new Uint8Array(16),
    },
    {
      type: "acquired",
      requestId: 7,
      name: "jobs/nightly",
      token: 1_795_426_718_504_001,
      leaseMs: 10_000,
      ticket: EMPTY_TICKET,
      mode: "exclusive",
      limit: 1,
      slot: 0,
      writeGeneration: 0,
    },
  ];
  for (const msg of neutral) {
    const bare = Object.fromEntries(
      Object.entries(msg).filter(([key]) =>
        ["type", "requestId", "name", "leaseMs", "waitMs", "position", "token"].includes(key)
      ),
    ) as Message;
    assert.deepEqual(encodeFrame(msg, 1), encodeFrame(bare, 1), msg.type);
  }
  // The layouts of docs/protocol.md's version-1 examples, unchanged.
  assert.deepEqual(
    [...encodeFrame({ type: "acquire", requestId: 7, name: "a", leaseMs: 1, waitMs: 2 })],
    [0, 0, 0, 16, 0x10, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 2, 0, 1, 0x61],
  );
});

const notInVersion1: [string, Message][] = [
  ["a shared ACQUIRE", {
    type: "acquire",
    requestId: 1,
    name: "a",
    leaseMs: 0,
    waitMs: 0,
    mode: "shared",
  }],
  ["an ACQUIRE with a limit", {
    type: "acquire",
    requestId: 1,
    name: "a",
    leaseMs: 0,
    waitMs: 0,
    limit: 1,
  }],
  ["an ACQUIRE with a value", {
    type: "acquire",
    requestId: 1,
    name: "a",
    leaseMs: 0,
    waitMs: 0,
    value: VALUE,
  }],
  ["an ACQUIRE whose mode names nothing", {
    type: "acquire",
    requestId: 1,
    name: "a",
    leaseMs: 0,
    waitMs: 0,
    mode: 2,
  }],
  ["a QUEUED with a ticket", {
    type: "queued",
    requestId: 1,
    name: "a",
    position: 1,
    ticket: TICKET,
  }],
  ["a QUEUED with an order term", {
    type: "queued",
    requestId: 1,
    name: "a",
    position: 1,
    orderTerm: 1,
  }],
  ["an ACQUIRED of a semaphore", {
    type: "acquired",
    requestId: 1,
    name: "a",
    token: 1,
    leaseMs: 50,
    limit: 8,
  }],
  ["an ACQUIRED with a slot", {
    type: "acquired",
    requestId: 1,
    name: "a",
    token: 1,
    leaseMs: 50,
    slot: 1,
  }],
  ["an ACQUIRED with a write generation", {
    type: "acquired",
    requestId: 1,
    name: "a",
    token: 1,
    leaseMs: 50,
    writeGeneration: 1,
  }],
  ["a WELCOME version 1 with a term", {
    type: "welcome",
    version: 1,
    serverVersion: "",
    sessionId: 1,
    ioTimeoutMs: 1,
    leaseDefaultMs: 1,
    leaseMaxMs: 1,
    term: 3,
  }],
  ["a QUERY", { type: "query", requestId: 1, name: "a" }],
  ["a GOODBYE", { type: "goodbye", requestId: 1 }],
  ["a LOCK_STATE", {
    type: "lock_state",
    requestId: 6,
    event: "state",
    reason: "none",
    kind: "none",
    limit: 0,
    queueLength: 0,
    owners: 0,
    name: "x",
    holders: [],
  }],
];

for (const [what, msg] of notInVersion1) {
  Deno.test(`a version-1 writer refuses ${what} (a programmer error) and keeps what was pushed before`, () => {
    const writer = new FrameWriter();
    assert.equal(writer.version, 1);
    writer.push({ type: "heartbeat", requestId: 1 });
    assert.throws(() => writer.push(msg), (error: unknown) => {
      assert.ok(error instanceof RangeError);
      assert.match(error.message, /version 1 session|version 2 only/);
      return true;
    });
    assert.equal(writer.byteLength, 9);
    // What a version-2 session carries (WELCOME: its own version field says which layout).
    writer.version = 2;
    writer.push(msg.type === "welcome" ? { ...msg, version: 2 } : msg);
  });
}

Deno.test("a writer and a reader refuse a version this codec does not speak", () => {
  assert.throws(() => new FrameWriter({ version: 3 }), /protocol version 3/);
  assert.throws(() => {
    new FrameWriter().version = 0;
  }, /protocol version 0/);
  assert.throws(() => {
    new FrameReader().version = 3;
  }, /protocol version 3/);
  assert.throws(() => decodeFrameBody(MessageType.HEARTBEAT, bytes(0, 0, 0, 1), 3), RangeError);
  assert.throws(() => encodeFrame({ type: "heartbeat", requestId: 1 }, 3), RangeError);
});

const badFieldsV2: [string, Message][] = [
  ["a ticket of 15 bytes", {
    type: "queued",
    requestId: 1,
    name: "a",
    position: 1,
    ticket: new Uint8Array(15),
  }],
  ["a ticket of 17 bytes", {
    type: "acquired",
    requestId: 1,
    name: "a",
    token: 1,
    leaseMs: 1,
    ticket: new Uint8Array(17),
  }],
  ["a value of 65536 bytes", {
    type: "set_value",
    requestId: 1,
    token: 1,
    name: "a",
    value: new Uint8Array(0x1_0000),
  }],
  ["a mode that is no name", {
    type: "acquire",
    requestId: 1,
    name: "a",
    leaseMs: 0,
    waitMs: 0,
    mode: "upgrade" as "shared",
  }],
  ["a mode given by the number of a name", {
    type: "acquire",
    requestId: 1,
    name: "a",
    leaseMs: 0,
    waitMs: 0,
    mode: 1,
  }],
  ["an enum number above u8", { type: "watch_ended", requestId: 1, reason: 256 }],
  ["a RECLAIM kind 1 given as a number", {
    type: "reclaim",
    requestId: 3,
    kind: 1,
    token: 0,
    orderTerm: 0,
    orderSeq: 0,
    leaseMs: 0,
    waitMs: 0,
    ticket: EMPTY_TICKET,
    mode: "exclusive",
    limit: 0,
    slot: 0,
    name: "a",
    value: EMPTY_VALUE,
  }],
  ["a RESUME with claims above u16", {
    type: "resume",
    requestId: 1,
    prevTerm: 1,
    prevSessionId: 1,
    claims: 0x1_0000,
  }],
  ["a LOCK_STATE with 65536 holders", {
    type: "lock_state",
    requestId: 6,
    event: "state",
    reason: "none",
    kind: "shared",
    limit: 1,
    queueLength: 0,
    owners: 0x1_0000,
    name: "x",
    holders: new Array(0x1_0000).fill({
      token: 1,
      heldMs: 0,
      leaseMs: 50,
      mode: "shared",
      slot: 0,
      identity: "",
      clientName: "",
      value: EMPTY_VALUE,
    }),
  }],
  ["a holder value above 2^53-1", {
    type: "lock_state",
    requestId: 6,
    event: "state",
    reason: "none",
    kind: "exclusive",
    limit: 1,
    queueLength: 0,
    owners: 1,
    name: "x",
    holders: [{
      token: 2 ** 53,
      heldMs: 0,
      leaseMs: 50,
      mode: "exclusive",
      slot: 0,
      identity: "",
      clientName: "",
      value: EMPTY_VALUE,
    }],
  }],
];

for (const [what, msg] of badFieldsV2) {
  Deno.test(`the version-2 encoder refuses ${what} and keeps what was pushed before`, () => {
    const writer = new FrameWriter({ version: 2, maxFrameBytes: 16 * 1024 * 1024 });
    writer.push({ type: "heartbeat", requestId: 1 });
    assert.throws(() => writer.push(msg), RangeError);
    assert.equal(writer.byteLength, 9);
  });
}

Deno.test("a ticket of 16 zero bytes is no ticket: it decodes to EMPTY_TICKET", () => {
  const [queued] = decodeV2(encodeFrame({
    type: "queued",
    requestId: 1,
    name: "a",
    position: 1,
    ticket: new Uint8Array(16),
  }, 2));
  assert.ok(queued.type === "queued");
  assert.equal(queued.ticket, EMPTY_TICKET);
});

Deno.test("tickets and values are copies: the reader's chunk may be reused", () => {
  const chunk = concat([
    encodeFrame({ type: "queued", requestId: 1, name: "a", position: 1, ticket: TICKET }, 2),
    encodeFrame({ type: "set_value", requestId: 2, token: 1, name: "a", value: VALUE }, 2),
  ]);
  const reader = new FrameReader();
  reader.version = 2;
  reader.push(chunk);
  chunk.fill(0xee);
  const queued = reader.next();
  const setValue = reader.next();
  assert.ok(queued?.type === "queued" && setValue?.type === "set_value");
  assert.deepEqual(queued.ticket, TICKET);
  assert.deepEqual(setValue.value, VALUE);
});

Deno.test("a reader decodes in the version of the HELLO or WELCOME that passed through it", () => {
  const acquireV2: Message = {
    type: "acquire",
    requestId: 1,
    name: "a",
    leaseMs: 0,
    waitMs: 0,
    mode: "shared",
    limit: 3,
    value: VALUE,
  };
  // A client's HELLO and its first requests in one chunk: the requests are version 2.
  const server = new FrameReader();
  assert.equal(server.version, 1);
  const got = decodeChunks([concat([
    encodeFrame({ type: "hello", version: 2, clientName: "c" }),
    encodeFrame(acquireV2, 2),
    encodeFrame({ type: "query", requestId: 2, name: "a" }, 2),
  ])], server);
  assert.deepEqual(got.slice(1), [acquireV2, { type: "query", requestId: 2, name: "a" }]);
  assert.equal(server.version, 2);

  // A WELCOME version 2 and the frames that came with it, cut anywhere.
  const welcome: Message = { ...examplesV2[1][1] } as Message;
  const stream = concat([
    encodeFrame(welcome, 2),
    encodeFrame({ type: "resumed", requestId: 1, outcome: "moved", windowLeftMs: 0 }, 2),
  ]);
  for (let at = 0; at <= stream.byteLength; at++) {
    const client = new FrameReader();
    const out = decodeChunks([stream.subarray(0, at), stream.subarray(at)], client);
    assert.equal(out.length, 2, `split at ${at}`);
    assert.equal(client.version, 2);
  }

  // A HELLO for a version this codec does not speak changes nothing, and it was the first.
  const other = new FrameReader();
  decodeChunks([encodeFrame({ type: "hello", version: 9, clientName: "" })], other);
  assert.equal(other.version, 1);
  decodeChunks([encodeFrame({ type: "hello", version: 2, clientName: "" })], other);
  assert.equal(other.version, 1);
  // Only the first HELLO or WELCOME counts (a second one is a violation the session refuses).
  decodeChunks([encodeFrame({ type: "hello", version: 1, clientName: "" })], server);
  assert.equal(server.version, 2);
  // A version set by the owner is fixed too.
  const fixed = new FrameReader();
  fixed.version = 1;
  decodeChunks([encodeFrame({ type: "hello", version: 2, clientName: "" })], fixed);
  assert.equal(fixed.version, 1);
});

const malformedV2: [string, number, Uint8Array, RegExp][] = [
  [
    "a version-2-only type on a version-1 session",
    1,
    frameOf(MessageType.GOODBYE, 0, 0, 0, 1),
    /unknown message type 0x1a/,
  ],
  [
    "the first version-2 type on a version-1 session",
    1,
    frameOf(MessageType.RESUME, ...new Array(22).fill(0)),
    /unknown message type 0x17/,
  ],
  [
    "the last version-2 type on a version-1 session",
    1,
    frameOf(MessageType.WATCH_ENDED, 0, 0, 0, 1, 0),
    /unknown message type 0x22/,
  ],
  [
    "the type after the last version-2 type",
    2,
    frameOf(0x23, 0, 0, 0, 1),
    /unknown message type 0x23/,
  ],
  [
    "a version-2 ACQUIRE read as version 1",
    1,
    encodeFrame(examplesV2[3][1], 2),
    /truncated|trailing bytes/,
  ],
  [
    "a version-1 ACQUIRE read as version 2",
    2,
    encodeFrame(examples[4][1], 1),
    /truncated|trailing/,
  ],
  [
    "a version-2 WELCOME without its tail",
    1,
    (() => {
      const v1 = encodeFrame(
        {
          ...examplesV2[1][1],
          version: 1,
          term: 0,
          reclaimWindowMs: 0,
          valueBytesMax: 0,
        } as Message,
        1,
      );
      v1[6] = 2; // version field 2, but the v1 layout
      return v1;
    })(),
    /"term" is truncated/,
  ],
  [
    "a version-1 WELCOME with a version-2 tail",
    2,
    (() => {
      const v2 = encodeFrame(examplesV2[1][1], 2);
      v2[6] = 1;
      return v2;
    })(),
    /16 trailing bytes/,
  ],
  [
    "a ticket cut short",
    2,
    frameOf(MessageType.QUEUED, 0, 0, 0, 1, 0, 0, 0, 1, ...new Array(16).fill(0), 1, 2, 3),
    /"ticket" is truncated/,
  ],
  [
    "a value longer than the frame",
    2,
    frameOf(MessageType.SET_VALUE, 0, 0, 0, 1, ...new Array(8).fill(0), 0, 1, 0x61, 0, 5, 1, 2),
    /"value" is truncated/,
  ],
  [
    "a value with no length",
    2,
    frameOf(MessageType.SET_VALUE, 0, 0, 0, 1, ...new Array(8).fill(0), 0, 1, 0x61),
    /"value" is truncated/,
  ],
  [
    "a LOCK_STATE whose holder count runs past the frame",
    2,
    frameOf(
      MessageType.LOCK_STATE,
      0,
      0,
      0,
      1,
      0,
      0,
      1,
      0,
      0,
      0,
      1,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      1,
      0,
      1,
      0x61,
      0,
      1,
    ),
    /"holders\[\]\.token" is truncated/,
  ],
  [
    "a LOCK_STATE whose holder identity is not UTF-8",
    2,
    frameOf(
      MessageType.LOCK_STATE,
      0,
      0,
      0,
      1,
      0,
      0,
      1,
      0,
      0,
      0,
      1,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      1,
      0,
      1,
      0x61,
      0,
      1,
      ...new Array(8).fill(0),
      ...new Array(8).fill(0),
      0,
      ...new Array(4).fill(0),
      0,
      1,
      0xff,
      0,
      0,
      0,
      0,
    ),
    /"holders\[\]\.identity" is not valid UTF-8/,
  ],
  [
    "a RESUME whose previous session id is above 2^53-1",
    2,
    frameOf(
      MessageType.RESUME,
      0,
      0,
      0,
      1,
      ...new Array(8).fill(0),
      0xff,
      ...new Array(7).fill(0),
      0,
      0,
    ),
    /"prevSessionId" is above 2\^53-1/,
  ],
];

/** A frame with a correct length prefix around `type` and `body`. */
function frameOf(type: number, ...body: number[]): Uint8Array {
  const frame = new Uint8Array(5 + body.length);
  new DataView(frame.buffer).setUint32(0, 1 + body.length);
  frame[4] = type;
  frame.set(body, 5);
  return frame;
}

for (const [what, version, input, reason] of malformedV2) {
  Deno.test(`the reader rejects ${what}`, () => {
    const reader = new FrameReader();
    reader.version = version;
    reader.push(input);
    expectMalformed(() => reader.next(), reason);
    expectMalformed(() => decodeFrameBody(input[4], input.subarray(5), version), reason);
  });
}

Deno.test("every version-2-only type is an unknown type on a version-1 session and decodes on a version-2 one", () => {
  for (const [, msg] of examplesV2) {
    const frame = encodeFrame(msg, 2);
    if (frame[4] < FIRST_V2_TYPE || frame[4] === MessageType.ERROR) continue;
    expectMalformed(
      () => decodeFrameBody(frame[4], frame.subarray(5), 1),
      new RegExp(`unknown message type 0x${frame[4].toString(16)}`),
    );
    assert.deepEqual(decodeFrameBody(frame[4], frame.subarray(5), 2), msg);
  }
});

// ---------------------------------------------------------------------------
// FrameWriter

Deno.test("a FrameWriter coalesces many frames into one buffer", () => {
  const writer = new FrameWriter({ initialBytes: 16 }); // forces several doublings
  for (const [, msg] of examples) writer.push(msg);
  const expected = concat(examples.map(([, msg]) => encodeFrame(msg)));
  assert.equal(writer.byteLength, expected.byteLength);
  const batch = writer.take();
  assert.deepEqual(batch, expected);
  assert.equal(writer.byteLength, 0);
  assert.deepEqual(decodeChunks([batch]), examples.map(([, msg]) => withNeutral(msg)));
});

Deno.test("take() returns bytes that later pushes do not overwrite", () => {
  const writer = new FrameWriter();
  writer.push({ type: "heartbeat", requestId: 1 });
  const first = writer.take();
  const copy = first.slice();
  writer.push({ type: "heartbeat", requestId: 2 });
  writer.push({ type: "heartbeat", requestId: 3 });
  assert.deepEqual(first, copy);
  assert.deepEqual(decodeChunks([writer.take()]), [
    { type: "heartbeat", requestId: 2 },
    { type: "heartbeat", requestId: 3 },
  ]);
});

const badFields: [string, Message][] = [
  ["a request id above u32", { type: "heartbeat", requestId: 2 ** 32 }],
  ["a negative request id", { type: "heartbeat", requestId: -1 }],
  ["a fractional lease", { type: "acquire", requestId: 1, name: "a", leaseMs: 1.5, waitMs: 0 }],
  ["a version above u16", { type: "hello", version: 0x1_0000, clientName: "" }],
  ["an error code above u8", { type: "error", requestId: 0, code: 256, name: "", message: "" }],
  ["a token above 2^53-1", { type: "release", requestId: 1, name: "a", token: 2 ** 53 }],
  ["a name longer than 65535 bytes", { type: "released", requestId: 1, name: "é".repeat(40_000) }],
  ["a name with a lone surrogate", { type: "released", requestId: 1, name: "a\ud800" }],
];

for (const [what, msg] of badFields) {
  Deno.test(`the encoder refuses ${what} and keeps what was pushed before`, () => {
    const writer = new FrameWriter();
    writer.push({ type: "heartbeat", requestId: 1 });
    const before = writer.byteLength;
    assert.throws(() => writer.push(msg), RangeError);
    assert.equal(writer.byteLength, before);
    assert.deepEqual(decodeChunks([writer.take()]), [{ type: "heartbeat", requestId: 1 }]);
  });
}

Deno.test("the encoder refuses a frame above its frame limit", () => {
  const writer = new FrameWriter({ maxFrameBytes: 20 });
  writer.push({ type: "released", requestId: 1, name: "x".repeat(13) }); // exactly 20 bytes
  assert.throws(
    () => writer.push({ type: "released", requestId: 1, name: "x".repeat(14) }),
    /exceeds the limit of 20 bytes/,
  );
  assert.equal(writer.byteLength, 24);
});

// ---------------------------------------------------------------------------
// ERROR messages are cut at ERROR_MESSAGE_BYTES_MAX bytes

const utf8 = new TextEncoder();

/** The message field of an encoded ERROR, as raw bytes (name must be ASCII-free of tricks). */
function errorMessageBytes(frame: Uint8Array): Uint8Array {
  const nameBytes = (frame[10] << 8) | frame[11];
  const at = 12 + nameBytes;
  const length = (frame[at] << 8) | frame[at + 1];
  assert.equal(at + 2 + length, frame.byteLength, "the message is the last field");
  return frame.subarray(at + 2);
}

const longMessages: [string, string][] = [
  ["ASCII", "x".repeat(5_000)],
  ["two-byte characters", "é".repeat(700)],
  ["three-byte characters", "锁".repeat(400)],
  ["four-byte characters", "🔒".repeat(300)],
  ["a four-byte character across the limit", "a".repeat(1_019) + "🔒".repeat(10)],
  ["a 1,024-byte lock name quoted", `Cannot acquire lock "${"n".repeat(1_024)}": it is held`],
];

for (const [what, message] of longMessages) {
  Deno.test(`an ERROR message of ${what} is cut to ${ERROR_MESSAGE_BYTES_MAX} bytes on a character boundary`, () => {
    const frame = encodeFrame({ type: "error", requestId: 7, code: 7, name: "n", message });
    const sent = errorMessageBytes(frame);
    assert.ok(sent.byteLength <= ERROR_MESSAGE_BYTES_MAX, `${sent.byteLength} bytes`);
    assert.ok(sent.byteLength >= ERROR_MESSAGE_BYTES_MAX - 6, "cut no earlier than needed");
    const text = new TextDecoder("utf-8", { fatal: true }).decode(sent); // throws if cut mid-character
    assert.ok(text.endsWith("\u2026"), "a cut message ends with an ellipsis");
    assert.ok(message.startsWith(text.slice(0, -1)), "the kept part is a prefix of the message");
    const decoded = decodeChunks([frame]);
    assert.equal(decoded.length, 1);
    assert.equal((decoded[0] as { message: string }).message, text);
  });
}

Deno.test("an ERROR message of exactly the limit is sent whole", () => {
  for (const message of ["x".repeat(ERROR_MESSAGE_BYTES_MAX), "🔒".repeat(256)]) {
    assert.equal(utf8.encode(message).byteLength, ERROR_MESSAGE_BYTES_MAX);
    const frame = encodeFrame({ type: "error", requestId: 1, code: 1, name: "", message });
    assert.deepEqual(errorMessageBytes(frame), utf8.encode(message));
  }
  const over = "x".repeat(ERROR_MESSAGE_BYTES_MAX + 1);
  const frame = encodeFrame({ type: "error", requestId: 1, code: 1, name: "", message: over });
  assert.equal(errorMessageBytes(frame).byteLength, ERROR_MESSAGE_BYTES_MAX);
});

Deno.test("only ERROR messages are cut: names and other strings are sent whole or refused", () => {
  const name = "n".repeat(2_000);
  const frame = encodeFrame({ type: "error", requestId: 1, code: 1, name, message: "" });
  assert.deepEqual(decodeChunks([frame]), [
    { type: "error", requestId: 1, code: 1, name, message: "" },
  ]);
  assert.deepEqual(decodeChunks([encodeFrame({ type: "released", requestId: 1, name })]), [
    { type: "released", requestId: 1, name },
  ]);
});

Deno.test("cutUtf8 keeps short text and never splits a character", () => {
  assert.equal(cutUtf8("", 3), "");
  assert.equal(cutUtf8("abc", 3), "abc");
  assert.equal(cutUtf8("abcd", 4), "abcd");
  assert.equal(cutUtf8("abcde", 4), "a\u2026");
  assert.equal(cutUtf8("é".repeat(4), 6), "é\u2026"); // 8 bytes: "é" (2) + "…" (3) fits 6
  assert.equal(cutUtf8("🔒🔒", 6), "\u2026"); // the first character alone would not fit with the mark
  fc.assert(
    fc.property(fc.string({ unit: "binary", maxLength: 80 }), fc.integer({ min: 3, max: 200 }), (
      text,
      maxBytes,
    ) => {
      const cut = cutUtf8(text, maxBytes);
      assert.ok(utf8.encode(cut).byteLength <= maxBytes);
      if (utf8.encode(text).byteLength <= maxBytes) assert.equal(cut, text);
      else assert.ok(text.startsWith(cut.slice(0, -1)) && cut.endsWith("\u2026"));
    }),
    { numRuns: 500 },
  );
});

// ---------------------------------------------------------------------------
// Chunking

const stream = concat(examples.map(([, msg]) => encodeFrame(msg)));
const streamMessages = examples.map(([, msg]) => withNeutral(msg));

Deno.test("a stream split at any single boundary decodes to the same messages", () => {
  for (let at = 0; at <= stream.byteLength; at++) {
    const got = decodeChunks([stream.subarray(0, at), stream.subarray(at)]);
    assert.deepEqual(got, streamMessages, `split at byte ${at}`);
  }
});

Deno.test("a stream pushed one byte at a time decodes to the same messages", () => {
  const chunks = Array.from(stream, (_, i) => stream.subarray(i, i + 1));
  assert.deepEqual(decodeChunks(chunks), streamMessages);
});

Deno.test("the reader copies what it keeps, so the caller may reuse its read buffer", () => {
  const readBuffer = new Uint8Array(7);
  const reader = new FrameReader();
  for (let at = 0; at < stream.byteLength; at += readBuffer.byteLength) {
    const n = Math.min(readBuffer.byteLength, stream.byteLength - at);
    readBuffer.set(stream.subarray(at, at + n));
    reader.push(readBuffer.subarray(0, n));
    readBuffer.fill(0xee); // the next read overwrites the buffer before next() is called
  }
  const got: Message[] = [];
  for (let msg = reader.next(); msg !== null; msg = reader.next()) got.push(msg);
  assert.deepEqual(got, streamMessages);
});

Deno.test("a partial frame yields null until its last byte arrives", () => {
  const frame = encodeFrame({ type: "heartbeat", requestId: 5 });
  const reader = new FrameReader();
  reader.push(frame.subarray(0, frame.byteLength - 1));
  assert.equal(reader.next(), null);
  assert.equal(reader.bufferedBytes, frame.byteLength - 1);
  reader.push(frame.subarray(frame.byteLength - 1));
  assert.deepEqual(reader.next(), { type: "heartbeat", requestId: 5 });
  assert.equal(reader.next(), null);
  assert.equal(reader.bufferedBytes, 0);
});

Deno.test("a frame of exactly the limit is accepted", () => {
  const msg: Message = {
    type: "released",
    requestId: 1,
    name: "n".repeat(FRAME_BYTES_MAX_DEFAULT - 7),
  };
  const frame = encodeFrame(msg);
  assert.equal(frame.byteLength, FRAME_BYTES_MAX_DEFAULT + 4);
  assert.deepEqual(decodeChunks([frame.subarray(0, 3), frame.subarray(3, 9), frame.subarray(9)]), [
    msg,
  ]);
});

// ---------------------------------------------------------------------------
// Rejections

const malformedCases: [string, Uint8Array, RegExp][] = [
  ["a frame of length 0", bytes(0, 0, 0, 0), /length 0/],
  ["a frame longer than the limit", bytes(0, 1, 0, 1), /length 65537 exceeds the limit/],
  ["a frame with the largest possible length", bytes(0xff, 0xff, 0xff, 0xff), /exceeds the limit/],
  ["an unknown type byte", bytes(0, 0, 0, 1, 0x03), /unknown message type 0x03/],
  ["an unknown type byte with a body", bytes(0, 0, 0, 3, 0x80, 1, 2), /unknown message type 0x80/],
  [
    "a HEARTBEAT whose request id is cut short",
    bytes(0, 0, 0, 3, 0x15, 0, 0),
    /"requestId" is truncated/,
  ],
  ["a HEARTBEAT with no body", bytes(0, 0, 0, 1, 0x15), /"requestId" is truncated/],
  [
    "an ACQUIRE whose name length runs past the frame",
    bytes(0, 0, 0, 17, 0x10, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0x61, 0x62),
    /"name" is truncated/,
  ],
  [
    "an ERROR missing its message field",
    bytes(0, 0, 0, 8, 0x7f, 0, 0, 0, 0, 1, 0, 0),
    /"message" is truncated/,
  ],
  [
    "a HEARTBEAT with a trailing byte",
    bytes(0, 0, 0, 6, 0x15, 0, 0, 0, 1, 0xff),
    /1 trailing bytes/,
  ],
  [
    "a RELEASED with invalid UTF-8 in its name",
    bytes(0, 0, 0, 9, 0x14, 0, 0, 0, 1, 0, 2, 0xff, 0xfe),
    /"name" is not valid UTF-8/,
  ],
  [
    "a RELEASED whose name has an invalid byte after ASCII ones",
    bytes(0, 0, 0, 10, 0x14, 0, 0, 0, 1, 0, 3, 0x61, 0x62, 0xff),
    /"name" is not valid UTF-8/,
  ],
  [
    "a RELEASED with an overlong UTF-8 encoding",
    bytes(0, 0, 0, 9, 0x14, 0, 0, 0, 1, 0, 2, 0xc0, 0xaf),
    /not valid UTF-8/,
  ],
  [
    "a RELEASED with an encoded surrogate",
    bytes(0, 0, 0, 10, 0x14, 0, 0, 0, 1, 0, 3, 0xed, 0xa0, 0x80),
    /not valid UTF-8/,
  ],
  [
    "a RELEASED whose name ends inside a multi-byte character",
    bytes(0, 0, 0, 8, 0x14, 0, 0, 0, 1, 0, 1, 0xc3),
    /not valid UTF-8/,
  ],
  [
    "a RELEASE whose token is 2^53",
    bytes(0, 0, 0, 16, 0x13, 0, 0, 0, 1, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 1, 0x61),
    /"token" is above 2\^53-1/,
  ],
  [
    "a WELCOME whose session id has every bit set",
    bytes(0, 0, 0, 25, 0x02, 0, 1, 0, 0, ...new Array(8).fill(0xff), ...new Array(12).fill(0)),
    /"sessionId" is above 2\^53-1/,
  ],
];

for (const [what, input, reason] of malformedCases) {
  Deno.test(`the reader rejects ${what}`, () => {
    const reader = new FrameReader();
    reader.push(input);
    expectMalformed(() => reader.next(), reason);
  });
  Deno.test(`the reader rejects ${what} also when it arrives byte by byte`, () => {
    const reader = new FrameReader();
    expectMalformed(() => {
      for (let i = 0; i < input.byteLength; i++) {
        reader.push(input.subarray(i, i + 1));
        while (reader.next() !== null) { /* drain */ }
      }
    }, reason);
  });
}

Deno.test("the largest u64 (2^53-1) is accepted", () => {
  const input = bytes(
    0,
    0,
    0,
    16,
    0x13,
    0,
    0,
    0,
    1,
    0,
    0x1f,
    0xff,
    0xff,
    0xff,
    0xff,
    0xff,
    0xff,
    0,
    1,
    0x61,
  );
  assert.deepEqual(decodeChunks([input]), [{
    type: "release",
    requestId: 1,
    token: Number.MAX_SAFE_INTEGER,
    name: "a",
  }]);
});

Deno.test("an oversized frame is refused from its 4-byte header alone, buffering nothing", () => {
  const reader = new FrameReader(16);
  reader.push(bytes(0, 0, 0, 17));
  assert.equal(reader.bufferedBytes, 0);
  expectMalformed(() => reader.next(), /length 17 exceeds the limit of 16 bytes/);

  const split = new FrameReader(16);
  split.push(bytes(0, 0));
  assert.equal(split.next(), null);
  split.push(bytes(0, 17));
  assert.equal(split.bufferedBytes, 0);
  expectMalformed(() => split.next(), /exceeds the limit/);
});

Deno.test("messages before a bad frame are delivered, then the error sticks", () => {
  const good = encodeFrame({ type: "heartbeat", requestId: 1 });
  const reader = new FrameReader();
  reader.push(concat([good, good, bytes(0, 0, 0, 0), good]));
  assert.deepEqual(reader.next(), { type: "heartbeat", requestId: 1 });
  assert.deepEqual(reader.next(), { type: "heartbeat", requestId: 1 });
  expectMalformed(() => reader.next(), /length 0/);
  reader.push(good);
  expectMalformed(() => reader.next(), /length 0/);
});

Deno.test("decodeFrameBody rejects a body with trailing bytes", () => {
  expectMalformed(
    () => decodeFrameBody(MessageType.HEARTBEAT_ACK, bytes(0, 0, 0, 1, 0, 0, 0, 2, 9)),
    /HEARTBEAT_ACK frame: 1 trailing bytes/,
  );
});

// ---------------------------------------------------------------------------
// Properties

const u8 = fc.integer({ min: 0, max: 0xff });
const u16 = fc.integer({ min: 0, max: 0xffff });
const u32 = fc.integer({ min: 0, max: U32_MAX });
const u64 = fc.maxSafeNat();
// Mostly short strings, sometimes ones past the codec's 256-character ASCII fast path.
const str = fc.oneof(
  { weight: 9, arbitrary: fc.string({ unit: "binary", maxLength: 24 }) },
  { weight: 1, arbitrary: fc.string({ unit: "binary", minLength: 250, maxLength: 300 }) },
  { weight: 1, arbitrary: fc.string({ unit: "binary-ascii", minLength: 250, maxLength: 300 }) },
);

/** Plain objects (fast-check may otherwise build null-prototype ones, which deepEqual tells apart). */
function record<T>(model: { [K in keyof T]: fc.Arbitrary<T[K]> }): fc.Arbitrary<T> {
  return fc.record(model, { noNullPrototype: true }) as fc.Arbitrary<T>;
}

/** A version for HELLO/WELCOME in a version-1 stream: not 2, which would switch the reader. */
const u16NotV2 = u16.filter((version) => version !== 2);

const messageArb: fc.Arbitrary<Message> = fc.oneof(
  record({ type: fc.constant("hello" as const), version: u16NotV2, clientName: str }),
  record({
    type: fc.constant("welcome" as const),
    version: u16NotV2,
    serverVersion: str,
    sessionId: u64,
    ioTimeoutMs: u32,
    leaseDefaultMs: u32,
    leaseMaxMs: u32,
  }),
  record({
    type: fc.constant("acquire" as const),
    requestId: u32,
    name: str,
    leaseMs: u32,
    waitMs: u32,
  }),
  record({ type: fc.constant("queued" as const), requestId: u32, name: str, position: u32 }),
  record({
    type: fc.constant("acquired" as const),
    requestId: u32,
    name: str,
    token: u64,
    leaseMs: u32,
  }),
  record({ type: fc.constant("release" as const), requestId: u32, name: str, token: u64 }),
  record({ type: fc.constant("released" as const), requestId: u32, name: str }),
  record({ type: fc.constant("heartbeat" as const), requestId: u32 }),
  record({ type: fc.constant("heartbeat_ack" as const), requestId: u32, renewed: u32 }),
  record({
    type: fc.constant("error" as const),
    requestId: u32,
    code: u8,
    name: str,
    message: str,
  }),
);

const bin = fc.oneof(
  { weight: 3, arbitrary: fc.constant(EMPTY_VALUE) },
  { weight: 6, arbitrary: fc.uint8Array({ minLength: 1, maxLength: 24 }) },
  { weight: 1, arbitrary: fc.uint8Array({ minLength: 250, maxLength: 300 }) },
);
const b16 = fc.oneof(
  fc.constant(EMPTY_TICKET),
  fc.uint8Array({ minLength: 16, maxLength: 16 }), // all zero: EMPTY_TICKET (asSent)
);
/** An enum field: one of its names, or a byte that names none. */
function enumArb<N extends string>(
  names: readonly (N | null)[],
): fc.Arbitrary<N | number> {
  const named = names.filter((name): name is N => name !== null);
  const unnamed = fc.integer({ min: 0, max: 0xff }).filter((v) =>
    v >= names.length || names[v] === null
  );
  return fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...named) }, {
    weight: 1,
    arbitrary: unnamed,
  });
}
const mode = enumArb(LOCK_MODES);
const holderArb = record({
  token: u64,
  heldMs: u32,
  leaseMs: u32,
  mode,
  slot: u32,
  identity: str,
  clientName: str,
  value: bin,
});

/** Every message type with every field of version 2 (HELLO and WELCOME of version 2). */
const messageArbV2: fc.Arbitrary<Message> = fc.oneof(
  record({ type: fc.constant("hello" as const), version: fc.constant(2), clientName: str }),
  record({
    type: fc.constant("welcome" as const),
    version: fc.constant(2),
    serverVersion: str,
    sessionId: u64,
    ioTimeoutMs: u32,
    leaseDefaultMs: u32,
    leaseMaxMs: u32,
    term: u64,
    reclaimWindowMs: u32,
    valueBytesMax: u32,
  }),
  record({
    type: fc.constant("acquire" as const),
    requestId: u32,
    name: str,
    leaseMs: u32,
    waitMs: u32,
    mode,
    limit: u32,
    value: bin,
  }),
  record({
    type: fc.constant("queued" as const),
    requestId: u32,
    name: str,
    position: u32,
    orderTerm: u64,
    orderSeq: u64,
    ticket: b16,
  }),
  record({
    type: fc.constant("acquired" as const),
    requestId: u32,
    name: str,
    token: u64,
    leaseMs: u32,
    ticket: b16,
    mode,
    limit: u32,
    slot: u32,
    writeGeneration: u64,
  }),
  messageArb.filter((msg) =>
    !["hello", "welcome", "acquire", "queued", "acquired"].includes(msg.type)
  ),
  record({
    type: fc.constant("resume" as const),
    requestId: u32,
    prevTerm: u64,
    prevSessionId: u64,
    claims: u16,
  }),
  record({
    type: fc.constant("resumed" as const),
    requestId: u32,
    outcome: enumArb(RESUME_OUTCOMES),
    windowLeftMs: u32,
  }),
  record({
    type: fc.constant("reclaim" as const),
    requestId: u32,
    kind: enumArb(CLAIM_KINDS),
    token: u64,
    orderTerm: u64,
    orderSeq: u64,
    leaseMs: u32,
    waitMs: u32,
    ticket: b16,
    mode,
    limit: u32,
    slot: u32,
    name: str,
    value: bin,
  }),
  record({ type: fc.constant("goodbye" as const), requestId: u32 }),
  record({
    type: fc.constant("set_value" as const),
    requestId: u32,
    token: u64,
    name: str,
    value: bin,
  }),
  record({ type: fc.constant("value_set" as const), requestId: u32, name: str }),
  record({ type: fc.constant("query" as const), requestId: u32, name: str }),
  record({
    type: fc.constant("lock_state" as const),
    requestId: u32,
    event: enumArb(LOCK_EVENTS),
    reason: enumArb(END_REASONS),
    kind: enumArb(LOCK_KINDS),
    limit: u32,
    queueLength: u32,
    owners: u32,
    name: str,
    holders: fc.array(holderArb, { maxLength: 4 }),
  }),
  record({ type: fc.constant("watch" as const), requestId: u32, pattern: str }),
  record({ type: fc.constant("watching" as const), requestId: u32, locks: u32 }),
  record({ type: fc.constant("unwatch" as const), requestId: u32 }),
  record({
    type: fc.constant("watch_ended" as const),
    requestId: u32,
    reason: enumArb(WATCH_END_REASONS),
  }),
);

/** Cuts `input` into chunks of the given sizes (cycled); every chunk is non-empty. */
function cut(input: Uint8Array, sizes: number[]): Uint8Array[] {
  const chunks: Uint8Array[] = [];
  for (let at = 0, i = 0; at < input.byteLength; i++) {
    const size = sizes.length === 0 ? input.byteLength : sizes[i % sizes.length];
    chunks.push(input.subarray(at, at + size));
    at += size;
  }
  return chunks;
}

/**
 * What the peer decodes: the message with its neutral version-2 fields, an ERROR's text cut to
 * ERROR_MESSAGE_BYTES_MAX, a ticket of 16 zero bytes as EMPTY_TICKET.
 */
function asSent(msg: Message): DecodedMessage {
  if (msg.type === "error") {
    return { ...msg, message: cutUtf8(msg.message, ERROR_MESSAGE_BYTES_MAX) };
  }
  const decoded = withNeutral(msg);
  if ("ticket" in decoded && decoded.ticket.every((byte) => byte === 0)) {
    return { ...decoded, ticket: EMPTY_TICKET };
  }
  return decoded;
}

Deno.test("property: every message round-trips", () => {
  fc.assert(
    fc.property(messageArb, (msg) => {
      assert.deepEqual(decodeChunks([encodeFrame(msg)]), [asSent(msg)]);
    }),
    { numRuns: 500 },
  );
});

Deno.test("property: a batch of messages cut into random chunks decodes to the same messages", () => {
  fc.assert(
    fc.property(
      fc.array(messageArb, { maxLength: 12 }),
      fc.array(fc.integer({ min: 1, max: 40 }), { maxLength: 8 }),
      (msgs, sizes) => {
        const writer = new FrameWriter({ initialBytes: 16 });
        for (const msg of msgs) writer.push(msg);
        assert.deepEqual(decodeChunks(cut(writer.take(), sizes)), msgs.map(asSent));
      },
    ),
    { numRuns: 300 },
  );
});

Deno.test("property: every version-2 message round-trips", () => {
  fc.assert(
    fc.property(messageArbV2, (msg) => {
      assert.deepEqual(decodeV2(encodeFrame(msg, 2)), [asSent(msg)]);
    }),
    { numRuns: 1_000 },
  );
});

Deno.test("property: a version-2 session's stream cut into random chunks decodes to the same messages", () => {
  fc.assert(
    fc.property(
      fc.array(messageArbV2, { maxLength: 12 }),
      fc.array(fc.integer({ min: 1, max: 40 }), { maxLength: 8 }),
      (msgs, sizes) => {
        // The first frame fixes the reader's version, as a HELLO does on a server.
        const writer = new FrameWriter({ initialBytes: 16, version: 2 });
        writer.push({ type: "hello", version: 2, clientName: "p" });
        for (const msg of msgs) writer.push(msg);
        const decoded = decodeChunks(cut(writer.take(), sizes));
        assert.deepEqual(decoded.slice(1), msgs.map(asSent));
      },
    ),
    { numRuns: 300 },
  );
});

/**
 * Feeds `input` in chunks and drains the reader with a bounded loop. Returns
 * normally for messages or a ProtocolError; anything else fails the property.
 */
function feedArbitraryBytes(
  input: Uint8Array,
  sizes: number[],
  maxFrameBytes: number,
  version = 1,
): void {
  const reader = new FrameReader(maxFrameBytes);
  if (version !== 1) reader.version = version;
  // Each message takes at least 5 bytes, so this many next() calls always suffice.
  let budget = input.byteLength + cut(input, sizes).length + 1;
  try {
    for (const chunk of cut(input, sizes)) {
      reader.push(chunk);
      while (reader.next() !== null) {
        assert.ok(--budget > 0, "next() kept returning messages past the input's size");
      }
    }
    assert.ok(reader.bufferedBytes <= maxFrameBytes + 4, "buffered more than one frame");
  } catch (error) {
    if (!(error instanceof ProtocolError)) throw error;
    assert.equal(error.code, MALFORMED);
  }
}

Deno.test("property: random bytes in random chunks yield messages or a ProtocolError", () => {
  fc.assert(
    fc.property(
      fc.uint8Array({ maxLength: 300 }),
      fc.array(fc.integer({ min: 1, max: 64 }), { maxLength: 8 }),
      fc.integer({ min: 1, max: 128 }),
      fc.constantFrom(1, 2),
      feedArbitraryBytes,
    ),
    { numRuns: 500 },
  );
});

/** Frames with a correct length prefix, a plausible type byte and a random body: reach the field decoders. */
const frameLikeArb = fc.tuple(
  fc.constantFrom(...Object.values(MessageType), 0x00, 0x03, 0x23, 0x7e, 0xff),
  fc.uint8Array({ maxLength: 40 }),
).map(([type, body]) => {
  const frame = new Uint8Array(5 + body.byteLength);
  new DataView(frame.buffer).setUint32(0, 1 + body.byteLength);
  frame[4] = type;
  frame.set(body, 5);
  return frame;
});

Deno.test("property: well-framed random bodies yield messages or a ProtocolError", () => {
  fc.assert(
    fc.property(
      fc.array(fc.oneof(frameLikeArb, messageArb.map((msg) => encodeFrame(msg))), {
        maxLength: 8,
      }),
      fc.array(fc.integer({ min: 1, max: 64 }), { maxLength: 8 }),
      (frames, sizes) => feedArbitraryBytes(concat(frames), sizes, FRAME_BYTES_MAX_DEFAULT),
    ),
    { numRuns: 500 },
  );
});

Deno.test("property: well-framed random bodies yield messages or a ProtocolError in version 2", () => {
  fc.assert(
    fc.property(
      fc.array(fc.oneof(frameLikeArb, messageArbV2.map((msg) => encodeFrame(msg, 2))), {
        maxLength: 8,
      }),
      fc.array(fc.integer({ min: 1, max: 64 }), { maxLength: 8 }),
      (frames, sizes) => feedArbitraryBytes(concat(frames), sizes, FRAME_BYTES_MAX_DEFAULT, 2),
    ),
    { numRuns: 500 },
  );
});

// ---------------------------------------------------------------------------
// docs/protocol.md

const protocolDoc = Deno.readTextFileSync(new URL("../../docs/protocol.md", import.meta.url));

/**
 * `Example…: \`{json}\`` followed by a ```hex block; `#` starts a comment in the block. The
 * example belongs to the message section above it: `### NAME (0xNN, direction)`, with
 * `, version 2` after it for the version-2 layout of a message both versions have; the types of
 * version 2 only are version 2 too. In the JSON, `b16` and `bin` fields are hex strings.
 */
interface DocExample {
  /** The section's heading line without `### `. */
  heading: string;
  name: keyof typeof MessageType;
  version: number;
  msg: Message;
  hex: Uint8Array;
}

function docExamples(): DocExample[] {
  const found: DocExample[] = [];
  const pattern = /^Example\b[^`]*?:\s*`(\{[^`]*\})`\s*```hex\n([\s\S]*?)```/gm;
  for (const match of protocolDoc.matchAll(pattern)) {
    const before = protocolDoc.slice(0, match.index);
    const heading = [...before.matchAll(/^### ((\w+) \(0x([0-9a-f]{2})[^)\n]*\)(, version 2)?)$/gm)]
      .at(-1);
    assert.ok(heading, `no message heading before example ${match[1]}`);
    const name = heading[2] as keyof typeof MessageType;
    const version = heading[4] !== undefined || MessageType[name] >= FIRST_V2_TYPE &&
        MessageType[name] !== MessageType.ERROR
      ? 2
      : 1;
    const digits = match[2].split("\n").map((line) => line.replace(/#.*/, "").replace(/\s+/g, ""))
      .join("");
    assert.match(digits, /^([0-9a-f]{2})+$/, `bad hex in example of ${heading[1]}`);
    found.push({
      heading: heading[1],
      name,
      version,
      msg: fromDocJson(heading[1], JSON.parse(match[1])),
      hex: Uint8Array.from(digits.match(/../g)!, (pair) => parseInt(pair, 16)),
    });
  }
  return found;
}

/** Bytes from a hex string; for a ticket all zero (or "") is EMPTY_TICKET, for a value "" EMPTY_VALUE. */
function hexBytes(type: string, hex: string): Uint8Array {
  const bytes = Uint8Array.from(hex.match(/../g) ?? [], (pair) => parseInt(pair, 16));
  if (type === "b16") return bytes.every((b) => b === 0) ? EMPTY_TICKET : bytes;
  return bytes.length === 0 ? EMPTY_VALUE : bytes;
}

/** The doc's JSON of a message, with its `b16`/`bin` fields (hex strings) as bytes. */
function fromDocJson(heading: string, json: Record<string, unknown>): Message {
  const out = { ...json };
  for (const row of layoutTable(heading)) {
    if (row.type !== "b16" && row.type !== "bin") continue;
    const [group, field] = row.field.includes("[].") ? row.field.split("[].") : [null, row.field];
    if (group === null) out[field] = hexBytes(row.type, out[field] as string);
    else {
      out[group] = (out[group] as Record<string, unknown>[]).map((item) => ({
        ...item,
        [field]: hexBytes(row.type, item[field] as string),
      }));
    }
  }
  return out as unknown as Message;
}

Deno.test("each hex example in docs/protocol.md decodes to the message it names", () => {
  const found = docExamples();
  assert.deepEqual(
    [...new Set(found.map((example) => example.name))].sort(),
    Object.keys(MessageType).sort(),
    "at least one example per message type",
  );
  assert.deepEqual(
    found.filter((e) => e.heading.endsWith(", version 2")).map((e) => e.name).sort(),
    ["ACQUIRE", "ACQUIRE", "ACQUIRED", "ACQUIRED", "QUEUED", "WELCOME"],
    "an example of each message version 2 changed, in its version-2 layout",
  );
  for (const { heading, name, version, msg, hex } of found) {
    assert.equal(hex[4], MessageType[name], heading);
    const reader = new FrameReader();
    reader.version = version;
    assert.deepEqual(decodeChunks([hex], reader), [withNeutral(msg)], heading);
    assert.deepEqual(
      encodeFrame(msg, version),
      hex,
      `${heading}: the encoder gives the documented bytes`,
    );
  }
});

Deno.test("the examples in docs/protocol.md carry realistic fencing tokens (above 2^32)", () => {
  const tokens = docExamples().flatMap(({ msg }) => {
    const all = "token" in msg && msg.token !== 0 ? [msg.token] : [];
    if (msg.type === "acquired" && msg.writeGeneration) all.push(msg.writeGeneration);
    if (msg.type === "lock_state") all.push(...msg.holders.map((holder) => holder.token));
    return all;
  });
  assert.ok(tokens.length >= 6, "ACQUIRED, RELEASE, RECLAIM, SET_VALUE, LOCK_STATE examples");
  for (const token of tokens) {
    assert.ok(token > 2 ** 32 && token <= Number.MAX_SAFE_INTEGER, `token ${token}`);
    // A client that keeps the low 32 bits only would read another number.
    assert.notEqual(token % 2 ** 32, token);
  }
  // So does the prose: the sequences show the same realistic values, never small ones.
  assert.doesNotMatch(protocolDoc, /token=\d{1,12}\b(?!\d)/, "a small token in a sequence");
});

interface LayoutRow {
  offset: string;
  field: string;
  type: string;
}

/** The offset/field/type table of the message section whose heading line is `### ${heading}`. */
function layoutTable(heading: string): LayoutRow[] {
  const line = `\n### ${heading}\n`;
  const start = protocolDoc.indexOf(line);
  assert.ok(start >= 0, `section of ${heading}`);
  assert.equal(protocolDoc.indexOf(line, start + 1), -1, `one section of ${heading}`);
  const next = protocolDoc.slice(start + line.length).search(/^##/m);
  const section = protocolDoc.slice(start, next < 0 ? undefined : start + line.length + next);
  const rows: LayoutRow[] = [];
  for (const line of section.split("\n")) {
    const cells = line.split("|").slice(1, -1).map((cell) => cell.trim());
    if (cells.length === 4 && /^(\d+|…)$/.test(cells[0])) {
      rows.push({ offset: cells[0], field: cells[1], type: cells[2] });
    }
  }
  return rows;
}

/** The names of each enum field (a u8 in the tables), by `MESSAGE.field`; `mode` everywhere. */
const DOC_ENUMS: Record<string, readonly (string | null)[]> = {
  "RECLAIM.kind": CLAIM_KINDS,
  "RESUMED.outcome": RESUME_OUTCOMES,
  "LOCK_STATE.event": LOCK_EVENTS,
  "LOCK_STATE.reason": END_REASONS,
  "LOCK_STATE.kind": LOCK_KINDS,
  "WATCH_ENDED.reason": WATCH_END_REASONS,
};

const toHex = (bytes: Uint8Array) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0"));

Deno.test("each layout table in docs/protocol.md matches its examples field by field", () => {
  for (const { heading, name, msg, hex } of docExamples()) {
    const rows = layoutTable(heading);
    assert.deepEqual(rows.slice(0, 2).map((row) => [row.offset, row.field, row.type]), [
      ["0", "length", "u32"],
      ["4", "type", "u8"],
    ], `${heading}: every frame starts with length and type`);
    const view = new DataView(hex.buffer, hex.byteOffset, hex.byteLength);
    let at = 0;
    let afterVariable = false;
    /** Reads the field of `row` at `at`, checks it against `values`, and moves on. */
    const walk = (row: LayoutRow, values: Record<string, unknown>, key: string) => {
      const what = `${heading}.${row.field}`;
      if (afterVariable) {
        assert.equal(row.offset, "…", `${what}: offset after a variable-length field is "…"`);
      } else {
        assert.equal(row.offset, String(at), `${what}: documented offset`);
      }
      let value: unknown;
      switch (row.type) {
        case "u8": {
          const byte = view.getUint8(at);
          const names = key === "mode" ? LOCK_MODES : DOC_ENUMS[`${name}.${key}`];
          value = names === undefined ? byte : names[byte] ?? byte;
          at += 1;
          break;
        }
        case "u16":
          value = view.getUint16(at);
          at += 2;
          break;
        case "u32":
          value = view.getUint32(at);
          at += 4;
          break;
        case "u64":
          value = view.getUint32(at) * 2 ** 32 + view.getUint32(at + 4);
          at += 8;
          break;
        case "b16":
          value = toHex(hexBytes("b16", toHex(hex.subarray(at, at + 16)).join("")));
          at += 16;
          break;
        case "str":
        case "bin": {
          const length = view.getUint16(at);
          const bytes = hex.subarray(at + 2, at + 2 + length);
          value = row.type === "str" ? new TextDecoder().decode(bytes) : toHex(bytes);
          at += 2 + length;
          afterVariable = true;
          break;
        }
        default:
          throw new Error(`${what}: unknown type ${row.type}`);
      }
      const expected = key === "length"
        ? hex.byteLength - 4
        : key === "type"
        ? MessageType[name]
        : values[key];
      if (row.type === "b16" || row.type === "bin") {
        assert.deepEqual(value, toHex(expected as Uint8Array), what);
      } else if (Array.isArray(expected)) {
        assert.equal(value, expected.length, `${what}: the count of its records`);
      } else {
        assert.equal(value, expected, what);
      }
      return value;
    };
    const values = msg as unknown as Record<string, unknown>;
    for (const [i, row] of rows.entries()) {
      if (row.field.includes("[].")) continue; // walked with its count below
      const count = walk(row, values, row.field);
      const group = rows.slice(i + 1).filter((r) => r.field.startsWith(`${row.field}[].`));
      if (group.length === 0) continue;
      afterVariable = true;
      for (const item of values[row.field] as Record<string, unknown>[]) {
        for (const member of group) walk(member, item, member.field.split("[].")[1]);
      }
      assert.equal((values[row.field] as unknown[]).length, count);
    }
    assert.equal(at, hex.byteLength, `${heading}: the table covers every byte of the example`);
    const listed = (fields: string[]) =>
      fields.filter((field) => field !== "length" && field !== "type").sort();
    assert.deepEqual(
      Object.keys(values).filter((key) => key !== "type").sort(),
      listed(rows.map((row) => row.field).filter((field) => !field.includes("[]."))),
      `${heading}: the table lists every field of the message`,
    );
    for (const row of rows.filter((r) => r.field.includes("[]."))) {
      const [group, field] = row.field.split("[].");
      for (const item of values[group] as Record<string, unknown>[]) {
        assert.ok(field in item, `${heading}.${row.field}: in every record`);
      }
    }
  }
});

Deno.test("the u64 example and the stated byte limits in docs/protocol.md hold", () => {
  const u64 = protocolDoc.match(/Example: (\d+) is `((?:[0-9a-f]{2} ?){8})`/);
  assert.ok(u64, "the u64 example");
  const frame = encodeFrame({ type: "release", requestId: 1, name: "a", token: Number(u64[1]) });
  assert.deepEqual(
    [...frame.subarray(9, 17)],
    u64[2].trim().split(" ").map((b) => parseInt(b, 16)),
  );
  const stated: [RegExp, number][] = [
    [/\(`FRAME_BYTES_MAX_DEFAULT`, (\d+) bytes by default/, FRAME_BYTES_MAX_DEFAULT],
    [/A lock name is 1\.\.(\d+) UTF-8 bytes \(`LOCK_NAME_BYTES_MAX`\)/, LOCK_NAME_BYTES_MAX],
    [/at most (\d+) bytes \(`CLIENT_NAME_BYTES_MAX`\)/, CLIENT_NAME_BYTES_MAX],
    [/human-readable, ≤ (\d+) bytes/, ERROR_MESSAGE_BYTES_MAX],
    [/cuts a longer message .* to at most ([\d,]+) bytes/s, ERROR_MESSAGE_BYTES_MAX],
    [/more than `WRITE_BUFFER_BYTES_MAX`, (\d+) MiB/, WRITE_BUFFER_BYTES_MAX / 2 ** 20],
  ];
  const longestError = encodeFrame({
    type: "error",
    requestId: 1,
    code: 1,
    name: "n".repeat(LOCK_NAME_BYTES_MAX),
    message: "m".repeat(5_000),
  });
  stated.push([/receives frames of\s+at\s+most ([\d,]+) bytes/, longestError.byteLength]);
  for (const [pattern, value] of stated) {
    const match = protocolDoc.match(pattern);
    assert.ok(match, `docs/protocol.md states ${pattern}`);
    assert.equal(Number(match[1].replaceAll(",", "")), value, String(pattern));
  }
});

Deno.test("every wire code appears in the docs/protocol.md code table", () => {
  const rows = new Map<string, string[]>();
  for (const line of protocolDoc.split("\n")) {
    const cells = line.split("|").slice(1, -1).map((cell) => cell.trim());
    if (cells.length === 5 && /^0x[0-9a-f]{2}$/.test(cells[0])) rows.set(cells[1], cells);
  }
  for (const info of Object.values(WIRE_CODES)) {
    const yesNo = (flag: boolean) => flag ? "yes" : "no";
    assert.deepEqual(rows.get(info.name), [
      "0x" + info.code.toString(16).padStart(2, "0"),
      info.name,
      yesNo(info.retryable),
      yesNo(info.closes),
      info.meaning,
    ], `row of ${info.name}`);
  }
  assert.equal(rows.size, Object.keys(WIRE_CODES).length, "no rows for codes that do not exist");
});
