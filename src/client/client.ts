/**
 * The lockd client: requests matched to replies by request id, heartbeats, the local lease
 * deadline of every owned lock, the client-side wait bound, reconnects with full-jitter
 * back-off, and (protocol version 2) claims carried over to a new leader after a fail-over:
 * RESUME, then a RECLAIM per claim, before any new ACQUIRE (docs/protocol.md, "Reclaiming after
 * a fail-over"). Every timer runs on an injected {@link Scheduler}; the network is behind one
 * {@link Dial} (transport.ts), so the same code runs on Deno, Node and Bun.
 *
 * @module
 */

import { type Scheduler, systemScheduler, type Timer } from "../clock.ts";
import {
  CLUSTER_CLIENT_SILENCE_MS,
  CONNECT_TIMEOUT_MS_CLUSTER_DEFAULT,
  CONNECT_TIMEOUT_MS_DEFAULT,
} from "../limits.ts";
import { WIRE_CODES } from "../wire/codes.ts";
import {
  type Acquired,
  EMPTY_TICKET,
  type ErrorMessage,
  type ServerMessage,
  WAIT_FOREVER,
} from "../wire/messages.ts";
import { parseHostPort } from "../host_port.ts";
import { VERSION } from "../version.ts";
import { boundClientName, defaultClientName } from "./client_name.ts";
import type { Connection } from "./connection.ts";
import { ConnectionError, LockdError, ServerProtocolError } from "./errors.ts";
import { type Lock, LockHandle } from "./lock_handle.ts";
import { type AcquireOptions, callBack, type Client, type ConnectOptions } from "./options.ts";
import type { LockInfo, Observation, ObserveOptions } from "./observe.ts";
import { redirectVerdict, refusedRedirectText } from "./redirect.ts";
import { openAny, openFirst, type Settings } from "./node_round.ts";
import {
  type Carry,
  chooseCarry,
  forgetTicket,
  ownedReclaim,
  type PendingAcquire,
  queuedReclaim,
  Session,
} from "./session.ts";
import { heartbeatIntervalMs, reconnectDelayMs } from "./timing.ts";
import { Claims } from "./claims.ts";
import { askedKind, claimKind, kindRefusal, wireKind } from "./claim_kind.ts";
import { Looks } from "./looks.ts";
import { type Dial, nodeSocketDial } from "./transport.ts";

export type { Lock } from "./lock_handle.ts";
export type { AcquireOptions, Client, ConnectOptions } from "./options.ts";

/** Closing ERRORs of a leader that stopped leading: its claims are carried over to the next. */
const LEADER_GONE: ReadonlySet<number> = new Set([
  WIRE_CODES.NOT_LEADER.code,
  WIRE_CODES.SHUTTING_DOWN.code,
]);

/**
 * Connects to a lockd server and completes the handshake (within `connectTimeoutMs`).
 *
 * ```ts
 * async function nightly(write: (token: number) => Promise<void>) {
 *   await using client = await connect({ addr: "127.0.0.1:7400" });
 *   await using lock = await client.acquire("jobs/nightly", { leaseMs: 10_000, waitMs: 30_000 });
 *   lock.lost.throwIfAborted();
 *   await write(lock.token); // the guarded resource checks the fencing token
 * }
 * ```
 */
export function connect(options: ConnectOptions): Promise<Client> {
  return connectWith(options);
}

/** Internals a test may replace: the transport and the source of jitter. */
export interface ClientInternals {
  dial?: Dial;
  random?: () => number;
}

/** {@link connect} with replaceable internals (tests only; not exported by mod.ts). */
export async function connectWith(
  options: ConnectOptions,
  internals: ClientInternals = {},
): Promise<Client> {
  const addrs = options.addrs ?? (options.addr === undefined ? [] : [options.addr]);
  if (addrs.length === 0 || (options.addr !== undefined && options.addrs !== undefined)) {
    throw new RangeError("connect() needs either addr or a non-empty addrs");
  }
  for (const addr of addrs) parseHostPort(addr); // a RangeError naming a bad address
  const timeoutMs = options.connectTimeoutMs ??
    (addrs.length > 1 ? CONNECT_TIMEOUT_MS_CLUSTER_DEFAULT : CONNECT_TIMEOUT_MS_DEFAULT);
  if (!(timeoutMs > 0 && timeoutMs <= 2 ** 31 - 1)) {
    throw new RangeError(
      `connectTimeoutMs must be a positive number of milliseconds: ${timeoutMs}`,
    );
  }
  const scheduler = options.scheduler ?? systemScheduler;
  const settings: Settings = {
    addrs,
    clientName: boundClientName(options.clientName ?? defaultClientName(`lockd-ts/${VERSION}`)),
    tls: options.tls,
    reconnect: options.reconnect ?? true,
    reclaim: options.reclaim ?? true,
    timeoutMs,
    signal: options.signal,
    onProtocolError: options.onProtocolError,
    scheduler,
    dial: internals.dial ?? nodeSocketDial(scheduler),
    random: internals.random ?? Math.random,
    onReconnectFailed: options.onReconnectFailed,
    onValueDropped: options.onValueDropped,
  };
  const { connection, addr } = await openFirst(settings, options.signal);
  return new LockdClient(settings, connection, addr);
}

class LockdClient implements Client {
  readonly #settings: Settings;
  readonly #scheduler: Scheduler;
  #session: Session | null = null;
  #nextRequestId = 1;
  readonly #claims: Claims;
  /** QUERY, WATCH and SET_VALUE (looks.ts): sent on each connection, answers checked there. */
  readonly #looks = new Looks(() => this.#nextRequestId++);
  /** Sent ACQUIREs and queued RECLAIMs of the current session by request id (abandoned too). */
  readonly #pending = new Map<number, PendingAcquire>();
  /** ACQUIREs waiting for a connection (and, while RECLAIMs go out, for them). */
  readonly #unsent = new Set<PendingAcquire>();
  /** Owned locks of the current session by the request id of their ACQUIRE or RECLAIM. */
  readonly #owned = new Map<number, LockHandle>();
  /** Owned RECLAIMs of the current session waiting for their answer, by request id. */
  readonly #reclaims = new Map<number, LockHandle>();
  /** RELEASEs of the current session whose answer a release() waits for, by request id. */
  readonly #releases = new Map<number, LockHandle>();
  /** What each release() in progress resolves or rejects. */
  readonly #releaseWaiters = new Map<LockHandle, { resolve(): void; reject(e: unknown): void }>();
  /** Claims of lost version-2 connections, oldest first, for the next connection to reclaim. */
  readonly #carries: Carry[] = [];
  /** The carry each lock being carried over belongs to. */
  readonly #carryOf = new Map<LockHandle, Carry>();
  /** Term and session id of the version-2 session that ended last: the next one resumes it. */
  #previous: { term: number; sessionId: number } | null = null;
  /** While RESUME and the RECLAIMs go out: new ACQUIREs wait in `#unsent`. */
  #holdingAcquires = false;
  #reconnectTimer: Timer | null = null;
  #reconnectAttempt = 0;
  #reconnecting: Promise<void> | null = null;
  /** Aborted by close(): ends a reconnect attempt in progress. */
  readonly #lifetime = new AbortController();
  #closed = false;
  /** The connection ended and `reconnect` is off: the client is of no more use. */
  #failed = false;
  #closing: Promise<void> | null = null;
  /** Connections given up or retired: close() waits for their sockets. */
  readonly #retiring = new Set<Promise<void>>();
  readonly #onOuterAbort = () => void this.close();
  /** Where the next reconnect starts: the node that served last, or the leader it named. */
  #preferred: string | null;
  /** A node that went silent (frozen, cut off): tried last by the next reconnect. */
  #avoid: string | null = null;
  #protocolErrors = 0;
  /**
   * Connections in a row that ended because the server broke the protocol: a WELCOME resets
   * the back-off only to this, so a node that welcomes and then misbehaves is not redialled
   * in a storm.
   */
  #violationsInARow = 0;

  constructor(settings: Settings, connection: Connection, addr: string) {
    this.#settings = settings;
    this.#scheduler = settings.scheduler;
    this.#claims = new Claims({
      scheduler: settings.scheduler,
      connected: () => this.#session !== null,
      closed: () => this.#closed,
      sendAcquire: (pending) => this.#sendAcquire(pending),
      sendRelease: (claim, acquireRequestId) => this.#sendRelease(claim, acquireRequestId),
      retire: (connection) => this.#retire(connection),
      armHeartbeat: () => this.#armHeartbeat(),
      onValueDropped: settings.onValueDropped,
    });
    this.#preferred = addr;
    settings.signal?.addEventListener("abort", this.#onOuterAbort, { once: true });
    this.#attach(connection, addr);
    if (settings.signal?.aborted) void this.close();
  }

  get sessionId(): number {
    return this.#session?.connection.welcome.sessionId ?? 0;
  }

  get serverVersion(): string {
    return this.#session?.connection.welcome.serverVersion ?? "";
  }

  get protocolVersion(): number {
    return this.#session?.version ?? 0;
  }

  get protocolErrors(): number {
    return this.#protocolErrors;
  }

  acquire(name: string, options: AcquireOptions = {}): Promise<Lock> {
    if (this.#closed) return Promise.reject(new ConnectionError("The client is closed"));
    if (this.#failed) {
      return Promise.reject(new ConnectionError("The connection to the lockd server was lost"));
    }
    const leaseMs = options.leaseMs ?? 0;
    if (!(Number.isInteger(leaseMs) && leaseMs >= 0 && leaseMs <= 0xffff_ffff)) {
      return Promise.reject(new RangeError(`leaseMs must be a whole number of ms: ${leaseMs}`));
    }
    const waitMs = options.waitMs ?? Infinity;
    if (!(waitMs >= 0)) {
      return Promise.reject(new RangeError(`waitMs must be 0 or more: ${waitMs}`));
    }
    const kind = claimKind(options);
    if (kind instanceof Error) return Promise.reject(kind);
    if (options.signal?.aborted) return Promise.reject(options.signal.reason);
    const bounded = waitMs > 0 && Number.isFinite(waitMs);
    return new Promise<Lock>((resolve, reject) => {
      const pending: PendingAcquire = {
        name,
        requestedLeaseMs: leaseMs,
        waitEndMs: bounded ? this.#scheduler.monotonicMs() + waitMs : null,
        waitMs: waitMs === 0
          ? 0
          : bounded
          ? Math.min(WAIT_FOREVER - 1, Math.ceil(waitMs))
          : WAIT_FOREVER,
        suspend: options.suspend ?? false,
        kind,
        state: "unsent",
        requestId: 0,
        sentAtMs: 0,
        ticket: EMPTY_TICKET,
        ticketSessionId: 0,
        orderTerm: 0,
        orderSeq: 0,
        carry: null,
        resolve,
        reject,
        signal: options.signal,
      };
      if (bounded) {
        pending.waitTimer = this.#scheduler.setTimer(
          () =>
            this.#giveUp(
              pending,
              new LockdError(
                WIRE_CODES.WAIT_TIMEOUT.code,
                name,
                `Cannot acquire lock "${name}": wait timed out after ${waitMs} ms`,
              ),
            ),
          waitMs,
        );
      }
      if (options.signal) {
        const signal = options.signal;
        pending.onAbort = () => this.#giveUp(pending, signal.reason);
        signal.addEventListener("abort", pending.onAbort, { once: true });
      }
      this.#sendAcquire(pending);
    });
  }

  async tryAcquire(
    name: string,
    options: Omit<AcquireOptions, "waitMs"> = {},
  ): Promise<Lock | null> {
    try {
      return await this.acquire(name, { ...options, waitMs: 0 });
    } catch (error) {
      if (error instanceof LockdError && error.code === WIRE_CODES.WAIT_TIMEOUT.code) return null;
      throw error;
    }
  }

  query(name: string): Promise<LockInfo> {
    return this.#looks.query(name);
  }

  observe(pattern: string, options?: ObserveOptions): Observation {
    return this.#looks.observe(pattern, options);
  }

  close(): Promise<void> {
    if (this.#closing !== null) return this.#closing;
    this.#closed = true;
    this.#looks.stop(new ConnectionError("The client is closed"), false);
    this.#settings.signal?.removeEventListener("abort", this.#onOuterAbort);
    this.#lifetime.abort(new ConnectionError("The client is closed"));
    this.#reconnectTimer?.cancel();
    this.#reconnectTimer = null;
    const session = this.#session;
    this.#session = null;
    session?.cancelTimers();
    // GOODBYE: the server ends the session gracefully; nothing of it is kept for a reclaim.
    session?.connection.goodbye(this.#nextRequestId++);
    for (const carry of [...this.#claims.carries]) this.#claims.giveUpCarry(carry, "disconnected");
    this.#claims.endAll(
      "disconnected",
      (pending) => this.#reject(pending, new ConnectionError("The client is closed")),
    );
    this.#claims.stop();
    this.#closing = Promise.all([
      session?.connection.socketClosed,
      this.#reconnecting,
      ...this.#retiring,
    ]).then(() => {});
    return this.#closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // ---- connection life ------------------------------------------------------------------

  #attach(connection: Connection, addr: string): void {
    const session = new Session(connection, addr, this.#scheduler.monotonicMs());
    this.#session = session;
    connection.onMessage = (message) => this.#onMessage(session, message);
    connection.onClose = (closingError) => this.#onConnectionClosed(session, closingError);
    connection.onViolation = (what) => this.#violation(session, what);
    connection.start();
    if (this.#session !== session) return; // closed while delivering what came with WELCOME
    // Claims carried over first (RESUME, then every RECLAIM), before any new ACQUIRE.
    this.#resume(session);
    const unsent = [...this.#claims.unsent];
    this.#claims.unsent.clear();
    for (const pending of unsent) this.#sendAcquire(pending);
    this.#looks.attached(session);
    this.#armHeartbeat();
    this.#claims.armDeadline();
  }

  #onConnectionClosed(session: Session, closingError: ErrorMessage | null): void {
    if (this.#session !== session) return;
    if (closingError?.code === WIRE_CODES.NOT_LEADER.code) {
      // A node that stopped leading names the new leader when it knows it: go there first,
      // if redirect.ts allows it; a name that is no address is that node's failure.
      const name = closingError.name;
      const verdict = redirectVerdict(name, this.#settings.addrs, this.#settings.tls !== undefined);
      this.#preferred = verdict.follow ? verdict.addr : null;
      // A node that stopped leading is asked last when it names no leader to follow.
      if (!verdict.follow && this.#settings.addrs.length > 1) this.#avoid = session.addr;
      if (!verdict.follow && verdict.why === "invalid") {
        this.#report(
          new ServerProtocolError(session.addr, refusedRedirectText(session.addr, name, "invalid")),
        );
      }
    }
    this.#endSession(session, closingError?.code ?? null, false);
  }

  /**
   * Whether the claims of `session`, which just ended, are carried over to the next connection:
   * only when the server that had them may not have ended them on purpose. The client gave the
   * connection up as silent (a frozen or cut-off server, a stalled path: the server may still
   * hold the session, and a single node moves it); or, in cluster mode (a term above 0), it
   * closed without an ERROR (a leader that died, a reset) or with NOT_LEADER or SHUTTING_DOWN (a
   * leader that stopped leading). Not after CLOSED_BY_ADMIN, IO_TIMEOUT or another closing ERROR,
   * a protocol error, or on a single node whose connection closed: a server that still serves
   * has ended those ownerships (and may grant the locks again at once), and a restarted one
   * remembers none.
   */
  #carriesOver(session: Session, closeCode: number | null, abandoned: boolean): boolean {
    if (this.#closed || session.violated || !this.#takesReclaims(session)) return false;
    if (abandoned) return true;
    const term = session.connection.welcome.term ?? 0;
    return term > 0 && (closeCode === null || LEADER_GONE.has(closeCode));
  }

  /** Claims of `session` can be carried over (this client reclaims, its server takes them). */
  #takesReclaims(session: Session): boolean {
    return this.#settings.reclaim && this.#settings.reconnect && session.takesReclaims;
  }

  /**
   * The connection ended. Owned locks are lost, or carried over (`#carriesOver`); waiting
   * acquires wait for the next session, carried over with their place or at the tail.
   * `abandoned`: the client gave it up (silent); with claims to carry its socket stays open.
   */
  #endSession(session: Session, closeCode: number | null, abandoned: boolean): void {
    if (this.#session !== session) return;
    this.#session = null;
    session.cancelTimers();
    this.#looks.detached();
    if (session.violated) {
      // That node broke the protocol: try the others first, and keep backing off.
      if (this.#settings.addrs.length > 1) this.#avoid = session.addr;
      this.#preferred = null;
    } else {
      this.#violationsInARow = 0;
    }
    const nowMs = this.#scheduler.monotonicMs();
    const welcome = session.connection.welcome;
    if (session.version === 2 && !session.violated) {
      this.#previous = { term: welcome.term ?? 0, sessionId: welcome.sessionId };
    }
    const carry: Carry | null = this.#carriesOver(session, closeCode, abandoned)
      ? {
        term: welcome.term ?? 0,
        sessionId: welcome.sessionId,
        lostAtMs: nowMs,
        windowEndMs: nowMs + (welcome.reclaimWindowMs ?? 0),
        kept: abandoned ? session.connection : null,
        locks: [],
        queued: [],
        timer: null,
        windowOver: false,
      }
      : null;
    if (carry?.kept == null) session.connection.close();
    this.#claims.carryOwnerships(closeCode, carry);
    this.#carryWaits(session, carry);
    if (carry !== null) this.#claims.keepCarry(carry);
    this.#claims.armDeadline();
    if (this.#closed || !this.#settings.reconnect) return;
    // A fail-over with the new leader named: follow it at once, without back-off.
    this.#scheduleReconnect(
      closeCode === WIRE_CODES.NOT_LEADER.code && this.#preferred !== null,
    );
  }

  /** The waiting acquires of a session that ended: carried over in `carry`, or to the tail. */
  #carryWaits(session: Session, carry: Carry | null): void {
    const waiting = [...this.#claims.pending.values()].filter((p) => p.state !== "abandoned");
    this.#claims.pending.clear();
    if (this.#closed || !this.#settings.reconnect) {
      if (!this.#closed) this.#failed = true;
      const error = new ConnectionError(
        this.#closed ? "The client is closed" : "The connection to the lockd server was lost",
      );
      for (const pending of [...waiting, ...this.#claims.unsent]) this.#reject(pending, error);
      this.#looks.stop(error, !this.#closed);
      this.#claims.unsent.clear();
      return;
    }
    this.#claims.carryWaits(waiting, session.connection.welcome.sessionId, carry);
  }

  #scheduleReconnect(now = false): void {
    const delayMs = now ? 0 : reconnectDelayMs(this.#reconnectAttempt, this.#settings.random);
    this.#reconnectAttempt++;
    this.#reconnectTimer = this.#scheduler.setTimer(() => {
      this.#reconnectTimer = null;
      this.#reconnecting = this.#reconnect().finally(() => this.#reconnecting = null);
    }, delayMs);
  }

  async #reconnect(): Promise<void> {
    if (this.#closed) return;
    let connection: Connection;
    let addr: string;
    try {
      const opened = await openAny(
        this.#settings,
        this.#preferred,
        this.#lifetime.signal,
        this.#avoid,
      );
      connection = opened.connection;
      addr = opened.addr;
      this.#preferred = opened.addr;
      this.#avoid = null;
    } catch (error) {
      if (this.#closed) return;
      callBack(this.#settings.onReconnectFailed, this.#reconnectAttempt, error as Error);
      this.#scheduleReconnect();
      return;
    }
    if (this.#closed) {
      connection.close();
      await connection.socketClosed;
      return;
    }
    // Only a WELCOME resets the back-off (not below the count of misbehaving nodes in a row).
    this.#reconnectAttempt = this.#violationsInARow;
    this.#attach(connection, addr);
  }

  // ---- carrying claims over (protocol version 2) ------------------------------------------

  /**
   * After WELCOME: RESUME and a RECLAIM per claim of one carry; the others, and all of them when
   * this server takes no reclaims, are given up. With nothing to carry over, a RESUME of no
   * claims still names the version-2 session that ended: a new leader after a planned hand-over
   * ends its reclaim window early once every session it lists is back.
   */
  #resume(session: Session): void {
    const previous = this.#previous;
    this.#previous = null;
    let resumed = false;
    if (this.#claims.carries.length > 0) {
      // Claims given up here go out after the RECLAIMs, with the new ACQUIREs.
      this.#holdingAcquires = true;
      try {
        resumed = this.#resumeCarry(session);
      } finally {
        this.#holdingAcquires = false;
      }
    }
    if (!resumed && previous !== null && session.takesReclaims) {
      this.#sendResume(session, previous.term, previous.sessionId, 0);
    }
  }

  #sendResume(session: Session, term: number, sessionId: number, claims: number): void {
    const requestId = this.#nextRequestId++;
    session.resumeId = requestId;
    session.ledger.resumeSent(requestId);
    session.connection.send({
      type: "resume",
      requestId,
      prevTerm: term,
      prevSessionId: sessionId,
      claims,
    });
  }

  /** RESUME and the RECLAIMs of the carry chosen; false when none was sent. */
  #resumeCarry(session: Session): boolean {
    const chosen = this.#takesReclaims(session) ? chooseCarry(this.#claims.carries) : null;
    for (const carry of [...this.#claims.carries]) {
      if (carry !== chosen) this.#claims.giveUpCarry(carry, "failover");
    }
    if (chosen === null) return false;
    const { locks, queued } = this.#claims.toReclaim(chosen, session.connection.welcome);
    if (locks.length + queued.length === 0) return false;
    this.#sendResume(session, chosen.term, chosen.sessionId, locks.length + queued.length);
    for (const handle of locks) this.#sendOwnedReclaim(session, handle);
    for (const pending of queued) this.#sendQueuedReclaim(session, pending);
    return true;
  }

  #sendOwnedReclaim(session: Session, handle: LockHandle): void {
    const requestId = this.#nextRequestId++;
    handle.reclaimRequestId = requestId;
    handle.reclaimSentAtMs = this.#scheduler.monotonicMs();
    this.#claims.reclaims.set(requestId, handle);
    const asked = { mode: handle.mode, limit: handle.limit, slot: handle.slot };
    session.ledger.reclaimSent(requestId, handle.name, "owned", handle.token, asked);
    session.connection.send(ownedReclaim(handle, requestId));
  }

  #sendQueuedReclaim(session: Session, pending: PendingAcquire): void {
    const waitMs = this.#waitLeft(pending);
    this.#register(pending);
    const asked = askedKind(pending.kind, 2);
    session.ledger.reclaimSent(pending.requestId, pending.name, "queued", 0, asked);
    session.connection.send(queuedReclaim(pending, waitMs));
  }

  /** Closes a connection given up or done with: GOODBYE (version 2), then the socket. */
  #retire(connection: Connection): void {
    if (connection.closed) return;
    connection.goodbye(this.#nextRequestId++);
    const closed = connection.socketClosed;
    this.#retiring.add(closed);
    void closed.then(() => this.#retiring.delete(closed));
  }

  // ---- requests ---------------------------------------------------------------------------

  /** What is left of a waiting acquire's bound, for the wire. */
  #waitLeft(pending: PendingAcquire): number {
    if (pending.waitEndMs === null) return pending.waitMs;
    const leftMs = pending.waitEndMs - this.#scheduler.monotonicMs();
    return Math.max(0, Math.min(WAIT_FOREVER - 1, Math.ceil(leftMs)));
  }

  /** Books a waiting acquire's request (an ACQUIRE or a queued RECLAIM) on `session`. */
  #register(pending: PendingAcquire): void {
    pending.state = "sent";
    pending.requestId = this.#nextRequestId++;
    pending.sentAtMs = this.#scheduler.monotonicMs();
    this.#claims.pending.set(pending.requestId, pending);
    this.#armHeartbeat(); // a waiting claim's lease counts for the cadence
  }

  #sendAcquire(pending: PendingAcquire): void {
    const session = this.#session;
    if (session === null || this.#holdingAcquires || this.#claims.handingBack(pending.name)) {
      pending.state = "unsent";
      this.#claims.unsent.add(pending); // after the next WELCOME (its RECLAIMs), or a hand-back
      return;
    }
    const refusal = kindRefusal(pending, session);
    if (refusal !== null) return this.#reject(pending, refusal);
    const waitMs = this.#waitLeft(pending);
    forgetTicket(pending); // a new place at the tail
    this.#register(pending);
    const asked = askedKind(pending.kind, session.version);
    session.ledger.acquireSent(pending.requestId, pending.name, asked);
    session.connection.send({
      type: "acquire",
      requestId: pending.requestId,
      name: pending.name,
      leaseMs: pending.requestedLeaseMs,
      waitMs,
      ...wireKind(pending.kind, session.version), // version 2: mode, limit, value
    });
  }

  /** The caller stops waiting (wait bound, abort); a queued claim is cancelled on the server. */
  #giveUp(pending: PendingAcquire, error: unknown): void {
    if (pending.state === "abandoned") return;
    this.#settle(pending);
    this.#claims.outOfCarry(pending);
    if (pending.state === "unsent" || pending.state === "carried") {
      this.#claims.unsent.delete(pending);
      pending.state = "abandoned";
    } else if (this.#claims.pending.get(pending.requestId) === pending) {
      // Kept until the server's own answer: a grant that crossed the cancel is released then.
      pending.state = "abandoned";
      this.#sendRelease({ name: pending.name, token: 0 }, 0);
    }
    pending.reject(error);
  }

  /** Stops the wait timer and the abort listener of an acquire that is being settled. */
  #settle(pending: PendingAcquire): void {
    pending.waitTimer?.cancel();
    if (pending.onAbort) pending.signal?.removeEventListener("abort", pending.onAbort);
  }

  #reject(pending: PendingAcquire, error: unknown): void {
    if (pending.state === "abandoned") return;
    pending.state = "abandoned";
    this.#settle(pending);
    pending.reject(error);
  }

  /**
   * Sends RELEASE (`token` 0: a cancel); the ledger still expects its answer (so it is checked),
   * which also ends what may come for the request `acquireRequestId` (0: a token-0 cancel).
   */
  #sendRelease(claim: { name: string; token: number }, acquireRequestId: number): number {
    const session = this.#session;
    if (session === null) return 0;
    const requestId = this.#nextRequestId++;
    session.ledger.releaseSent(requestId, claim.name, acquireRequestId);
    session.connection.send({
      type: "release",
      requestId,
      name: claim.name,
      token: claim.token,
    });
    return requestId;
  }

  // ---- replies ----------------------------------------------------------------------------

  #onMessage(session: Session, message: ServerMessage): void {
    if (this.#session !== session) return;
    const nowMs = this.#scheduler.monotonicMs();
    session.lastFrameAtMs = nowMs;
    // A deadline that has passed is final, whatever this frame says.
    this.#claims.expireOverdue(nowMs);
    if (message.type === "welcome") return; // the connection lets only replies through
    // A reply must fit the request it names (request id 0: a server condition, handled below).
    const look = this.#looks.has(message.requestId); // QUERY, WATCH, SET_VALUE: looks.ts
    const misfit = message.requestId === 0
      ? null
      : (look ? this.#looks : session.ledger).accept(message);
    if (misfit !== null) {
      this.#violation(session, misfit);
      session.connection.close();
      return;
    }
    if (look) return;
    switch (message.type) {
      case "acquired":
        if (this.#claims.reclaims.has(message.requestId)) {
          this.#claims.reclaimKept(session, message);
        } else this.#onAcquired(session, message);
        break;
      case "released": {
        const handle = this.#claims.releases.get(message.requestId);
        if (handle !== undefined) this.#claims.ownershipOver(handle, "disconnected");
        break;
      }
      case "heartbeat_ack":
        this.#onHeartbeatAck(session, message.requestId);
        break;
      case "error":
        this.#onError(session, message);
        break;
      case "queued":
        this.#claims.queued(session, message);
        break;
      case "resumed":
        if (message.requestId === session.resumeId) this.#onResumed(session);
        break;
      default:
        break; // the ledger lets only replies to this client's requests through
    }
    this.#claims.armDeadline();
    this.#armHeartbeat();
  }

  #onAcquired(session: Session, message: Acquired): void {
    const pending = this.#claims.pending.get(message.requestId);
    if (pending === undefined) return;
    this.#claims.pending.delete(message.requestId);
    this.#claims.outOfCarry(pending);
    if (pending.state === "abandoned") {
      // The caller gave up while the grant was on its way: hand it back at once.
      this.#sendRelease(message, message.requestId);
      return;
    }
    this.#settle(pending);
    pending.state = "abandoned"; // settled: nothing more happens to it
    const handle = new LockHandle(
      {
        name: message.name,
        token: message.token,
        leaseMs: message.leaseMs,
        requestId: message.requestId,
        confirmedSendMs: pending.sentAtMs,
        confirmer: session,
        suspend: pending.suspend,
        grant: message,
        value: pending.kind.value,
        values: this.#looks,
      },
      (h) => this.#claims.release(h),
      (h) => this.#claims.checkDeadline(h),
    );
    handle.ticket = session.takesReclaims ? message.ticket ?? EMPTY_TICKET : EMPTY_TICKET;
    this.#claims.owned.set(message.requestId, handle);
    if (this.#scheduler.monotonicMs() >= handle.deadlineMs) {
      // Granted too late to be confirmed (a long wait without acknowledged heartbeats): it
      // arrives lost, and goes back to the server at once.
      this.#claims.ownershipOver(handle, "lease_unconfirmed");
      this.#sendRelease(handle, handle.requestId);
    }
    pending.resolve(handle);
  }

  #onHeartbeatAck(session: Session, requestId: number): void {
    const sentAtMs = session.heartbeats.get(requestId);
    if (sentAtMs === undefined) return;
    // Replies come in order: an ACK also answers every older heartbeat.
    for (const [id] of session.heartbeats) {
      session.heartbeats.delete(id);
      if (id === requestId) break;
    }
    session.lastAckedHeartbeatSendMs = Math.max(session.lastAckedHeartbeatSendMs, sentAtMs);
    this.#claims.confirmSuspended();
  }

  /** The new server has decided about the old session: a socket kept for it is closed now. */
  #onResumed(session: Session): void {
    session.resumeId = 0;
    for (const carry of this.#claims.carries) {
      if (carry.kept !== null) this.#retire(carry.kept);
      carry.kept = null;
    }
  }

  #onError(session: Session, error: ErrorMessage): void {
    const { requestId, code } = error;
    if (requestId === 0) return; // INVALID_ARGUMENT for a request with id 0: never sent
    if (code === WIRE_CODES.LEASE_EXPIRED.code) {
      const handle = this.#claims.owned.get(requestId);
      if (handle !== undefined) this.#claims.ownershipOver(handle, "expired");
      return;
    }
    const failure = new LockdError(code, error.name, error.message);
    if (requestId === session.resumeId) {
      // RESUME refused (INVALID_ARGUMENT): nothing is moved; each RECLAIM gets its own answer.
      this.#onResumed(session);
      return;
    }
    const reclaimed = this.#claims.reclaims.get(requestId);
    if (reclaimed !== undefined) {
      // CLAIM_VOID (or another refusal): the lock could not be carried over.
      this.#claims.reclaims.delete(requestId);
      reclaimed.reclaimRequestId = 0;
      this.#claims.carriedLost(reclaimed, "failover", failure);
      return this.#claims.sendHeldBack();
    }
    const pending = this.#claims.pending.get(requestId);
    if (pending !== undefined) {
      this.#claims.pending.delete(requestId);
      this.#claims.outOfCarry(pending);
      this.#reject(pending, failure);
      return;
    }
    const handle = this.#claims.releases.get(requestId);
    if (handle !== undefined) this.#claims.ownershipOver(handle, "disconnected", failure);
  }

  // ---- ownerships and deadlines -----------------------------------------------------------

  // ---- heartbeats and silence ---------------------------------------------------------------

  #armHeartbeat(): void {
    const session = this.#session;
    if (session === null) return;
    const intervalMs = heartbeatIntervalMs(
      session.ioTimeoutMs,
      this.#claims.leasesInPlay(session.connection.welcome),
    );
    const dueMs = session.lastHeartbeatSentMs + intervalMs;
    if (session.heartbeatTimer !== null && session.heartbeatDueMs <= dueMs) return;
    session.heartbeatTimer?.cancel();
    session.heartbeatDueMs = dueMs;
    session.heartbeatTimer = this.#scheduler.setTimer(
      () => this.#heartbeat(session),
      dueMs - this.#scheduler.monotonicMs(),
    );
  }

  #heartbeat(session: Session): void {
    session.heartbeatTimer = null;
    session.heartbeatDueMs = Infinity;
    if (this.#session !== session) return;
    const nowMs = this.#scheduler.monotonicMs();
    const requestId = this.#nextRequestId++;
    session.heartbeats.set(requestId, nowMs);
    session.ledger.heartbeatSent(requestId);
    session.lastHeartbeatSentMs = nowMs;
    session.connection.send({ type: "heartbeat", requestId });
    this.#armSilence(session);
    this.#armHeartbeat();
  }

  /**
   * How long a connection may stay silent after an unanswered heartbeat: the I/O timeout (the
   * server would have closed a session as silent as that), or 3 s with several nodes (a frozen
   * or cut-off leader: another node takes over meanwhile) and on a session whose claims can be
   * carried over (well before the deadlines of long leases).
   */
  #silenceMs(session: Session): number {
    return this.#settings.addrs.length > 1 || this.#takesReclaims(session)
      ? Math.min(session.ioTimeoutMs, CLUSTER_CLIENT_SILENCE_MS)
      : session.ioTimeoutMs;
  }

  /** The silence check runs on its own timer, not at the next heartbeat. */
  #armSilence(session: Session): void {
    if (session.silenceTimer !== null || session.heartbeats.size === 0) return;
    const oldest = session.heartbeats.values().next().value!;
    const dueMs = Math.max(oldest, session.lastFrameAtMs) + this.#silenceMs(session);
    session.silenceTimer = this.#scheduler.setTimer(
      () => this.#silenceDue(session),
      dueMs - this.#scheduler.monotonicMs(),
    );
  }

  #silenceDue(session: Session): void {
    session.silenceTimer = null;
    if (this.#session !== session || session.heartbeats.size === 0) return;
    const nowMs = this.#scheduler.monotonicMs();
    const oldest = session.heartbeats.values().next().value!;
    const silenceMs = this.#silenceMs(session);
    if (nowMs - oldest < silenceMs || nowMs - session.lastFrameAtMs < silenceMs) {
      this.#armSilence(session);
      return;
    }
    // No answer for that long: the server closed its side by now, or the path is dead, or
    // (cluster) the leader froze or was cut off.
    if (this.#settings.addrs.length > 1) {
      // That node may be frozen: a new connection to it would wait out the connect timeout.
      this.#avoid = session.addr;
      this.#preferred = null;
    }
    this.#endSession(session, null, true);
  }

  /** The server broke the protocol on `session`'s connection, which is closing. */
  #violation(session: Session, what: string): void {
    if (session.violated) return;
    session.violated = true;
    this.#violationsInARow++;
    this.#report(new ServerProtocolError(session.addr, what));
  }

  /** Counts a protocol error and hands it to the application's callback. */
  #report(error: ServerProtocolError): void {
    this.#protocolErrors++;
    callBack(this.#settings.onProtocolError, error);
  }
}
