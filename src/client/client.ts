import { RECONNECT_BACKOFF_MS_MAX, RECONNECT_BACKOFF_MS_MIN } from "../limits.ts";
import { WIRE_CODES } from "../protocol/codes.ts";
import { type Message, WAIT_FOREVER } from "../protocol/messages.ts";
import { VERSION } from "../version.ts";
import { type ClientTlsOptions, Connection } from "./connection.ts";
import { ConnectionError, LockdError, LockLostError, type LostReason } from "./errors.ts";

/** Options of {@link connect}. */
export interface ConnectOptions {
  /** Server address, `host:port` (IPv6 as `[::1]:7400`). */
  addr: string;
  /** Sent in HELLO; shows in the server's debug log. */
  clientName?: string;
  /** TLS (and mutual TLS with `cert` + `key`); plain TCP when absent. */
  tls?: ClientTlsOptions;
  /**
   * Reconnect after the server closed the session (ERROR 0x02, shutdown, I/O
   * timeout, network loss). Waiting claims rejoin the tail of the queue;
   * owned locks report `lost`. Default true.
   */
  reconnect?: boolean;
}

/** Options of {@link Client.acquire}. */
export interface AcquireOptions {
  /** Lease length; 0 or absent = the server's default. Heartbeats keep it alive. */
  leaseMs?: number;
  /** How long to wait in the queue; absent = forever. */
  waitMs?: number;
  /** Aborting leaves the queue. */
  signal?: AbortSignal;
}

/** An owned lock. Release it, or `await using` it. */
export interface Lock extends AsyncDisposable {
  readonly name: string;
  /** The fencing token: pass it to the guarded resource with every write. */
  readonly token: number;
  /** The effective lease (after the server's clamping). */
  readonly leaseMs: number;
  /** Aborted when ownership ends without `release()`; its reason is a {@link LockLostError}. */
  readonly lost: AbortSignal;
  /** Ends the ownership. Resolves quietly when the lock was already lost. */
  release(): Promise<void>;
}

interface PendingAcquire {
  name: string;
  leaseMs: number;
  /** Absolute deadline (performance.now() ms) or null for forever. */
  deadlineMs: number | null;
  requestId: number;
  resolve(lock: Lock): void;
  reject(error: unknown): void;
  signal?: AbortSignal;
  onAbort?: () => void;
  /** The caller gave up; if a grant still arrives it is released at once. */
  abandoned: boolean;
}

interface OwnedLock {
  handle: LockHandle;
  acquireRequestId: number;
}

/**
 * Connects to a lockd server.
 *
 * ```ts
 * await using client = await connect({ addr: "127.0.0.1:7400" });
 * await using lock = await client.acquire("jobs/nightly", { leaseMs: 10_000 });
 * await writeWithFence(lock.token);
 * ```
 */
export async function connect(options: ConnectOptions): Promise<Client> {
  const connection = await Connection.open(
    options.addr,
    options.clientName ?? `lockd-ts/${VERSION}`,
    options.tls,
  );
  return new Client(options, connection);
}

/** A session with a lockd server. Create with {@link connect}. */
export class Client implements AsyncDisposable {
  readonly #options: ConnectOptions;
  #connection: Connection | null;
  #nextRequestId = 1;
  readonly #pending = new Map<number, PendingAcquire>();
  readonly #owned = new Map<string, OwnedLock>();
  readonly #releases = new Map<number, { resolve(): void; reject(error: unknown): void }>();
  #heartbeatTimer: ReturnType<typeof setTimeout> | undefined;
  #reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  #reconnectAttempt = 0;
  #closed = false;
  /** Acquires waiting for a (re)connection before they can be sent. */
  readonly #unsent = new Set<PendingAcquire>();

  /** @internal use {@link connect} */
  constructor(options: ConnectOptions, connection: Connection) {
    this.#options = options;
    this.#connection = connection;
    this.#attach(connection);
  }

  /** The server's session id of the current connection (changes after a reconnect). */
  get sessionId(): number {
    return this.#connection?.welcome.sessionId ?? 0;
  }

  /** The server's version string. */
  get serverVersion(): string {
    return this.#connection?.welcome.serverVersion ?? "";
  }

  /** Waits for the lock and resolves once it is owned. */
  acquire(name: string, options: AcquireOptions = {}): Promise<Lock> {
    if (this.#closed) return Promise.reject(new ConnectionError("The client is closed"));
    options.signal?.throwIfAborted();
    return new Promise<Lock>((resolve, reject) => {
      const pending: PendingAcquire = {
        name,
        leaseMs: options.leaseMs ?? 0,
        deadlineMs: options.waitMs === undefined ? null : performance.now() + options.waitMs,
        requestId: 0,
        resolve,
        reject,
        signal: options.signal,
        abandoned: false,
      };
      if (options.signal) {
        pending.onAbort = () => this.#abandon(pending, options.signal!.reason);
        options.signal.addEventListener("abort", pending.onAbort, { once: true });
      }
      this.#sendAcquire(pending);
    });
  }

  /** Takes the lock if it is free right now; null when it is held. */
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

  /** Closes the session: owned locks are released by the server (graceful), waits are abandoned. */
  close(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#closed = true;
    clearTimeout(this.#reconnectTimer);
    clearTimeout(this.#heartbeatTimer);
    const connection = this.#connection;
    this.#connection = null;
    connection?.close();
    this.#failAll(new ConnectionError("The client is closed"), "disconnected");
    return Promise.resolve();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // ---- internals ----------------------------------------------------------

  #attach(connection: Connection): void {
    connection.onMessage = (message) => this.#onMessage(message);
    connection.onClose = (code) => this.#onConnectionClosed(connection, code);
    connection.start();
    this.#scheduleHeartbeat();
    const unsent = [...this.#unsent];
    this.#unsent.clear();
    for (const pending of unsent) this.#sendAcquire(pending);
  }

  #sendAcquire(pending: PendingAcquire): void {
    const connection = this.#connection;
    if (connection === null || connection.closed) {
      // Reconnecting: sent when the new session is up (a bound that ran out meanwhile
      // becomes a try-lock, waitMs 0).
      pending.requestId = 0;
      this.#unsent.add(pending);
      return;
    }
    let waitMs = WAIT_FOREVER;
    if (pending.deadlineMs !== null) {
      waitMs = Math.max(
        0,
        Math.min(WAIT_FOREVER - 1, Math.round(pending.deadlineMs - performance.now())),
      );
    }
    pending.requestId = this.#nextRequestId++;
    this.#pending.set(pending.requestId, pending);
    connection.send({
      type: "acquire",
      requestId: pending.requestId,
      name: pending.name,
      leaseMs: pending.leaseMs,
      waitMs,
    });
  }

  #abandon(pending: PendingAcquire, reason: unknown): void {
    if (pending.abandoned) return;
    pending.abandoned = true;
    this.#unsent.delete(pending);
    pending.reject(reason);
    if (pending.requestId !== 0 && this.#connection && !this.#connection.closed) {
      // Cancel the queued claim; a grant racing with this is released when it arrives.
      this.#connection.send({
        type: "release",
        requestId: this.#nextRequestId++,
        name: pending.name,
        token: 0,
      });
    }
  }

  #onMessage(message: Message): void {
    switch (message.type) {
      case "acquired": {
        const pending = this.#pending.get(message.requestId);
        if (pending === undefined) return;
        this.#pending.delete(message.requestId);
        this.#detachSignal(pending);
        const handle = new LockHandle(this, message.name, message.token, message.leaseMs);
        this.#owned.set(message.name, { handle, acquireRequestId: message.requestId });
        this.#scheduleHeartbeat();
        if (pending.abandoned) handle.release().catch(() => {});
        else pending.resolve(handle);
        return;
      }
      case "released": {
        const release = this.#releases.get(message.requestId);
        this.#releases.delete(message.requestId);
        release?.resolve();
        return;
      }
      case "error":
        this.#onError(message.requestId, message.code, message.name, message.message);
        return;
      default:
        // QUEUED and HEARTBEAT_ACK need no action.
        return;
    }
  }

  #onError(requestId: number, code: number, name: string, text: string): void {
    if (requestId === 0) return; // session-level: the connection is about to close
    if (code === WIRE_CODES.LEASE_EXPIRED.code) {
      const owned = this.#owned.get(name);
      if (owned && owned.acquireRequestId === requestId) {
        this.#owned.delete(name);
        owned.handle.markLost("expired");
      }
      return;
    }
    const pending = this.#pending.get(requestId);
    if (pending !== undefined) {
      this.#pending.delete(requestId);
      this.#detachSignal(pending);
      if (!pending.abandoned) pending.reject(new LockdError(code, name, text));
      return;
    }
    const release = this.#releases.get(requestId);
    if (release !== undefined) {
      this.#releases.delete(requestId);
      release.reject(new LockdError(code, name, text));
    }
  }

  /** @internal used by LockHandle */
  releaseLock(handle: LockHandle): Promise<void> {
    const owned = this.#owned.get(handle.name);
    if (owned === undefined || owned.handle !== handle) return Promise.resolve();
    this.#owned.delete(handle.name);
    const connection = this.#connection;
    if (connection === null || connection.closed) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const requestId = this.#nextRequestId++;
      this.#releases.set(requestId, { resolve, reject });
      connection.send({ type: "release", requestId, name: handle.name, token: handle.token });
    });
  }

  #onConnectionClosed(connection: Connection, lastErrorCode: number | null): void {
    if (this.#connection !== connection) return;
    this.#connection = null;
    clearTimeout(this.#heartbeatTimer);
    const reason: LostReason = lastErrorCode === WIRE_CODES.CLOSED_BY_ADMIN.code
      ? "force"
      : lastErrorCode === WIRE_CODES.IO_TIMEOUT.code
      ? "io_timeout"
      : "disconnected";
    for (const [name, owned] of this.#owned) {
      this.#owned.delete(name);
      owned.handle.markLost(reason);
    }
    for (const [requestId, release] of this.#releases) {
      this.#releases.delete(requestId);
      release.resolve(); // the session is gone, so is the ownership
    }
    if (this.#closed) return;
    if (this.#options.reconnect === false) {
      this.#failAll(new ConnectionError("The connection to the lockd server was lost"), reason);
      return;
    }
    // Waiting claims rejoin the tail of the queue on the new session.
    const waiting = [...this.#pending.values()];
    this.#pending.clear();
    for (const pending of waiting) this.#sendAcquire(pending);
    this.#scheduleReconnect();
  }

  #scheduleReconnect(): void {
    const capMs = Math.min(
      RECONNECT_BACKOFF_MS_MAX,
      RECONNECT_BACKOFF_MS_MIN * 2 ** Math.min(this.#reconnectAttempt, 16),
    );
    this.#reconnectAttempt++;
    const delayMs = RECONNECT_BACKOFF_MS_MIN / 2 + Math.random() * capMs; // full jitter
    this.#reconnectTimer = setTimeout(async () => {
      this.#reconnectTimer = undefined;
      if (this.#closed) return;
      try {
        const connection = await Connection.open(
          this.#options.addr,
          this.#options.clientName ?? `lockd-ts/${VERSION}`,
          this.#options.tls,
        );
        if (this.#closed) {
          connection.close();
          return;
        }
        this.#reconnectAttempt = 0;
        this.#connection = connection;
        this.#attach(connection);
      } catch {
        if (!this.#closed) this.#scheduleReconnect();
      }
    }, delayMs);
  }

  #failAll(error: Error, reason: LostReason): void {
    for (const pending of [...this.#pending.values(), ...this.#unsent]) {
      this.#detachSignal(pending);
      if (!pending.abandoned) pending.reject(error);
    }
    this.#pending.clear();
    this.#unsent.clear();
    for (const [name, owned] of this.#owned) {
      this.#owned.delete(name);
      owned.handle.markLost(reason);
    }
    for (const release of this.#releases.values()) release.resolve();
    this.#releases.clear();
  }

  #detachSignal(pending: PendingAcquire): void {
    if (pending.onAbort) pending.signal?.removeEventListener("abort", pending.onAbort);
  }

  /** One timer: heartbeats well inside the shortest lease and the I/O timeout. */
  #scheduleHeartbeat(): void {
    const connection = this.#connection;
    if (connection === null || this.#closed) return;
    let intervalMs = connection.welcome.ioTimeoutMs / 3;
    for (const owned of this.#owned.values()) {
      intervalMs = Math.min(intervalMs, owned.handle.leaseMs / 3);
    }
    clearTimeout(this.#heartbeatTimer);
    this.#heartbeatTimer = setTimeout(() => {
      this.#heartbeatTimer = undefined;
      if (this.#connection !== connection || connection.closed) return;
      connection.send({ type: "heartbeat", requestId: this.#nextRequestId++ });
      this.#scheduleHeartbeat();
    }, Math.max(10, intervalMs));
  }
}

class LockHandle implements Lock {
  readonly name: string;
  readonly token: number;
  readonly leaseMs: number;
  readonly #client: Client;
  readonly #lost = new AbortController();
  #released = false;

  constructor(client: Client, name: string, token: number, leaseMs: number) {
    this.#client = client;
    this.name = name;
    this.token = token;
    this.leaseMs = leaseMs;
  }

  get lost(): AbortSignal {
    return this.#lost.signal;
  }

  release(): Promise<void> {
    if (this.#released || this.#lost.signal.aborted) return Promise.resolve();
    this.#released = true;
    return this.#client.releaseLock(this);
  }

  markLost(reason: LostReason): void {
    if (this.#released || this.#lost.signal.aborted) return;
    this.#lost.abort(new LockLostError(this.name, this.token, reason));
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}
