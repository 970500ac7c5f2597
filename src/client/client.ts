/**
 * The lockd client: requests matched to replies by request id, heartbeats, the local lease
 * deadline of every owned lock, the client-side wait bound, and reconnects with full-jitter
 * back-off. Every timer runs on an injected {@link Scheduler}; the network is behind one
 * {@link Dial} (transport.ts), so the same code runs on Deno, Node and Bun.
 *
 * @module
 */

import { type Scheduler, systemScheduler, type Timer } from "../clock.ts";
import { CLUSTER_CLIENT_SILENCE_MS, CONNECT_TIMEOUT_MS_DEFAULT } from "../limits.ts";
import { WIRE_CODES } from "../wire/codes.ts";
import { type ErrorMessage, type ServerMessage, WAIT_FOREVER } from "../wire/messages.ts";
import { parseHostPort } from "../host_port.ts";
import { VERSION } from "../version.ts";
import { boundClientName, defaultClientName } from "./client_name.ts";
import { Connection } from "./connection.ts";
import { ConnectionError, LockdError, type LostReason, ServerProtocolError } from "./errors.ts";
import { type Lock, LockHandle } from "./lock_handle.ts";
import { redirectVerdict, refusedRedirectText } from "./redirect.ts";
import { ReplyLedger } from "./reply_ledger.ts";
import { openAny, type Settings } from "./node_round.ts";
import {
  effectiveLeaseMs,
  heartbeatIntervalMs,
  localDeadlineMs,
  reconnectDelayMs,
} from "./timing.ts";
import { type ClientTlsOptions, type Dial, nodeSocketDial } from "./transport.ts";

export type { Lock } from "./lock_handle.ts";

/** Options of {@link connect}. */
export interface ConnectOptions {
  /** Server address, `host:port` (IPv6 as `[::1]:7400`). Give this or `addrs`. */
  addr?: string;
  /**
   * The nodes of a lockd cluster (docs/cluster.md), tried in order. A node that is not the
   * leader answers NOT_LEADER naming the leader, and the client goes there at once: to an
   * address of this list always, to any other address only with `tls` (the node reached must
   * present a certificate from your CA); a name that is not a `host:port` counts as a failed
   * node. A node without a leader yet holds the HELLO until one is elected. A connection that
   * stays silent for 3 s while heartbeats are due is given up (a frozen leader). Give this or
   * `addr`.
   */
  addrs?: readonly string[];
  /**
   * Sent in HELLO: the server shows it in the admin API (holders and waiters) and writes it
   * into the audit records of acquire and release. Default `lockd-ts/<version>@<host>:<pid>`
   * (without `@<host>` on Deno when the process may not read the host name: `--allow-sys`).
   * Informational, not authenticated; cut to 256 UTF-8 bytes (between two characters, marked
   * with "…"), the protocol's limit, so a long name never fails a connect.
   */
  clientName?: string;
  /** TLS (and mutual TLS with `cert` + `key`); plain TCP when absent. */
  tls?: ClientTlsOptions;
  /**
   * Reconnect after the server closed the session (ERROR 0x02, shutdown, I/O timeout, network
   * loss), with full-jitter exponential back-off: attempt n waits a random time between 0 and
   * min(5000, 50 × 2^n) ms, and n goes back to 0 only after a WELCOME. Waiting claims rejoin
   * the tail of their queues on the new session; owned locks report `lost`. Default true.
   */
  reconnect?: boolean;
  /**
   * Bound on dialling, the TLS handshake and HELLO/WELCOME, for `connect()` and for every
   * reconnect attempt, in milliseconds. Default 5000.
   */
  connectTimeoutMs?: number;
  /**
   * Called after each failed reconnect attempt with its number since the last WELCOME (1, 2, ...)
   * and its error; not for the first connection (`connect()` rejects with that failure). A
   * program can say what it is trying while no node answers (`lockd run` does, every 10 s).
   * An exception it throws is ignored.
   */
  onReconnectFailed?: (attempt: number, error: Error) => void;
  /**
   * Aborting it stops the client: a `connect()` in progress rejects with the signal's reason,
   * a connected client closes as with `close()`, and no reconnect is attempted any more.
   */
  signal?: AbortSignal;
  /**
   * Called when a server breaks the protocol (a reply that does not fit its request, a WELCOME
   * out of bounds on a reconnect, a malformed frame, a NOT_LEADER naming no address): the
   * client has closed that connection and goes on as after any lost connection. Also counted
   * in `client.protocolErrors`. A callback that throws is ignored.
   */
  onProtocolError?: (error: ServerProtocolError) => void;
  /**
   * Testing hook: the clock and timers of the heartbeats, the lease deadlines, the wait bound,
   * the reconnect back-off, the connect timeout and the grace of a socket's close. Default: the process clock with real
   * timers. A test can pass a scheduler whose time it moves by hand.
   */
  scheduler?: Scheduler;
}

/** Options of {@link Client.acquire}. */
export interface AcquireOptions {
  /** Lease in milliseconds; 0 or absent = the server's default. Heartbeats keep it alive. */
  leaseMs?: number;
  /**
   * How long to wait in the queue, in milliseconds; absent or `Infinity` = without bound.
   * The bound holds on the client's clock: when it passes, `acquire` rejects with a
   * {@link LockdError} WAIT_TIMEOUT (0x07) even if the server is slow to answer, and the
   * claim is cancelled on the server. 0 is a try-lock (the server answers at once).
   */
  waitMs?: number;
  /** Aborting it gives up the wait (rejecting with the signal's reason) and leaves the queue. */
  signal?: AbortSignal;
}

/** A session with a lockd server; create it with {@link connect}. */
export interface Client extends AsyncDisposable {
  /** The server's session id of the current connection (changes after a reconnect; 0 while reconnecting). */
  readonly sessionId: number;
  /** The server's version, from WELCOME ("" while reconnecting). */
  readonly serverVersion: string;
  /**
   * How many times a server broke the protocol on this client's connections (each one closed
   * the connection; see {@link ConnectOptions.onProtocolError}).
   */
  readonly protocolErrors: number;
  /**
   * Waits for the lock in its FIFO queue and resolves once it is owned. Rejects with a
   * {@link LockdError} (e.g. WAIT_TIMEOUT when `waitMs` ran out, ACL_DENIED,
   * DUPLICATE_CLAIM) or a {@link ConnectionError} (client closed, connection lost without
   * reconnect).
   */
  acquire(name: string, options?: AcquireOptions): Promise<Lock>;
  /** Takes the lock if it is free right now; resolves to null when it is held by someone. */
  tryAcquire(name: string, options?: Omit<AcquireOptions, "waitMs">): Promise<Lock | null>;
  /**
   * Closes the session: the server releases the owned locks (their `lost` fires with reason
   * `disconnected`) and pending acquires reject. Resolves once the socket is closed.
   */
  close(): Promise<void>;
}

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
  const timeoutMs = options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS_DEFAULT;
  if (!(timeoutMs > 0 && timeoutMs <= 2 ** 31 - 1)) {
    throw new RangeError(
      `connectTimeoutMs must be a positive number of milliseconds: ${timeoutMs}`,
    );
  }
  const scheduler = options.scheduler ?? systemScheduler;
  const dial = internals.dial ?? nodeSocketDial(scheduler);
  const addrs = options.addrs ?? (options.addr === undefined ? [] : [options.addr]);
  if (addrs.length === 0 || (options.addr !== undefined && options.addrs !== undefined)) {
    throw new RangeError("connect() needs either addr or a non-empty addrs");
  }
  for (const addr of addrs) parseHostPort(addr); // a RangeError naming a bad address

  const settings: Settings = {
    addrs,
    clientName: boundClientName(options.clientName ?? defaultClientName(`lockd-ts/${VERSION}`)),
    tls: options.tls,
    reconnect: options.reconnect ?? true,
    timeoutMs,
    signal: options.signal,
    onProtocolError: options.onProtocolError,
    scheduler,
    dial,
    random: internals.random ?? Math.random,
    onReconnectFailed: options.onReconnectFailed,
  };
  const { connection, addr } = await openAny(settings, null, options.signal);
  return new LockdClient(settings, connection, addr);
}

/**
 * An ACQUIRE the caller still waits for. Legal transitions: `unsent` (no connection) ↔ `sent`
 * (a reconnect puts a sent claim back to `unsent`); `sent` → `abandoned` (the caller gave up:
 * wait bound, abort; a grant that still arrives is released at once). Settled acquires leave
 * the client's maps.
 */
interface PendingAcquire {
  readonly name: string;
  readonly requestedLeaseMs: number;
  /** Client-clock end of the wait; null = no client-side bound (forever, or a try-lock). */
  readonly waitEndMs: number | null;
  /** waitMs for the wire: WAIT_FOREVER, 0 (try-lock) or the bound. */
  readonly waitMs: number;
  state: "unsent" | "sent" | "abandoned";
  requestId: number;
  sentAtMs: number;
  readonly resolve: (lock: Lock) => void;
  readonly reject: (error: unknown) => void;
  readonly signal?: AbortSignal;
  onAbort?: () => void;
  waitTimer?: Timer;
}

interface PendingRelease {
  readonly handle: LockHandle;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/** What the client knows about its current connection; a reconnect starts a new one. */
class Session {
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
  deadlineTimer: Timer | null = null;
  deadlineDueMs = Infinity;

  constructor(connection: Connection, addr: string, nowMs: number) {
    this.connection = connection;
    this.addr = addr;
    this.ledger = new ReplyLedger(connection.welcome);
    this.ioTimeoutMs = connection.welcome.ioTimeoutMs;
    this.lastHeartbeatSentMs = nowMs;
    this.lastFrameAtMs = nowMs;
  }

  cancelTimers(): void {
    this.heartbeatTimer?.cancel();
    this.heartbeatTimer = null;
    this.heartbeatDueMs = Infinity;
    this.deadlineTimer?.cancel();
    this.deadlineTimer = null;
    this.deadlineDueMs = Infinity;
  }
}

class LockdClient implements Client {
  readonly #settings: Settings;
  readonly #scheduler: Scheduler;
  #session: Session | null = null;
  #nextRequestId = 1;
  /** Sent ACQUIREs of the current session by request id (abandoned ones included). */
  readonly #pending = new Map<number, PendingAcquire>();
  /** ACQUIREs waiting for a connection. */
  readonly #unsent = new Set<PendingAcquire>();
  /** Owned locks of the current session by the request id of their ACQUIRE. */
  readonly #owned = new Map<number, LockHandle>();
  readonly #releases = new Map<number, PendingRelease>();
  #reconnectTimer: Timer | null = null;
  #reconnectAttempt = 0;
  #reconnecting: Promise<void> | null = null;
  /** Aborted by close(): ends a reconnect attempt in progress. */
  readonly #lifetime = new AbortController();
  #closed = false;
  /** The connection ended and `reconnect` is off: the client is of no more use. */
  #failed = false;
  #closing: Promise<void> | null = null;
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
        state: "unsent",
        requestId: 0,
        sentAtMs: 0,
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

  close(): Promise<void> {
    if (this.#closing !== null) return this.#closing;
    this.#closed = true;
    this.#settings.signal?.removeEventListener("abort", this.#onOuterAbort);
    this.#lifetime.abort(new ConnectionError("The client is closed"));
    this.#reconnectTimer?.cancel();
    this.#reconnectTimer = null;
    const session = this.#session;
    this.#session = null;
    session?.cancelTimers();
    session?.connection.close();
    this.#endAll(new ConnectionError("The client is closed"), "disconnected");
    this.#closing = Promise.all([session?.connection.socketClosed, this.#reconnecting]).then(
      () => {},
    );
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
    const unsent = [...this.#unsent];
    this.#unsent.clear();
    for (const pending of unsent) this.#sendAcquire(pending);
    this.#armHeartbeat();
  }

  #onConnectionClosed(session: Session, closingError: ErrorMessage | null): void {
    if (this.#session !== session) return;
    this.#expireOverdue(this.#scheduler.monotonicMs());
    this.#session = null;
    session.cancelTimers();
    const notLeader = closingError?.code === WIRE_CODES.NOT_LEADER.code;
    const reason: LostReason = closingError?.code === WIRE_CODES.CLOSED_BY_ADMIN.code
      ? "force"
      : closingError?.code === WIRE_CODES.IO_TIMEOUT.code
      ? "io_timeout"
      : notLeader
      ? "failover"
      : "disconnected";
    if (session.violated) {
      // That node broke the protocol: try the others first, and keep backing off.
      if (this.#settings.addrs.length > 1) this.#avoid = session.addr;
      this.#preferred = null;
    } else {
      this.#violationsInARow = 0;
    }
    if (notLeader) {
      // A node that stopped leading names the new leader when it knows it: go there first,
      // if redirect.ts allows it; a name that is no address is that node's failure.
      const name = closingError!.name;
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
    this.#endOwnerships(reason);
    const waiting = [...this.#pending.values()];
    this.#pending.clear();
    if (!this.#settings.reconnect) {
      this.#failed = true;
      for (const pending of [...waiting, ...this.#unsent]) {
        if (pending.state !== "abandoned") {
          this.#settle(pending);
          pending.reject(new ConnectionError("The connection to the lockd server was lost"));
        }
      }
      this.#unsent.clear();
      return;
    }
    // Waiting claims rejoin the tail of their queues on the next session.
    for (const pending of waiting) {
      if (pending.state === "abandoned") continue;
      pending.state = "unsent";
      pending.requestId = 0;
      this.#unsent.add(pending);
    }
    // A fail-over with the new leader named: follow it at once, without back-off.
    this.#scheduleReconnect(notLeader && this.#preferred !== null);
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
      try {
        this.#settings.onReconnectFailed?.(this.#reconnectAttempt, error as Error);
      } catch {
        // The application's callback: its failure must not stop the reconnects.
      }
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

  // ---- requests ---------------------------------------------------------------------------

  #sendAcquire(pending: PendingAcquire): void {
    const session = this.#session;
    if (session === null) {
      pending.state = "unsent";
      this.#unsent.add(pending);
      return;
    }
    const nowMs = this.#scheduler.monotonicMs();
    let waitMs = pending.waitMs;
    if (pending.waitEndMs !== null) {
      waitMs = Math.max(0, Math.min(WAIT_FOREVER - 1, Math.ceil(pending.waitEndMs - nowMs)));
    }
    pending.state = "sent";
    pending.requestId = this.#nextRequestId++;
    pending.sentAtMs = nowMs;
    this.#pending.set(pending.requestId, pending);
    session.ledger.acquireSent(pending.requestId, pending.name);
    session.connection.send({
      type: "acquire",
      requestId: pending.requestId,
      name: pending.name,
      leaseMs: pending.requestedLeaseMs,
      waitMs,
    });
    this.#armHeartbeat();
  }

  /** The caller stops waiting (wait bound, abort); a queued claim is cancelled on the server. */
  #giveUp(pending: PendingAcquire, error: unknown): void {
    if (pending.state === "abandoned") return;
    this.#settle(pending);
    if (pending.state === "unsent") {
      this.#unsent.delete(pending);
    } else if (this.#pending.get(pending.requestId) === pending) {
      // Kept until the server's own answer: a grant that crossed the cancel is released then.
      pending.state = "abandoned";
      this.#sendUntracked({ type: "release", name: pending.name, token: 0 }, 0);
    }
    pending.reject(error);
  }

  /** Stops the wait timer and the abort listener of an acquire that is being settled. */
  #settle(pending: PendingAcquire): void {
    pending.waitTimer?.cancel();
    if (pending.onAbort) pending.signal?.removeEventListener("abort", pending.onAbort);
  }

  #release(handle: LockHandle): Promise<void> {
    const session = this.#session;
    if (session === null || this.#owned.get(handle.acquireRequestId) !== handle) {
      handle.markReleased();
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const requestId = this.#nextRequestId++;
      this.#releases.set(requestId, { handle, resolve, reject });
      session.ledger.releaseSent(requestId, handle.name, handle.acquireRequestId);
      session.connection.send({
        type: "release",
        requestId,
        name: handle.name,
        token: handle.token,
      });
    });
  }

  /**
   * A RELEASE whose reply nobody waits for: the ledger still expects it (so it is checked), and
   * its answer also ends what may come for the ACQUIRE `acquireRequestId` (0: a token-0 cancel).
   */
  #sendUntracked(
    request: { type: "release"; name: string; token: number },
    acquireRequestId: number,
  ): void {
    const session = this.#session;
    if (session === null) return;
    const requestId = this.#nextRequestId++;
    session.ledger.releaseSent(requestId, request.name, acquireRequestId);
    session.connection.send({ ...request, requestId });
  }

  // ---- replies ----------------------------------------------------------------------------

  #onMessage(session: Session, message: ServerMessage): void {
    if (this.#session !== session) return;
    const nowMs = this.#scheduler.monotonicMs();
    session.lastFrameAtMs = nowMs;
    // A deadline that has passed is final, whatever this frame says.
    this.#expireOverdue(nowMs);
    if (message.type === "welcome") return; // the connection lets only replies through
    // A reply must fit the request it names (request id 0: a server condition, handled below).
    const misfit = message.requestId === 0 ? null : session.ledger.accept(message);
    if (misfit !== null) {
      this.#violation(session, misfit);
      session.connection.close();
      return;
    }
    switch (message.type) {
      case "acquired":
        this.#onAcquired(message.requestId, message.name, message.token, message.leaseMs);
        break;
      case "released": {
        const release = this.#releases.get(message.requestId);
        if (release === undefined) break;
        this.#releases.delete(message.requestId);
        this.#owned.delete(release.handle.acquireRequestId);
        release.handle.markReleased();
        release.resolve();
        break;
      }
      case "heartbeat_ack":
        this.#onHeartbeatAck(session, message.requestId);
        break;
      case "error":
        this.#onError(message);
        break;
      case "queued":
        break; // the position is informative only
      default:
        break; // the connection lets only server replies through
    }
    this.#armDeadline();
  }

  #onAcquired(requestId: number, name: string, token: number, leaseMs: number): void {
    const pending = this.#pending.get(requestId);
    if (pending === undefined) return;
    this.#pending.delete(requestId);
    if (pending.state === "abandoned") {
      this.#sendUntracked({ type: "release", name, token }, requestId);
      return;
    }
    this.#settle(pending);
    const handle = new LockHandle(
      { name, token, leaseMs, acquireRequestId: requestId, acquireSentAtMs: pending.sentAtMs },
      (h) => this.#release(h),
      (h) => this.#checkDeadline(h),
    );
    this.#owned.set(requestId, handle);
    // A grant whose lease cannot be confirmed any more (heartbeats unanswered for too long)
    // arrives already lost.
    this.#expireOverdue(this.#scheduler.monotonicMs());
    this.#armHeartbeat();
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
  }

  #onError(error: ErrorMessage): void {
    const { requestId, code } = error;
    if (code === WIRE_CODES.LEASE_EXPIRED.code) {
      const handle = this.#owned.get(requestId);
      if (handle !== undefined) this.#endOwnership(handle, "expired");
      return;
    }
    const pending = this.#pending.get(requestId);
    if (pending !== undefined) {
      this.#pending.delete(requestId);
      if (pending.state === "abandoned") return;
      this.#settle(pending);
      pending.reject(new LockdError(code, error.name, error.message));
      return;
    }
    const release = this.#releases.get(requestId);
    if (release !== undefined) {
      this.#releases.delete(requestId);
      this.#owned.delete(release.handle.acquireRequestId);
      release.handle.markReleased();
      release.reject(new LockdError(code, error.name, error.message));
    }
  }

  // ---- ownerships and deadlines -----------------------------------------------------------

  #deadlineOf(session: Session, handle: LockHandle): number {
    const confirmedSendMs = Math.max(handle.acquireSentAtMs, session.lastAckedHeartbeatSendMs);
    return localDeadlineMs(confirmedSendMs, handle.leaseMs, session.ioTimeoutMs);
  }

  /**
   * Reading `lost` or `state`: the ownership ends now if its local deadline has passed, whether
   * or not the deadline timer has run (a blocked event loop, a paused process).
   */
  #checkDeadline(handle: LockHandle): void {
    const session = this.#session;
    if (session === null || this.#owned.get(handle.acquireRequestId) !== handle) return;
    if (this.#scheduler.monotonicMs() < this.#deadlineOf(session, handle)) return;
    this.#endOwnership(handle, "lease_unconfirmed");
    this.#armDeadline();
    this.#armHeartbeat();
  }

  /** Ends every ownership whose local deadline has passed (reason `lease_unconfirmed`). */
  #expireOverdue(nowMs: number): void {
    const session = this.#session;
    if (session === null) return;
    for (const handle of this.#owned.values()) {
      if (nowMs >= this.#deadlineOf(session, handle)) {
        this.#endOwnership(handle, "lease_unconfirmed");
      }
    }
  }

  /**
   * The ownership is over for this client: `lost` fires (a held lock) or `release()` resolves
   * (a lock being released). After a local deadline the server may still think it owned, so
   * it is released there too.
   */
  #endOwnership(handle: LockHandle, reason: LostReason): void {
    this.#owned.delete(handle.acquireRequestId);
    for (const [requestId, release] of this.#releases) {
      if (release.handle !== handle) continue;
      this.#releases.delete(requestId);
      handle.markReleased();
      release.resolve();
    }
    if (handle.markLost(reason) && reason === "lease_unconfirmed") {
      this.#sendUntracked(
        { type: "release", name: handle.name, token: handle.token },
        handle.acquireRequestId,
      );
    }
  }

  #endOwnerships(reason: LostReason): void {
    for (const handle of [...this.#owned.values()]) this.#endOwnership(handle, reason);
    for (const release of this.#releases.values()) {
      release.handle.markReleased();
      release.resolve(); // the session is gone, so is the ownership
    }
    this.#releases.clear();
  }

  /** One timer at the earliest local deadline of the session's ownerships. */
  #armDeadline(): void {
    const session = this.#session;
    if (session === null) return;
    let dueMs = Infinity;
    for (const handle of this.#owned.values()) {
      dueMs = Math.min(dueMs, this.#deadlineOf(session, handle));
    }
    if (dueMs === session.deadlineDueMs) return;
    session.deadlineTimer?.cancel();
    session.deadlineTimer = null;
    session.deadlineDueMs = dueMs;
    if (dueMs === Infinity) return;
    session.deadlineTimer = this.#scheduler.setTimer(() => {
      session.deadlineTimer = null;
      session.deadlineDueMs = Infinity;
      if (this.#session !== session) return;
      this.#expireOverdue(this.#scheduler.monotonicMs());
      this.#armDeadline();
    }, dueMs - this.#scheduler.monotonicMs());
  }

  // ---- heartbeats -------------------------------------------------------------------------

  /** Leases the session owns or waits for (each sets an upper bound on the heartbeat period). */
  *#leasesInPlay(session: Session): Iterable<number> {
    for (const handle of this.#owned.values()) yield handle.leaseMs;
    for (const pending of this.#pending.values()) {
      yield effectiveLeaseMs(pending.requestedLeaseMs, session.connection.welcome);
    }
  }

  #armHeartbeat(): void {
    const session = this.#session;
    if (session === null) return;
    const intervalMs = heartbeatIntervalMs(session.ioTimeoutMs, this.#leasesInPlay(session));
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
    // A connection that answered nothing for the I/O timeout is dead (a stalled path, a
    // vanished server): the server would have closed a session as silent as that.
    // With several nodes to choose from, a silent leader (frozen, cut off) is left sooner.
    const silenceMs = this.#settings.addrs.length > 1
      ? Math.min(session.ioTimeoutMs, CLUSTER_CLIENT_SILENCE_MS)
      : session.ioTimeoutMs;
    const oldest = session.heartbeats.values().next();
    if (
      !oldest.done && nowMs - oldest.value >= silenceMs &&
      nowMs - session.lastFrameAtMs >= silenceMs
    ) {
      if (this.#settings.addrs.length > 1) {
        // That node may be frozen: a new connection to it would wait out the connect timeout.
        this.#avoid = this.#preferred;
        this.#preferred = null;
      }
      session.connection.close();
      return;
    }
    const requestId = this.#nextRequestId++;
    session.heartbeats.set(requestId, nowMs);
    session.ledger.heartbeatSent(requestId);
    session.lastHeartbeatSentMs = nowMs;
    session.connection.send({ type: "heartbeat", requestId });
    this.#armHeartbeat();
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
    try {
      this.#settings.onProtocolError?.(error);
    } catch {
      // The application's callback must not break the client.
    }
  }

  /** close(): everything still waiting rejects; owned locks are lost. */
  #endAll(error: Error, reason: LostReason): void {
    for (const pending of [...this.#pending.values(), ...this.#unsent]) {
      if (pending.state === "abandoned") continue;
      this.#settle(pending);
      pending.reject(error);
    }
    this.#pending.clear();
    this.#unsent.clear();
    this.#endOwnerships(reason);
  }
}
