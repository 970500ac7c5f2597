/**
 * Encoding side of the lockd wire codec (protocol versions 1 and 2, layouts in
 * `docs/protocol.md`). A session pushes every reply of a batch into one
 * `FrameWriter` and sends `take()` as a single socket write: one write per
 * batch is what keeps Nagle and per-write syscalls off the hot path.
 *
 * A writer encodes in the layout of its `version` (1 until the session's HELLO/WELCOME
 * fixed another); WELCOME takes the layout of its own `version` field.
 */

import {
  ERROR_MESSAGE_BYTES_MAX,
  FRAME_BYTES_MAX_DEFAULT,
  FRAME_WRITER_BYTES_DEFAULT,
  FRAME_WRITER_RETAINED_BYTES_MAX,
} from "../limits.ts";
import {
  type Acquire,
  type Acquired,
  CLAIM_KINDS,
  EMPTY_TICKET,
  END_REASONS,
  LOCK_EVENTS,
  LOCK_KINDS,
  LOCK_MODES,
  type LockStateHolder,
  type Message,
  MessageType,
  PROTOCOL_VERSIONS,
  type Queued,
  RESUME_OUTCOMES,
  TICKET_BYTES,
  WATCH_END_REASONS,
  type Welcome,
} from "./messages.ts";
import { cutUtf8 } from "./cut_utf8.ts";

/** Bytes of the length prefix in front of every frame. */
export const FRAME_HEADER_BYTES = 4;
/** Largest byte length of a `str` or `bin` field (u16 prefix). */
const STRING_BYTES_MAX = 0xffff;
/** Largest count of a repeated group (u16 prefix). */
const COUNT_MAX = 0xffff;

/** Strings up to this many characters are first tried as pure ASCII. */
const ASCII_FAST_PATH_CHARS_MAX = 256;

const textEncoder = new TextEncoder();

export { cutUtf8 };

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
  /** Protocol version whose layouts `push` writes (default 1); see `version`. */
  version?: number;
}

/** Throws unless `version` is one this codec speaks. */
export function checkVersion(version: number): number {
  if (!PROTOCOL_VERSIONS.includes(version)) {
    throw new RangeError(
      `Cannot use protocol version ${version}: this codec speaks ${
        PROTOCOL_VERSIONS.join(" and ")
      }`,
    );
  }
  return version;
}

/**
 * Appends encoded frames to one growable buffer.
 *
 * Out-of-range fields (a request id that is not a u32, a string longer than
 * 65535 UTF-8 bytes or with a lone surrogate, a token above 2^53-1, a ticket
 * that is not 16 bytes, an enum name that does not exist) are programmer
 * errors: `push` throws a `RangeError` and leaves the buffer as it was before
 * the call. So is what the writer's version cannot carry: a version-2 message
 * type, or a version-2 field with a value other than its neutral one, on a
 * version-1 writer.
 */
export class FrameWriter {
  #buf: Uint8Array;
  #view: DataView;
  #len = 0;
  readonly #initialBytes: number;
  readonly #maxFrameBytes: number;
  readonly #retainedBytesMax: number;
  #version: number;

  constructor(options: FrameWriterOptions = {}) {
    this.#version = checkVersion(options.version ?? 1);
    this.#initialBytes = Math.max(16, options.initialBytes ?? FRAME_WRITER_BYTES_DEFAULT);
    this.#maxFrameBytes = options.maxFrameBytes ?? FRAME_BYTES_MAX_DEFAULT;
    this.#retainedBytesMax = options.retainedBytesMax ?? FRAME_WRITER_RETAINED_BYTES_MAX;
    this.#buf = new Uint8Array(this.#initialBytes);
    this.#view = new DataView(this.#buf.buffer);
  }

  /**
   * The protocol version of the session: the layouts `push` writes. The session sets it once
   * HELLO and WELCOME fixed it (frames already pushed keep theirs).
   */
  get version(): number {
    return this.#version;
  }

  set version(version: number) {
    this.#version = checkVersion(version);
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
   * Appends a frame encoded before in this writer's version, whose request id is its first field
   * (`EncodedFrame`), with `requestId` in place of its own: its bytes copied, nothing re-encoded.
   */
  pushEncoded(frame: Uint8Array, requestId: number): void {
    if (
      frame.length - FRAME_HEADER_BYTES > this.#maxFrameBytes || (requestId >>> 0) !== requestId
    ) {
      throw new RangeError(
        `Cannot append a frame of ${frame.length} bytes, request id ${requestId}`,
      );
    }
    this.#reserve(frame.length);
    this.#buf.set(frame, this.#len);
    this.#view.setUint32(this.#len + FRAME_HEADER_BYTES + 1, requestId);
    this.#len += frame.length;
  }

  /**
   * Returns the pushed bytes and empties the writer. The result is a copy (later pushes never
   * change it), or with `copy` false a view of the writer's buffer, valid until the next push.
   */
  take(copy = true): Uint8Array {
    const out = copy ? this.#buf.slice(0, this.#len) : this.#buf.subarray(0, this.#len);
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
        this.#u8(MessageType.HELLO);
        this.#u16(msg.version, "version");
        this.#str(msg.clientName, "clientName");
        return;
      case "welcome":
        this.#writeWelcome(msg);
        return;
      case "acquire":
        this.#writeAcquire(msg);
        return;
      case "queued":
        this.#writeQueued(msg);
        return;
      case "acquired":
        this.#writeAcquired(msg);
        return;
      case "release":
        this.#u8(MessageType.RELEASE);
        this.#u32(msg.requestId, "requestId");
        this.#u64(msg.token, "token");
        this.#str(msg.name, "name");
        return;
      case "released":
        this.#u8(MessageType.RELEASED);
        this.#u32(msg.requestId, "requestId");
        this.#str(msg.name, "name");
        return;
      case "heartbeat":
        this.#u8(MessageType.HEARTBEAT);
        this.#u32(msg.requestId, "requestId");
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
      default:
        this.#writeV2Only(msg);
    }
  }

  #writeWelcome(msg: Welcome): void {
    this.#u8(MessageType.WELCOME);
    this.#u16(msg.version, "version");
    this.#str(msg.serverVersion, "serverVersion");
    this.#u64(msg.sessionId, "sessionId");
    this.#u32(msg.ioTimeoutMs, "ioTimeoutMs");
    this.#u32(msg.leaseDefaultMs, "leaseDefaultMs");
    this.#u32(msg.leaseMaxMs, "leaseMaxMs");
    if (msg.version === 2) {
      this.#u64(msg.term ?? 0, "term");
      this.#u32(msg.reclaimWindowMs ?? 0, "reclaimWindowMs");
      this.#u32(msg.valueBytesMax ?? 0, "valueBytesMax");
    } else if (
      (msg.term ?? 0) !== 0 || (msg.reclaimWindowMs ?? 0) !== 0 ||
      (msg.valueBytesMax ?? 0) !== 0
    ) {
      throw notInVersion1("WELCOME", "term, reclaimWindowMs or valueBytesMax");
    }
    return;
  }

  #writeAcquire(msg: Acquire): void {
    this.#u8(MessageType.ACQUIRE);
    this.#u32(msg.requestId, "requestId");
    this.#u32(msg.leaseMs, "leaseMs");
    this.#u32(msg.waitMs, "waitMs");
    if (this.#version === 1) {
      if (
        (msg.mode !== undefined && msg.mode !== "exclusive") ||
        (msg.limit ?? 0) !== 0 || (msg.value !== undefined && msg.value.length !== 0)
      ) {
        throw notInVersion1("ACQUIRE", "mode, limit or value");
      }
      this.#str(msg.name, "name");
      return;
    }
    this.#enum(msg.mode ?? "exclusive", LOCK_MODES, "mode");
    this.#u32(msg.limit ?? 0, "limit");
    this.#str(msg.name, "name");
    this.#bin(msg.value, "value");
    return;
  }

  #writeQueued(msg: Queued): void {
    this.#u8(MessageType.QUEUED);
    this.#u32(msg.requestId, "requestId");
    this.#u32(msg.position, "position");
    if (this.#version === 1) {
      if ((msg.orderTerm ?? 0) !== 0 || (msg.orderSeq ?? 0) !== 0 || hasTicket(msg.ticket)) {
        throw notInVersion1("QUEUED", "orderTerm, orderSeq or ticket");
      }
      this.#str(msg.name, "name");
      return;
    }
    this.#u64(msg.orderTerm ?? 0, "orderTerm");
    this.#u64(msg.orderSeq ?? 0, "orderSeq");
    this.#b16(msg.ticket, "ticket");
    this.#str(msg.name, "name");
    return;
  }

  #writeAcquired(msg: Acquired): void {
    this.#u8(MessageType.ACQUIRED);
    this.#u32(msg.requestId, "requestId");
    this.#u64(msg.token, "token");
    this.#u32(msg.leaseMs, "leaseMs");
    if (this.#version === 1) {
      if (
        hasTicket(msg.ticket) || (msg.mode !== undefined && msg.mode !== "exclusive") ||
        (msg.limit ?? 1) !== 1 || (msg.slot ?? 0) !== 0 || (msg.writeGeneration ?? 0) !== 0
      ) {
        throw notInVersion1("ACQUIRED", "ticket, mode, limit, slot or writeGeneration");
      }
      this.#str(msg.name, "name");
      return;
    }
    this.#b16(msg.ticket, "ticket");
    this.#enum(msg.mode ?? "exclusive", LOCK_MODES, "mode");
    this.#u32(msg.limit ?? 1, "limit");
    this.#u32(msg.slot ?? 0, "slot");
    this.#u64(msg.writeGeneration ?? 0, "writeGeneration");
    this.#str(msg.name, "name");
    return;
  }

  /** The message types of version 2 only (kept apart so the common types' switch stays small). */
  #writeV2Only(msg: Message): void {
    const typeByte = V2_ONLY_TYPE_BYTES[msg.type];
    if (typeByte === undefined) {
      throw new RangeError(
        `Cannot encode message: unknown type ${JSON.stringify((msg as { type: unknown }).type)}`,
      );
    }
    if (this.#version < 2) {
      throw new RangeError(
        `Cannot encode ${msg.type.toUpperCase()} on a protocol version ${this.#version} session: ` +
          "the message is version 2 only",
      );
    }
    this.#u8(typeByte);
    switch (msg.type) {
      case "resume":
        this.#u32(msg.requestId, "requestId");
        this.#u64(msg.prevTerm, "prevTerm");
        this.#u64(msg.prevSessionId, "prevSessionId");
        this.#u16(msg.claims, "claims");
        return;
      case "resumed":
        this.#u32(msg.requestId, "requestId");
        this.#enum(msg.outcome, RESUME_OUTCOMES, "outcome");
        this.#u32(msg.windowLeftMs, "windowLeftMs");
        return;
      case "reclaim":
        this.#u32(msg.requestId, "requestId");
        this.#enum(msg.kind, CLAIM_KINDS, "kind");
        this.#u64(msg.token, "token");
        this.#u64(msg.orderTerm, "orderTerm");
        this.#u64(msg.orderSeq, "orderSeq");
        this.#u32(msg.leaseMs, "leaseMs");
        this.#u32(msg.waitMs, "waitMs");
        this.#b16(msg.ticket, "ticket");
        this.#enum(msg.mode, LOCK_MODES, "mode");
        this.#u32(msg.limit, "limit");
        this.#u32(msg.slot, "slot");
        this.#str(msg.name, "name");
        this.#bin(msg.value, "value");
        this.#u64(msg.writeGeneration ?? 0, "writeGeneration");
        return;
      case "goodbye":
      case "unwatch":
        this.#u32(msg.requestId, "requestId");
        return;
      case "set_value":
      case "downgrade":
        this.#u32(msg.requestId, "requestId");
        this.#u64(msg.token, "token");
        this.#str(msg.name, "name");
        if (msg.type === "set_value") this.#bin(msg.value, "value");
        return;
      case "value_set":
      case "query":
        this.#u32(msg.requestId, "requestId");
        this.#str(msg.name, "name");
        return;
      case "lock_state":
        this.#u32(msg.requestId, "requestId");
        this.#enum(msg.event, LOCK_EVENTS, "event");
        this.#enum(msg.reason, END_REASONS, "reason");
        this.#enum(msg.kind, LOCK_KINDS, "kind");
        this.#u32(msg.limit, "limit");
        this.#u32(msg.queueLength, "queueLength");
        this.#u32(msg.owners, "owners");
        this.#str(msg.name, "name");
        if (msg.holders.length > COUNT_MAX) {
          throw new RangeError(
            `Cannot encode field "holders": ${msg.holders.length} holders exceed ${COUNT_MAX}`,
          );
        }
        this.#u16(msg.holders.length, "holders");
        for (const holder of msg.holders) this.#holder(holder);
        return;
      case "watch":
      case "watching":
      case "watch_ended":
        this.#u32(msg.requestId, "requestId");
        if (msg.type === "watch") this.#str(msg.pattern, "pattern");
        else if (msg.type === "watching") this.#u32(msg.locks, "locks");
        else this.#enum(msg.reason, WATCH_END_REASONS, "reason");
        return;
      default:
        throw new RangeError(`Cannot encode message: ${msg.type} is no version-2-only type`);
    }
  }

  #holder(holder: LockStateHolder): void {
    this.#u64(holder.token, "holders[].token");
    this.#u32(holder.heldMs, "holders[].heldMs");
    this.#u32(holder.leaseMs, "holders[].leaseMs");
    this.#enum(holder.mode, LOCK_MODES, "holders[].mode");
    this.#u32(holder.slot, "holders[].slot");
    this.#str(holder.identity, "holders[].identity");
    this.#str(holder.clientName, "holders[].clientName");
    this.#bin(holder.value, "holders[].value");
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

  /** A ticket: 16 raw bytes; EMPTY_TICKET (or none given) is sent as 16 zero bytes. */
  #b16(value: Uint8Array | undefined, field: string): void {
    const ticket = value ?? EMPTY_TICKET;
    if (ticket.length !== 0 && ticket.length !== TICKET_BYTES) {
      throw new RangeError(
        `Cannot encode field "${field}": ${ticket.length} bytes, not ${TICKET_BYTES} (or none)`,
      );
    }
    this.#reserve(TICKET_BYTES);
    if (ticket.length === 0) this.#buf.fill(0, this.#len, this.#len + TICKET_BYTES);
    else this.#buf.set(ticket, this.#len);
    this.#len += TICKET_BYTES;
  }

  /** Raw bytes with a u16 length (a value; not UTF-8). None given is the empty value. */
  #bin(value: Uint8Array | undefined, field: string): void {
    const n = value?.length ?? 0;
    if (n > STRING_BYTES_MAX) {
      throw new RangeError(`Cannot encode field "${field}": ${n} bytes exceed ${STRING_BYTES_MAX}`);
    }
    this.#reserve(2 + n);
    this.#view.setUint16(this.#len, n);
    if (n > 0) this.#buf.set(value!, this.#len + 2);
    this.#len += 2 + n;
  }

  /**
   * An enum as a u8: the index of its name in `names`, or a number that names nothing (to test
   * how a peer refuses it). A number that has a name must be given by its name, so that what is
   * encoded decodes to the same message.
   */
  #enum(value: string | number, names: readonly (string | null)[], field: string): void {
    if (typeof value === "string") {
      const index = names.indexOf(value);
      if (index < 0) {
        throw new RangeError(
          `Cannot encode field "${field}": ${JSON.stringify(value)} is not one of ${
            names.filter((name) => name !== null).join(", ")
          }`,
        );
      }
      this.#u8(index, field);
      return;
    }
    if (value < names.length && names[value] !== null) {
      throw new RangeError(
        `Cannot encode field "${field}": ${value} has a name, ${JSON.stringify(names[value])}`,
      );
    }
    this.#u8(value, field);
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

function notInVersion1(message: string, fields: string): RangeError {
  return new RangeError(
    `Cannot encode ${message} on a protocol version 1 session: ${fields} other than neutral ` +
      "(version 2 fields)",
  );
}

/** A ticket that is not "none" (EMPTY_TICKET, or 16 zero bytes). */
function hasTicket(ticket: Uint8Array | undefined): boolean {
  if (ticket === undefined) return false;
  for (let i = 0; i < ticket.length; i++) if (ticket[i] !== 0) return true;
  return false;
}

/** Type bytes of the version-2-only messages by name. */
const V2_ONLY_TYPE_BYTES: Partial<Record<string, number>> = {
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
};
function rangeError(field: string, value: number, what: string): RangeError {
  return new RangeError(`Cannot encode field "${field}": ${value} is not ${what}`);
}

const sharedWriter = new FrameWriter();

/**
 * Encodes one message as one frame (length prefix included) in the layout of protocol `version`
 * (default 1). The result is never shared.
 */
export function encodeFrame(msg: Message, version = 1): Uint8Array {
  sharedWriter.version = version;
  sharedWriter.push(msg);
  return sharedWriter.take();
}
