/**
 * The one table of wire ERROR codes (numbered explicitly, never reused; `docs/protocol.md`
 * renders it and a test proves each code is produced by some case), shared by the server, the
 * client and the cluster's probe. It knows nothing of the server's domain: the mappings from a
 * domain reason to a code and its message are in `src/service/wire_errors.ts`.
 *
 * @module
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

/** Every wire ERROR code by name (numbers are never reused; docs/protocol.md renders this table). */
export const WIRE_CODES = {
  MALFORMED_FRAME: {
    code: 0x01,
    name: "MALFORMED_FRAME",
    retryable: false,
    closes: true,
    meaning:
      "A frame could not be parsed: bad length, oversized, truncated body, unknown type, trailing bytes, invalid UTF-8, or a request before HELLO.",
  },
  CLOSED_BY_ADMIN: {
    code: 0x02,
    name: "CLOSED_BY_ADMIN",
    retryable: true,
    closes: true,
    meaning:
      "An operator force-released an ownership of this session or removed one of its waiters. A server condition, never a client error: reconnect with back-off and join the tail of the queue.",
  },
  UNSUPPORTED_VERSION: {
    code: 0x03,
    name: "UNSUPPORTED_VERSION",
    retryable: false,
    closes: true,
    meaning: "HELLO asked for a protocol version this server does not speak.",
  },
  ACL_DENIED: {
    code: 0x04,
    name: "ACL_DENIED",
    retryable: false,
    closes: false,
    meaning: "The ACL does not allow this identity to acquire this lock.",
  },
  LEASE_EXPIRED: {
    code: 0x05,
    name: "LEASE_EXPIRED",
    retryable: true,
    closes: false,
    meaning:
      "The named ownership ended because its lease ran out; the lock went to the next waiter. The session stays open.",
  },
  NOT_OWNER: {
    code: 0x06,
    name: "NOT_OWNER",
    retryable: false,
    closes: false,
    meaning:
      "RELEASE named a lock this session does not own with that token (or a claim it does not have).",
  },
  WAIT_TIMEOUT: {
    code: 0x07,
    name: "WAIT_TIMEOUT",
    retryable: true,
    closes: false,
    meaning:
      "The lock was not granted within the ACQUIRE's wait bound (immediately, for a try-lock).",
  },
  DUPLICATE_CLAIM: {
    code: 0x08,
    name: "DUPLICATE_CLAIM",
    retryable: false,
    closes: false,
    meaning: "This session already owns or waits for the named lock.",
  },
  LIMIT_EXCEEDED: {
    code: 0x09,
    name: "LIMIT_EXCEEDED",
    retryable: true,
    closes: false,
    meaning:
      "A server limit was reached (claims of all sessions, claims per session, waiters per lock); nothing changed. With request id 0 the connection is closed: the session limit at HELLO, too many connections without HELLO, or no room for a frame above any valid request.",
  },
  SHUTTING_DOWN: {
    code: 0x0a,
    name: "SHUTTING_DOWN",
    retryable: true,
    closes: true,
    meaning:
      "The server is shutting down; ownerships of the session ended (graceful). Reconnect later.",
  },
  INVALID_ARGUMENT: {
    code: 0x0b,
    name: "INVALID_ARGUMENT",
    retryable: false,
    closes: false,
    meaning:
      "A field is out of range: an empty, oversized or reserved lock name, control or invisible format characters (bidirectional controls, zero-width characters), a name not in NFC, request id 0.",
  },
  AUDIT_UNAVAILABLE: {
    code: 0x0c,
    name: "AUDIT_UNAVAILABLE",
    retryable: true,
    closes: false,
    meaning: "The audit log cannot be written, so no new ownership is granted until it can.",
  },
  HANDSHAKE_TIMEOUT: {
    code: 0x0d,
    name: "HANDSHAKE_TIMEOUT",
    retryable: true,
    closes: true,
    meaning: "No HELLO arrived within the handshake timeout.",
  },
  IO_TIMEOUT: {
    code: 0x0e,
    name: "IO_TIMEOUT",
    retryable: true,
    closes: true,
    meaning:
      "The session sent nothing for io_timeout_ms (or did not read its replies); its ownerships ended with reason io_timeout.",
  },
  CANCELLED: {
    code: 0x0f,
    name: "CANCELLED",
    retryable: false,
    closes: false,
    meaning: "The pending ACQUIRE was cancelled by the client's own RELEASE of the queued claim.",
  },
  TOKENS_UNAVAILABLE: {
    code: 0x10,
    name: "TOKENS_UNAVAILABLE",
    retryable: true,
    closes: false,
    meaning:
      "No fencing token could be reserved (the token file in the server's data directory cannot be written), so no new ownership is granted until it can; the server retries by itself.",
  },
  NOT_LEADER: {
    code: 0x11,
    name: "NOT_LEADER",
    retryable: true,
    closes: true,
    meaning:
      "Cluster mode: this node does not serve (a standby, or a leader that stepped down or is handing over). The ERROR's name field carries the leader's advertised host:port, or is empty while no leader is known: connect there at once, or go through the address list again.",
  },
  CLAIM_VOID: {
    code: 0x12,
    name: "CLAIM_VOID",
    retryable: false,
    closes: false,
    meaning:
      "Protocol version 2: the RECLAIM's claim could not be carried over to this leader: it ended on the old one, the lock went to another holder, or the reclaim window closed. The session stays open.",
  },
} as const satisfies Record<string, WireCodeInfo>;

/**
 * Codes only a cluster node sends. A single node never does, and its
 * `lockd_protocol_errors_total{code}` has no sample for them (the operator spec's label values
 * are a single node's; cluster mode adds these).
 */
export const CLUSTER_ONLY_WIRE_CODES: ReadonlySet<number> = new Set([WIRE_CODES.NOT_LEADER.code]);

/** The name of a wire ERROR code, e.g. "WAIT_TIMEOUT". */
export type WireCodeName = keyof typeof WIRE_CODES;

const BY_NUMBER = new Map<number, WireCodeInfo>(
  Object.values(WIRE_CODES).map((info) => [info.code, info]),
);

/** Looks a code up by number; unknown numbers get a synthetic entry. */
export function wireCodeInfo(code: number): WireCodeInfo {
  return BY_NUMBER.get(code) ?? {
    code,
    name: "UNKNOWN",
    retryable: false,
    closes: false,
    meaning: "A code this build does not know.",
  };
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
