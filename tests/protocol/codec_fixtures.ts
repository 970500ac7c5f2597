/**
 * Shared by the codec tests (codec_test.ts: version 1 and docs/protocol.md; codec_v2_test.ts:
 * version 2): helpers, round-trip examples of both versions and fast-check arbitraries.
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { ProtocolError, WIRE_CODES } from "../../src/wire/codes.ts";
import { cutUtf8 } from "../../src/wire/frame.ts";
import { FrameReader } from "../../src/wire/frame_reader.ts";
import {
  CLAIM_KINDS,
  type DecodedMessage,
  EMPTY_TICKET,
  EMPTY_VALUE,
  END_REASONS,
  LOCK_EVENTS,
  LOCK_KINDS,
  LOCK_MODES,
  type Message,
  MessageType,
  PROTOCOL_VERSION,
  RESUME_OUTCOMES,
  WAIT_FOREVER,
  WATCH_END_REASONS,
  withNeutral,
} from "../../src/wire/messages.ts";
import { ERROR_MESSAGE_BYTES_MAX } from "../../src/limits.ts";

export const MALFORMED = WIRE_CODES.MALFORMED_FRAME.code;
export const U32_MAX = 0xffff_ffff;

/** Pushes `chunks` one after the other and drains the reader after each push. */
export function decodeChunks(chunks: Uint8Array[], reader = new FrameReader()): DecodedMessage[] {
  const out: DecodedMessage[] = [];
  for (const chunk of chunks) {
    reader.push(chunk);
    for (let msg = reader.next(); msg !== null; msg = reader.next()) out.push(msg);
  }
  return out;
}

export function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.byteLength;
  }
  return out;
}

export function bytes(...values: number[]): Uint8Array {
  return Uint8Array.from(values);
}

export function expectMalformed(fn: () => unknown, reason: RegExp): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof ProtocolError, `expected ProtocolError, got ${error}`);
    assert.equal(error.code, MALFORMED);
    assert.match(error.message, reason);
    return true;
  });
}

// ---------------------------------------------------------------------------
// Round trips

export const examples: [string, Message][] = [
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

// ---------------------------------------------------------------------------
// Version 2

export const TICKET = Uint8Array.from({ length: 16 }, (_, i) => 0xa0 + i);
export const VALUE = utf8Bytes("10.0.0.7:8080");

export function utf8Bytes(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}

/** Decodes `frames` with a reader fixed to version 2. */
export function decodeV2(...frames: Uint8Array[]): DecodedMessage[] {
  const reader = new FrameReader();
  reader.version = 2;
  return decodeChunks([concat(frames)], reader);
}

export const examplesV2: [string, Message][] = [
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
    writeGeneration: 0,
  }],
  ["a RECLAIM of a reader with its write generation", {
    type: "reclaim",
    requestId: 5,
    kind: "owned",
    token: 1_795_426_718_504_011,
    orderTerm: 0,
    orderSeq: 0,
    leaseMs: 10_000,
    waitMs: 0,
    ticket: TICKET,
    mode: "shared",
    limit: 1,
    slot: 0,
    name: "reports/daily",
    value: EMPTY_VALUE,
    writeGeneration: 1_795_426_718_504_007,
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
    writeGeneration: 0,
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
  ["a DOWNGRADE", {
    type: "downgrade",
    requestId: 14,
    token: 1_795_426_718_504_007,
    name: "reports/daily",
  }],
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

/** A frame with a correct length prefix around `type` and `body`. */
export function frameOf(type: number, ...body: number[]): Uint8Array {
  const frame = new Uint8Array(5 + body.length);
  new DataView(frame.buffer).setUint32(0, 1 + body.length);
  frame[4] = type;
  frame.set(body, 5);
  return frame;
}

// ---------------------------------------------------------------------------
// Properties

export const u8 = fc.integer({ min: 0, max: 0xff });
export const u16 = fc.integer({ min: 0, max: 0xffff });
export const u32 = fc.integer({ min: 0, max: U32_MAX });
export const u64 = fc.maxSafeNat();
// Mostly short strings, sometimes ones past the codec's 256-character ASCII fast path.
export const str = fc.oneof(
  { weight: 9, arbitrary: fc.string({ unit: "binary", maxLength: 24 }) },
  { weight: 1, arbitrary: fc.string({ unit: "binary", minLength: 250, maxLength: 300 }) },
  { weight: 1, arbitrary: fc.string({ unit: "binary-ascii", minLength: 250, maxLength: 300 }) },
);

/** Plain objects (fast-check may otherwise build null-prototype ones, which deepEqual tells apart). */
export function record<T>(model: { [K in keyof T]: fc.Arbitrary<T[K]> }): fc.Arbitrary<T> {
  return fc.record(model, { noNullPrototype: true }) as fc.Arbitrary<T>;
}

/** A version for HELLO/WELCOME in a version-1 stream: not 2, which would switch the reader. */
export const u16NotV2 = u16.filter((version) => version !== 2);

export const messageArb: fc.Arbitrary<Message> = fc.oneof(
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

export const bin = fc.oneof(
  { weight: 3, arbitrary: fc.constant(EMPTY_VALUE) },
  { weight: 6, arbitrary: fc.uint8Array({ minLength: 1, maxLength: 24 }) },
  { weight: 1, arbitrary: fc.uint8Array({ minLength: 250, maxLength: 300 }) },
);
export const b16 = fc.oneof(
  fc.constant(EMPTY_TICKET),
  fc.uint8Array({ minLength: 16, maxLength: 16 }), // all zero: EMPTY_TICKET (asSent)
);
/** An enum field: one of its names, or a byte that names none. */
export function enumArb<N extends string>(
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
export const mode = enumArb(LOCK_MODES);
export const holderArb = record({
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
export const messageArbV2: fc.Arbitrary<Message> = fc.oneof(
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
    writeGeneration: u64,
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
  record({ type: fc.constant("downgrade" as const), requestId: u32, token: u64, name: str }),
  record({
    type: fc.constant("watch_ended" as const),
    requestId: u32,
    reason: enumArb(WATCH_END_REASONS),
  }),
);

/** Cuts `input` into chunks of the given sizes (cycled); every chunk is non-empty. */
export function cut(input: Uint8Array, sizes: number[]): Uint8Array[] {
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
export function asSent(msg: Message): DecodedMessage {
  if (msg.type === "error") {
    return { ...msg, message: cutUtf8(msg.message, ERROR_MESSAGE_BYTES_MAX) };
  }
  const decoded = withNeutral(msg);
  if ("ticket" in decoded && decoded.ticket.every((byte) => byte === 0)) {
    return { ...decoded, ticket: EMPTY_TICKET };
  }
  return decoded;
}

/**
 * Feeds `input` in chunks and drains the reader with a bounded loop. Returns
 * normally for messages or a ProtocolError; anything else fails the property.
 */
export function feedArbitraryBytes(
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

/** Frames with a correct length prefix, a plausible type byte and a random body: reach the field decoders. */
export const frameLikeArb = fc.tuple(
  fc.constantFrom(...Object.values(MessageType), 0x00, 0x03, 0x23, 0x7e, 0xff),
  fc.uint8Array({ maxLength: 40 }),
).map(([type, body]) => {
  const frame = new Uint8Array(5 + body.byteLength);
  new DataView(frame.buffer).setUint32(0, 1 + body.byteLength);
  frame[4] = type;
  frame.set(body, 5);
  return frame;
});
