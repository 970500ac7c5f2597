/**
 * Every claim of a client and where it stands: acquires waiting, locks owned on the current
 * connection, owned RECLAIMs in flight, releases in progress, and the claims of lost version-2
 * connections that the next connection carries over ({@link Carry}); with the local lease
 * deadlines of the locks and what happens when one passes. client.ts drives it; what needs the
 * network goes through {@link ClaimsHost}.
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import {
  type Acquired,
  EMPTY_TICKET,
  EMPTY_VALUE,
  type Queued,
  type Welcome,
} from "../wire/messages.ts";
import type { Connection } from "./connection.ts";
import { WIRE_CODES } from "../wire/codes.ts";
import type { LostReason } from "./errors.ts";
import { LockHandle } from "./lock_handle.ts";
import { type Carry, forgetTicket, type PendingAcquire, type Session } from "./session.ts";
import { callBack } from "./options.ts";
import { effectiveLeaseMs } from "./timing.ts";

/** RESUME's `claims` is a u16: at most this many RECLAIMs follow one RESUME. */
const RECLAIMS_PER_RESUME_MAX = 0xffff;

/** What the claims need from the client: the clock and the current connection. */
export interface ClaimsHost {
  readonly scheduler: Scheduler;
  /** Whether a connection is open (after its WELCOME). */
  connected(): boolean;
  /** Whether the client is closed. */
  closed(): boolean;
  /** Sends (or queues, without a connection) a waiting acquire as a new ACQUIRE. */
  sendAcquire(pending: PendingAcquire): void;
  /** Sends RELEASE on the current connection; returns its request id (0: none sent). */
  sendRelease(claim: { name: string; token: number }, acquireRequestId: number): number;
  /** Closes a connection given up or done with (GOODBYE, then the socket). */
  retire(connection: Connection): void;
  /** The heartbeat cadence may have changed. */
  armHeartbeat(): void;
  /** ConnectOptions.onValueDropped: a claim carried over without its value. */
  readonly onValueDropped?: (name: string, valueBytes: number, valueBytesMax: number) => void;
}

/** The claims of one client. */
export class Claims {
  /** Sent ACQUIREs and queued RECLAIMs of the current session by request id (abandoned too). */
  readonly pending = new Map<number, PendingAcquire>();
  /** ACQUIREs waiting for a connection (and, while RECLAIMs go out, for them). */
  readonly unsent = new Set<PendingAcquire>();
  /** Owned locks of the current session by the request id of their ACQUIRE or RECLAIM. */
  readonly owned = new Map<number, LockHandle>();
  /** Owned RECLAIMs of the current session waiting for their answer, by request id. */
  readonly reclaims = new Map<number, LockHandle>();
  /** RELEASEs of the current session whose answer a release() waits for, by request id. */
  readonly releases = new Map<number, LockHandle>();
  /** What each release() in progress resolves or rejects. */
  readonly releaseWaiters = new Map<LockHandle, { resolve(): void; reject(e: unknown): void }>();
  /** Claims of lost version-2 connections, oldest first, for the next connection to reclaim. */
  readonly carries: Carry[] = [];
  /** The carry each lock being carried over belongs to. */
  readonly carryOf = new Map<LockHandle, Carry>();
  /** One timer at the earliest local deadline of every lock whose deadline decides something. */
  #deadlineTimer: Timer | null = null;
  #deadlineDueMs = Infinity;
  readonly #host: ClaimsHost;

  constructor(host: ClaimsHost) {
    this.#host = host;
  }

  /** Stops the deadline timer (the client is closed). */
  stop(): void {
    this.#deadlineTimer?.cancel();
    this.#deadlineTimer = null;
  }

  /** The owned locks of a session that ended: lost, or carried over in `carry`. */
  carryOwnerships(closeCode: number | null, carry: Carry | null): void {
    const reason: LostReason = closeCode === WIRE_CODES.CLOSED_BY_ADMIN.code
      ? "force"
      : closeCode === WIRE_CODES.IO_TIMEOUT.code
      ? "io_timeout"
      : closeCode === WIRE_CODES.NOT_LEADER.code
      ? "failover"
      : "disconnected";
    // Owned RECLAIMs on their way stay with their own carry (sent again next time); a lock
    // released meanwhile is done.
    for (const handle of this.reclaims.values()) {
      handle.reclaimRequestId = 0;
      if (handle.releasing) this.releaseDone(handle);
    }
    this.reclaims.clear();
    // Locks being released are done (the session is gone, and so is the ownership); the
    // others are lost, or carried over while their deadlines run.
    const nowMs = this.#host.scheduler.monotonicMs();
    for (const handle of [...this.owned.values()]) {
      if (carry !== null && handle.live && handle.ticket.length > 0) {
        this.owned.delete(handle.requestId);
        if (handle.phase !== "suspended") handle.phase = "reclaiming";
        this.carryOf.set(handle, carry);
        carry.locks.push(handle);
        if (nowMs >= handle.deadlineMs) this.deadlinePassed(handle);
      } else {
        this.ownershipOver(handle, reason);
      }
    }
    this.owned.clear();
    for (const handle of this.releases.values()) this.releaseDone(handle);
    this.releases.clear();
  }

  /** A carry with claims waits for the next connection until its window ends. */
  keepCarry(carry: Carry): void {
    if (carry.locks.length + carry.queued.length === 0) {
      if (carry.kept !== null) this.#host.retire(carry.kept);
      carry.kept = null;
      return;
    }
    this.carries.push(carry);
    carry.timer = this.#host.scheduler.setTimer(
      () => this.carryWindowEnded(carry),
      Math.max(0, carry.windowEndMs - this.#host.scheduler.monotonicMs()),
    );
  }

  /** A claim leaves its carry (confirmed, void, released, abandoned); an empty carry is done. */
  outOfCarry(claim: LockHandle | PendingAcquire): void {
    let carry: Carry | null | undefined;
    if (claim instanceof LockHandle) {
      carry = this.carryOf.get(claim);
      this.carryOf.delete(claim);
      if (carry !== undefined) removeFrom(carry.locks, claim);
    } else {
      carry = claim.carry;
      claim.carry = null;
      if (carry !== null) removeFrom(carry.queued, claim);
    }
    if (carry == null || carry.locks.length + carry.queued.length > 0) return;
    if (!removeFrom(this.carries, carry)) return;
    carry.timer?.cancel();
    carry.timer = null;
    if (carry.kept !== null) this.#host.retire(carry.kept);
    carry.kept = null;
  }

  /**
   * The lost connection's reclaim window has passed: its suspended locks are lost (`failover`)
   * and its kept socket is closed. Held locks still being carried over go on until their
   * deadlines (the new leader holds their locks back at least that long), waiting claims until
   * the server says where they stand.
   */
  carryWindowEnded(carry: Carry): void {
    carry.timer = null;
    carry.windowOver = true;
    for (const handle of [...carry.locks]) {
      if (handle.phase === "suspended") this.carriedLost(handle, "failover");
    }
    if (carry.kept !== null) this.#host.retire(carry.kept);
    carry.kept = null;
    this.armDeadline();
  }

  /**
   * Nothing more of `carry` is reclaimed: its locks are lost with `reason` (one whose RECLAIM is
   * on its way is handed back if it is kept), its waiting claims rejoin the tail.
   */
  giveUpCarry(carry: Carry, reason: LostReason): void {
    removeFrom(this.carries, carry);
    carry.timer?.cancel();
    carry.timer = null;
    for (const handle of [...carry.locks]) this.carriedLost(handle, reason);
    for (const pending of [...carry.queued]) this.uncarry(pending);
    if (carry.kept !== null) this.#host.retire(carry.kept);
    carry.kept = null;
  }

  /** A lock being carried over is lost (or, released meanwhile, done). */
  carriedLost(handle: LockHandle, reason: LostReason, cause?: unknown): void {
    this.outOfCarry(handle);
    if (handle.releasing) this.releaseDone(handle);
    else handle.markLost(reason, cause);
  }

  /**
   * A waiting claim leaves its carry: it joins the tail with a new ACQUIRE (unless its queued
   * RECLAIM is on its way: then it is in that queue already).
   */
  uncarry(pending: PendingAcquire): void {
    this.outOfCarry(pending);
    forgetTicket(pending);
    if (pending.state !== "carried") return;
    pending.state = "unsent";
    this.#host.sendAcquire(pending);
  }

  /** The ownership being released is over: release() resolves (or rejects with `error`). */
  releaseDone(handle: LockHandle, error?: unknown): void {
    handle.markReleased();
    const waiter = this.releaseWaiters.get(handle);
    this.releaseWaiters.delete(handle);
    if (error === undefined) waiter?.resolve();
    else waiter?.reject(error);
  }

  /**
   * The ownership ended for this client: a held lock reports lost with `reason`, a lock being
   * released is done (release() rejects with `error` when given: NOT_OWNER).
   */
  ownershipOver(handle: LockHandle, reason: LostReason, error?: unknown): void {
    if (this.owned.get(handle.requestId) === handle) this.owned.delete(handle.requestId);
    for (const [requestId, releasing] of this.releases) {
      if (releasing === handle) this.releases.delete(requestId);
    }
    if (handle.releasing) this.releaseDone(handle, error);
    else handle.markLost(reason);
  }

  /**
   * Whether a lock's local deadline still decides something: held on the current connection,
   * or being carried over (not suspended: its deadline has passed already).
   */
  tracked(handle: LockHandle): boolean {
    if (!handle.live && !handle.releasing) return false;
    if (handle.phase === "suspended") return false;
    if (handle.phase === "reclaiming") {
      return this.carryOf.has(handle) || handle.reclaimRequestId !== 0;
    }
    return this.#host.connected() && this.owned.get(handle.requestId) === handle;
  }

  /** Every lock whose deadline the client watches. */
  *watched(): Iterable<LockHandle> {
    yield* this.owned.values();
    yield* this.reclaims.values();
    for (const carry of this.carries) yield* carry.locks;
  }

  /**
   * Reading `lost` or `state`: the ownership ends now if its local deadline has passed, whether
   * or not the deadline timer has run (a blocked event loop, a paused process).
   */
  checkDeadline(handle: LockHandle): void {
    if (!this.tracked(handle)) return;
    if (this.#host.scheduler.monotonicMs() < handle.deadlineMs) return;
    this.deadlinePassed(handle);
    this.armDeadline();
    this.#host.armHeartbeat();
  }

  /** Handles every lock whose local deadline has passed. */
  expireOverdue(nowMs: number): void {
    for (const handle of [...this.watched()]) {
      if (this.tracked(handle) && nowMs >= handle.deadlineMs) this.deadlinePassed(handle);
    }
  }

  /**
   * The local lease deadline passed with no newer confirmation: the lock is lost, or, acquired
   * with `suspend`, suspended (on its connection, or while it is being carried over).
   */
  deadlinePassed(handle: LockHandle): void {
    if (handle.phase === "reclaiming") {
      const carry = this.carryOf.get(handle);
      if (handle.suspend && handle.live && !(carry?.windowOver ?? false)) {
        handle.setSuspended(true);
      } else {
        this.carriedLost(handle, handle.suspend ? "failover" : "lease_unconfirmed");
      }
      return;
    }
    const releasing = handle.releasing;
    if (!releasing && handle.suspend) {
      // Suspended, not lost: an acknowledged heartbeat (no LEASE_EXPIRED before it) or a kept
      // reclaim confirms it again.
      handle.setSuspended(true);
      return;
    }
    this.ownershipOver(handle, "lease_unconfirmed");
    // Best effort: if the server still counts it as ours, let the next waiter have it.
    if (!releasing) this.#host.sendRelease(handle, handle.requestId);
  }

  /** One timer at the earliest local deadline of the locks the client watches. */
  armDeadline(): void {
    let dueMs = Infinity;
    for (const handle of this.watched()) {
      if (this.tracked(handle)) dueMs = Math.min(dueMs, handle.deadlineMs);
    }
    if (dueMs === this.#deadlineDueMs || this.#host.closed()) return;
    this.#deadlineTimer?.cancel();
    this.#deadlineTimer = null;
    this.#deadlineDueMs = dueMs;
    if (dueMs === Infinity) return;
    this.#deadlineTimer = this.#host.scheduler.setTimer(() => {
      this.#deadlineTimer = null;
      this.#deadlineDueMs = Infinity;
      this.expireOverdue(this.#host.scheduler.monotonicMs());
      this.armDeadline();
      this.#host.armHeartbeat();
    }, dueMs - this.#host.scheduler.monotonicMs());
  }

  /**
   * Whether an owned RECLAIM of `name` is on its way on this session for a lock let go of
   * meanwhile (released while it was carried over, or lost): its answer hands the lock back with
   * a RELEASE, and until then the session owns it on the server, so an ACQUIRE of that name
   * would get DUPLICATE_CLAIM. Such an ACQUIRE waits (in `unsent`) until the RECLAIM is answered.
   */
  handingBack(name: string): boolean {
    for (const handle of this.reclaims.values()) {
      if (handle.name === name && !handle.live) return true;
    }
    return false;
  }

  /** An owned RECLAIM was answered: the ACQUIREs held back for it go out (see handingBack). */
  sendHeldBack(): void {
    for (const pending of [...this.unsent]) {
      if (this.handingBack(pending.name)) continue;
      this.unsent.delete(pending);
      this.#host.sendAcquire(pending); // back in `unsent` while no session takes it
    }
  }

  /** Leases the session owns or waits for (each sets an upper bound on the heartbeat period). */
  *leasesInPlay(welcome: Welcome): Iterable<number> {
    for (const handle of this.owned.values()) yield handle.leaseMs;
    for (const handle of this.reclaims.values()) yield handle.leaseMs;
    for (const pending of this.pending.values()) {
      if (pending.state === "abandoned") continue;
      yield effectiveLeaseMs(pending.requestedLeaseMs, welcome);
    }
  }

  /** The waiting acquires of a session that ended: carried over in `carry`, or to the tail. */
  carryWaits(waiting: PendingAcquire[], sessionId: number, carry: Carry | null): void {
    for (const pending of waiting) {
      pending.requestId = 0;
      if (pending.carry !== null) {
        pending.state = "carried"; // a queued RECLAIM of an older carry: sent again with it
      } else if (
        carry !== null && pending.ticket.length > 0 && pending.ticketSessionId === sessionId
      ) {
        pending.state = "carried";
        pending.carry = carry;
        carry.queued.push(pending);
      } else {
        // Waiting claims rejoin the tail of their queues on the next session.
        forgetTicket(pending);
        pending.state = "unsent";
        this.unsent.add(pending);
      }
    }
  }

  /**
   * What of `carry` one RESUME takes (RESUME's `claims` is a u16): the locks and waiting claims
   * without a RECLAIM on its way; the rest is given up. Both empty: the carry is given up. A
   * value longer than the new leader takes (`welcome`) is left behind (see the loop).
   */
  toReclaim(carry: Carry, welcome: Welcome): { locks: LockHandle[]; queued: PendingAcquire[] } {
    let locks = carry.locks.filter((handle) => handle.reclaimRequestId === 0);
    let queued = carry.queued.filter((pending) => pending.state === "carried");
    for (const handle of locks.slice(RECLAIMS_PER_RESUME_MAX)) this.carriedLost(handle, "failover");
    locks = locks.slice(0, RECLAIMS_PER_RESUME_MAX);
    const room = RECLAIMS_PER_RESUME_MAX - locks.length;
    for (const pending of queued.slice(room)) this.uncarry(pending);
    queued = queued.slice(0, room);
    if (locks.length + queued.length === 0) this.giveUpCarry(carry, "failover");
    // Such a value would get the RECLAIM refused (INVALID_ARGUMENT) and the lock lost for its
    // value: the claim goes without it, and the application hears of it.
    const valueBytesMax = welcome.valueBytesMax ?? 0;
    for (const claim of [...locks, ...queued]) {
      const value = claim instanceof LockHandle ? claim.value : claim.kind.value;
      if (value.length <= valueBytesMax) continue;
      callBack(this.#host.onValueDropped, claim.name, value.length, valueBytesMax);
      if (claim instanceof LockHandle) claim.value = EMPTY_VALUE;
      else claim.kind = { ...claim.kind, value: EMPTY_VALUE };
    }
    return { locks, queued };
  }

  /**
   * A HEARTBEAT_ACK arrived: a suspended lock whose deadline it moved past now is held again. No
   * LEASE_EXPIRED came before the ACK (reply order): the lease ran on without a break, and this
   * heartbeat renewed it in time.
   */
  confirmSuspended(): void {
    const nowMs = this.#host.scheduler.monotonicMs();
    for (const handle of this.owned.values()) {
      if (handle.phase === "suspended" && handle.live && nowMs < handle.deadlineMs) {
        handle.setSuspended(false);
      }
    }
  }

  /** close(): everything still waiting is rejected (`reject`); owned locks are lost. */
  endAll(reason: LostReason, reject: (pending: PendingAcquire) => void): void {
    for (const pending of [...this.pending.values(), ...this.unsent]) reject(pending);
    this.pending.clear();
    this.unsent.clear();
    for (const handle of [...this.reclaims.values()]) this.carriedLost(handle, reason);
    this.reclaims.clear();
    for (const handle of [...this.owned.values()]) this.ownershipOver(handle, reason);
    this.owned.clear();
    for (const handle of [...this.releaseWaiters.keys()]) this.releaseDone(handle);
    this.releases.clear();
  }

  /**
   * release(): sends RELEASE; the lock stays owned (heartbeats, deadline) until the answer
   * comes. A lock whose RECLAIM is on its way is released once that is answered (kept: then a
   * RELEASE; void: done); one waiting to be carried over is done at once, and what its RECLAIM
   * confirms is handed back (a suspended one is not reclaimed at all).
   */
  release(handle: LockHandle): Promise<void> {
    const done = new Promise<void>((resolve, reject) => {
      this.releaseWaiters.set(handle, { resolve, reject });
    });
    const connected = this.#host.connected();
    if (handle.reclaimRequestId !== 0 && connected) return done;
    if (connected && this.owned.get(handle.requestId) === handle) {
      const requestId = this.#host.sendRelease(handle, handle.requestId);
      this.releases.set(requestId, handle);
      return done;
    }
    if (handle.phase === "suspended") this.outOfCarry(handle);
    this.releaseDone(handle);
    return done;
  }

  /**
   * ACQUIRED answering an owned RECLAIM (same token, checked by the ledger): the lock is
   * confirmed on this connection, its deadline counted from the RECLAIM's send time.
   */
  reclaimKept(session: Session, message: Acquired): void {
    this.#reclaimKept(session, message);
    this.sendHeldBack(); // after the RELEASE that hands a lock let go of back
  }

  #reclaimKept(session: Session, message: Acquired): void {
    const handle = this.reclaims.get(message.requestId)!;
    this.reclaims.delete(message.requestId);
    handle.reclaimRequestId = 0;
    this.outOfCarry(handle);
    if (!handle.live) {
      // Reported lost meanwhile (never revived), or released while carried over: hand it back.
      const requestId = this.#host.sendRelease(message, message.requestId);
      if (handle.releasing && this.releaseWaiters.has(handle)) {
        // release() waits for this: it resolves on RELEASED (or at the deadline, as any release).
        handle.requestId = message.requestId;
        handle.confirmer = session;
        handle.confirmedSendMs = handle.reclaimSentAtMs;
        handle.leaseMs = message.leaseMs;
        handle.phase = "confirmed";
        this.owned.set(message.requestId, handle);
        this.releases.set(requestId, handle);
      }
      return;
    }
    handle.requestId = message.requestId;
    handle.confirmer = session;
    handle.confirmedSendMs = handle.reclaimSentAtMs;
    handle.leaseMs = message.leaseMs;
    handle.ticket = session.takesReclaims ? message.ticket ?? EMPTY_TICKET : EMPTY_TICKET;
    this.owned.set(message.requestId, handle);
    const wasSuspended = handle.phase === "suspended";
    if (this.#host.scheduler.monotonicMs() < handle.deadlineMs) {
      if (wasSuspended) handle.setSuspended(false);
      else handle.phase = "confirmed";
    } else if (handle.suspend) {
      // Kept, but confirmed too late to count as held: suspended until a heartbeat confirms it.
      handle.setSuspended(true);
    } else {
      handle.phase = "confirmed";
      this.ownershipOver(handle, "lease_unconfirmed");
      this.#host.sendRelease(handle, handle.requestId);
    }
  }

  /** QUEUED: its ticket and order fields are what a new leader needs to keep the claim's place. */
  queued(session: Session, message: Queued): void {
    const pending = this.pending.get(message.requestId);
    if (pending === undefined || pending.state === "abandoned") return;
    this.outOfCarry(pending);
    const ticket = message.ticket ?? EMPTY_TICKET;
    if (ticket.length > 0 && session.takesReclaims) {
      pending.ticket = ticket;
      pending.ticketSessionId = session.connection.welcome.sessionId;
      pending.orderTerm = message.orderTerm ?? 0;
      pending.orderSeq = message.orderSeq ?? 0;
    } else {
      forgetTicket(pending);
    }
  }
}

/** Removes `item` from `list`; false when it was not there. */
function removeFrom<T>(list: T[], item: T): boolean {
  const i = list.indexOf(item);
  if (i === -1) return false;
  list.splice(i, 1);
  return true;
}
