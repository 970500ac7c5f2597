/**
 * The one command surface over the lock engine. Every state change of the
 * server goes through here: sessions (the protocol layer), operators (the
 * admin API), the deadline timer, the audit log's health, shutdown and the
 * tests. For each command the service reads the clock once, calls the pure
 * engine with that instant, writes the audit records, hands the frames to
 * the sessions in the order it decided them, and re-arms the deadline timer.
 *
 * Two seams for the replication work are marked "Cluster seam" below: where a
 * change must be committed before anyone is told about it, and where a frame
 * promises ownership (a leadership check belongs right before it).
 *
 * Cluster mode also checks leadership before every decision (`#mayDecide`): a
 * node that cannot prove it leads right now (paused, or frozen past its lease
 * and just woken) grants, hands off, expires and ends nothing, and audits
 * nothing. Its deadline timer, the requests of its sessions (held in their
 * readers, `decisionsHeld`), connections that ended and lifted grant blocks
 * wait until the leader re-proves its lease (`decisionsResumed`), or are
 * dropped when it steps down (`closeAllForFailover` ends every ownership as
 * `failover`).
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import type { LockEngine } from "../core/engine.ts";
import type { ClaimMode, CloseCause, EngineEvent, Instant, Peer } from "../core/types.ts";
import { FRAME_BYTES_MAX_DEFAULT, TOKEN_RETRY_MS_MAX, TOKEN_RETRY_MS_MIN } from "../limits.ts";
import type { AuditLog } from "../log/audit.ts";
import type { Actor } from "../log/audit_records.ts";
import { log } from "../log/diagnostic.ts";
import type { ServerCounters } from "../counters.ts";
import {
  errorFrame,
  notLeaderError,
  SESSION_ERRORS,
  SHUTTING_DOWN_ERROR,
  type WireError,
} from "./wire_errors.ts";
import type { ServerMessage } from "../wire/messages.ts";
import { type Acl, ALLOW_ALL } from "../security/acl.ts";
import { type LockRules, NO_LOCK_RULES } from "../security/lock_rules.ts";
import { type ClaimOptions, PLAIN_CLAIM } from "./claim_options.ts";
import type { ForceReleaseResult, KickWaiterResult } from "./operator_results.ts";
import { DeadlineTimer } from "./deadline_timer.ts";
import { type CarriedOver, type Closing, EventCarrier } from "./event_carrier.ts";
import type { LeadershipGate, OwnershipGate } from "./leadership_gate.ts";
import { LockReads } from "./lock_reads.ts";
import { type Delays, type ReclaimRequest, Reclaims, type ReclaimStats } from "./reclaims.ts";
import { type SessionPort, SessionRegistry } from "./session_registry.ts";
import { SingleNodeGate } from "./single_node_gate.ts";

const logger = log("protocol");
const serverLogger = log("server");
const adminLogger = log("admin");

export interface LockServiceOptions {
  readonly engine: LockEngine;
  readonly audit: AuditLog;
  readonly scheduler: Scheduler;
  readonly counters: ServerCounters;
  readonly acl?: Acl;
  /** The lock rules (`-lock-rules-file`): kind, limit and lock-delay per name. None by default. */
  readonly lockRules?: LockRules;
  /** Cluster mode: who may promise ownership and act, and when (absent on a single node). */
  readonly gate?: LeadershipGate;
  /**
   * Records and reclaims (the term, tickets, W1–W3): the gate in cluster mode, else a single
   * node's (`SingleNodeGate`); tests give their own.
   */
  readonly ownership?: OwnershipGate;
  /** `-max-frame-bytes`: a LOCK_STATE lists the holders that fit in one frame of it. */
  readonly frameBytesMax?: number;
}

export class LockService {
  readonly #engine: LockEngine;
  readonly #audit: AuditLog;
  readonly #scheduler: Scheduler;
  readonly #counters: ServerCounters;
  readonly #sessions = new SessionRegistry();
  readonly #deadlines: DeadlineTimer;
  readonly #gate: LeadershipGate | undefined;
  readonly #ownership: OwnershipGate;
  readonly #carrier: EventCarrier;
  readonly #reclaims: Reclaims;
  readonly #reads: LockReads;
  #acl: Acl;
  #lockRules: LockRules = NO_LOCK_RULES;
  #tokenRetry: Timer | undefined;
  #tokenRetryDelayMs = TOKEN_RETRY_MS_MIN;
  #inTokenRetry = false;
  #stopped = false;
  /**
   * Cluster mode: work that waits until this node may decide again, in arrival order, by key:
   * `close:<session>` (a connection that ended), `request:<n>` (a request that reached the
   * service while it could not decide), `audit` and `tokens` (a lifted grant block), `leading`.
   * Bounded: one close per session, one request per session (`#deferRequest`), three more.
   */
  readonly #deferred = new Map<string, () => void>();
  #deferredRequests = 0;
  /** Settles when sessions may hand their held requests to the service again. */
  #held: PromiseWithResolvers<void> | null = null;

  constructor(options: LockServiceOptions) {
    this.#engine = options.engine;
    this.#audit = options.audit;
    this.#scheduler = options.scheduler;
    this.#counters = options.counters;
    this.#acl = options.acl ?? ALLOW_ALL;
    this.#gate = options.gate;
    this.#ownership = options.ownership ?? options.gate ??
      new SingleNodeGate(this.#engine.ioTimeoutMs);
    this.#reclaims = new Reclaims({
      engine: this.#engine,
      audit: this.#audit,
      sessions: this.#sessions,
      ownership: this.#ownership,
      acl: () => this.#acl,
      now: () => this.now(),
      apply: (events, carried) => this.#apply(events, undefined, carried),
      closeSession: (sessionId, cause) => this.closeSession(sessionId, cause),
    });
    this.#carrier = new EventCarrier({
      engine: this.#engine,
      audit: this.#audit,
      counters: this.#counters,
      sessions: this.#sessions,
      gate: this.#gate,
      ownership: this.#ownership,
      sessionEnded: (sessionId) => this.#connectionGone(sessionId),
      ownershipEnded: (name, token) => this.#reclaims.ownershipEnded(name, token),
    });
    this.#reads = new LockReads({
      view: this.#engine.view,
      audit: this.#audit,
      counters: this.#counters,
      sessions: this.#sessions,
      acl: () => this.#acl,
      scheduler: this.#scheduler,
      frameBytesMax: options.frameBytesMax ?? FRAME_BYTES_MAX_DEFAULT,
    });
    this.#deadlines = new DeadlineTimer(this.#scheduler, () => this.tick());
    if (options.lockRules !== undefined) this.setLockRules(options.lockRules);
  }

  /** The one reading of the clock an operation uses. */
  now(): Instant {
    return { monoMs: this.#scheduler.monotonicMs(), wallMs: this.#scheduler.wallMs() };
  }

  get acl(): Acl {
    return this.#acl;
  }

  /** Replaces the ACL (SIGHUP); ACQUIREs decided from now on use it. */
  setAcl(acl: Acl): void {
    this.#acl = acl;
  }

  get lockRules(): LockRules {
    return this.#lockRules;
  }

  /**
   * Replaces the lock rules (at start, and on SIGHUP). A lock keeps the kind and limit it has
   * while it has owners or waiters; a lock that gets its first claim from now on takes them from
   * these rules, and an ownership that ends non-gracefully from now on gets their lock-delay. A
   * lock-delay already running keeps its end.
   */
  setLockRules(rules: LockRules): void {
    this.#lockRules = rules;
    this.#engine.setKindRule(rules.lookup);
  }

  // ---- sessions (the protocol layer) ---------------------------------------

  /**
   * Cluster mode: whether a HELLO may open a session now (null), is refused (NOT_LEADER), or
   * must wait for the answer (an election under way). Always null on a single node.
   */
  admit(): WireError | null | Promise<WireError | null> {
    return this.#gate?.admit() ?? null;
  }

  /** A valid HELLO (admitted): registers the session, or says why it is refused. */
  openSession(
    identity: string,
    remoteAddr: string,
    port: SessionPort,
    clientName = "",
  ): Peer | WireError {
    if (this.#engine.isBlocked("shutting_down")) return SHUTTING_DOWN_ERROR;
    const peer = this.#engine.openSession(this.now(), identity, remoteAddr, clientName);
    if (peer === null) {
      this.#counters.limitRefusals.sessions++;
      logger.warn("session limit reached", { remote_addr: remoteAddr });
      return SESSION_ERRORS.sessionLimit();
    }
    this.#sessions.add(peer.sessionId, port);
    // The session's I/O deadline joined the heap.
    this.#deadlines.arm(this.#engine.nextDeadlineMs());
    return peer;
  }

  /** The session sent something (read at `nowMs`, when the caller has read the clock): its I/O deadline moves. */
  touch(sessionId: number, nowMs = this.#scheduler.monotonicMs()): void {
    this.#engine.touch(nowMs, sessionId);
  }

  /** ACQUIRE: the ACL decides first (a denial is audited and changes nothing), then the engine. */
  acquire(
    peer: Peer,
    requestId: number,
    name: string,
    leaseMs: number,
    waitMs: number | null,
    claim: ClaimOptions = PLAIN_CLAIM,
  ): void {
    // The retry closure only where requests may wait (cluster mode): none per request else.
    // During a planned hand-over's records flush (grants blocked) it waits for the session's
    // NOT_LEADER: closing the session here would commit floors that void its reclaims.
    if (this.#gate !== undefined) {
      const retry = () => this.acquire(peer, requestId, name, leaseMs, waitMs, claim);
      if (this.#deferRequest(peer, retry, this.#engine.isBlocked("not_leader"))) return;
    }
    const denied = this.#reads.checkAccess(peer, name, "acquire");
    if (denied !== null) {
      this.#sessions.get(peer.sessionId)?.send(errorFrame(requestId, name, denied));
      return;
    }
    this.#apply(
      this.#engine.acquire(this.now(), {
        sessionId: peer.sessionId,
        requestId,
        name,
        leaseMs,
        waitMs,
        mode: claim.mode,
        limit: claim.limit,
        value: claim.value,
      }),
    );
  }

  /**
   * SET_VALUE: replaces the value of the session's ownership with `token` (audited as
   * `value_set`, then VALUE_SET); a stale token gets NOT_OWNER, a long value INVALID_ARGUMENT.
   */
  setValue(
    peer: Peer,
    requestId: number,
    name: string,
    token: number,
    value: Uint8Array | null,
  ): void {
    if (this.#deferRequest(peer, () => this.setValue(peer, requestId, name, token, value))) return;
    this.#apply(
      this.#engine.setValue(this.now(), {
        sessionId: peer.sessionId,
        requestId,
        name,
        token,
        value,
      }),
    );
  }

  /**
   * Changes the mode of the session's ownership with `token`: `shared` downgrades an exclusive
   * owner in place (audited as `downgrade`; waiting readers at the head are granted beside it),
   * `exclusive` is refused (upgrades deadlock).
   */
  setMode(peer: Peer, requestId: number, name: string, token: number, mode: ClaimMode): void {
    if (this.#deferRequest(peer, () => this.setMode(peer, requestId, name, token, mode))) return;
    this.#apply(
      this.#engine.setMode(this.now(), {
        sessionId: peer.sessionId,
        requestId,
        name,
        token,
        mode,
      }),
    );
  }

  /** Whether the session may read lock `name`: null, or its ACL_DENIED (`LockReads.checkAccess`). */
  checkRead(peer: Peer, name: string): WireError | null {
    return this.#reads.checkAccess(peer, name, "read");
  }

  /** QUERY: the lock's LOCK_STATE without queueing (or INVALID_ARGUMENT, ACL_DENIED). */
  query(peer: Peer, requestId: number, name: string): void {
    if (this.#deferRequest(peer, () => this.query(peer, requestId, name))) return;
    this.#reads.query(peer, requestId, name);
  }

  /** WATCH: snapshots, WATCHING, then the changes of every matching lock (watch_hub.ts). */
  watch(peer: Peer, requestId: number, pattern: string): void {
    if (this.#deferRequest(peer, () => this.watch(peer, requestId, pattern))) return;
    this.#reads.watch(peer, requestId, pattern);
  }

  /** UNWATCH: ends the watch (WATCH_ENDED). */
  unwatch(peer: Peer, requestId: number): void {
    if (this.#deferRequest(peer, () => this.unwatch(peer, requestId))) return;
    this.#reads.watches.unwatch(peer, requestId);
  }

  /** RELEASE: ends an ownership (its token) or cancels a queued claim (token 0). */
  release(peer: Peer, requestId: number, name: string, token: number): void {
    const gated = this.#gate !== undefined;
    if (gated && this.#deferRequest(peer, () => this.release(peer, requestId, name, token))) return;
    this.#apply(
      this.#engine.release(this.now(), { sessionId: peer.sessionId, requestId, name, token }),
    );
  }

  /** HEARTBEAT: renews every ownership of the session; the ACK says how many. */
  heartbeat(peer: Peer, requestId: number): void {
    // Renews nothing the node cannot stand behind, and keeps the ACK behind earlier requests.
    if (
      this.#gate !== undefined && this.#deferRequest(peer, () => this.heartbeat(peer, requestId))
    ) {
      return;
    }
    const renewed = this.#engine.heartbeat(this.#scheduler.monotonicMs(), peer.sessionId);
    const port = this.#sessions.get(peer.sessionId);
    if (port === undefined) return;
    const ack: ServerMessage = { type: "heartbeat_ack", requestId, renewed };
    if (this.#gate === undefined) {
      port.send(ack);
      return;
    }
    // The gate may answer later: keep the ACK's place in the session's reply order.
    this.#carrier.promiseOwnership(
      port.hold(),
      ack,
      this.#engine.view.ownedLeaseMaxMs(peer.sessionId),
    );
  }

  /**
   * The connection ended the session (peer left, read error, protocol violation, a stalled
   * write): its ownerships end and its waits leave. `finalError` is sent after the records.
   */
  closeSession(sessionId: number, cause: CloseCause, finalError: WireError | null = null): void {
    if (!this.#mayDecide()) {
      // The connection ends now; its ownerships end (and their waiters get the lock) once the
      // node proves it leads, or as `failover` at the step-down.
      this.#sessions.remove(sessionId)?.terminate(
        finalError === null ? null : errorFrame(0, "", finalError),
      );
      this.#deferred.set(`close:${sessionId}`, () => this.closeSession(sessionId, cause));
      return;
    }
    this.#apply(this.#engine.closeSession(this.now(), sessionId, cause), {
      sessionId,
      finalError,
    });
  }

  /**
   * The connection ended without a word (EOF, a reset, a read or write error). A version-1
   * session closes (`cause`). A version-2 one is orphaned (docs/protocol.md, "End of a
   * connection"): its client may still count on its locks and carry them over (RESUME), so its
   * ownerships stay until their leases end; its waits leave their queues.
   */
  connectionLost(sessionId: number, cause: CloseCause): void {
    const port = this.#sessions.get(sessionId);
    if ((port?.version ?? 1) < 2) return this.closeSession(sessionId, cause);
    this.#sessions.remove(sessionId);
    this.#connectionGone(sessionId);
    this.#decide(`close:${sessionId}`, () => {
      this.#apply(this.#engine.orphanSession(this.now(), sessionId, cause));
      const view = this.#engine.view;
      const endMs = view.orphanLeaseEndMs(sessionId);
      if (endMs === undefined) return; // it owned nothing: closed
      logger.info("connection ended without GOODBYE; session kept for its client (orphaned)", {
        session: sessionId,
        remote_addr: view.sessionPeer(sessionId)?.remoteAddr ?? "",
        ownerships: view.claimCountOf(sessionId),
        leases_end_in_ms: Math.round(endMs - this.#scheduler.monotonicMs()),
      });
    });
  }

  /** A session's connection is gone (closed, or orphaned): its RESUME and watches end. */
  #connectionGone(sessionId: number): void {
    this.#reclaims.sessionEnded(sessionId);
    this.#reads.watches.sessionEnded(sessionId); // a watch lives as long as its connection
  }

  // ---- protocol version 2: reclaims and GOODBYE -------------------------------

  /** The term this node serves (0 on a single node): WELCOME's `term` in version 2. */
  get term(): number {
    return this.#ownership.term;
  }

  /** WELCOME's `valueBytesMax` in version 2: the longest holder's value (`-max-lock-value-bytes`). */
  get valueBytesMax(): number {
    return this.#engine.valueBytesMax;
  }

  /** WELCOME's `reclaimWindowMs` in version 2 (see `OwnershipGate.reclaimWindowMs`). */
  get reclaimWindowMs(): number {
    return this.#ownership.reclaimWindowMs;
  }

  /** RESUME and RECLAIM decisions so far (`/metrics`). */
  get reclaimStats(): Readonly<ReclaimStats> {
    return this.#reclaims.stats;
  }

  /**
   * RESUME, the session's first request (the session checks that): its outcome (RESUMED),
   * `moved`, `reclaim` or `none`, for the RECLAIMs that follow (see reclaims.ts).
   */
  resume(peer: Peer, requestId: number, prevTerm: number, prevSessionId: number): void {
    if (this.#deferRequest(peer, () => this.resume(peer, requestId, prevTerm, prevSessionId))) {
      return;
    }
    this.#reclaims.resume(peer, requestId, prevTerm, prevSessionId);
  }

  /**
   * RECLAIM: one claim of the session's RESUME, carried over (ACQUIRED, QUEUED) or void
   * (CLAIM_VOID; a queued one joins the tail). `last`: the RESUME announced no more.
   */
  reclaim(peer: Peer, request: ReclaimRequest, last: boolean): void {
    if (this.#deferRequest(peer, () => this.reclaim(peer, request, last))) return;
    this.#reclaims.reclaim(peer, request, last);
  }

  /** The session sent another request before every RECLAIM its RESUME announced. */
  reclaimsDone(peer: Peer): void {
    if (this.#deferRequest(peer, () => this.reclaimsDone(peer))) return;
    this.#reclaims.done(peer);
  }

  /** GOODBYE: the session ends gracefully (as a clean close of version 1) and is closed. */
  goodbye(peer: Peer): void {
    this.closeSession(peer.sessionId, "client_closed");
  }

  /** Cluster mode, a takeover: the locks of `names` are reserved for reclaims (reclaims.ts). */
  reserveForReclaims(names: Iterable<string>, untilMs: number, delays?: Delays): number {
    return this.#reclaims.reserve(names, untilMs, delays);
  }

  /** Cluster mode, the window ended: the reservations of `names` end (once it may decide). */
  endReservations(names: readonly string[]): void {
    this.#decide("reservations", () => this.#reclaims.endReservations(names));
  }

  /** Cluster mode, an operator frees a lock reserved for reclaims (audited, reclaims.ts). */
  liftReservation(name: string, actor: Actor): "lifted" | "not_leader" | "not_reserved" {
    if (this.#gate !== undefined && !this.#gate.mayAct()) return "not_leader";
    if (!this.#engine.view.isReserved(name)) return "not_reserved";
    this.#reclaims.liftReservation(name, actor);
    return "lifted";
  }

  /**
   * The sessions that have claims (owned or queued), for a planned hand-over's list: their
   * clients will RESUME at the next leader.
   */
  sessionsWithClaims(): number[] {
    const view = this.#engine.view;
    // Version 1 clients never RESUME: waiting for them would only keep the window open.
    return view.sessionIds().filter((sessionId) =>
      view.claimCountOf(sessionId) > 0 && (this.#sessions.get(sessionId)?.version ?? 1) >= 2
    );
  }

  // ---- operators (the admin API) -------------------------------------------

  /**
   * Force-release: the audit records of the operator's action first (one `force_release` per
   * owner ended), then each owner's session is closed (ERROR 0x02 after its release records) and
   * the head waiters are granted at once (unless a lock-delay holds them back). Without
   * `expectedToken` every owner of the lock is ended (a semaphore's or a shared lock's too);
   * with it, only the ownership with that fencing token: the check and the release happen in
   * this one call, so an operator's dialog opened on one holder never releases the next one
   * (nothing is audited or changed when no owner holds it).
   */
  forceRelease(name: string, actor: Actor, expectedToken?: number): ForceReleaseResult {
    if (this.#gate !== undefined && !this.#gate.mayAct()) return { status: "not_leader" };
    const holder = this.#engine.view.holderOf(name);
    if (holder === undefined) return { status: "lock_not_found" };
    if (holder === null) {
      const block = this.#engine.grantBlock;
      return {
        status: "no_owner",
        waiters: this.#engine.view.queueLengthOf(name),
        block,
        detail: block === null ? "" : this.#engine.blockDetail(block),
      };
    }
    const owners = this.#engine.view.holdersOf(name);
    const ended = expectedToken === undefined
      ? owners
      : owners.filter((owner) => owner.token === expectedToken);
    if (ended.length === 0) return { status: "holder_changed", holder, holders: owners };
    for (const owner of ended) {
      this.#audit.append({
        event: "force_release",
        lock: name,
        token: owner.token,
        identity: owner.identity,
        remote_addr: owner.remoteAddr,
        session: owner.sessionId,
        actor,
      });
    }
    this.#apply(this.#engine.forceRelease(this.now(), { name, token: expectedToken }).events);
    for (const owner of ended) {
      adminLogger.info("admin force-released a lock", {
        lock: name,
        token: owner.token,
        owner_remote_addr: owner.remoteAddr,
        owner_identity: owner.identity,
        actor,
      });
    }
    return { status: "released", holder: ended[0], holders: ended };
  }

  /** Removes one waiter: the audit record first, then its session is closed like a force-release. */
  kickWaiter(name: string, remoteAddr: string, actor: Actor): KickWaiterResult {
    if (this.#gate !== undefined && !this.#gate.mayAct()) return { status: "not_leader" };
    if (this.#engine.view.holderOf(name) === undefined) return { status: "lock_not_found" };
    const waiter = this.#engine.view.findWaiter(name, remoteAddr);
    if (waiter === undefined) return { status: "waiter_not_found" };
    this.#audit.append({
      event: "kick_waiter",
      lock: name,
      token: null,
      identity: waiter.identity,
      remote_addr: waiter.remoteAddr,
      session: waiter.sessionId,
      actor,
    });
    const result = this.#engine.kickWaiter(this.now(), name, remoteAddr);
    this.#apply(result.events);
    if (result.status !== "ok") {
      // findWaiter and kickWaiter read the engine in the same turn, so this cannot happen.
      throw new Error(`kickWaiter("${name}", "${remoteAddr}") disagreed with findWaiter`);
    }
    adminLogger.info("admin removed a waiter", {
      lock: name,
      waiter_remote_addr: waiter.remoteAddr,
      waiter_identity: waiter.identity,
      actor,
    });
    return { status: "kicked", waiter };
  }

  // ---- time, health and shutdown ---------------------------------------------

  /**
   * Handles every deadline due now (the deadline timer calls it). A node that cannot decide
   * now expires nothing: `decisionsResumed` ticks again.
   */
  tick(): void {
    if (!this.#mayDecide()) return;
    this.#apply(this.#engine.tick(this.now()));
  }

  /**
   * The audit log turned unhealthy (`failure`) or healthy again (null). While it fails no
   * ownership is granted: every ownership must be recorded.
   */
  auditHealthChanged(failure: string | null): void {
    if (failure !== null) {
      serverLogger.error("audit log cannot be written; grants paused", { error: failure });
      this.#deferred.delete("audit");
      this.#engine.blockGrants("audit_unavailable");
      return;
    }
    serverLogger.info("audit log writable again; grants resumed", {
      dropped_records: this.#audit.droppedRecords,
    });
    this.#decide(
      "audit",
      () => this.#apply(this.#engine.unblockGrants(this.now(), "audit_unavailable")),
    );
  }

  /**
   * Shutdown begins: from this instant nothing is granted. Every session is closed with
   * SHUTTING_DOWN after its release records; its ownerships end once (graceful) and its
   * waits leave without a grant; new sessions are refused.
   */
  beginShutdown(): void {
    this.#engine.blockGrants("shutting_down");
    const now = this.now();
    for (const sessionId of this.#engine.view.sessionIds()) {
      this.#apply(this.#engine.closeSession(now, sessionId, "shutdown"));
    }
    this.#releaseHeldSessions();
  }

  /**
   * Cluster mode: this node stopped leading (or hands over). Every session is closed with
   * NOT_LEADER after its release records (ownerships end as `failover`); `leaderAddr` is the
   * new leader's address when known ("" otherwise), `why` goes into the message.
   */
  closeAllForFailover(leaderAddr: string, why: string): void {
    // Hand-offs among the sessions closed below must not try to grant.
    this.#engine.blockGrants("not_leader");
    // What waited for this node to prove its leadership concerned these sessions: they end
    // here (a lifted grant block still counts when the node next serves).
    for (const key of [...this.#deferred.keys()]) {
      if (key !== "audit" && key !== "tokens") this.#deferred.delete(key);
    }
    this.#deferredRequests = 0;
    const now = this.now();
    const finalError = notLeaderError(leaderAddr, why);
    for (const sessionId of this.#engine.view.sessionIds()) {
      this.#apply(this.#engine.closeSession(now, sessionId, "failover"), { sessionId, finalError });
    }
    this.#releaseHeldSessions();
  }

  /** Cluster mode: the node does not serve (at start, before its first election). */
  notLeader(): void {
    this.#engine.blockGrants("not_leader");
  }

  /**
   * Cluster mode: the node serves a new term: grants go ahead, and new claims take the term as
   * the first part of their order key (restored waiters of earlier terms go ahead of them).
   */
  leading(): void {
    const term = this.#ownership.term;
    if (term > this.#engine.orderTerm) this.#engine.setOrderTerm(term);
    this.#deferred.set(
      "leading",
      () => this.#apply(this.#engine.unblockGrants(this.now(), "not_leader")),
    );
    this.decisionsResumed();
  }

  /**
   * Cluster mode: whether a session must hold its requests (null: hand them over now). While
   * the node cannot prove its leadership, a session keeps what it reads in its reader until the
   * promise settles: the leader resumed, or stepped down (the session is closed then).
   */
  decisionsHeld(): Promise<void> | null {
    // A planned hand-over's records flush (grants blocked, still leading) holds requests too.
    if (this.#mayDecide() && !this.#engine.isBlocked("not_leader")) return null;
    this.#held ??= Promise.withResolvers<void>();
    return this.#held.promise;
  }

  /**
   * Cluster mode: the node may decide again (its leadership re-proved, or a term begins): the
   * work that waited is done now, in order, then every deadline due, then the sessions hand
   * over the requests they held.
   */
  decisionsResumed(): void {
    if (!this.#mayDecide()) return;
    const work = [...this.#deferred.values()];
    this.#deferred.clear();
    this.#deferredRequests = 0;
    // Each piece checks again: a real clock may pass the leader's limit meanwhile.
    for (const piece of work) piece();
    this.tick();
    if (this.#mayDecide()) this.#releaseHeldSessions();
  }

  /** Cluster mode: fencing tokens were reserved: grants that waited for them go ahead now. */
  tokensReserved(): void {
    if (!this.#engine.isBlocked("token_store_unavailable")) return;
    if (!this.#mayDecide()) {
      this.#deferred.set("tokens", () => this.tokensReserved());
      return;
    }
    this.#apply(this.#engine.retryTokenStore(this.now()));
    if (!this.#engine.isBlocked("token_store_unavailable")) {
      this.#tokenRetry?.cancel();
      this.#tokenRetry = undefined;
      this.#tokenRetryDelayMs = TOKEN_RETRY_MS_MIN;
    }
  }

  /** Stops the timers (after the sessions are closed). */
  stop(): void {
    this.#stopped = true;
    this.#deadlines.stop();
    this.#reads.stop();
    this.#tokenRetry?.cancel();
    this.#tokenRetry = undefined;
  }

  // ---- leadership (cluster mode) ---------------------------------------------

  /** Whether this node may decide a change of ownership now (always, on a single node). */
  #mayDecide(): boolean {
    return this.#gate === undefined || this.#gate.mayDecide();
  }

  /** Runs `work` now when the node may decide, else once it may again (one per `key`). */
  #decide(key: string, work: () => void): void {
    if (this.#mayDecide()) {
      this.#deferred.delete(key);
      work();
      return;
    }
    this.#deferred.set(key, work);
  }

  /**
   * A request reached the service while the node cannot decide: it waits, in order. Sessions
   * ask `decisionsHeld` before each request and hold the rest in their readers, so this is only
   * a request whose check passed a moment before the node's limit: at most one per session.
   * `always`: also while the node may decide (a planned hand-over's records flush). Returns
   * whether it was deferred.
   */
  #deferRequest(peer: Peer, retry: () => void, always = false): boolean {
    if (this.#mayDecide() && !always) return false;
    const sessionId = peer.sessionId;
    this.#deferred.set(`request:${++this.#deferredRequests}`, () => {
      if (this.#sessions.get(sessionId) !== undefined) retry();
    });
    return true;
  }

  /** Sessions hand over the requests they held (the node decides again, or stepped down). */
  #releaseHeldSessions(): void {
    const held = this.#held;
    this.#held = null;
    held?.resolve();
  }

  // ---- carrying out engine events ---------------------------------------------

  /** Carries out engine events in order (`EventCarrier`), then re-arms the deadline timer. */
  #apply(events: EngineEvent[], closing?: Closing, carried?: CarriedOver): void {
    const watches = this.#reads.watches;
    for (const event of events) {
      this.#carrier.carry(event, closing, carried);
      if (!watches.empty) this.#reads.changed(event); // no lock-change object while no watch is open
    }
    this.#deadlines.arm(this.#engine.nextDeadlineMs());
    if (this.#engine.isBlocked("token_store_unavailable") && !this.#inTokenRetry) {
      this.#retryTokenStoreLater();
    }
  }

  /** Tries the token store again with exponential back-off until a reservation succeeds. */
  #retryTokenStoreLater(): void {
    if (this.#tokenRetry !== undefined || this.#stopped) return;
    if (this.#tokenRetryDelayMs === TOKEN_RETRY_MS_MIN) {
      serverLogger.error("no fencing token could be reserved; grants paused", {
        error: this.#engine.blockDetail("token_store_unavailable"),
        retry_ms: this.#tokenRetryDelayMs,
      });
    }
    this.#tokenRetry = this.#scheduler.setTimer(() => {
      this.#tokenRetry = undefined;
      if (!this.#mayDecide()) {
        // A grant now would be a decision: retry once the node may decide (tokensReserved).
        this.#deferred.set("tokens", () => this.tokensReserved());
        return;
      }
      this.#inTokenRetry = true;
      try {
        this.#apply(this.#engine.retryTokenStore(this.now()));
      } catch (error) {
        serverLogger.error("token store retry failed", { error: String(error) });
      } finally {
        this.#inTokenRetry = false;
      }
      if (this.#engine.isBlocked("token_store_unavailable")) {
        this.#tokenRetryDelayMs = Math.min(TOKEN_RETRY_MS_MAX, this.#tokenRetryDelayMs * 2);
        this.#retryTokenStoreLater();
      } else {
        this.#tokenRetryDelayMs = TOKEN_RETRY_MS_MIN;
        serverLogger.info("token store writable again; grants resumed");
      }
    }, this.#tokenRetryDelayMs);
  }
}
