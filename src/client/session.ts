/**
 * What the client keeps per connection ({@link Session}), per acquire still waiting
 * ({@link PendingAcquire}) and per lost version-2 connection whose claims the next connection
 * carries over ({@link Carry}). Plain records; client.ts makes every change.
 *
 * @module
 */

import type { Timer } from "../clock.ts";
import { EMPTY_TICKET, type Reclaim } from "../wire/messages.ts";
import type { ClaimKind } from "./claim_kind.ts";
import type { Connection } from "./connection.ts";
import type { Lock, LockHandle } from "./lock_handle.ts";
import { ReplyLedger } from "./reply_ledger.ts";

/**
 * An ACQUIRE the caller still waits for. Legal transitions: `unsent` (no connection) ↔ `sent`
 * (a reconnect puts a sent claim back to `unsent`); `sent` → `carried` (its version-2
 * connection ended and it has a ticket: the next connection reclaims its place) → `sent` (its
 * queued RECLAIM went out) or `unsent` (given up: it joins the tail); `sent` → `abandoned` (the
 * caller gave up: wait bound, abort; a grant that still arrives is released at once). Settled
 * acquires leave the client's maps.
 */
export interface PendingAcquire {
  readonly name: string;
  readonly requestedLeaseMs: number;
  /** Client-clock end of the wait; null = no client-side bound (forever, or a try-lock). */
  readonly waitEndMs: number | null;
  /** waitMs for the wire: WAIT_FOREVER, 0 (try-lock) or the bound. */
  readonly waitMs: number;
  /** Acquired with `suspend: true` (see Lock.suspended). */
  readonly suspend: boolean;
  /**
   * What it asks for (protocol version 2): mode, limit, the holder's value. Replaced without its
   * value when it is carried over to a leader that takes shorter values (claims.ts `toReclaim`).
   */
  kind: ClaimKind;
  state: "unsent" | "sent" | "carried" | "abandoned";
  requestId: number;
  sentAtMs: number;
  /** Its place in the queue as a new leader checks it: the last QUEUED's ticket and order. */
  ticket: Uint8Array;
  /** The session id of the connection that ticket came on. */
  ticketSessionId: number;
  orderTerm: number;
  orderSeq: number;
  /** While it is being carried over: the lost connection's claims it belongs to. */
  carry: Carry | null;
  readonly resolve: (lock: Lock) => void;
  readonly reject: (error: unknown) => void;
  readonly signal?: AbortSignal;
  onAbort?: () => void;
  waitTimer?: Timer;
}

/** Forgets a waiting claim's place in the queue: it joins the tail next time. */
export function forgetTicket(pending: PendingAcquire): void {
  pending.ticket = EMPTY_TICKET;
  pending.ticketSessionId = 0;
  pending.orderTerm = 0;
  pending.orderSeq = 0;
}

/** A RELEASE whose caller waits for its answer. */
export interface PendingRelease {
  readonly handle: LockHandle;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * The claims of one lost version-2 connection that the next connection reclaims (RESUME, then a
 * RECLAIM each), until each is confirmed, void or given up, or `windowEndMs` passes (the lost
 * connection's WELCOME `reclaimWindowMs` after the loss).
 */
export interface Carry {
  readonly term: number;
  readonly sessionId: number;
  readonly lostAtMs: number;
  readonly windowEndMs: number;
  /** The lost connection when the client gave it up itself (silent): kept open until RESUMED. */
  kept: Connection | null;
  readonly locks: LockHandle[];
  readonly queued: PendingAcquire[];
  timer: Timer | null;
  /** The window has passed: a suspended lock of it is lost (`failover`). */
  windowOver: boolean;
}

/**
 * Which carry a RESUME names (one RESUME names one earlier session): the one most claims were
 * made on, an owned lock counting double (losing it costs more than a place in a queue), the
 * newest on a tie.
 */
export function chooseCarry(carries: readonly Carry[]): Carry | null {
  let best: Carry | null = null;
  let bestKey: number[] = [];
  for (const carry of carries) {
    const key = [2 * carry.locks.length + carry.queued.length, carry.term, carry.lostAtMs];
    if (best === null || compareKeys(key, bestKey) > 0) {
      best = carry;
      bestKey = key;
    }
  }
  return best;
}

function compareKeys(a: number[], b: number[]): number {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}

/** What the client knows about its current connection; a reconnect starts a new one. */
export class Session {
  readonly connection: Connection;
  /** The node it is connected to (`host:port`). */
  readonly addr: string;
  readonly ioTimeoutMs: number;
  /** Every request of this connection that may still get an answer: replies are checked. */
  readonly ledger: ReplyLedger;
  /** The server broke the protocol on this connection (it is being closed). */
  violated = false;
  /** Send time of the newest HEARTBEAT whose HEARTBEAT_ACK has arrived. */
  lastAckedHeartbeatSendMs = -Infinity;
  /** Unanswered heartbeats, request id → send time, oldest first. */
  readonly heartbeats = new Map<number, number>();
  lastHeartbeatSentMs: number;
  lastFrameAtMs: number;
  heartbeatTimer: Timer | null = null;
  heartbeatDueMs = Infinity;
  silenceTimer: Timer | null = null;
  /** The RESUME waiting for its RESUMED (0: none). */
  resumeId = 0;

  constructor(connection: Connection, addr: string, nowMs: number) {
    this.connection = connection;
    this.addr = addr;
    this.ledger = new ReplyLedger(connection.welcome);
    this.ioTimeoutMs = connection.welcome.ioTimeoutMs;
    this.lastHeartbeatSentMs = nowMs;
    this.lastFrameAtMs = nowMs;
  }

  /** The protocol version of the session. */
  get version(): number {
    return this.connection.welcome.version;
  }

  /** A version-2 session whose server takes reclaims (WELCOME's `reclaimWindowMs` > 0). */
  get takesReclaims(): boolean {
    const welcome = this.connection.welcome;
    return welcome.version === 2 && (welcome.reclaimWindowMs ?? 0) > 0;
  }

  cancelTimers(): void {
    this.heartbeatTimer?.cancel();
    this.heartbeatTimer = null;
    this.heartbeatDueMs = Infinity;
    this.silenceTimer?.cancel();
    this.silenceTimer = null;
  }
}

/** The RECLAIM of an owned lock: its kind and slot, and the value the old leader had. */
export function ownedReclaim(handle: LockHandle, requestId: number): Reclaim {
  return {
    type: "reclaim",
    requestId,
    kind: "owned",
    token: handle.token,
    orderTerm: 0,
    orderSeq: 0,
    leaseMs: handle.leaseMs,
    waitMs: 0,
    ticket: handle.ticket,
    mode: handle.mode,
    limit: handle.limit,
    slot: handle.slot,
    name: handle.name,
    value: handle.value,
    writeGeneration: handle.writeGeneration,
  };
}

/** The RECLAIM of a waiting acquire with its place in the queue; `waitMs` what is left. */
export function queuedReclaim(pending: PendingAcquire, waitMs: number): Reclaim {
  return {
    type: "reclaim",
    requestId: pending.requestId,
    kind: "queued",
    token: 0,
    orderTerm: pending.orderTerm,
    orderSeq: pending.orderSeq,
    leaseMs: pending.requestedLeaseMs,
    waitMs,
    ticket: pending.ticket,
    mode: pending.kind.mode,
    limit: pending.kind.limit,
    slot: 0,
    name: pending.name,
    value: pending.kind.value,
  };
}
