/**
 * RESUME and RECLAIM (protocol version 2; design §1 "Reclaim rule", docs/protocol.md
 * "Reclaiming after a fail-over"): a client whose connection ended while it held or waited for
 * locks carries its claims over to its new session.
 *
 * RESUME names the session (`prevSessionId`) and term (`prevTerm`) the claims were made in, and
 * how many RECLAIMs follow. Its outcome:
 * - **moved**: the same term and that session is still here, with the same identity: open (a
 *   silent connection its client gave up on) or orphaned (a version-2 connection that ended
 *   without GOODBYE, whose ownerships wait for their client until their leases end). The RECLAIMs are held until the last one came, then
 *   decided together: those whose ticket is valid and whose claim the old session still has move
 *   to the new session in one engine step (`moveClaims`: tokens, places and leases kept, the
 *   leases renewed); at least one valid ticket must prove the RESUME comes from that session's
 *   client before the old session is touched at all. What the old session has that the client
 *   did not reclaim ends (released: the client let go of it), and the old session is closed.
 * - **reclaim**: claims of an earlier term, decided one by one as they come, by the reclaim rule:
 *   (i) the ticket, (ii)–(iv) the cluster's part (`OwnershipGate.reclaimCheck`: term, window,
 *   floor), (vi) the ACL, then (v) the engine: an owned claim is restored with its token and a
 *   fresh lease (`restoreOwnership`), a queued one put back at its order key (`restoreWaiter`).
 *   A valid reclaim with a higher token than an owner restored before it wins: the lower one is
 *   ended (`reclaim_conflict`).
 * - **none**: nothing can be carried over: every owned claim gets CLAIM_VOID, every queued one
 *   joins the tail of its queue (an ACQUIRE with what is left of its wait bound).
 *
 * A void owned claim is answered with CLAIM_VOID; a void queued one joins the tail (but for an
 * ACL refusal: ACL_DENIED). Every decision is audited (`reclaim`, `reclaim_void`,
 * `reclaim_conflict`) and counted (`stats`).
 *
 * @module
 */

import type { LockEngine } from "../core/engine.ts";
import type { CloseCause, EngineEvent, Instant, Peer, SessionClaimView } from "../core/types.ts";
import type { AuditLog } from "../log/audit.ts";
import type { Actor } from "../log/audit_records.ts";
import type { ReclaimRecord } from "../log/audit_records.ts";
import { log } from "../log/diagnostic.ts";
import type { Acl } from "../security/acl.ts";
import type { ResumeOutcome } from "../wire/messages.ts";
import type { ClaimOptions } from "./claim_options.ts";
import { ticketValid } from "./claim_tickets.ts";
import type { CarriedOver } from "./event_carrier.ts";
import type { OwnershipGate } from "./leadership_gate.ts";
import type { SessionRegistry } from "./session_registry.ts";
import { RECLAIM_VOID_REASONS, type ReclaimVoidReason } from "./void_reasons.ts";
import {
  aclDeniedError,
  claimVoidError,
  errorFrame,
  rejectionError,
  SESSION_ERRORS,
  type WireError,
} from "./wire_errors.ts";

const logger = log("protocol");

/** One RECLAIM, as the session decoded and checked it. */
export interface ReclaimRequest {
  /** The claim's request id from now on. */
  readonly requestId: number;
  readonly kind: "owned" | "queued";
  readonly name: string;
  /** Owned: the grant's token; queued: 0. */
  readonly token: number;
  /** Queued: the QUEUED's order key; owned: 0. */
  readonly orderTerm: number;
  readonly orderSeq: number;
  readonly leaseMs: number;
  /** Queued: what is left of its wait bound (null: forever). */
  readonly waitMs: number | null;
  readonly ticket: Uint8Array;
  /** The limit, slot and write generation the RECLAIM carried (an owned claim's ticket binds them). */
  readonly limit: number;
  readonly slot: number;
  readonly writeGeneration: number;
  /** What the engine is asked for (mode, limit, value). */
  readonly claim: ClaimOptions;
}

/** Lock-delays a takeover carries over: the monotonic ms each lock's delay runs until. */
export type Delays = ReadonlyMap<string, number>;

/** Counters of RESUME and RECLAIM, exact after every command; `/metrics` reads them. */
export interface ReclaimStats {
  /** RESUMEs by outcome. */
  readonly resumes: Record<ResumeOutcome, number>;
  /** RECLAIMs decided, by claim kind and outcome (`lockd_cluster_reclaims_total`). */
  readonly reclaims: Record<"owned" | "queued", { kept: number; void: number }>;
  /** Void RECLAIMs by reason (`lockd_cluster_reclaim_void_total`). */
  readonly voids: Record<ReclaimVoidReason, number>;
  /** Restored ownerships ended by a higher valid reclaim (`..._reclaim_conflicts_total`). */
  conflicts: number;
}

export interface ReclaimsOptions {
  readonly engine: LockEngine;
  readonly audit: AuditLog;
  readonly sessions: SessionRegistry;
  readonly ownership: OwnershipGate;
  /** The ACL in force now (it changes on SIGHUP). */
  readonly acl: () => Acl;
  readonly now: () => Instant;
  /** Carries out engine events (the service's `#apply`). */
  readonly apply: (events: EngineEvent[], carried?: CarriedOver) => void;
  /** Ends a session from the server side (the service's `closeSession`). */
  readonly closeSession: (sessionId: number, cause: CloseCause) => void;
}

/** A session's RESUME, kept until its RECLAIMs are decided. */
interface Resumption {
  readonly prevTerm: number;
  readonly prevSessionId: number;
  readonly outcome: ResumeOutcome;
  /** `moved`: the RECLAIMs held until the last one came. */
  readonly held: ReclaimRequest[];
}

/** The largest u32: what RESUMED's `windowLeftMs` can carry. */
const U32_MAX = 0xffff_ffff;

export class Reclaims {
  readonly stats: ReclaimStats = {
    resumes: { moved: 0, reclaim: 0, none: 0 },
    reclaims: { owned: { kept: 0, void: 0 }, queued: { kept: 0, void: 0 } },
    voids: Object.fromEntries(RECLAIM_VOID_REASONS.map((r) => [r, 0])) as Record<
      ReclaimVoidReason,
      number
    >,
    conflicts: 0,
  };
  readonly #o: ReclaimsOptions;
  /** RESUMEs whose RECLAIMs are still coming, by session. */
  readonly #resumes = new Map<number, Resumption>();
  /** Tokens of ownerships restored by a reclaim, by lock, while they last. */
  readonly #restored = new Map<string, Set<number>>();

  constructor(options: ReclaimsOptions) {
    this.#o = options;
  }

  /** RESUME (the session's first request): its outcome is decided and answered (RESUMED). */
  resume(peer: Peer, requestId: number, prevTerm: number, prevSessionId: number): void {
    const { engine, ownership } = this.#o;
    const term = ownership.term;
    let outcome: ResumeOutcome = "none";
    let windowLeftMs = 0;
    if (prevTerm === term) {
      const old = engine.view.sessionPeer(prevSessionId);
      if (old !== undefined && prevSessionId !== peer.sessionId && old.identity === peer.identity) {
        // An open session stays at most its I/O timeout without a frame; an orphan until its
        // last lease ends.
        outcome = "moved";
        const orphanEndMs = engine.view.orphanLeaseEndMs(prevSessionId);
        windowLeftMs = orphanEndMs === undefined
          ? engine.ioTimeoutMs
          : orphanEndMs - this.#o.now().monoMs;
      }
    } else if (prevTerm < term) {
      windowLeftMs = ownership.reclaimWindowLeftMs(prevTerm);
      if (windowLeftMs > 0) outcome = "reclaim";
    }
    if (outcome === "none") windowLeftMs = 0;
    this.#resumes.set(peer.sessionId, { prevTerm, prevSessionId, outcome, held: [] });
    this.stats.resumes[outcome]++;
    logger.info("session resumed", {
      session: peer.sessionId,
      remote_addr: peer.remoteAddr,
      prev_session: prevSessionId,
      prev_term: prevTerm,
      outcome,
    });
    this.#o.sessions.get(peer.sessionId)?.send({
      type: "resumed",
      requestId,
      outcome,
      windowLeftMs: Math.min(U32_MAX, Math.max(0, Math.ceil(windowLeftMs))),
    });
  }

  /** One RECLAIM; `last`: the RESUME announced no more (the reclaims are then done). */
  reclaim(peer: Peer, request: ReclaimRequest, last: boolean): void {
    const state = this.#resumes.get(peer.sessionId);
    if (state === undefined) {
      this.#send(peer, request, SESSION_ERRORS.reclaimWithoutResume(request.name));
      return;
    }
    if (state.outcome === "moved") state.held.push(request);
    else if (request.kind === "owned") this.#decideOwned(peer, state, request);
    else this.#decideQueued(peer, state, request);
    if (last) this.done(peer);
  }

  /**
   * The session is done reclaiming (its last announced RECLAIM came, or another request did):
   * held RECLAIMs are decided, and the gate hears of it.
   */
  done(peer: Peer): void {
    const state = this.#resumes.get(peer.sessionId);
    if (state === undefined) return;
    this.#resumes.delete(peer.sessionId);
    if (state.outcome === "moved") this.#move(peer, state);
    this.#o.ownership.reclaimsDone(state.prevTerm, state.prevSessionId);
  }

  /** A session ended: a RESUME of it still reclaiming is done (what it held is dropped). */
  sessionEnded(sessionId: number): void {
    const state = this.#resumes.get(sessionId);
    if (state === undefined) return;
    this.#resumes.delete(sessionId);
    this.#o.ownership.reclaimsDone(state.prevTerm, state.prevSessionId);
  }

  /** An ownership ended: a restored one is forgotten. */
  ownershipEnded(name: string, token: number): void {
    if (this.#restored.size === 0) return;
    const tokens = this.#restored.get(name);
    if (tokens === undefined || !tokens.delete(token)) return;
    if (tokens.size === 0) this.#restored.delete(name);
  }

  /**
   * A new leader's takeover: every lock of `names` (those the last term may have left held) is
   * reserved until `untilMs` (monotonic) or until its holders reclaimed it, and a lock-delay of
   * the last term in `delays` runs on to its end here. Not a decision (nothing is granted): done
   * before the term's grants begin. Returns how many.
   */
  reserve(names: Iterable<string>, untilMs: number, delays?: Delays): number {
    let count = 0;
    for (const name of names) {
      this.#o.engine.reserve({ name, untilMs, delayedUntilMs: delays?.get(name) });
      count++;
    }
    this.#o.apply([]);
    return count;
  }

  /**
   * The reclaim window ended: the reservations of `names` still in force are lifted (each
   * queue's head is granted), and the gate hears of every lock left idle (its record may go).
   */
  endReservations(names: readonly string[]): void {
    for (const name of names) this.liftReservation(name, null);
  }

  /**
   * Frees a lock reserved for reclaims (audited `reservation_lifted`, by an operator or, with
   * `actor` null, by the window's end): its queue's head is granted; an idle lock's record may go.
   */
  liftReservation(name: string, actor: Actor | null): void {
    const { engine, audit } = this.#o;
    if (engine.view.isReserved(name)) {
      audit.append({
        event: "reservation_lifted",
        lock: name,
        token: null,
        identity: "",
        remote_addr: "",
        session: 0,
        ...(actor === null ? { by: "window" } : { by: "operator", actor }),
      });
      this.#o.apply(engine.liftReservation(this.#o.now(), name));
    }
    if (engine.view.isIdle(name)) this.#o.ownership.idle(name);
  }

  // ---- claims of an earlier term (or none) -----------------------------------------

  /** Why a claim of `state`'s RESUME is void before the engine is asked, or null. */
  #voidReason(peer: Peer, state: Resumption, request: ReclaimRequest): ReclaimVoidReason | null {
    const { ownership } = this.#o;
    if (!this.#ticketValid(peer, state, request)) return "ticket";
    // The same term and not moved: the session that held the claim is gone with it.
    if (state.prevTerm === ownership.term) return "window";
    if (state.prevTerm > ownership.term) return "term";
    const owned = request.kind === "owned";
    const cluster = ownership.reclaimCheck({
      kind: request.kind,
      name: request.name,
      term: state.prevTerm,
      token: owned ? request.token : 0,
      slot: owned ? request.slot : 0,
    });
    if (cluster !== null) return cluster;
    if (!this.#o.acl().decide(peer.identity, request.name, "acquire").allowed) return "acl";
    return null;
  }

  #ticketValid(peer: Peer, state: Resumption, request: ReclaimRequest): boolean {
    const { name, claim } = request;
    return ticketValid(
      this.#o.ownership.tickets,
      request.ticket,
      state.prevTerm,
      state.prevSessionId,
      peer.identity,
      request.kind === "owned"
        ? {
          kind: "owned",
          name,
          token: request.token,
          mode: claim.mode,
          limit: request.limit,
          slot: request.slot,
          writeGeneration: request.writeGeneration,
        }
        : {
          kind: "queued",
          name,
          orderTerm: request.orderTerm,
          orderSeq: request.orderSeq,
          mode: claim.mode,
        },
    );
  }

  #decideOwned(peer: Peer, state: Resumption, request: ReclaimRequest): void {
    const reason = this.#voidReason(peer, state, request);
    if (reason !== null) {
      this.#void(peer, state, request, reason);
      return;
    }
    const outcome = this.#restore(peer, request);
    if (outcome.status === "restored") {
      this.#kept(state, request, outcome.events);
    } else if (outcome.status === "refused") {
      if (outcome.rejection.reason === "limit_exceeded") this.#void(peer, state, request, "limit");
      else this.#send(peer, request, rejectionError(request.name, outcome.rejection));
    } else if (!this.#winsConflict(peer, state, request)) {
      this.#void(peer, state, request, "regranted");
    }
  }

  #restore(peer: Peer, request: ReclaimRequest) {
    return this.#o.engine.restoreOwnership(this.#o.now(), {
      sessionId: peer.sessionId,
      requestId: request.requestId,
      name: request.name,
      token: request.token,
      leaseMs: request.leaseMs,
      mode: request.claim.mode,
      limit: request.claim.limit,
      slot: request.slot,
      writeGeneration: request.writeGeneration,
      value: request.claim.value,
    });
  }

  /** A restored ownership: counted, remembered, and its events carried out (ACQUIRED). */
  #kept(state: Resumption, request: ReclaimRequest, events: EngineEvent[]): void {
    this.stats.reclaims.owned.kept++;
    let tokens = this.#restored.get(request.name);
    if (tokens === undefined) this.#restored.set(request.name, tokens = new Set());
    tokens.add(request.token);
    this.#o.apply(events, carriedOver(state));
  }

  /**
   * Higher token wins: when every owner of the lock (a semaphore: of the claim's slot) is an
   * ownership restored here with a lower token (of another session), they are ended (`reclaim_conflict`, then as a force-release) and
   * this claim is restored in their place. Returns whether it was.
   */
  #winsConflict(peer: Peer, state: Resumption, request: ReclaimRequest): boolean {
    const { engine, audit } = this.#o;
    const restored = this.#restored.get(request.name);
    // A semaphore's slots are owned one by one: only the owner of the claim's slot is in its way.
    const perSlot = engine.view.getLock(request.name, 0)?.kind === "semaphore";
    const owners = engine.view.holdersOf(request.name)
      .filter((o) => !perSlot || o.slot === request.slot);
    if (
      restored === undefined || owners.length === 0 ||
      !owners.every((o) =>
        restored.has(o.token) && o.token < request.token && o.sessionId !== peer.sessionId
      )
    ) {
      return false;
    }
    const now = this.#o.now();
    // Nothing is granted between the losers' end and this restore (a reservation of the
    // takeover, if one still holds, does that already).
    const reserved = (engine.view.getLock(request.name, 0)?.reservedUntilMs ?? 0) !== 0;
    if (!reserved) engine.reserve({ name: request.name, untilMs: now.monoMs + 1, claims: 1 });
    for (const loser of owners) {
      this.stats.conflicts++;
      audit.append({
        event: "reclaim_conflict",
        lock: request.name,
        token: loser.token,
        identity: loser.identity,
        remote_addr: loser.remoteAddr,
        session: loser.sessionId,
        winner_token: request.token,
        winner_session: peer.sessionId,
      });
      logger.warn("two reclaims of one lock: the higher token wins", {
        lock: request.name,
        token: loser.token,
        session: loser.sessionId,
        winner_token: request.token,
        winner_session: peer.sessionId,
      });
      this.#o.apply(engine.forceRelease(now, { name: request.name, token: loser.token }).events);
    }
    const outcome = this.#restore(peer, request);
    if (outcome.status === "restored") {
      this.#kept(state, request, outcome.events);
      return true;
    }
    if (!reserved) this.#o.apply(engine.liftReservation(now, request.name));
    return false;
  }

  #decideQueued(peer: Peer, state: Resumption, request: ReclaimRequest): void {
    const reason = this.#voidReason(peer, state, request);
    if (reason === "acl") {
      this.#void(peer, state, request, reason);
      return;
    }
    if (reason !== null) {
      this.#void(peer, state, request, reason);
      this.#joinTail(peer, request);
      return;
    }
    const events = this.#o.engine.restoreWaiter(this.#o.now(), {
      sessionId: peer.sessionId,
      requestId: request.requestId,
      name: request.name,
      leaseMs: request.leaseMs,
      waitMs: request.waitMs,
      mode: request.claim.mode,
      limit: request.claim.limit,
      value: request.claim.value,
      order: { term: request.orderTerm, seq: request.orderSeq },
    });
    const refused = events.find((e) => e.type === "rejected");
    if (refused?.type === "rejected") {
      if (refused.rejection.reason === "limit_exceeded") {
        this.#count(peer, state, request, "limit");
      }
      this.#o.apply(events);
      return;
    }
    this.stats.reclaims.queued.kept++;
    this.#o.audit.append(reclaimRecord(peer, state, request));
    this.#o.apply(events, carriedOver(state));
  }

  /**
   * A void queued claim asks again at the tail, as an ACQUIRE with what is left of its wait
   * (the ACL decides first, as for an ACQUIRE).
   */
  #joinTail(peer: Peer, request: ReclaimRequest): void {
    if (!this.#o.acl().decide(peer.identity, request.name, "acquire").allowed) {
      this.#send(peer, request, aclDeniedError(request.name, peer.identity));
      return;
    }
    this.#o.apply(this.#o.engine.acquire(this.#o.now(), {
      sessionId: peer.sessionId,
      requestId: request.requestId,
      name: request.name,
      leaseMs: request.leaseMs,
      waitMs: request.waitMs,
      mode: request.claim.mode,
      limit: request.claim.limit,
      value: request.claim.value,
    }));
  }

  // ---- a same-term move ---------------------------------------------------------------

  /** Decides the RECLAIMs of a `moved` RESUME together (see the module comment). */
  #move(peer: Peer, state: Resumption): void {
    const { engine } = this.#o;
    const from = state.prevSessionId;
    const proven: ReclaimRequest[] = [];
    const voided: [ReclaimRequest, ReclaimVoidReason][] = [];
    const old = engine.view.sessionPeer(from);
    for (const request of state.held) {
      const claim = old === undefined ? undefined : engine.view.sessionClaim(from, request.name);
      if (!this.#ticketValid(peer, state, request)) voided.push([request, "ticket"]);
      else if (old === undefined) voided.push([request, "window"]);
      else if (claim === undefined || !sameClaim(claim, request)) voided.push([request, "floor"]);
      else proven.push(request);
    }
    if (proven.length > 0) {
      const moved = this.#moveProven(peer, state, proven);
      if (!moved) { for (const request of proven) voided.push([request, "limit"]); }
    }
    for (const [request, reason] of voided) {
      this.#void(peer, state, request, reason);
      if (request.kind === "queued") this.#joinTail(peer, request);
    }
  }

  /**
   * Moves the proven claims of the old session to this one; ends what it has beyond them, then
   * closes it. Returns whether the engine moved them.
   */
  #moveProven(peer: Peer, state: Resumption, proven: ReclaimRequest[]): boolean {
    const { engine } = this.#o;
    const from = state.prevSessionId;
    const covered = new Map(proven.map((request) => [request.name, request.requestId]));
    const now = this.#o.now();
    // What the client did not reclaim it let go of (a RELEASE that never arrived, a claim it
    // reported lost): released, as it meant.
    for (const claim of engine.view.sessionClaims(from)) {
      if (covered.has(claim.name)) continue;
      this.#o.apply(engine.release(now, {
        sessionId: from,
        requestId: 0,
        name: claim.name,
        token: claim.token,
      }));
    }
    const outcome = engine.moveClaims(now, {
      fromSessionId: from,
      toSessionId: peer.sessionId,
      requestIds: covered,
    });
    if (outcome.status === "refused") {
      logger.warn("claims of a resumed session could not move", {
        session: peer.sessionId,
        prev_session: from,
        problem: outcome.problem,
      });
      return false;
    }
    for (const request of proven) this.stats.reclaims[request.kind].kept++;
    this.#o.apply(outcome.events, carriedOver(state));
    this.#o.closeSession(from, "client_closed");
    return true;
  }

  // ---- voids ------------------------------------------------------------------------

  /** A void claim: counted and audited; an owned one answered CLAIM_VOID (a queued one's caller answers). */
  #void(peer: Peer, state: Resumption, request: ReclaimRequest, reason: ReclaimVoidReason): void {
    this.#count(peer, state, request, reason);
    if (request.kind === "owned") {
      this.#send(peer, request, claimVoidError(request.name, reason));
    } else if (reason === "acl") {
      this.#send(peer, request, aclDeniedError(request.name, peer.identity));
    }
  }

  #count(peer: Peer, state: Resumption, request: ReclaimRequest, reason: ReclaimVoidReason): void {
    this.stats.reclaims[request.kind].void++;
    this.stats.voids[reason]++;
    this.#o.audit.append({ ...commonFields(peer, state, request), event: "reclaim_void", reason });
    logger.info("reclaim void", {
      session: peer.sessionId,
      remote_addr: peer.remoteAddr,
      lock: request.name,
      claim: request.kind,
      reason,
    });
  }

  #send(peer: Peer, request: ReclaimRequest, error: WireError): void {
    this.#o.sessions.get(peer.sessionId)?.send(errorFrame(request.requestId, request.name, error));
  }
}

/** Whether the old session's claim is the one a RECLAIM names (its token, or its order key). */
function sameClaim(claim: SessionClaimView, request: ReclaimRequest): boolean {
  if (request.kind === "owned") return claim.state === "owned" && claim.token === request.token;
  // A waiter granted meanwhile is still that claim (its order key stays): it moves as an owner.
  return claim.orderTerm === request.orderTerm && claim.orderSeq === request.orderSeq;
}

function carriedOver(state: Resumption): CarriedOver {
  return { prevSessionId: state.prevSessionId, prevTerm: state.prevTerm };
}

/** The `reclaim` record of a kept queued claim (owned ones: the carrier's, at their grant). */
function reclaimRecord(peer: Peer, state: Resumption, request: ReclaimRequest): ReclaimRecord {
  return { ...commonFields(peer, state, request), event: "reclaim" };
}

/** The fields `reclaim` and `reclaim_void` records share. */
function commonFields(peer: Peer, state: Resumption, request: ReclaimRequest) {
  return {
    lock: request.name,
    token: request.kind === "owned" ? request.token : null,
    identity: peer.identity,
    remote_addr: peer.remoteAddr,
    session: peer.sessionId,
    client_name: peer.clientName,
    claim: request.kind,
    prev_session: state.prevSessionId,
    prev_term: state.prevTerm,
  };
}
