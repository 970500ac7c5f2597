/**
 * The one wire-errors module: the table of ERROR codes (numbered explicitly,
 * never reused; `docs/protocol.md` renders it and a test proves each code is
 * produced by some case), and every mapping from a domain reason to a wire
 * code and its message. Nothing else in the server builds an ERROR's text.
 *
 * @module
 */

import type { CloseCause, GrantBlock, Rejection } from "../core/types.ts";
import type { ErrorMessage } from "./messages.ts";

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

// ---- domain reasons → wire code and message ---------------------------------

/** What an ERROR frame says: its code and its message (the lock name travels beside it). */
export interface WireError {
  readonly code: WireCodeName;
  readonly message: string;
  /** The frame's name field when it is not a lock name (NOT_LEADER: the leader's address). */
  readonly name?: string;
}

const GRANT_BLOCK_CODES: Readonly<Record<GrantBlock, WireCodeName>> = {
  audit_unavailable: "AUDIT_UNAVAILABLE",
  token_store_unavailable: "TOKENS_UNAVAILABLE",
  shutting_down: "SHUTTING_DOWN",
  not_leader: "NOT_LEADER",
};

/** Why grants are blocked, as a clause for messages (wire and admin API alike). */
function grantBlockText(block: GrantBlock, detail = ""): string {
  switch (block) {
    case "audit_unavailable":
      return "the audit log cannot be written, grants are paused";
    case "token_store_unavailable":
      return `no fencing token could be reserved${
        detail === "" ? "" : ` (${detail})`
      }, grants are paused until the token store works again`;
    case "shutting_down":
      return "the server is shutting down";
    case "not_leader":
      return "this node is not the leader";
  }
}

/** The ERROR answering a request the engine refused. */
export function rejectionError(name: string, rejection: Rejection): WireError {
  switch (rejection.reason) {
    case "invalid_argument":
      return { code: "INVALID_ARGUMENT", message: rejection.problem };
    case "duplicate_claim":
      return {
        code: "DUPLICATE_CLAIM",
        message: `Cannot acquire lock "${name}": this session already ${
          rejection.owned ? "owns" : "waits for"
        } it`,
      };
    case "limit_exceeded":
      return {
        code: "LIMIT_EXCEEDED",
        message: rejection.limit === "claims_per_session"
          ? `Cannot acquire lock "${name}": the session already has ${rejection.max} claims`
          : rejection.limit === "claims"
          ? `Cannot acquire lock "${name}": the server holds ${rejection.max} claims, its limit`
          : `Cannot acquire lock "${name}": its queue already has ${rejection.max} waiters`,
      };
    case "not_owner": {
      const why = rejection.claim === "none"
        ? "this session has no claim on it"
        : rejection.claim === "queued"
        ? "this session only waits for it (cancel with token 0)"
        : `token ${rejection.token} is not the token of this ownership`;
      return { code: "NOT_OWNER", message: `Cannot release lock "${name}": ${why}` };
    }
    case "grants_blocked":
      return {
        code: GRANT_BLOCK_CODES[rejection.block],
        message: `Cannot acquire lock "${name}": ${
          grantBlockText(rejection.block, rejection.detail)
        }`,
      };
  }
}

/** A wait that ended without a grant: its bound ran out (or a try-lock found the lock held). */
export function waitTimeoutError(name: string, waitedMs: number): WireError {
  return {
    code: "WAIT_TIMEOUT",
    message: waitedMs === 0
      ? `Cannot acquire lock "${name}": it is held`
      : `Cannot acquire lock "${name}": wait timed out after ${Math.round(waitedMs)} ms`,
  };
}

/** The client's own RELEASE (token 0) cancelled its queued claim. */
export function cancelledError(name: string): WireError {
  return { code: "CANCELLED", message: `Wait for lock "${name}" cancelled` };
}

/** An ownership ended because its lease ran out. */
export function leaseExpiredError(name: string, token: number): WireError {
  return {
    code: "LEASE_EXPIRED",
    message: `Lost lock "${name}": its lease expired (token ${token})`,
  };
}

/** The ACL refused an ACQUIRE. */
export function aclDeniedError(name: string, identity: string): WireError {
  return {
    code: "ACL_DENIED",
    message: `Cannot acquire lock "${name}": the ACL does not allow identity "${identity}"`,
  };
}

/** The final ERROR of a session the server closes, by cause (none when the peer already left). */
export function sessionClosedError(
  cause: CloseCause,
  name: string,
  ioTimeoutMs: number,
): WireError | null {
  switch (cause) {
    case "admin":
      return {
        code: "CLOSED_BY_ADMIN",
        message: `Closed by administrator (action on lock "${name}")`,
      };
    case "io_timeout":
      return { code: "IO_TIMEOUT", message: `No traffic for ${ioTimeoutMs} ms` };
    case "shutdown":
      return SHUTTING_DOWN_ERROR;
    case "failover":
      return notLeaderError("", "this node stepped down");
    case "client_closed":
    case "io_error":
      return null;
  }
}

/**
 * Cluster mode: this node does not serve. The ERROR frame carries the leader's advertised
 * address in its name field ("" while none is known).
 */
export function notLeaderError(leaderAddr: string, why: string): WireError {
  return {
    code: "NOT_LEADER",
    name: leaderAddr,
    message: leaderAddr === ""
      ? `This node is not the leader (${why}); no leader is known yet`
      : `This node is not the leader (${why}); the leader is ${leaderAddr}`,
  };
}

export const SHUTTING_DOWN_ERROR: WireError = {
  code: "SHUTTING_DOWN",
  message: "The server is shutting down",
};

/** Errors of the session layer, before or beside the engine. */
export const SESSION_ERRORS = {
  requestIdZero: (): WireError => ({
    code: "INVALID_ARGUMENT",
    message: "Request id 0 is reserved for the server",
  }),
  handshakeTimeout: (timeoutMs: number): WireError => ({
    code: "HANDSHAKE_TIMEOUT",
    message: `No HELLO within ${timeoutMs} ms`,
  }),
  clientNameTooLong: (bytesMax: number): WireError => ({
    code: "INVALID_ARGUMENT",
    message: `Client name is longer than ${bytesMax} bytes`,
  }),
  unsupportedVersion: (asked: number, spoken: number): WireError => ({
    code: "UNSUPPORTED_VERSION",
    message: `Protocol version ${asked} is not supported; this server speaks ${spoken}`,
  }),
  sessionLimit: (): WireError => ({
    code: "LIMIT_EXCEEDED",
    message: "The server has reached its session limit",
  }),
  handshakeLimit: (handshakesMax: number): WireError => ({
    code: "LIMIT_EXCEEDED",
    message: `More than ${handshakesMax} connections were waiting for their HELLO; ` +
      "this one waited longest",
  }),
  malformed: (reason: string): WireError => ({ code: "MALFORMED_FRAME", message: reason }),
} as const;

/**
 * The ERROR frame for `error`. The encoder cuts the message to ERROR_MESSAGE_BYTES_MAX; the
 * session cuts an echoed name that would not fit the frame limit (see Session).
 */
export function errorFrame(requestId: number, name: string, error: WireError): ErrorMessage {
  return {
    type: "error",
    requestId,
    code: WIRE_CODES[error.code].code,
    name: error.name ?? name,
    message: error.message,
  };
}
