/**
 * The requests of one open session, each turned into its service command, with the session
 * rules that span requests (docs/protocol.md, "Session rules" and "Reclaiming after a
 * fail-over"): request id 0 is refused; RESUME only as the first request; RECLAIMs only after
 * it, as many as it announced at most, before any other request (another request ends them).
 * `Session` dispatches through it, and so does the contract suite's socketless transport.
 *
 * @module
 */

import type { CloseCause, Peer } from "../core/types.ts";
import { type ClaimOptions, PLAIN_CLAIM } from "../service/claim_options.ts";
import type { LockService } from "../service/lock_service.ts";
import { errorFrame, SESSION_ERRORS, type WireError } from "../service/wire_errors.ts";
import {
  type DecodedClientRequest,
  type Enum,
  type LockMode,
  type Reclaim,
  type ServerMessage,
  WAIT_FOREVER,
} from "../wire/messages.ts";

/**
 * How a session's end by its peer (EOF after a clean close) counts: a version-1 client closes
 * its connection to let go (`client_closed`: graceful), a version-2 client says GOODBYE first,
 * so a version-2 connection that ends without it vanished (`io_error`): its session is orphaned
 * (`LockService.connectionLost`), its ownerships stay until their leases end (`expired`, which
 * raises the lock's floor in cluster mode) or its client carries them over with RESUME.
 */
export function peerClosedCause(version: number): CloseCause {
  return version >= 2 ? "io_error" : "client_closed";
}

/** One session's requests, in the order its connection read them. */
export class RequestDispatch {
  readonly #service: LockService;
  readonly #peer: Peer;
  readonly #version: number;
  readonly #send: (message: ServerMessage) => void;
  /** Requests handled so far (RESUME must be the first). */
  #requests = 0;
  /** RECLAIMs the session's RESUME announced and that have not come yet. */
  #reclaimsLeft = 0;

  /** `send`: puts a frame into the session's reply order (for refusals before the service). */
  constructor(
    service: LockService,
    peer: Peer,
    version: number,
    send: (message: ServerMessage) => void,
  ) {
    this.#service = service;
    this.#peer = peer;
    this.#version = version;
    this.#send = send;
  }

  /** One request: its service command, or the ERROR that refuses it. */
  apply(message: DecodedClientRequest): void {
    const service = this.#service;
    const peer = this.#peer;
    const first = this.#requests++ === 0;
    if (message.requestId === 0) {
      const name = "name" in message ? message.name : "";
      this.#refuse(0, name, SESSION_ERRORS.requestIdZero());
      return;
    }
    if (this.#reclaimsLeft > 0 && message.type !== "reclaim") {
      // Another request before every RECLAIM came: the session is done reclaiming.
      this.#reclaimsLeft = 0;
      service.reclaimsDone(peer);
    }
    switch (message.type) {
      case "acquire": {
        const claim = this.#version >= 2 ? acquireClaim(message) : PLAIN_CLAIM;
        if ("code" in claim) return this.#refuse(message.requestId, message.name, claim);
        const waitMs = message.waitMs === WAIT_FOREVER ? null : message.waitMs;
        service.acquire(peer, message.requestId, message.name, message.leaseMs, waitMs, claim);
        return;
      }
      case "release":
        service.release(peer, message.requestId, message.name, message.token);
        return;
      case "heartbeat":
        service.heartbeat(peer, message.requestId);
        return;
      case "resume":
        if (!first) return this.#refuse(message.requestId, "", SESSION_ERRORS.resumeNotFirst());
        service.resume(peer, message.requestId, message.prevTerm, message.prevSessionId);
        this.#reclaimsLeft = message.claims;
        if (message.claims === 0) service.reclaimsDone(peer);
        return;
      case "reclaim":
        return this.#reclaim(message);
      case "goodbye":
        service.goodbye(peer);
        return;
      case "set_value":
        service.setValue(
          peer,
          message.requestId,
          message.name,
          message.token,
          message.value.length === 0 ? null : message.value,
        );
        return;
      case "query":
        service.query(peer, message.requestId, message.name);
        return;
      case "watch":
        service.watch(peer, message.requestId, message.pattern);
        return;
      case "unwatch":
        service.unwatch(peer, message.requestId);
        return;
      case "downgrade":
        service.setMode(peer, message.requestId, message.name, message.token, "shared");
        return;
      default:
        return unreachable(message);
    }
  }

  /** A RECLAIM of the session's RESUME: checked here, decided by the service. */
  #reclaim(message: Reclaim): void {
    const { requestId, name } = message;
    if (this.#reclaimsLeft === 0) {
      return this.#refuse(requestId, name, SESSION_ERRORS.reclaimWithoutResume(name));
    }
    const last = --this.#reclaimsLeft === 0;
    const kind = message.kind;
    const claim = kind === "owned" || kind === "queued"
      ? acquireClaim(message, "reclaim")
      : SESSION_ERRORS.claimKind(name, kind);
    if ("code" in claim || (kind !== "owned" && kind !== "queued")) {
      // A refused RECLAIM counts among those the RESUME announced.
      this.#refuse(requestId, name, "code" in claim ? claim : SESSION_ERRORS.claimKind(name, kind));
      if (last) this.#service.reclaimsDone(this.#peer);
      return;
    }
    this.#service.reclaim(this.#peer, {
      requestId,
      kind,
      name,
      token: kind === "owned" ? message.token : 0,
      orderTerm: kind === "queued" ? message.orderTerm : 0,
      orderSeq: kind === "queued" ? message.orderSeq : 0,
      leaseMs: message.leaseMs,
      waitMs: message.waitMs === WAIT_FOREVER ? null : message.waitMs,
      ticket: message.ticket,
      limit: message.limit,
      slot: message.slot,
      writeGeneration: kind === "owned" ? message.writeGeneration ?? 0 : 0,
      claim,
    }, last);
  }

  /** A request refused before the service: its ERROR, the session goes on. */
  #refuse(requestId: number, name: string, error: WireError): void {
    this.#send(errorFrame(requestId, name, error));
  }
}

/**
 * The claim a version-2 ACQUIRE or RECLAIM asks the engine for (its mode, limit and value; an
 * empty value is none), or the INVALID_ARGUMENT that refuses a mode byte naming nothing. Every
 * other check (a limit out of range, a value over `-max-lock-value-bytes`, a claim that
 * disagrees with the lock's kind and limit) is the engine's. Version-1 sessions ask for
 * `PLAIN_CLAIM`.
 */
function acquireClaim(
  fields: {
    readonly name: string;
    readonly mode: Enum<LockMode>;
    readonly limit: number;
    readonly value: Uint8Array;
  },
  action = "acquire",
): ClaimOptions | WireError {
  if (typeof fields.mode === "number") {
    return {
      code: "INVALID_ARGUMENT",
      message: `Cannot ${action} lock "${fields.name}": mode ${fields.mode} is neither 0 ` +
        "(exclusive) nor 1 (shared)",
    };
  }
  return {
    mode: fields.mode,
    limit: fields.limit,
    value: fields.value.length === 0 ? null : fields.value,
  };
}

/** The `never` check of an exhaustive switch: a new message type fails to compile until handled. */
export function unreachable(message: never): never {
  throw new Error(`unhandled message type ${(message as { type: string }).type}`);
}
