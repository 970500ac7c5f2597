import type { Clock } from "../clock.ts";
import type { LockEngine } from "../core/engine.ts";
import type { CloseCause, EngineEvent, Peer, RejectReason } from "../core/types.ts";
import type { AuditLog } from "../log/audit.ts";
import { log } from "../log/diagnostic.ts";
import type { ServerCounters } from "../ops/counters.ts";
import { type Acl, ALLOW_ALL } from "../security/acl.ts";
import type { WireCodeName } from "./codes.ts";
import type { Session, SessionHost } from "./session.ts";

const logger = log("protocol");

/** Which wire code answers each engine refusal. */
const REJECT_CODES: Readonly<Record<RejectReason, WireCodeName>> = {
  invalid_argument: "INVALID_ARGUMENT",
  duplicate_claim: "DUPLICATE_CLAIM",
  limit_exceeded: "LIMIT_EXCEEDED",
  not_owner: "NOT_OWNER",
  grants_paused: "AUDIT_UNAVAILABLE",
};

/** The final ERROR a session gets when the engine closes it, by cause (none when the peer already left). */
const CLOSE_ERRORS: Readonly<Record<CloseCause, WireCodeName | null>> = {
  client_closed: null,
  io_error: null,
  io_timeout: "IO_TIMEOUT",
  admin: "CLOSED_BY_ADMIN",
  shutdown: "SHUTTING_DOWN",
};

export interface DispatcherOptions {
  engine: LockEngine;
  audit: AuditLog;
  counters: ServerCounters;
  clock: Clock;
  serverVersion: string;
  frameBytesMax: number;
  handshakeTimeoutMs: number;
}

/**
 * The hub between sessions, the engine, the audit log and the timer: it
 * carries out engine events in order (audit record first, then the frame that
 * depends on it), keeps the one deadline timer armed, and watches writes that
 * stall.
 */
export class Dispatcher implements SessionHost {
  readonly engine: LockEngine;
  readonly counters: ServerCounters;
  readonly serverVersion: string;
  readonly frameBytesMax: number;
  readonly handshakeTimeoutMs: number;
  readonly writesInFlight = new Set<Session>();
  readonly #audit: AuditLog;
  readonly #clock: Clock;
  readonly #sessions = new Map<number, Session>();
  /** Every live connection, registered or still in its handshake. */
  readonly connections = new Set<Session>();
  #acl: Acl = ALLOW_ALL;
  #shuttingDown = false;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerAtMs = Infinity;
  #watchdog: ReturnType<typeof setInterval> | undefined;
  #stopped = false;

  constructor(options: DispatcherOptions) {
    this.engine = options.engine;
    this.#audit = options.audit;
    this.counters = options.counters;
    this.#clock = options.clock;
    this.serverVersion = options.serverVersion;
    this.frameBytesMax = options.frameBytesMax;
    this.handshakeTimeoutMs = options.handshakeTimeoutMs;
    const checkEveryMs = Math.max(50, Math.min(1_000, this.engine.ioTimeoutMs / 4));
    this.#watchdog = setInterval(() => this.#checkStalledWrites(), checkEveryMs);
  }

  get shuttingDown(): boolean {
    return this.#shuttingDown;
  }

  get sessionCount(): number {
    return this.#sessions.size;
  }

  set acl(acl: Acl) {
    this.#acl = acl;
  }

  get acl(): Acl {
    return this.#acl;
  }

  register(session: Session): void {
    this.#sessions.set(session.peer!.sessionId, session);
  }

  unregister(session: Session): void {
    if (session.peer !== null && this.#sessions.get(session.peer.sessionId) === session) {
      this.#sessions.delete(session.peer.sessionId);
    }
    this.connections.delete(session);
  }

  admitAcquire(peer: Peer, requestId: number, name: string): boolean {
    const decision = this.#acl.decide(peer.identity, name);
    if (decision.allowed) return true;
    this.counters.aclDenials++;
    logger.warn("ACL denied acquire", {
      session: peer.sessionId,
      remote_addr: peer.remoteAddr,
      identity: peer.identity,
      lock: name,
      rule_line: decision.rule?.line ?? 0,
    });
    this.#audit.append({
      event: "acl_deny",
      lock: name,
      token: null,
      identity: peer.identity,
      remote_addr: peer.remoteAddr,
      session: peer.sessionId,
    });
    this.#sessions.get(peer.sessionId)?.sendError(
      "ACL_DENIED",
      requestId,
      name,
      `Cannot acquire lock "${name}": the ACL does not allow identity "${peer.identity}"`,
    );
    return false;
  }

  /** Carries out engine events in order, then re-arms the deadline timer. */
  apply(events: EngineEvent[]): void {
    for (const event of events) this.#applyOne(event);
    this.#arm();
  }

  /** Begins shutdown: new sessions are refused; every session gets SHUTTING_DOWN and its ownerships end graceful. */
  closeAllSessions(): void {
    this.#shuttingDown = true;
    for (const sessionId of this.engine.sessionIds()) {
      this.apply(this.engine.closeSession(sessionId, "shutdown"));
    }
    for (const session of [...this.connections]) {
      session.terminate({
        code: "SHUTTING_DOWN",
        name: "",
        message: "The server is shutting down",
      });
    }
  }

  /** Stops the timers (after the sessions are closed). */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    clearInterval(this.#watchdog);
    this.#timer = undefined;
  }

  #applyOne(event: EngineEvent): void {
    const session = this.#sessions.get(event.peer.sessionId);
    const peer = event.peer;
    switch (event.type) {
      case "granted":
        this.#audit.append({
          event: "acquire",
          lock: event.name,
          token: event.token,
          identity: peer.identity,
          remote_addr: peer.remoteAddr,
          session: peer.sessionId,
          waited_ms: Math.round(event.waitedMs),
        }, () =>
          session?.send({
            type: "acquired",
            requestId: event.requestId,
            name: event.name,
            token: event.token,
            leaseMs: event.leaseMs,
          }));
        return;
      case "queued":
        session?.send({
          type: "queued",
          requestId: event.requestId,
          name: event.name,
          position: event.position,
        });
        return;
      case "ended":
        this.#audit.append({
          event: "release",
          lock: event.name,
          token: event.token,
          identity: peer.identity,
          remote_addr: peer.remoteAddr,
          session: peer.sessionId,
          reason: event.reason,
          held_ms: Math.round(event.heldMs),
        }, () => {
          if (event.releaseRequestId !== 0) {
            session?.send({
              type: "released",
              requestId: event.releaseRequestId,
              name: event.name,
            });
          } else if (event.reason === "expired") {
            session?.sendError(
              "LEASE_EXPIRED",
              event.acquireRequestId,
              event.name,
              `Lost lock "${event.name}": its lease expired (token ${event.token})`,
            );
          }
        });
        if (event.reason === "expired") {
          logger.info("lease expired", {
            lock: event.name,
            session: peer.sessionId,
            remote_addr: peer.remoteAddr,
            token: event.token,
          });
        }
        return;
      case "wait_ended":
        if (event.cause === "timeout") {
          session?.sendError(
            "WAIT_TIMEOUT",
            event.requestId,
            event.name,
            event.waitedMs === 0
              ? `Cannot acquire lock "${event.name}": it is held`
              : `Cannot acquire lock "${event.name}": wait timed out after ${
                Math.round(event.waitedMs)
              } ms`,
          );
        } else if (event.cause === "cancelled") {
          session?.sendError(
            "CANCELLED",
            event.requestId,
            event.name,
            `Wait for lock "${event.name}" cancelled`,
          );
          session?.send({ type: "released", requestId: event.releaseRequestId, name: event.name });
        }
        return;
      case "rejected":
        session?.sendError(REJECT_CODES[event.reason], event.requestId, event.name, event.message);
        if (event.reason === "limit_exceeded") {
          logger.warn("limit reached", {
            session: peer.sessionId,
            remote_addr: peer.remoteAddr,
            lock: event.name,
            detail: event.message,
          });
        }
        return;
      case "session_closed": {
        const code = CLOSE_ERRORS[event.cause];
        if (event.cause === "io_timeout") {
          logger.info("session timed out", {
            session: peer.sessionId,
            remote_addr: peer.remoteAddr,
          });
        }
        session?.terminate(
          code === null ? undefined : {
            code,
            name: event.name,
            message: closeMessage(event.cause, event.name, this.engine.ioTimeoutMs),
          },
        );
        return;
      }
    }
  }

  /** One timer for every deadline: armed for the earliest, re-armed only when an earlier one appears. */
  #arm(): void {
    if (this.#stopped) return;
    const atMs = this.engine.nextDeadlineMs();
    if (atMs === undefined || atMs >= this.#timerAtMs) return;
    clearTimeout(this.#timer);
    this.#timerAtMs = atMs;
    const delayMs = Math.max(0, Math.ceil(atMs - this.#clock.monotonicMs()));
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#timerAtMs = Infinity;
      this.apply(this.engine.tick());
    }, delayMs);
  }

  #checkStalledWrites(): void {
    const now = performance.now();
    for (const session of [...this.writesInFlight]) {
      if (now - session.writeStartedMs > this.engine.ioTimeoutMs) {
        logger.warn("write stalled, closing session", {
          session: session.peer?.sessionId ?? 0,
          remote_addr: session.transport.remoteAddr,
        });
        session.closeForStall();
      }
    }
  }
}

function closeMessage(cause: CloseCause, name: string, ioTimeoutMs: number): string {
  switch (cause) {
    case "admin":
      return `Closed by administrator (action on lock "${name}")`;
    case "io_timeout":
      return `No traffic for ${ioTimeoutMs} ms`;
    case "shutdown":
      return "The server is shutting down";
    default:
      return "Session closed";
  }
}
