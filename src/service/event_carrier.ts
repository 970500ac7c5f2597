/**
 * Carries out the lock engine's events for the service, one at a time and in the order the
 * engine decided them: each becomes its audit record and the frames of the session it concerns,
 * in that session's reply order (docs/architecture.md, "Reply order").
 *
 * Two seams for cluster mode sit here:
 * - **Before an ownership is told** (ACQUIRED): its place in the reply order is held, its audit
 *   record written, the ownership gate's `beforeDeliver` (W1/W2: a record committed in etcd)
 *   awaited, and then the leadership gate's promise check passed (`promiseOwnership`). On a
 *   single node `beforeDeliver` answers null and nothing is awaited but the audit record.
 * - **When an ownership ends**: the ownership gate hears of it (`ended`, W2), and of a lock left
 *   with no claim (`idle`, W3).
 *
 * Version-2 sessions get the fields version 2 added: a reclaim ticket in every ACQUIRED and
 * QUEUED, the order key in QUEUED, the mode, limit, slot and write generation in ACQUIRED.
 *
 * @module
 */

import type { LockEngine } from "../core/engine.ts";
import {
  type ClaimMode,
  type EngineEvent,
  isGracefulEnd,
  type LockKind,
  type Peer,
} from "../core/types.ts";
import type { AuditLog } from "../log/audit.ts";
import { type AuditRecord, valueDigest } from "../log/audit_records.ts";
import { log } from "../log/diagnostic.ts";
import type { ServerCounters } from "../counters.ts";
import type { Acquired, Queued, ServerMessage } from "../wire/messages.ts";
import { ownedTicket, queuedTicket } from "./claim_tickets.ts";
import type { LeadershipGate, OwnershipGate } from "./leadership_gate.ts";
import type { SessionPort, SessionRegistry } from "./session_registry.ts";
import {
  cancelledError,
  errorFrame,
  leaseExpiredError,
  rejectionError,
  sessionClosedError,
  waitTimeoutError,
  type WireError,
} from "./wire_errors.ts";

const logger = log("protocol");

/** A session's end requested by its own connection, with the final ERROR to send (if any). */
export interface Closing {
  readonly sessionId: number;
  readonly finalError: WireError | null;
}

/** Where the claims a RECLAIM carried over came from: their `reclaim` records name it. */
export interface CarriedOver {
  readonly prevSessionId: number;
  readonly prevTerm: number;
}

export interface EventCarrierOptions {
  readonly engine: LockEngine;
  readonly audit: AuditLog;
  readonly counters: ServerCounters;
  readonly sessions: SessionRegistry;
  /** Cluster mode's promise check (absent on a single node). */
  readonly gate: LeadershipGate | undefined;
  readonly ownership: OwnershipGate;
  /** A session is gone from the engine (after its ownerships ended). */
  readonly sessionEnded: (sessionId: number) => void;
  /** An ownership ended. */
  readonly ownershipEnded: (name: string, token: number) => void;
}

/** The engine event of one type. */
type EventOf<T extends EngineEvent["type"]> = Extract<EngineEvent, { readonly type: T }>;

/** Whether a session speaks protocol version 2 (it gets tickets and the new fields). */
function speaksV2(port: SessionPort | undefined): boolean {
  return port !== undefined && (port.version ?? 1) >= 2;
}

export class EventCarrier {
  readonly #engine: LockEngine;
  readonly #audit: AuditLog;
  readonly #counters: ServerCounters;
  readonly #sessions: SessionRegistry;
  readonly #gate: LeadershipGate | undefined;
  readonly #ownership: OwnershipGate;
  readonly #sessionEnded: (sessionId: number) => void;
  readonly #ownershipEnded: (name: string, token: number) => void;

  constructor(options: EventCarrierOptions) {
    this.#engine = options.engine;
    this.#audit = options.audit;
    this.#counters = options.counters;
    this.#sessions = options.sessions;
    this.#gate = options.gate;
    this.#ownership = options.ownership;
    this.#sessionEnded = options.sessionEnded;
    this.#ownershipEnded = options.ownershipEnded;
  }

  /** Carries out one event: its audit record, its frames, the gates' hooks. */
  carry(event: EngineEvent, closing?: Closing, carried?: CarriedOver): void {
    const port = this.#sessions.get(event.peer.sessionId);
    switch (event.type) {
      case "granted":
        return this.#granted(event, port, carried);
      case "queued":
        return this.#queued(event, port);
      case "ended":
        return this.#ended(event, port);
      case "value_changed":
        return this.#valueChanged(event, port);
      case "mode_changed":
        return this.#modeChanged(event, port);
      case "wait_ended":
        return this.#waitEnded(event, port);
      case "rejected":
        return this.#rejected(event, port);
      case "session_closed":
        return this.#sessionClosed(event, port, closing);
      case "claim_moved":
        return this.#claimMoved(event, port, carried);
    }
  }

  /**
   * Sends a frame that promises ownership for `leaseMs` (ACQUIRED, HEARTBEAT_ACK) into its
   * place in the session's reply order.
   *
   * Cluster seam: the gate checks leadership right here, before the promise leaves; a node
   * that stepped down fills the place with nothing (its sessions are being closed).
   */
  promiseOwnership(
    place: (message: ServerMessage | null) => void,
    message: ServerMessage,
    leaseMs: number,
  ): void {
    if (this.#gate === undefined) {
      place(message);
      return;
    }
    this.#gate.promise(leaseMs, () => place(message), () => place(null));
  }

  /** A grant (or a restored ownership): its audit record, then ACQUIRED in reply order. */
  #granted(event: EventOf<"granted">, port: SessionPort | undefined, carried?: CarriedOver) {
    const peer = event.peer;
    const record: AuditRecord = event.restored
      ? reclaimRecord(peer, event.name, event.token, "owned", carried, this.#ownership.term)
      : {
        event: "acquire",
        lock: event.name,
        token: event.token,
        identity: peer.identity,
        remote_addr: peer.remoteAddr,
        session: peer.sessionId,
        client_name: peer.clientName,
        waited_ms: Math.round(event.waitedMs),
        ...kindFields(event),
        ...(event.value === null ? {} : valueDigest(event.value)),
      };
    const reply: Acquired = {
      type: "acquired",
      requestId: event.requestId,
      name: event.name,
      token: event.token,
      leaseMs: event.leaseMs,
    };
    if (speaksV2(port)) this.#addOwnedFields(reply, peer, event);
    this.#deliverOwnership(record, port, reply, event.restored);
  }

  /** Version 2's fields of an ACQUIRED, its ticket minted for this term and session. */
  #addOwnedFields(
    reply: Acquired,
    peer: Peer,
    owned: { mode: ClaimMode; limit: number; slot: number; writeGeneration: number },
  ): void {
    reply.ticket = ownedTicket(this.#ownership.tickets, this.#ownership.term, peer, {
      name: reply.name,
      token: reply.token,
      mode: owned.mode,
      limit: owned.limit,
      slot: owned.slot,
      writeGeneration: owned.writeGeneration,
    });
    reply.mode = owned.mode;
    reply.limit = owned.limit;
    reply.slot = owned.slot;
    reply.writeGeneration = owned.writeGeneration;
  }

  /** A claim joined a queue (or was put back at its place): QUEUED; the lock is not idle. */
  #queued(event: EventOf<"queued">, port: SessionPort | undefined): void {
    this.#ownership.busy(event.name);
    if (port === undefined) return;
    const reply: Queued = {
      type: "queued",
      requestId: event.requestId,
      name: event.name,
      position: event.position,
    };
    if (speaksV2(port)) this.#addQueuedFields(reply, event.peer, event);
    port.send(reply);
  }

  /** Version 2's fields of a QUEUED: the order key and its ticket. */
  #addQueuedFields(
    reply: Queued,
    peer: Peer,
    queued: { mode: ClaimMode; orderTerm: number; orderSeq: number },
  ): void {
    reply.orderTerm = queued.orderTerm;
    reply.orderSeq = queued.orderSeq;
    reply.ticket = queuedTicket(this.#ownership.tickets, this.#ownership.term, peer, {
      name: reply.name,
      orderTerm: queued.orderTerm,
      orderSeq: queued.orderSeq,
      mode: queued.mode,
    });
  }

  /** An ownership ended: the gates hear of it, its audit record, then RELEASED or LEASE_EXPIRED. */
  #ended(event: EventOf<"ended">, port: SessionPort | undefined): void {
    const peer = event.peer;
    this.#ownership.ended(
      event.name,
      event.token,
      isGracefulEnd(event.reason),
      event.slot,
      event.mode === "shared",
      event.delayedUntilMs,
    );
    this.#ownershipEnded(event.name, event.token);
    const reply: ServerMessage | null = event.releaseRequestId !== 0
      ? { type: "released", requestId: event.releaseRequestId, name: event.name }
      : event.reason === "expired"
      ? errorFrame(
        event.acquireRequestId,
        event.name,
        leaseExpiredError(event.name, event.token),
      )
      : null;
    this.#record(
      {
        event: "release",
        lock: event.name,
        token: event.token,
        identity: peer.identity,
        remote_addr: peer.remoteAddr,
        session: peer.sessionId,
        client_name: peer.clientName,
        reason: event.reason,
        held_ms: Math.round(event.heldMs),
        ...kindFields(event),
      },
      port,
      reply,
    );
    if (event.reason === "expired") {
      logger.info("lease expired", {
        lock: event.name,
        session: peer.sessionId,
        remote_addr: peer.remoteAddr,
        token: event.token,
      });
    }
    if (this.#engine.view.isIdle(event.name)) this.#ownership.idle(event.name);
  }

  /** A holder replaced its value: its record, then VALUE_SET (SET_VALUE is version 2's). */
  #valueChanged(event: EventOf<"value_changed">, port: SessionPort | undefined): void {
    const peer = event.peer;
    this.#record(
      {
        event: "value_set",
        lock: event.name,
        token: event.token,
        identity: peer.identity,
        remote_addr: peer.remoteAddr,
        session: peer.sessionId,
        client_name: peer.clientName,
        ...valueDigest(event.value),
      },
      port,
      { type: "value_set", requestId: event.requestId, name: event.name },
    );
  }

  /**
   * A holder downgraded to shared (DOWNGRADE): its `downgrade` record, then ACQUIRED with the
   * request's id, mode shared and a fresh ticket (a ticket names the mode). A holder that already
   * was shared gets the same ACQUIRED without a record.
   */
  #modeChanged(event: EventOf<"mode_changed">, port: SessionPort | undefined): void {
    const peer = event.peer;
    const claim = this.#engine.view.sessionClaim(peer.sessionId, event.name);
    let reply: Acquired | null = null;
    if (claim !== undefined && claim.state === "owned" && speaksV2(port)) {
      reply = {
        type: "acquired",
        requestId: event.requestId,
        name: event.name,
        token: claim.token,
        leaseMs: claim.leaseMs,
      };
      this.#addOwnedFields(reply, peer, claim);
    }
    if (!event.changed) {
      if (reply !== null) port?.send(reply);
      return;
    }
    this.#record(
      {
        event: "downgrade",
        lock: event.name,
        token: event.token,
        identity: peer.identity,
        remote_addr: peer.remoteAddr,
        session: peer.sessionId,
        client_name: peer.clientName,
        write_generation: event.writeGeneration,
      },
      port,
      reply,
    );
  }

  /** A wait ended without a grant: timed out, or cancelled by a RELEASE. */
  #waitEnded(event: EventOf<"wait_ended">, port: SessionPort | undefined): void {
    if (event.cause === "timeout") {
      port?.send(
        errorFrame(event.requestId, event.name, waitTimeoutError(event.name, event.waitedMs)),
      );
    } else if (event.cause === "cancelled") {
      port?.send(errorFrame(event.requestId, event.name, cancelledError(event.name)));
      port?.send({ type: "released", requestId: event.releaseRequestId, name: event.name });
    }
    if (this.#engine.view.isIdle(event.name)) this.#ownership.idle(event.name);
  }

  /** A refused request: its error, and a limit reached counted and logged. */
  #rejected(event: EventOf<"rejected">, port: SessionPort | undefined): void {
    port?.send(
      errorFrame(event.requestId, event.name, rejectionError(event.name, event.rejection)),
    );
    if (event.rejection.reason === "limit_exceeded") {
      this.#counters.limitRefusals[event.rejection.limit]++;
      logger.warn("limit reached", {
        session: event.peer.sessionId,
        remote_addr: event.peer.remoteAddr,
        lock: event.name,
        limit: event.rejection.limit,
      });
    }
  }

  /** A session ended: out of the registry, and its final frame (if any) behind the rest. */
  #sessionClosed(
    event: EventOf<"session_closed">,
    port: SessionPort | undefined,
    closing: Closing | undefined,
  ): void {
    const peer = event.peer;
    this.#sessions.remove(peer.sessionId);
    this.#sessionEnded(peer.sessionId);
    if (event.cause === "io_timeout") {
      logger.info("session timed out", {
        session: peer.sessionId,
        remote_addr: peer.remoteAddr,
      });
    }
    const finalError = closing?.sessionId === peer.sessionId && closing.finalError !== null
      ? closing.finalError
      : sessionClosedError(event.cause, event.name, this.#engine.ioTimeoutMs);
    port?.terminate(finalError === null ? null : errorFrame(0, event.name, finalError));
  }

  /**
   * A claim moved to this session (a same-term RESUME): its `reclaim` record, then the answer to
   * its RECLAIM: ACQUIRED with its token (a promise of its renewed lease, through both gates)
   * or QUEUED with its place.
   */
  #claimMoved(event: EventOf<"claim_moved">, port: SessionPort | undefined, carried?: CarriedOver) {
    const claim = this.#engine.view.sessionClaim(event.peer.sessionId, event.name);
    if (claim === undefined) return; // cannot happen: the move was this step's
    const from = {
      prevSessionId: event.fromSessionId,
      prevTerm: carried?.prevTerm ?? this.#ownership.term,
    };
    const owned = claim.state === "owned";
    const record = reclaimRecord(
      event.peer,
      event.name,
      owned ? claim.token : null,
      claim.state,
      from,
      this.#ownership.term,
    );
    if (!owned) {
      this.#audit.append(record);
      const reply: Queued = {
        type: "queued",
        requestId: event.requestId,
        name: event.name,
        position: claim.position,
      };
      if (speaksV2(port)) this.#addQueuedFields(reply, event.peer, claim);
      port?.send(reply);
      return;
    }
    const reply: Acquired = {
      type: "acquired",
      requestId: event.requestId,
      name: event.name,
      token: claim.token,
      leaseMs: claim.leaseMs,
    };
    if (speaksV2(port)) this.#addOwnedFields(reply, event.peer, claim);
    this.#deliverOwnership(record, port, reply, true);
  }

  /**
   * Writes the audit record of an ownership about to be told, then sends its ACQUIRED once the
   * record is written, the ownership gate's write (if any) committed and the leadership gate
   * lets the promise leave. A write that never commits drops the ACQUIRED (its place is filled
   * with nothing).
   */
  #deliverOwnership(
    record: AuditRecord,
    port: SessionPort | undefined,
    reply: Acquired,
    restored: boolean,
  ): void {
    if (port === undefined) {
      this.#audit.append(record);
      return;
    }
    const place = port.hold();
    const commit = this.#ownership.beforeDeliver(reply.name, restored);
    if (commit === null) {
      this.#audit.append(record, () => this.promiseOwnership(place, reply, reply.leaseMs));
      return;
    }
    // Handled at once: a write that fails before the audit record is written is no unhandled
    // rejection.
    const committed = commit.then(() => true, () => false);
    this.#audit.append(record, () => {
      committed.then((ok) => {
        if (ok) this.promiseOwnership(place, reply, reply.leaseMs);
        else place(null);
      });
    });
  }

  /**
   * Writes an audit record; the reply that depends on it (or, for `null`, the session's
   * later frames) waits for the write.
   */
  #record(record: AuditRecord, port: SessionPort | undefined, reply: ServerMessage | null): void {
    if (port === undefined) {
      this.#audit.append(record);
      return;
    }
    const place = port.hold();
    this.#audit.append(record, () => place(reply));
  }
}

/** The `reclaim` record of a claim carried over to `peer`'s session. */
function reclaimRecord(
  peer: Peer,
  name: string,
  token: number | null,
  claim: "owned" | "queued",
  carried: CarriedOver | undefined,
  term: number,
): AuditRecord {
  return {
    event: "reclaim",
    lock: name,
    token,
    identity: peer.identity,
    remote_addr: peer.remoteAddr,
    session: peer.sessionId,
    client_name: peer.clientName,
    claim,
    prev_session: carried?.prevSessionId ?? 0,
    prev_term: carried?.prevTerm ?? term,
  };
}

/**
 * The kind fields of an `acquire` or `release` record: only for shared and semaphore locks, so
 * the records of plain exclusive locks stay as they were before kinds existed.
 */
function kindFields(
  event: { kind: LockKind; limit: number; mode: ClaimMode; slot: number },
): { kind?: string; limit?: number; mode?: string; slot?: number } {
  if (event.kind === "exclusive") return {};
  return { kind: event.kind, limit: event.limit, mode: event.mode, slot: event.slot };
}
