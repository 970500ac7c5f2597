/** The wire codec's version 2 (docs/protocol.md, "Version 2"); version 1 is codec_test.ts's. */
import assert from "node:assert/strict";
import fc from "fast-check";
import { encodeFrame, FrameWriter } from "../../src/wire/frame.ts";
import { decodeFrameBody, FrameReader } from "../../src/wire/frame_reader.ts";
import {
  EMPTY_TICKET,
  EMPTY_VALUE,
  FIRST_V2_TYPE,
  type Message,
  MessageType,
} from "../../src/wire/messages.ts";
import { FRAME_BYTES_MAX_DEFAULT } from "../../src/limits.ts";

import {
  asSent,
  bytes,
  concat,
  cut,
  decodeChunks,
  decodeV2,
  examples,
  examplesV2,
  expectMalformed,
  feedArbitraryBytes,
  frameLikeArb,
  frameOf,
  messageArbV2,
  TICKET,
  VALUE,
} from "./codec_fixtures.ts";

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
    frameOf(0x24, 0, 0, 0, 1),
    /unknown message type 0x24/,
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
// Properties

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
