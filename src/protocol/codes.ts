/**
 * The one table of wire ERROR codes. Codes are numbered explicitly and never
 * reused; `docs/protocol.md` renders this table. A test proves each code is
 * produced by some case.
 */

/** One wire ERROR code: its number, name, meaning and how a client should treat it. */
export interface WireCodeInfo {
  /** The byte on the wire, e.g. 0x07. */
  readonly code: number;
  /** The code's name, e.g. "WAIT_TIMEOUT". */
  readonly name: string;
  /** What the code means, as docs/protocol.md says it. */
  readonly meaning: string;
  /** Whether a well-behaved client may try the same thing again later. */
  readonly retryable: boolean;
  /** Whether the server closes the connection after sending it. */
  readonly closes: boolean;
}

function entry(
  code: number,
  name: string,
  retryable: boolean,
  closes: boolean,
  meaning: string,
): WireCodeInfo {
  return { code, name, retryable, closes, meaning };
}

/** Every wire ERROR code by name (numbers are never reused; docs/protocol.md renders this table). */
export const WIRE_CODES = {
  MALFORMED_FRAME: entry(
    0x01,
    "MALFORMED_FRAME",
    false,
    true,
    "A frame could not be parsed: bad length, oversized, truncated body, unknown type, trailing bytes, invalid UTF-8, or a request before HELLO.",
  ),
  CLOSED_BY_ADMIN: entry(
    0x02,
    "CLOSED_BY_ADMIN",
    true,
    true,
    "An operator force-released an ownership of this session or removed one of its waiters. A server condition, never a client error: reconnect with back-off and join the tail of the queue.",
  ),
  UNSUPPORTED_VERSION: entry(
    0x03,
    "UNSUPPORTED_VERSION",
    false,
    true,
    "HELLO asked for a protocol version this server does not speak.",
  ),
  ACL_DENIED: entry(
    0x04,
    "ACL_DENIED",
    false,
    false,
    "The ACL does not allow this identity to acquire this lock.",
  ),
  LEASE_EXPIRED: entry(
    0x05,
    "LEASE_EXPIRED",
    true,
    false,
    "The named ownership ended because its lease ran out; the lock went to the next waiter. The session stays open.",
  ),
  NOT_OWNER: entry(
    0x06,
    "NOT_OWNER",
    false,
    false,
    "RELEASE named a lock this session does not own with that token (or a claim it does not have).",
  ),
  WAIT_TIMEOUT: entry(
    0x07,
    "WAIT_TIMEOUT",
    true,
    false,
    "The lock was not granted within the ACQUIRE's wait bound (immediately, for a try-lock).",
  ),
  DUPLICATE_CLAIM: entry(
    0x08,
    "DUPLICATE_CLAIM",
    false,
    false,
    "This session already owns or waits for the named lock.",
  ),
  LIMIT_EXCEEDED: entry(
    0x09,
    "LIMIT_EXCEEDED",
    true,
    false,
    "A server limit was reached (sessions, claims per session, waiters per lock); nothing changed. When the session limit is hit the connection is closed.",
  ),
  SHUTTING_DOWN: entry(
    0x0a,
    "SHUTTING_DOWN",
    true,
    true,
    "The server is shutting down; ownerships of the session ended (graceful). Reconnect later.",
  ),
  INVALID_ARGUMENT: entry(
    0x0b,
    "INVALID_ARGUMENT",
    false,
    false,
    "A field is out of range: an empty, oversized or reserved lock name, control characters, request id 0.",
  ),
  AUDIT_UNAVAILABLE: entry(
    0x0c,
    "AUDIT_UNAVAILABLE",
    true,
    false,
    "The audit log cannot be written, so no new ownership is granted until it can.",
  ),
  HANDSHAKE_TIMEOUT: entry(
    0x0d,
    "HANDSHAKE_TIMEOUT",
    true,
    true,
    "No HELLO arrived within the handshake timeout.",
  ),
  IO_TIMEOUT: entry(
    0x0e,
    "IO_TIMEOUT",
    true,
    true,
    "The session sent nothing for io_timeout_ms (or did not read its replies); its ownerships ended with reason io_timeout.",
  ),
  CANCELLED: entry(
    0x0f,
    "CANCELLED",
    false,
    false,
    "The pending ACQUIRE was cancelled by the client's own RELEASE of the queued claim.",
  ),
} as const;

/** The name of a wire ERROR code, e.g. "WAIT_TIMEOUT". */
export type WireCodeName = keyof typeof WIRE_CODES;

const BY_NUMBER = new Map<number, WireCodeInfo>(
  Object.values(WIRE_CODES).map((info) => [info.code, info]),
);

/** Looks a code up by number; unknown numbers get a synthetic entry. */
export function wireCodeInfo(code: number): WireCodeInfo {
  return BY_NUMBER.get(code) ??
    entry(code, "UNKNOWN", false, false, "A code this build does not know.");
}

/** `0x02` style, as used in the metric label `code`. */
export function formatWireCode(code: number): string {
  return "0x" + code.toString(16).padStart(2, "0");
}

/** A protocol-level failure carrying its wire code (thrown by the codec, sent as ERROR). */
export class ProtocolError extends Error {
  readonly code: number;
  constructor(code: WireCodeName, message: string) {
    super(message);
    this.name = "ProtocolError";
    this.code = WIRE_CODES[code].code;
  }
}
