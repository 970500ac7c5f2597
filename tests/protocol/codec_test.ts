import assert from "node:assert/strict";
import fc from "fast-check";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { cutUtf8, encodeFrame, FrameWriter } from "../../src/wire/frame.ts";
import { decodeFrameBody, FrameReader } from "../../src/wire/frame_reader.ts";
import {
  CLAIM_KINDS,
  EMPTY_TICKET,
  EMPTY_VALUE,
  END_REASONS,
  FIRST_V2_TYPE,
  LOCK_EVENTS,
  LOCK_KINDS,
  LOCK_MODES,
  type Message,
  MessageType,
  PROTOCOL_VERSIONS,
  RESUME_OUTCOMES,
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

import {
  asSent,
  bytes,
  concat,
  cut,
  decodeChunks,
  examples,
  examplesV2,
  expectMalformed,
  feedArbitraryBytes,
  frameLikeArb,
  messageArb,
} from "./codec_fixtures.ts";

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
    downgrade: MessageType.DOWNGRADE,
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
