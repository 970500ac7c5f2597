/**
 * Frames encoded once for many sessions (src/wire/encoded_frame.ts): appended with another
 * request id they decode to the message with that id, byte for byte what encoding it would give;
 * a frame over the writer's limit or a request id that is no u32 is refused, the writer left as
 * it was.
 */
import assert from "node:assert/strict";
import { EncodedFrame, type RequestMessage } from "../../src/wire/encoded_frame.ts";
import { encodeFrame, FrameWriter } from "../../src/wire/frame.ts";
import { decodeV2, examplesV2 } from "./codec_fixtures.ts";

const shareable = examplesV2.filter(([, msg]) =>
  msg.type === "lock_state" || msg.type === "watching" || msg.type === "watch_ended"
) as [string, RequestMessage][];

Deno.test("an encoded frame appended with another request id is that message's encoding", () => {
  assert.ok(shareable.length >= 3);
  const encoder = new FrameWriter({ version: 2 });
  for (const [what, msg] of shareable) {
    const frame = new EncodedFrame(msg, encoder);
    assert.equal(encoder.byteLength, 0, what);
    const writer = new FrameWriter({ version: 2 });
    writer.pushEncoded(frame.bytes, 7);
    writer.pushEncoded(frame.bytes, 0xffff_ffff);
    const bytes = writer.take();
    assert.deepEqual(
      bytes.subarray(0, frame.bytes.length),
      encodeFrame({ ...msg, requestId: 7 }, 2),
    );
    assert.deepEqual(decodeV2(bytes), [
      { ...msg, requestId: 7 },
      { ...msg, requestId: 0xffff_ffff },
    ], what);
    assert.deepEqual(frame.withRequestId(9), { ...msg, requestId: 9 });
  }
});

Deno.test("a frame over the writer's limit or a request id that is no u32 is refused, the writer left as it was", () => {
  const encoder = new FrameWriter({ version: 2 });
  const [, msg] = shareable[0];
  const frame = new EncodedFrame(msg, encoder);
  const small = new FrameWriter({ version: 2, maxFrameBytes: frame.bytes.length - 5 });
  assert.throws(() => small.pushEncoded(frame.bytes, 1), RangeError);
  assert.equal(small.byteLength, 0);
  const writer = new FrameWriter({ version: 2 });
  assert.throws(() => writer.pushEncoded(frame.bytes, -1), RangeError);
  assert.throws(() => writer.pushEncoded(frame.bytes, 2 ** 32), RangeError);
  assert.throws(() => writer.pushEncoded(frame.bytes, 1.5), RangeError);
  assert.equal(writer.byteLength, 0);
});
