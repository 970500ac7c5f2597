/**
 * Every mapping from a domain reason (a refusal of the engine, a session's end, a grant block,
 * the session layer's own checks) to a wire code and its message: nothing else in the server
 * builds an ERROR's text. The codes themselves are the one table in `src/wire/codes.ts`.
 *
 * @module
 */

import type { CloseCause, GrantBlock, Rejection } from "../core/types.ts";
import type { ReclaimVoidReason } from "./void_reasons.ts";
import { WIRE_CODES, type WireCodeName } from "../wire/codes.ts";
import type { ErrorMessage } from "../wire/messages.ts";

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

/** The ERROR answering a QUERY or WATCH the ACL refused (same code as a refused ACQUIRE). */
export function aclReadDeniedError(name: string, identity: string): WireError {
  return {
    code: "ACL_DENIED",
    message: `Cannot read lock "${name}": the ACL does not allow identity "${identity}" to read it`,
  };
}

/** Why a RECLAIM's claim is not carried over, as the clause of CLAIM_VOID's message. */
const VOID_CLAUSES: Readonly<Record<ReclaimVoidReason, string>> = {
  ticket: "its ticket is not one this server issued for this claim, session and identity",
  term: "it was made in a term whose claims this leader does not take",
  window: "the reclaim window is closed (the session that held it is gone)",
  floor: "the ownership ended before this reclaim (it expired or its session ended)",
  regranted: "the lock has another owner now",
  acl: "the ACL no longer allows this identity to acquire it",
  limit: "a server limit (claims per session, claims) refused it",
};

/** A RECLAIM's owned claim could not be carried over (protocol version 2; the session stays). */
export function claimVoidError(name: string, reason: ReclaimVoidReason): WireError {
  return {
    code: "CLAIM_VOID",
    message: `Cannot reclaim lock "${name}": ${VOID_CLAUSES[reason]}`,
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
  unsupportedVersion: (asked: number, spoken: readonly number[]): WireError => ({
    code: "UNSUPPORTED_VERSION",
    message: `Protocol version ${asked} is not supported; this server speaks ${
      spoken.join(" and ")
    }`,
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
  resumeNotFirst: (): WireError => ({
    code: "INVALID_ARGUMENT",
    message: "RESUME must be the first request after WELCOME",
  }),
  reclaimWithoutResume: (name: string): WireError => ({
    code: "INVALID_ARGUMENT",
    message: `Cannot reclaim lock "${name}": a RECLAIM must follow a RESUME, ` +
      "no more of them than it announced and before any other request",
  }),
  claimKind: (name: string, kind: number | string): WireError => ({
    code: "INVALID_ARGUMENT",
    message:
      `Cannot reclaim lock "${name}": claim kind ${kind} is neither 1 (owned) nor 2 (queued)`,
  }),
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
