/**
 * Decoding side of the lockd wire codec (protocol versions 1 and 2, layouts in
 * `docs/protocol.md`). Server and client use the same reader: it decodes
 * every message type whichever direction it travels.
 *
 * A reader decodes in the layout of its session's version. That is 1 until the
 * first HELLO or WELCOME passes through it: when its version is one the codec
 * speaks, the frames after it (also those in the same chunk, such as requests a
 * client sent right behind its HELLO) decode in that version. HELLO's layout is the same
 * in both versions, and WELCOME's tail is read iff its own version field is 2.
 * A version-2-only type on a version-1 session is an unknown type.
 */

import {
  FRAME_BYTES_MAX_DEFAULT,
  FRAME_READER_PARTIAL_BYTES_MIN,
  FRAME_READER_RETAINED_BYTES_MAX,
} from "../limits.ts";
import { ProtocolError } from "./codes.ts";
import { FRAME_HEADER_BYTES } from "./frame.ts";
import { checkVersion } from "./frame.ts";
import {
  CLAIM_KINDS,
  type DecodedMessage,
  EMPTY_TICKET,
  EMPTY_VALUE,
  END_REASONS,
  type Enum,
  LOCK_EVENTS,
  LOCK_KINDS,
  LOCK_MODES,
  type LockStateHolder,
  MessageType,
  RESUME_OUTCOMES,
  TICKET_BYTES,
  WATCH_END_REASONS,
} from "./messages.ts";
/** Strings up to this many bytes are first tried as pure ASCII (kept well below the argument-count limit of `apply`). */
const ASCII_FAST_PATH_BYTES_MAX = 256;

const asciiScratch: number[] = [];
const textDecoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Big-endian u32 by byte arithmetic: a DataView per chunk cost more than a small frame's decode. */
function readU32(bytes: Uint8Array, at: number): number {
  return bytes[at] * 0x100_0000 + ((bytes[at + 1] << 16) | (bytes[at + 2] << 8) | bytes[at + 3]);
}

function malformed(reason: string): ProtocolError {
  return new ProtocolError("MALFORMED_FRAME", reason);
}

const NO_BYTES = new Uint8Array(0); // shared by every idle reader and cursor (no room: not written)
/** Reads the fields of one frame body in order; every read is bounds-checked. */
class BodyCursor {
  bytes: Uint8Array = NO_BYTES;
  pos = 0;
  end = 0;
  kind = "";
  /** Protocol version of the session: the layouts to read. */
  version = 1;
  /** Whether a HELLO/WELCOME (or the owner) fixed `version`: later ones change nothing. */
  versionFixed = false;

  /** Points the cursor at `bytes[start, end)`. */
  reset(bytes: Uint8Array, start: number, end: number, kind: string): void {
    this.bytes = bytes;
    this.pos = start;
    this.end = end;
    this.kind = kind;
  }

  #need(bytes: number, field: string): void {
    if (this.end - this.pos < bytes) {
      throw malformed(
        `Cannot decode ${this.kind} frame: field "${field}" is truncated (needs ${bytes} bytes, ${
          this.end - this.pos
        } left)`,
      );
    }
  }

  u8(field: string): number {
    this.#need(1, field);
    return this.bytes[this.pos++];
  }

  u16(field: string): number {
    this.#need(2, field);
    const value = (this.bytes[this.pos] << 8) | this.bytes[this.pos + 1];
    this.pos += 2;
    return value;
  }

  u32(field: string): number {
    this.#need(4, field);
    const value = readU32(this.bytes, this.pos);
    this.pos += 4;
    return value;
  }

  u64(field: string): number {
    this.#need(8, field);
    const high = readU32(this.bytes, this.pos);
    const low = readU32(this.bytes, this.pos + 4);
    if (high >= 0x20_0000) {
      throw malformed(
        `Cannot decode ${this.kind} frame: field "${field}" is above 2^53-1 (high word 0x${
          high.toString(16)
        })`,
      );
    }
    this.pos += 8;
    return high * 0x1_0000_0000 + low;
  }

  str(field: string): string {
    const length = this.u16(field);
    this.#need(length, field);
    const start = this.pos;
    this.pos += length;
    if (length === 0) return "";
    if (length <= ASCII_FAST_PATH_BYTES_MAX) {
      // ASCII is valid UTF-8 and maps byte to code unit; this is ~4x cheaper
      // than TextDecoder for the short names that fill most frames.
      const bytes = this.bytes;
      const codes = asciiScratch;
      let i = 0;
      while (i < length && bytes[start + i] < 0x80) {
        codes[i] = bytes[start + i];
        i++;
      }
      if (i === length) {
        codes.length = length;
        return String.fromCharCode.apply(null, codes);
      }
    }
    try {
      return textDecoder.decode(this.bytes.subarray(start, start + length));
    } catch {
      throw malformed(`Cannot decode ${this.kind} frame: field "${field}" is not valid UTF-8`);
    }
  }

  /** A ticket: 16 raw bytes, copied; all zero is EMPTY_TICKET (no ticket). */
  b16(field: string): Uint8Array {
    this.#need(TICKET_BYTES, field);
    const start = this.pos;
    this.pos += TICKET_BYTES;
    for (let i = start; i < this.pos; i++) {
      if (this.bytes[i] !== 0) return this.bytes.slice(start, this.pos);
    }
    return EMPTY_TICKET;
  }

  /** Raw bytes with a u16 length, copied (the chunk is reused); empty is EMPTY_VALUE. Not UTF-8 checked. */
  bin(field: string): Uint8Array {
    const length = this.u16(field);
    this.#need(length, field);
    const start = this.pos;
    this.pos += length;
    return length === 0 ? EMPTY_VALUE : this.bytes.slice(start, this.pos);
  }

  /** A u8 enum: its name, or the byte when it names nothing (a semantic check refuses it later). */
  enum<Name extends string>(field: string, names: readonly (Name | null)[]): Enum<Name> {
    const value = this.u8(field);
    return names[value] ?? value;
  }

  /**
   * The first HELLO or WELCOME fixes the session's version: later frames use its layouts. A later
   * one (a protocol violation the session refuses) or an unknown version changes nothing.
   */
  adopt(version: number): void {
    if (this.versionFixed) return;
    this.versionFixed = true;
    if (version === 1 || version === 2) this.version = version;
  }

  finish(): void {
    if (this.pos !== this.end) {
      throw malformed(
        `Cannot decode ${this.kind} frame: ${
          this.end - this.pos
        } trailing bytes after the last field`,
      );
    }
  }
}

/** Decodes the body (type byte excluded) found at `bytes[start, end)`. */
function decodeWith(
  cursor: BodyCursor,
  type: number,
  bytes: Uint8Array,
  start: number,
  end: number,
): DecodedMessage {
  let msg: DecodedMessage;
  switch (type) {
    case MessageType.HELLO:
      cursor.reset(bytes, start, end, "HELLO");
      msg = { type: "hello", version: cursor.u16("version"), clientName: cursor.str("clientName") };
      cursor.adopt(msg.version);
      break;
    case MessageType.WELCOME: {
      cursor.reset(bytes, start, end, "WELCOME");
      const welcome = decodeWelcome(cursor);
      cursor.adopt(welcome.version);
      msg = welcome;
      break;
    }
    case MessageType.ACQUIRE:
      cursor.reset(bytes, start, end, "ACQUIRE");
      msg = decodeAcquire(cursor);
      break;
    case MessageType.QUEUED:
      cursor.reset(bytes, start, end, "QUEUED");
      msg = decodeQueued(cursor);
      break;
    case MessageType.ACQUIRED:
      cursor.reset(bytes, start, end, "ACQUIRED");
      msg = decodeAcquired(cursor);
      break;
    case MessageType.RELEASE: {
      cursor.reset(bytes, start, end, "RELEASE");
      const requestId = cursor.u32("requestId");
      const token = cursor.u64("token");
      msg = { type: "release", requestId, name: cursor.str("name"), token };
      break;
    }
    case MessageType.RELEASED:
      cursor.reset(bytes, start, end, "RELEASED");
      msg = { type: "released", requestId: cursor.u32("requestId"), name: cursor.str("name") };
      break;
    case MessageType.HEARTBEAT:
      cursor.reset(bytes, start, end, "HEARTBEAT");
      msg = { type: "heartbeat", requestId: cursor.u32("requestId") };
      break;
    case MessageType.HEARTBEAT_ACK:
      cursor.reset(bytes, start, end, "HEARTBEAT_ACK");
      msg = {
        type: "heartbeat_ack",
        requestId: cursor.u32("requestId"),
        renewed: cursor.u32("renewed"),
      };
      break;
    case MessageType.ERROR:
      cursor.reset(bytes, start, end, "ERROR");
      msg = {
        type: "error",
        requestId: cursor.u32("requestId"),
        code: cursor.u8("code"),
        name: cursor.str("name"),
        message: cursor.str("message"),
      };
      break;
    default:
      if (cursor.version < 2 || type < MessageType.RESUME || type > MessageType.DOWNGRADE) {
        throw malformed(
          `Cannot decode frame: unknown message type 0x${type.toString(16).padStart(2, "0")}`,
        );
      }
      msg = decodeV2Only(cursor, type, bytes, start, end);
  }
  cursor.finish();
  return msg;
}

/** WELCOME's fields (the cursor is on its body). */
function decodeWelcome(cursor: BodyCursor): Extract<DecodedMessage, { type: "welcome" }> {
  const version = cursor.u16("version");
  const serverVersion = cursor.str("serverVersion");
  const sessionId = cursor.u64("sessionId");
  const ioTimeoutMs = cursor.u32("ioTimeoutMs");
  const leaseDefaultMs = cursor.u32("leaseDefaultMs");
  const leaseMaxMs = cursor.u32("leaseMaxMs");
  const v2 = version === 2;
  return {
    type: "welcome",
    version,
    serverVersion,
    sessionId,
    ioTimeoutMs,
    leaseDefaultMs,
    leaseMaxMs,
    term: v2 ? cursor.u64("term") : 0,
    reclaimWindowMs: v2 ? cursor.u32("reclaimWindowMs") : 0,
    valueBytesMax: v2 ? cursor.u32("valueBytesMax") : 0,
  };
}

/** ACQUIRE's fields (the cursor is on its body). */
function decodeAcquire(cursor: BodyCursor): DecodedMessage {
  const requestId = cursor.u32("requestId");
  const leaseMs = cursor.u32("leaseMs");
  const waitMs = cursor.u32("waitMs");
  if (cursor.version === 1) {
    return {
      type: "acquire",
      requestId,
      name: cursor.str("name"),
      leaseMs,
      waitMs,
      mode: "exclusive",
      limit: 0,
      value: EMPTY_VALUE,
    };
  }
  const mode = cursor.enum("mode", LOCK_MODES);
  const limit = cursor.u32("limit");
  const name = cursor.str("name");
  return {
    type: "acquire",
    requestId,
    name,
    leaseMs,
    waitMs,
    mode,
    limit,
    value: cursor.bin("value"),
  };
}

/** QUEUED's fields (the cursor is on its body). */
function decodeQueued(cursor: BodyCursor): DecodedMessage {
  const requestId = cursor.u32("requestId");
  const position = cursor.u32("position");
  if (cursor.version === 1) {
    return {
      type: "queued",
      requestId,
      name: cursor.str("name"),
      position,
      orderTerm: 0,
      orderSeq: 0,
      ticket: EMPTY_TICKET,
    };
  }
  const orderTerm = cursor.u64("orderTerm");
  const orderSeq = cursor.u64("orderSeq");
  const ticket = cursor.b16("ticket");
  return {
    type: "queued",
    requestId,
    name: cursor.str("name"),
    position,
    orderTerm,
    orderSeq,
    ticket,
  };
}

/** ACQUIRED's fields (the cursor is on its body). */
function decodeAcquired(cursor: BodyCursor): DecodedMessage {
  const requestId = cursor.u32("requestId");
  const token = cursor.u64("token");
  const leaseMs = cursor.u32("leaseMs");
  if (cursor.version === 1) {
    return {
      type: "acquired",
      requestId,
      name: cursor.str("name"),
      token,
      leaseMs,
      ticket: EMPTY_TICKET,
      mode: "exclusive",
      limit: 1,
      slot: 0,
      writeGeneration: 0,
    };
  }
  const ticket = cursor.b16("ticket");
  const mode = cursor.enum("mode", LOCK_MODES);
  const limit = cursor.u32("limit");
  const slot = cursor.u32("slot");
  const writeGeneration = cursor.u64("writeGeneration");
  return {
    type: "acquired",
    requestId,
    name: cursor.str("name"),
    token,
    leaseMs,
    ticket,
    mode,
    limit,
    slot,
    writeGeneration,
  };
}

/** LOCK_STATE's fields (the cursor is on its body). */
function decodeLockState(cursor: BodyCursor): DecodedMessage {
  const requestId = cursor.u32("requestId");
  const event = cursor.enum("event", LOCK_EVENTS);
  const reason = cursor.enum("reason", END_REASONS);
  const kind = cursor.enum("kind", LOCK_KINDS);
  const limit = cursor.u32("limit");
  const queueLength = cursor.u32("queueLength");
  const owners = cursor.u32("owners");
  const name = cursor.str("name");
  const count = cursor.u16("holders");
  const holders: LockStateHolder[] = [];
  for (let i = 0; i < count; i++) {
    holders.push({
      token: cursor.u64("holders[].token"),
      heldMs: cursor.u32("holders[].heldMs"),
      leaseMs: cursor.u32("holders[].leaseMs"),
      mode: cursor.enum("holders[].mode", LOCK_MODES),
      slot: cursor.u32("holders[].slot"),
      identity: cursor.str("holders[].identity"),
      clientName: cursor.str("holders[].clientName"),
      value: cursor.bin("holders[].value"),
    });
  }
  return {
    type: "lock_state",
    requestId,
    event,
    reason,
    kind,
    limit,
    queueLength,
    owners,
    name,
    holders,
  };
}

/** RECLAIM's fields (the cursor is on its body). */
function decodeReclaim(cursor: BodyCursor): DecodedMessage {
  return {
    type: "reclaim",
    requestId: cursor.u32("requestId"),
    kind: cursor.enum("kind", CLAIM_KINDS),
    token: cursor.u64("token"),
    orderTerm: cursor.u64("orderTerm"),
    orderSeq: cursor.u64("orderSeq"),
    leaseMs: cursor.u32("leaseMs"),
    waitMs: cursor.u32("waitMs"),
    ticket: cursor.b16("ticket"),
    mode: cursor.enum("mode", LOCK_MODES),
    limit: cursor.u32("limit"),
    slot: cursor.u32("slot"),
    name: cursor.str("name"),
    value: cursor.bin("value"),
    writeGeneration: cursor.u64("writeGeneration"),
  };
}

/** Each type byte's name, for the errors of a body. */
const TYPE_NAMES = new Map(Object.entries(MessageType).map(([name, b]) => [b as number, name]));

/** The message types of version 2 only (kept apart so the common types' switch stays small). */
function decodeV2Only(
  cursor: BodyCursor,
  type: number,
  bytes: Uint8Array,
  start: number,
  end: number,
): DecodedMessage {
  cursor.reset(bytes, start, end, TYPE_NAMES.get(type) ?? "");
  switch (type) {
    case MessageType.RESUME:
      return {
        type: "resume",
        requestId: cursor.u32("requestId"),
        prevTerm: cursor.u64("prevTerm"),
        prevSessionId: cursor.u64("prevSessionId"),
        claims: cursor.u16("claims"),
      };
    case MessageType.RESUMED:
      return {
        type: "resumed",
        requestId: cursor.u32("requestId"),
        outcome: cursor.enum("outcome", RESUME_OUTCOMES),
        windowLeftMs: cursor.u32("windowLeftMs"),
      };
    case MessageType.RECLAIM:
      return decodeReclaim(cursor);
    case MessageType.GOODBYE:
      return { type: "goodbye", requestId: cursor.u32("requestId") };
    case MessageType.SET_VALUE:
      return {
        type: "set_value",
        requestId: cursor.u32("requestId"),
        token: cursor.u64("token"),
        name: cursor.str("name"),
        value: cursor.bin("value"),
      };
    case MessageType.VALUE_SET:
      return { type: "value_set", requestId: cursor.u32("requestId"), name: cursor.str("name") };
    case MessageType.QUERY:
      return { type: "query", requestId: cursor.u32("requestId"), name: cursor.str("name") };
    case MessageType.LOCK_STATE:
      return decodeLockState(cursor);
    case MessageType.WATCH:
      return { type: "watch", requestId: cursor.u32("requestId"), pattern: cursor.str("pattern") };
    case MessageType.WATCHING:
      return { type: "watching", requestId: cursor.u32("requestId"), locks: cursor.u32("locks") };
    case MessageType.UNWATCH:
      return { type: "unwatch", requestId: cursor.u32("requestId") };
    case MessageType.DOWNGRADE:
      return {
        type: "downgrade",
        requestId: cursor.u32("requestId"),
        token: cursor.u64("token"),
        name: cursor.str("name"),
      };
    case MessageType.WATCH_ENDED:
      return {
        type: "watch_ended",
        requestId: cursor.u32("requestId"),
        reason: cursor.enum("reason", WATCH_END_REASONS),
      };
    default:
      throw malformed(
        `Cannot decode frame: unknown message type 0x${type.toString(16).padStart(2, "0")}`,
      );
  }
}

/**
 * Decodes one frame body of a session of protocol `version` (default 1): `type`
 * is the type byte, `body` the bytes after it. Throws `ProtocolError`
 * (MALFORMED_FRAME) on an unknown type (a version-2-only type in version 1
 * included), a truncated field, trailing bytes, invalid UTF-8 in a `str` or a
 * u64 above 2^53-1.
 */
export function decodeFrameBody(type: number, body: Uint8Array, version = 1): DecodedMessage {
  const cursor = new BodyCursor();
  cursor.version = checkVersion(version);
  return decodeWith(cursor, type, body, 0, body.byteLength);
}

/**
 * A ration of bytes shared by the readers of one server: the part of each partial-frame buffer
 * above FRAME_READER_RETAINED_BYTES_MAX (frames no valid request needs) is taken from it.
 */
export interface FrameBudget {
  /** Takes `bytes`; false (and nothing taken) when the ration has not that many left. */
  take(bytes: number): boolean;
  give(bytes: number): void;
}

/**
 * Splits a byte stream into messages.
 *
 * `push` decodes every complete frame of the chunk at once, straight from the
 * chunk, and copies only a trailing partial frame; so the caller may reuse
 * (overwrite) the chunk's buffer as soon as `push` returns. A frame's length
 * is checked from its 4-byte prefix before any of its body is buffered, so a
 * reader never holds more than `maxFrameBytes` + 4 bytes of a partial frame.
 *
 * The first bad frame poisons the reader: `next()` first returns the messages
 * decoded before it, then throws its `ProtocolError` on this and every later
 * call; further pushes are ignored. With a `budget`, a frame larger than any
 * valid request whose buffer the budget cannot cover is such an error too,
 * with code LIMIT_EXCEEDED.
 */
export class FrameReader {
  readonly maxFrameBytes: number;

  /** Messages decoded by `push` and not yet returned by `next`. */
  #ready: DecodedMessage[] = [];
  #readyHead = 0;
  #error: ProtocolError | null = null;

  /** A partial frame (header included) copied out of earlier chunks. */
  #partial: Uint8Array = NO_BYTES;
  #partialLen = 0;
  /** Length prefix of the partial frame, or -1 while fewer than 4 header bytes are in. */
  #partialFrameBytes = -1;

  readonly #cursor = new BodyCursor();
  readonly #budget: FrameBudget | null;
  /** Bytes of `#partial` taken from the budget. */
  #charged = 0;

  constructor(maxFrameBytes: number = FRAME_BYTES_MAX_DEFAULT, budget?: FrameBudget) {
    if (!(Number.isInteger(maxFrameBytes) && maxFrameBytes >= 1)) {
      throw new RangeError(
        `Cannot create frame reader: maxFrameBytes ${maxFrameBytes} is not a positive integer`,
      );
    }
    this.maxFrameBytes = maxFrameBytes;
    this.#budget = budget ?? null;
  }

  /**
   * The protocol version whose layouts the reader decodes: 1 until the first HELLO or WELCOME
   * decoded fixed it (see the module comment). Settable for a session whose version is known
   * otherwise (then no HELLO or WELCOME changes it); frames already decoded keep theirs.
   */
  get version(): number {
    return this.#cursor.version;
  }

  set version(version: number) {
    this.#cursor.version = checkVersion(version);
    this.#cursor.versionFixed = true;
  }

  /** Messages decoded and not yet taken by `next()`. */
  get readyCount(): number {
    return this.#ready.length - this.#readyHead;
  }

  /** Bytes of a partial frame held between pushes (for tests and metrics). */
  get bufferedBytes(): number {
    return this.#partialLen;
  }

  /** Bytes the reader's partial-frame buffer takes (at least `bufferedBytes`). */
  get retainedBytes(): number {
    return this.#partial.byteLength;
  }

  /**
   * Shrinks the partial-frame buffer to the bytes it holds (none: no buffer). The session calls
   * it when the peer stalls in the middle of a frame, so a stalled frame keeps only what arrived.
   */
  compact(): void {
    if (this.#partial.byteLength === this.#partialLen) return;
    this.#setPartial(this.#partial.slice(0, this.#partialLen));
  }

  /** Drops any partial frame and gives its bytes back to the budget (the connection closed). */
  release(): void {
    this.#partialLen = 0;
    this.#partialFrameBytes = -1;
    this.#setPartial(NO_BYTES);
  }

  /** Feeds bytes read from the peer. `chunk` is never read again after this returns. */
  push(chunk: Uint8Array): void {
    if (this.#error !== null || chunk.byteLength === 0) return;
    try {
      let pos = 0;
      if (this.#partialLen > 0) {
        pos = this.#fillPartial(chunk);
        if (pos < 0) return; // chunk used up, frame still partial
      }
      this.#decodeChunk(chunk, pos);
    } catch (error) {
      if (!(error instanceof ProtocolError)) throw error;
      this.#error = error;
      this.#dropPartial();
    }
  }

  /**
   * Returns the next complete message, or null when more bytes are needed.
   * Throws `ProtocolError` (MALFORMED_FRAME) once a bad frame is reached.
   */
  next(): DecodedMessage | null {
    if (this.#readyHead < this.#ready.length) {
      const msg = this.#ready[this.#readyHead];
      this.#readyHead++;
      if (this.#readyHead === this.#ready.length) {
        this.#ready.length = 0;
        this.#readyHead = 0;
      }
      return msg;
    }
    if (this.#error !== null) throw this.#error;
    return null;
  }

  /** Decodes the whole frames of `chunk[pos..]` in place and copies a trailing partial one. */
  #decodeChunk(chunk: Uint8Array, pos: number): void {
    const end = chunk.byteLength;
    while (end - pos >= FRAME_HEADER_BYTES) {
      const frameBytes = readU32(chunk, pos);
      this.#checkLength(frameBytes);
      const bodyStart = pos + FRAME_HEADER_BYTES;
      if (end - bodyStart < frameBytes) break;
      const frameEnd = bodyStart + frameBytes;
      this.#ready.push(
        decodeWith(this.#cursor, chunk[bodyStart], chunk, bodyStart + 1, frameEnd),
      );
      pos = frameEnd;
    }
    if (pos < end) {
      const rest = end - pos;
      const frameBytes = rest >= FRAME_HEADER_BYTES
        ? readU32(chunk, pos) // already checked by the loop above
        : -1;
      // Room for the bytes that arrived, not for the whole frame the header announces: a peer
      // that sends a header and stops pins nothing.
      this.#ensurePartial(rest, FRAME_HEADER_BYTES + Math.max(0, frameBytes));
      this.#partial.set(chunk.subarray(pos, end), 0);
      this.#partialLen = rest;
      this.#partialFrameBytes = frameBytes;
    }
  }

  /**
   * Moves bytes of `chunk` into the partial frame. Returns the chunk offset
   * after the completed frame, or -1 when the chunk ran out first.
   */
  #fillPartial(chunk: Uint8Array): number {
    let pos = 0;
    if (this.#partialFrameBytes < 0) {
      const take = Math.min(FRAME_HEADER_BYTES - this.#partialLen, chunk.byteLength);
      this.#ensurePartial(this.#partialLen + take, FRAME_HEADER_BYTES);
      this.#partial.set(chunk.subarray(0, take), this.#partialLen);
      this.#partialLen += take;
      pos = take;
      if (this.#partialLen < FRAME_HEADER_BYTES) return -1;
      const frameBytes = readU32(this.#partial, 0);
      this.#checkLength(frameBytes);
      this.#partialFrameBytes = frameBytes;
    }
    const frameEnd = FRAME_HEADER_BYTES + this.#partialFrameBytes;
    const take = Math.min(frameEnd - this.#partialLen, chunk.byteLength - pos);
    this.#ensurePartial(this.#partialLen + take, frameEnd);
    this.#partial.set(chunk.subarray(pos, pos + take), this.#partialLen);
    this.#partialLen += take;
    pos += take;
    if (this.#partialLen < frameEnd) return -1;
    const partial = this.#partial;
    this.#dropPartial(); // before decoding, so a bad body leaves no partial frame behind
    this.#ready.push(
      decodeWith(
        this.#cursor,
        partial[FRAME_HEADER_BYTES],
        partial,
        FRAME_HEADER_BYTES + 1,
        frameEnd,
      ),
    );
    return pos;
  }

  #checkLength(frameBytes: number): void {
    if (frameBytes === 0) {
      throw malformed("Cannot read frame: length 0 (a frame has at least its type byte)");
    }
    if (frameBytes > this.maxFrameBytes) {
      throw malformed(
        `Cannot read frame: length ${frameBytes} exceeds the limit of ${this.maxFrameBytes} bytes`,
      );
    }
  }

  /**
   * Grows the partial buffer to hold `bytes`, keeping its content: doubling (so a frame that
   * trickles in is copied O(n) times in total, not O(n²)), never past `frameEnd` (the whole
   * frame with its header, at most maxFrameBytes + 4).
   */
  #ensurePartial(bytes: number, frameEnd: number): void {
    if (bytes <= this.#partial.byteLength) return;
    const capacity = Math.min(
      frameEnd,
      Math.max(bytes, 2 * this.#partial.byteLength, FRAME_READER_PARTIAL_BYTES_MIN),
    );
    const charge = Math.max(0, capacity - FRAME_READER_RETAINED_BYTES_MAX);
    if (charge > this.#charged) {
      if (this.#budget !== null && !this.#budget.take(charge - this.#charged)) {
        throw new ProtocolError(
          "LIMIT_EXCEEDED",
          `Cannot read a frame of ${frameEnd - FRAME_HEADER_BYTES} bytes: the server's room ` +
            "for frames larger than any valid request is in use",
        );
      }
      this.#charged = charge;
    }
    const grown = new Uint8Array(capacity);
    grown.set(this.#partial.subarray(0, this.#partialLen));
    this.#partial = grown;
  }

  /** Replaces the partial buffer with a smaller one, giving bytes back to the budget. */
  #setPartial(buffer: Uint8Array): void {
    const charge = Math.max(0, buffer.byteLength - FRAME_READER_RETAINED_BYTES_MAX);
    if (charge < this.#charged) this.#budget?.give(this.#charged - charge);
    this.#charged = Math.min(this.#charged, charge);
    this.#partial = buffer;
  }

  /** Forgets the partial frame; a large buffer is released so idle sessions stay small. */
  #dropPartial(): void {
    this.#partialLen = 0;
    this.#partialFrameBytes = -1;
    if (this.#partial.byteLength > FRAME_READER_RETAINED_BYTES_MAX) {
      this.#setPartial(NO_BYTES);
    }
  }
}
