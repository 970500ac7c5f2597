/**
 * What one session still expects to hear, by request id, and whether a reply fits it. Every
 * frame from the server is untrusted: a reply must name a request this session sent and has
 * not had its last answer to, be of a type that request can get, and carry that request's lock
 * name. Anything else (an ACQUIRED naming another lock, a reply to a request never sent or
 * already answered, a HEARTBEAT_ACK for an ACQUIRE, a LEASE_EXPIRED for a lock not owned) is a
 * protocol error: the client closes the connection rather than act on it. Pure bookkeeping, no
 * clock and no I/O; docs/protocol.md ("Requests in flight") has the same table.
 *
 * @module
 */

import { LEASE_MS_MIN, LOCK_NAME_BYTES_MAX, TOKEN_MAX } from "../limits.ts";
import { formatWireCode, WIRE_CODES, wireCodeInfo } from "../wire/codes.ts";
import { cutUtf8 } from "../wire/frame.ts";
import type { ServerMessage, Welcome } from "../wire/messages.ts";
import { quoteUntrusted } from "./redirect.ts";

/** A frame after WELCOME: a reply, or (request id 0) a server condition. */
export type Reply = Exclude<ServerMessage, Welcome>;

/** The reply of one type. */
type ReplyOf<T extends Reply["type"]> = Extract<Reply, { readonly type: T }>;

/**
 * A request whose answer may still come. Legal transitions: acquire `waiting` → `owned`
 * (ACQUIRED) → gone (LEASE_EXPIRED, or the answer to the RELEASE of that ownership); `waiting`
 * → gone (an ERROR that ends the wait); release and heartbeat → gone (their answer).
 */
type Expected =
  | { readonly kind: "acquire"; readonly name: string; phase: "waiting" | "owned"; queued: boolean }
  | { readonly kind: "release"; readonly name: string; readonly acquireRequestId: number }
  | { readonly kind: "heartbeat" };

const LEASE_EXPIRED = WIRE_CODES.LEASE_EXPIRED.code;
const NOT_OWNER = WIRE_CODES.NOT_OWNER.code;

/** Whether `code` is one the protocol version this client speaks defines. */
function knownCode(code: number): boolean {
  return wireCodeInfo(code).name !== "UNKNOWN";
}

export class ReplyLedger {
  readonly #expected = new Map<number, Expected>();
  readonly #welcome: Welcome;

  constructor(welcome: Welcome) {
    this.#welcome = welcome;
  }

  /** Requests that may still get an answer. */
  get size(): number {
    return this.#expected.size;
  }

  acquireSent(requestId: number, name: string): void {
    this.#expected.set(requestId, { kind: "acquire", name, phase: "waiting", queued: false });
  }

  /** `acquireRequestId`: the ACQUIRE of the ownership it ends (0: a token-0 cancel). */
  releaseSent(requestId: number, name: string, acquireRequestId: number): void {
    this.#expected.set(requestId, { kind: "release", name, acquireRequestId });
  }

  heartbeatSent(requestId: number): void {
    this.#expected.set(requestId, { kind: "heartbeat" });
  }

  /**
   * Checks a reply (request id other than 0) against what was asked and books it. Returns null
   * when it fits, else what is wrong with it, in words (nothing is booked then).
   */
  accept(message: Reply): string | null {
    const requestId = message.requestId;
    const expected = this.#expected.get(requestId);
    const what = `${message.type.toUpperCase()} for request ${requestId}`;
    if (expected === undefined) {
      return `${what}, which this session never sent or had its last answer to already`;
    }
    switch (message.type) {
      case "queued":
        if (expected.kind !== "acquire" || expected.phase !== "waiting" || expected.queued) {
          return `${what}, which is not an ACQUIRE waiting for its first QUEUED`;
        }
        if (message.name !== expected.name) return this.#wrongName(what, message.name, expected);
        expected.queued = true;
        return null;
      case "acquired":
        return this.#acceptAcquired(message, expected, what);
      case "released":
        if (expected.kind !== "release") return `${what}, which is not a RELEASE`;
        if (message.name !== expected.name) return this.#wrongName(what, message.name, expected);
        this.#releaseAnswered(requestId, expected.acquireRequestId);
        return null;
      case "heartbeat_ack":
        if (expected.kind !== "heartbeat") return `${what}, which is not a HEARTBEAT`;
        // Replies keep the order of the requests they answer: an older heartbeat whose ACK
        // has not come before this one never gets one.
        for (const [id, older] of this.#expected) {
          if (older.kind === "heartbeat") this.#expected.delete(id);
          if (id === requestId) break;
        }
        return null;
      case "error":
        return this.#acceptError(message, expected, what);
      default:
        // Version-2 replies: a version-1 session never decodes them (an unknown type).
        return `${what}, a reply this client (protocol version 1) never asks for`;
    }
  }

  /** ACQUIRED: only for an ACQUIRE still waiting, with a lease and a token in range. */
  #acceptAcquired(
    message: ReplyOf<"acquired">,
    expected: Expected,
    what: string,
  ): string | null {
    if (expected.kind !== "acquire" || expected.phase !== "waiting") {
      return `${what}, which is not an ACQUIRE waiting for its grant`;
    }
    if (message.name !== expected.name) return this.#wrongName(what, message.name, expected);
    const leaseMaxMs = this.#welcome.leaseMaxMs;
    if (message.leaseMs < LEASE_MS_MIN || message.leaseMs > leaseMaxMs) {
      return `${what} with a lease of ${message.leaseMs} ms, outside ${LEASE_MS_MIN}..${leaseMaxMs} ms`;
    }
    if (message.token < 1 || message.token > TOKEN_MAX) {
      return `${what} with token ${message.token}`;
    }
    expected.phase = "owned";
    return null;
  }

  /** ERROR: each kind of request has its own codes it can be answered with. */
  #acceptError(message: ReplyOf<"error">, expected: Expected, what: string): string | null {
    const requestId = message.requestId;
    const code = message.code;
    const codeText = `${what} with code ${formatWireCode(code)}`;
    if (expected.kind === "heartbeat") return `${codeText}: a HEARTBEAT has no error answer`;
    if (!this.#nameFits(message.name, expected.name)) {
      return this.#wrongName(what, message.name, expected);
    }
    if (expected.kind === "release") {
      if (code !== NOT_OWNER && knownCode(code)) {
        return `${codeText}: a RELEASE is answered RELEASED or NOT_OWNER`;
      }
      this.#releaseAnswered(requestId, expected.acquireRequestId);
      return null;
    }
    if (expected.phase === "owned") {
      if (code !== LEASE_EXPIRED) return `${codeText} for an ACQUIRE that owns its lock`;
      this.#expected.delete(requestId);
      return null;
    }
    if (code === LEASE_EXPIRED || code === NOT_OWNER || wireCodeInfo(code).closes) {
      return `${codeText} for an ACQUIRE still waiting`;
    }
    this.#expected.delete(requestId);
    return null;
  }

  #releaseAnswered(requestId: number, acquireRequestId: number): void {
    this.#expected.delete(requestId);
    // After the answer to the RELEASE of an ownership, nothing more comes for its ACQUIRE.
    const acquire = this.#expected.get(acquireRequestId);
    if (acquire?.kind === "acquire" && acquire.phase === "owned") {
      this.#expected.delete(acquireRequestId);
    }
  }

  /** An ERROR echoes the request's name, cut to 1,024 bytes when it was longer (an invalid one). */
  #nameFits(name: string, asked: string): boolean {
    return name === asked || (name !== "" && name === cutUtf8(asked, LOCK_NAME_BYTES_MAX));
  }

  #wrongName(what: string, name: string, expected: { kind: string; name: string }): string {
    const kind = expected.kind.toUpperCase();
    return `${what} names lock ${quoteUntrusted(name)}, but that ${kind} was for ` +
      quoteUntrusted(expected.name);
  }
}
