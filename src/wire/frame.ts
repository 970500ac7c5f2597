/**
 * Encoding side of the lockd wire codec (protocol version 1, layouts in
 * `docs/protocol.md`). A session pushes every reply of a batch into one
 * `FrameWriter` and sends `take()` as a single socket write: one write per
 * batch is what keeps Nagle and per-write syscalls off the hot path.
 */

import {
  ERROR_MESSAGE_BYTES_MAX,
  FRAME_BYTES_MAX_DEFAULT,
  FRAME_WRITER_BYTES_DEFAULT,
  FRAME_WRITER_RETAINED_BYTES_MAX,
} from "../limits.ts";
import { type ClientMessage, type Message, MessageType, type ServerMessage } from "./messages.ts";

/** Bytes of the length prefix in front of every frame. */
export const FRAME_HEADER_BYTES = 4;
/** Largest byte length of a `str` field (u16 prefix). */
const STRING_BYTES_MAX = 0xffff;

/** Strings up to this many characters are first tried as pure ASCII. */
const ASCII_FAST_PATH_CHARS_MAX = 256;

const textEncoder = new TextEncoder();

export interface FrameWriterOptions {
  /** Starting capacity; the buffer doubles when a frame does not fit. */
  initialBytes?: number;
  /**
   * Largest frame (length prefix excluded) this writer produces. The peer
   * refuses longer frames, so producing one is a programmer error.
   */
  maxFrameBytes?: number;
  /** A buffer grown past this by a burst is dropped at `take()` (default FRAME_WRITER_RETAINED_BYTES_MAX). */
  retainedBytesMax?: number;
}

/**
 * Appends encoded frames to one growable buffer.
 *
 * Out-of-range fields (a request id that is not a u32, a string longer than
 * 65535 UTF-8 bytes or with a lone surrogate, a token above 2^53-1) are
 * programmer errors: `push` throws a `RangeError` and leaves the buffer as it
 * was before the call.
 */
export class FrameWriter {
  #buf: Uint8Array;
  #view: DataView;
  #len = 0;
  readonly #initialBytes: number;
  readonly #maxFrameBytes: number;
  readonly #retainedBytesMax: number;

  constructor(options: FrameWriterOptions = {}) {
    this.#initialBytes = Math.max(16, options.initialBytes ?? FRAME_WRITER_BYTES_DEFAULT);
    this.#maxFrameBytes = options.maxFrameBytes ?? FRAME_BYTES_MAX_DEFAULT;
    this.#retainedBytesMax = options.retainedBytesMax ?? FRAME_WRITER_RETAINED_BYTES_MAX;
    this.#buf = new Uint8Array(this.#initialBytes);
    this.#view = new DataView(this.#buf.buffer);
  }

  /** Bytes pushed since the last `take()`. */
  get byteLength(): number {
    return this.#len;
  }

  /** Encodes `msg` as one frame after the frames already pushed. */
  push(msg: Message): void {
    const start = this.#len;
    try {
      this.#reserve(FRAME_HEADER_BYTES + 1);
      this.#len += FRAME_HEADER_BYTES; // length, patched below
      this.#writeBody(msg);
      const frameBytes = this.#len - start - FRAME_HEADER_BYTES;
      if (frameBytes > this.#maxFrameBytes) {
        throw new RangeError(
          `Cannot encode ${msg.type} message: frame of ${frameBytes} bytes exceeds the limit of ${this.#maxFrameBytes} bytes`,
        );
      }
      this.#view.setUint32(start, frameBytes);
    } catch (error) {
      this.#len = start;
      throw error;
    }
  }

  /**
   * Returns the pushed bytes and empties the writer. The result is a copy:
   * later pushes never change it.
   */
  take(): Uint8Array {
    const out = this.#buf.slice(0, this.#len);
    this.#len = 0;
    if (this.#buf.byteLength > this.#retainedBytesMax) {
      this.#buf = new Uint8Array(this.#initialBytes);
      this.#view = new DataView(this.#buf.buffer);
    }
    return out;
  }

  #writeBody(msg: Message): void {
    switch (msg.type) {
      case "hello":
      case "acquire":
      case "release":
      case "heartbeat":
        return this.#writeRequest(msg);
      default:
        return this.#writeReply(msg);
    }
  }

  /** The body of a message a client sends. */
  #writeRequest(msg: ClientMessage): void {
    switch (msg.type) {
      case "hello":
        this.#u8(MessageType.HELLO);
        this.#u16(msg.version, "version");
        this.#str(msg.clientName, "clientName");
        return;
      case "acquire":
        this.#u8(MessageType.ACQUIRE);
        this.#u32(msg.requestId, "requestId");
        this.#u32(msg.leaseMs, "leaseMs");
        this.#u32(msg.waitMs, "waitMs");
        this.#str(msg.name, "name");
        return;
      case "release":
        this.#u8(MessageType.RELEASE);
        this.#u32(msg.requestId, "requestId");
        this.#u64(msg.token, "token");
        this.#str(msg.name, "name");
        return;
      case "heartbeat":
        this.#u8(MessageType.HEARTBEAT);
        this.#u32(msg.requestId, "requestId");
        return;
    }
  }

  /** The body of a message the server sends. */
  #writeReply(msg: ServerMessage): void {
    switch (msg.type) {
      case "welcome":
        this.#u8(MessageType.WELCOME);
        this.#u16(msg.version, "version");
        this.#str(msg.serverVersion, "serverVersion");
        this.#u64(msg.sessionId, "sessionId");
        this.#u32(msg.ioTimeoutMs, "ioTimeoutMs");
        this.#u32(msg.leaseDefaultMs, "leaseDefaultMs");
        this.#u32(msg.leaseMaxMs, "leaseMaxMs");
        return;
      case "queued":
        this.#u8(MessageType.QUEUED);
        this.#u32(msg.requestId, "requestId");
        this.#u32(msg.position, "position");
        this.#str(msg.name, "name");
        return;
      case "acquired":
        this.#u8(MessageType.ACQUIRED);
        this.#u32(msg.requestId, "requestId");
        this.#u64(msg.token, "token");
        this.#u32(msg.leaseMs, "leaseMs");
        this.#str(msg.name, "name");
        return;
      case "released":
        this.#u8(MessageType.RELEASED);
        this.#u32(msg.requestId, "requestId");
        this.#str(msg.name, "name");
        return;
      case "heartbeat_ack":
        this.#u8(MessageType.HEARTBEAT_ACK);
        this.#u32(msg.requestId, "requestId");
        this.#u32(msg.renewed, "renewed");
        return;
      case "error":
        this.#u8(MessageType.ERROR);
        this.#u32(msg.requestId, "requestId");
        this.#u8(msg.code, "code");
        this.#str(msg.name, "name");
        this.#str(cutUtf8(msg.message, ERROR_MESSAGE_BYTES_MAX), "message");
        return;
      default: {
        const unknown: never = msg;
        throw new RangeError(
          `Cannot encode message: unknown type ${JSON.stringify((unknown as Message).type)}`,
        );
      }
    }
  }

  /** Makes room for `bytes` more bytes, doubling the buffer as often as needed. */
  #reserve(bytes: number): void {
    const needed = this.#len + bytes;
    if (needed <= this.#buf.byteLength) return;
    let capacity = this.#buf.byteLength * 2;
    while (capacity < needed) capacity *= 2;
    const grown = new Uint8Array(capacity);
    grown.set(this.#buf.subarray(0, this.#len));
    this.#buf = grown;
    this.#view = new DataView(grown.buffer);
  }

  #u8(value: number, field = "type"): void {
    if (!(value >= 0 && value <= 0xff && Number.isInteger(value))) {
      throw rangeError(field, value, "a u8");
    }
    this.#reserve(1);
    this.#buf[this.#len++] = value;
  }

  #u16(value: number, field: string): void {
    if (!(value >= 0 && value <= 0xffff && Number.isInteger(value))) {
      throw rangeError(field, value, "a u16");
    }
    this.#reserve(2);
    this.#view.setUint16(this.#len, value);
    this.#len += 2;
  }

  #u32(value: number, field: string): void {
    if ((value >>> 0) !== value) throw rangeError(field, value, "a u32");
    this.#reserve(4);
    this.#view.setUint32(this.#len, value);
    this.#len += 4;
  }

  #u64(value: number, field: string): void {
    if (!(Number.isSafeInteger(value) && value >= 0)) {
      throw rangeError(field, value, "an integer in 0..2^53-1");
    }
    this.#reserve(8);
    this.#view.setUint32(this.#len, Math.floor(value / 0x1_0000_0000));
    this.#view.setUint32(this.#len + 4, value >>> 0);
    this.#len += 8;
  }

  #str(value: string, field: string): void {
    // Every UTF-16 code unit takes at least one UTF-8 byte, so this bound is
    // safe to check before encoding and keeps `#reserve` bounded.
    if (value.length > STRING_BYTES_MAX) {
      throw new RangeError(
        `Cannot encode field "${field}": ${value.length} characters exceed ${STRING_BYTES_MAX} bytes`,
      );
    }
    if (value.length <= ASCII_FAST_PATH_CHARS_MAX && this.#asciiStr(value)) return;
    if (!value.isWellFormed()) {
      // TextEncoder would silently turn a lone surrogate into U+FFFD, so two
      // different names would reach the server as the same lock.
      throw new RangeError(`Cannot encode field "${field}": the string has a lone surrogate`);
    }
    this.#reserve(2 + value.length * 3);
    const { written } = textEncoder.encodeInto(value, this.#buf.subarray(this.#len + 2));
    if (written > STRING_BYTES_MAX) {
      throw new RangeError(
        `Cannot encode field "${field}": ${written} UTF-8 bytes exceed ${STRING_BYTES_MAX}`,
      );
    }
    this.#view.setUint16(this.#len, written);
    this.#len += 2 + written;
  }

  /**
   * Writes a pure-ASCII string byte by byte (lock names usually are; this is
   * about 3x cheaper than `encodeInto` for short strings). Returns false,
   * having written nothing that counts, at the first non-ASCII character.
   */
  #asciiStr(value: string): boolean {
    const n = value.length;
    this.#reserve(2 + n);
    const buf = this.#buf;
    const start = this.#len + 2;
    for (let i = 0; i < n; i++) {
      const c = value.charCodeAt(i);
      if (c >= 0x80) return false;
      buf[start + i] = c;
    }
    this.#view.setUint16(this.#len, n);
    this.#len = start + n;
    return true;
  }
}

/** Marks a message that was cut; 3 bytes in UTF-8. */
const CUT_MARK = "\u2026";

/**
 * Returns `text` if it takes at most `maxBytes` UTF-8 bytes, else its longest
 * prefix that fits together with a trailing "…", cut between two characters
 * (never inside one, so the result is valid UTF-8). ERROR messages are cut this
 * way: `docs/protocol.md` promises clients at most 1,024 bytes, and a message
 * quoting a 1,024-byte lock name would be longer. `maxBytes` is at least 3.
 */
export function cutUtf8(text: string, maxBytes: number): string {
  // Each UTF-16 code unit takes at most 3 UTF-8 bytes (a surrogate pair, two units, takes 4).
  if (text.length * 3 <= maxBytes) return text;
  const bytes = textEncoder.encode(text);
  // A lone surrogate is left for the encoder to refuse (encode() would have replaced it).
  if (bytes.length <= maxBytes || !text.isWellFormed()) return text;
  let end = Math.max(0, maxBytes - 3);
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--; // back to the start of a character
  return new TextDecoder().decode(bytes.subarray(0, end)) + CUT_MARK;
}

function rangeError(field: string, value: number, what: string): RangeError {
  return new RangeError(`Cannot encode field "${field}": ${value} is not ${what}`);
}

const sharedWriter = new FrameWriter();

/** Encodes one message as one frame (length prefix included). The result is never shared. */
export function encodeFrame(msg: Message): Uint8Array {
  sharedWriter.push(msg);
  return sharedWriter.take();
}
