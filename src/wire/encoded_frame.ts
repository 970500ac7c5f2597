/**
 * Frames encoded once for many sessions: a watch event's LOCK_STATE goes to every watcher of the
 * lock, and each session appends the same bytes with its own request id
 * (`FrameWriter.pushEncoded`), so a change costs one encoding however many are told of it.
 *
 * @module
 */

import { FRAME_HEADER_BYTES, type FrameWriter } from "./frame.ts";
import type { ServerMessage } from "./messages.ts";

/** Where a frame's request id is, when it is its first field: after the length and type byte. */
const REQUEST_ID_OFFSET = FRAME_HEADER_BYTES + 1;
/** The request id a frame is encoded with to check where it lands (any other would do). */
const REQUEST_ID_PROBE = 0xa5a5_5a5a;

/** A server message with a request id (a LOCK_STATE, ...): one that may be shared. */
export type RequestMessage = Extract<ServerMessage, { requestId: number }>;

/**
 * One frame encoded once for many sessions: the message, the protocol version of its layout and
 * its bytes (length prefix included), never changed once made.
 */
export class EncodedFrame {
  readonly message: RequestMessage;
  readonly version: number;
  readonly bytes: Uint8Array;

  /**
   * Encodes `message` with `writer` (left empty, as it was): throws what `push` throws, and a
   * RangeError for a message whose request id is not its first field.
   */
  constructor(message: RequestMessage, writer: FrameWriter) {
    writer.push({ ...message, requestId: REQUEST_ID_PROBE });
    const bytes = writer.take();
    if (
      bytes.length < REQUEST_ID_OFFSET + 4 ||
      new DataView(bytes.buffer).getUint32(REQUEST_ID_OFFSET) !== REQUEST_ID_PROBE
    ) {
      throw new RangeError(`Cannot share a ${message.type} frame: its request id is not first`);
    }
    this.message = message;
    this.version = writer.version;
    this.bytes = bytes;
  }

  /** The message with `requestId`, for a session that encodes it itself. */
  withRequestId(requestId: number): RequestMessage {
    return { ...this.message, requestId };
  }
}
