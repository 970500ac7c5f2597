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
import { type AskedKind, grantMisfit, PLAIN_KIND } from "./look_checks.ts";

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
  | {
    readonly kind: "acquire";
    readonly name: string;
    phase: "waiting" | "owned";
    queued: boolean;
    /** A RECLAIM (version 2) of an owned or a queued claim; null for an ACQUIRE. */
    readonly reclaim: "owned" | "queued" | null;
    /** An owned RECLAIM: the claim's token, which its ACQUIRED must carry again. */
    readonly token: number;
    /** What the claim asked for (mode, limit, an owned RECLAIM's slot): its grant must fit. */
    readonly asked: AskedKind;
  }
  | { readonly kind: "release"; readonly name: string; readonly acquireRequestId: number }
  | { readonly kind: "heartbeat" }
  | { readonly kind: "resume"; readonly name: "" };

const LEASE_EXPIRED = WIRE_CODES.LEASE_EXPIRED.code;
const NOT_OWNER = WIRE_CODES.NOT_OWNER.code;
const CLAIM_VOID = WIRE_CODES.CLAIM_VOID.code;

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

  /** Whether `requestId` may still get an answer (a new request must not reuse it). */
  has(requestId: number): boolean {
    return this.#expected.has(requestId);
  }

  acquireSent(requestId: number, name: string, asked: AskedKind = PLAIN_KIND): void {
    this.#expected.set(requestId, {
      kind: "acquire",
      name,
      phase: "waiting",
      queued: false,
      reclaim: null,
      token: 0,
      asked,
    });
  }

  /** A RECLAIM (version 2): answered as an ACQUIRE; an owned one's ACQUIRED carries `token`. */
  reclaimSent(
    requestId: number,
    name: string,
    kind: "owned" | "queued",
    token = 0,
    asked: AskedKind = PLAIN_KIND,
  ): void {
    this.#expected.set(requestId, {
      kind: "acquire",
      name,
      phase: "waiting",
      queued: false,
      reclaim: kind,
      token,
      asked,
    });
  }

  /** A RESUME (version 2): answered by one RESUMED, or refused with an ERROR naming no lock. */
  resumeSent(requestId: number): void {
    this.#expected.set(requestId, { kind: "resume", name: "" });
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
        return this.#acceptQueued(message, expected, what);
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
      case "resumed":
        if (expected.kind !== "resume") return `${what}, which is not a RESUME`;
        if (typeof message.outcome !== "string") {
          return `${what} with outcome ${message.outcome}, which names nothing`;
        }
        this.#expected.delete(requestId);
        return null;
      case "error":
        return this.#acceptError(message, expected, what);
      default:
        // Replies to what this client never asks for (values, query, watch).
        return `${what}, a reply this client never asks for`;
    }
  }

  /** QUEUED: once, for an ACQUIRE or a queued RECLAIM still waiting, in this session's term. */
  #acceptQueued(message: ReplyOf<"queued">, expected: Expected, what: string): string | null {
    if (
      expected.kind !== "acquire" || expected.phase !== "waiting" || expected.queued ||
      expected.reclaim === "owned"
    ) {
      return `${what}, which is not an ACQUIRE or queued RECLAIM waiting for its first QUEUED`;
    }
    if (message.name !== expected.name) return this.#wrongName(what, message.name, expected);
    const term = this.#welcome.term ?? 0;
    if ((message.orderTerm ?? 0) > term) {
      return `${what} with orderTerm ${message.orderTerm}, above the session's term ${term}`;
    }
    expected.queued = true;
    return null;
  }

  /** ACQUIRED: only for an ACQUIRE still waiting, with a lease and a token in range. */
  #acceptAcquired(
    message: ReplyOf<"acquired">,
    expected: Expected,
    what: string,
  ): string | null {
    if (expected.kind !== "acquire" || expected.phase !== "waiting") {
      return `${what}, which is not an ACQUIRE or RECLAIM waiting for its grant`;
    }
    if (message.name !== expected.name) return this.#wrongName(what, message.name, expected);
    const leaseMaxMs = this.#welcome.leaseMaxMs;
    if (message.leaseMs < LEASE_MS_MIN || message.leaseMs > leaseMaxMs) {
      return `${what} with a lease of ${message.leaseMs} ms, outside ${LEASE_MS_MIN}..${leaseMaxMs} ms`;
    }
    if (message.token < 1 || message.token > TOKEN_MAX) {
      return `${what} with token ${message.token}`;
    }
    if (expected.reclaim === "owned" && message.token !== expected.token) {
      return `${what} with token ${message.token}, but that RECLAIM carried the claim's token ` +
        `${expected.token}`;
    }
    // The grant's kind: what the claim asked for (look_checks.ts).
    const misfit = grantMisfit(message, expected.asked);
    if (misfit !== null) return `${what} ${misfit}`;
    expected.phase = "owned";
    return null;
  }

  /** ERROR: each kind of request has its own codes it can be answered with. */
  #acceptError(message: ReplyOf<"error">, expected: Expected, what: string): string | null {
    const requestId = message.requestId;
    const code = message.code;
    const codeText = `${what} with code ${formatWireCode(code)}`;
    if (expected.kind === "heartbeat") return `${codeText}: a HEARTBEAT has no error answer`;
    if (code === CLAIM_VOID && !(expected.kind === "acquire" && expected.reclaim === "owned")) {
      return `${codeText}: CLAIM_VOID answers an owned RECLAIM only`;
    }
    if (expected.kind === "resume") {
      // RESUMED, or a refusal of the request (INVALID_ARGUMENT: not the first request).
      if (code === LEASE_EXPIRED || code === NOT_OWNER || wireCodeInfo(code).closes) {
        return `${codeText}: a RESUME is answered RESUMED (or refused)`;
      }
      if (message.name !== "") return this.#wrongName(what, message.name, expected);
      this.#expected.delete(requestId);
      return null;
    }
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
    const an = expected.reclaim === null ? "an ACQUIRE" : "a RECLAIM";
    if (expected.phase === "owned") {
      if (code !== LEASE_EXPIRED) return `${codeText} for ${an} that owns its lock`;
      this.#expected.delete(requestId);
      return null;
    }
    if (code === LEASE_EXPIRED || code === NOT_OWNER || wireCodeInfo(code).closes) {
      return `${codeText} for ${an} still waiting`;
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

  #wrongName(
    what: string,
    name: string,
    expected: Exclude<Expected, { kind: "heartbeat" }>,
  ): string {
    const kind = expected.kind === "acquire" && expected.reclaim !== null
      ? "RECLAIM"
      : expected.kind.toUpperCase();
    return `${what} names lock ${quoteUntrusted(name)}, but that ${kind} was for ` +
      quoteUntrusted(expected.name);
  }
}
