/**
 * The client library's public shapes: the options of {@link connect} and of
 * {@link Client.acquire}, and the {@link Client} a connect resolves to. client.ts builds them.
 *
 * @module
 */

import type { Scheduler } from "../clock.ts";
import type { ServerProtocolError } from "./errors.ts";
import type { Lock } from "./lock_handle.ts";
import type { LockInfo, Observation, ObserveOptions } from "./observe.ts";
import type { ClientTlsOptions } from "./transport.ts";

/** Calls an application's callback: what it throws is the application's, not the client's. */
export function callBack<A extends unknown[]>(
  callback: ((...args: A) => void) | undefined,
  ...args: A
): void {
  try {
    callback?.(...args);
  } catch {
    // The application's failure: the client goes on.
  }
}

/** Options of {@link connect}. */
export interface ConnectOptions {
  /** Server address, `host:port` (IPv6 as `[::1]:7400`). Give this or `addrs`. */
  addr?: string;
  /**
   * The nodes of a lockd cluster (docs/cluster.md), tried in order. A node that is not the
   * leader answers NOT_LEADER naming the leader, and the client goes there at once: to an
   * address of this list always, to any other address only with `tls` (the node reached must
   * present a certificate from your CA); a name that is not a `host:port` counts as a failed
   * node. A node without a leader yet holds the HELLO until one is elected, and the first
   * connect goes round the list again (with back-off) until `connectTimeoutMs`, so a client
   * started during a fail-over is held rather than refused. A connection that stays silent for
   * 3 s while heartbeats are due is given up (a frozen leader). Give this or `addr`.
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
   * the tail of their queues on the new session; owned locks report `lost`, unless they are
   * carried over (see `reclaim`). Default true.
   */
  reconnect?: boolean;
  /**
   * Bound on dialling, the TLS handshake and HELLO/WELCOME (a fallback to protocol version 1
   * included), for `connect()` and for every reconnect attempt, in milliseconds. With several
   * `addrs`, the first `connect()` goes round them until this bound has passed; it ends at once
   * on what no retry mends (a redirect it may not follow, TLS against a plain listener or the
   * other way round, a refused certificate, another protocol on the port). Default 5000; 10000
   * with several `addrs`.
   */
  connectTimeoutMs?: number;
  /**
   * Carry owned locks and waiting acquires over to the new session after a fail-over
   * (protocol version 2, docs/cluster.md): when the connection to a cluster's leader ends
   * without a word about the ownerships (the leader died, a reset, NOT_LEADER, SHUTTING_DOWN)
   * or goes silent, owned locks stay held while their local deadlines run and are reclaimed
   * with their tokens at the next leader, and waiting acquires keep their place in the queue.
   * On a single node only a connection the client gave up as silent is carried over (the
   * server moves it while it still has it open). Without it, or with a server of before
   * version 2, such a session end loses the locks (`failover` or `disconnected`). Default true.
   */
  reclaim?: boolean;
  /**
   * Called after each failed reconnect attempt with its number since the last WELCOME (1, 2, ...)
   * and its error; not for the first connection (`connect()` rejects with that failure). A
   * program can say what it is trying while no node answers (`lockd run` does, every 10 s).
   * An exception it throws is ignored.
   */
  onReconnectFailed?: (attempt: number, error: Error) => void;
  /**
   * Called when a claim is carried over to a new leader (RECLAIM, protocol version 2) without
   * its value, because that leader takes shorter values (WELCOME's `valueBytesMax`) than the
   * claim's, with the lock's name, the value's length and the new limit. The lock (or the
   * waiting acquire) is kept, not lost for its value; its `value` reads empty from then on, as
   * the new leader has it, and `setValue` can publish a shorter one. An exception it throws is
   * ignored.
   */
  onValueDropped?: (name: string, valueBytes: number, valueBytesMax: number) => void;
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
  /**
   * When the lock's local deadline passes while it cannot be confirmed (it is being carried
   * over to a new leader after a fail-over, or its connection went silent), the lock becomes
   * suspended (`lock.suspended`, event `suspend`) instead of lost, until it is confirmed again
   * (event `resume`) or cannot be (lost, `failover`). Do no unfenced work while suspended.
   * `lockd run` never uses it (a child cannot be paused safely). Default false.
   */
  suspend?: boolean;
  /**
   * `shared` asks for a shared (read) lock (protocol version 2): shared claims at the head of
   * the queue are granted together; an exclusive claim waits for them and stops later shared
   * claims from passing it. `lock.writeGeneration` is the token of the lock's last exclusive
   * grant. Default `exclusive`.
   */
  mode?: "exclusive" | "shared";
  /**
   * N asks for one of N slots of a semaphore (protocol version 2; `lock.slot` says which, every
   * grant has its own token). The first claim fixes a lock's kind and limit while it exists (or
   * a server rule does): a claim that disagrees is refused with INVALID_ARGUMENT naming them.
   * 0 takes whatever the lock or a rule has. Default 1: a plain lock, so `acquire(name)` never
   * lands in a semaphore by accident.
   */
  limit?: number;
  /**
   * The holder's value from the grant on (protocol version 2), e.g. a leader's address; a
   * string is sent as UTF-8. `query` and `observe` show it; `lock.setValue` replaces it. At
   * most the server's `-max-lock-value-bytes` (INVALID_ARGUMENT before anything is sent).
   */
  value?: Uint8Array | string;
}

/** A session with a lockd server; create it with {@link connect}. */
export interface Client extends AsyncDisposable {
  /** The server's session id of the current connection (changes after a reconnect; 0 while reconnecting). */
  readonly sessionId: number;
  /** The server's version, from WELCOME ("" while reconnecting). */
  readonly serverVersion: string;
  /**
   * The protocol version of the current connection: 2, or 1 with a server of before version 2
   * (which cannot carry locks over a fail-over); 0 while reconnecting.
   */
  readonly protocolVersion: number;
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
   * The state of lock `name` now, without queueing (QUERY, protocol version 2): its kind,
   * holders (identity, client name, value, token, held for) and queue length; `holder` is null
   * when nobody holds it. Asked again on the next connection if this one ends first. Rejects
   * with a {@link LockdError} (INVALID_ARGUMENT for a bad name or a server of version 1,
   * ACL_DENIED).
   */
  query(name: string): Promise<LockInfo>;
  /**
   * Observes lock `pattern`, or every lock a glob in the ACL's language matches (WATCH,
   * protocol version 2): an async iterator of {@link LockInfo}, first the current state of each
   * matching lock, then one per change (granted, ended with its reason, value or queue
   * changed), the latest state per lock when the reader is slow. After a reconnect or a
   * fail-over it watches again and goes on with a fresh snapshot (a lock that ended meanwhile
   * reads kind `none`). Leaving a `for await` loop, `close()`, aborting `signal` or closing the
   * client ends it; a refused WATCH (ACL_DENIED, a bad glob) or too many matching locks
   * (LIMIT_EXCEEDED) rejects the iteration.
   */
  observe(pattern: string, options?: ObserveOptions): Observation;
  /**
   * Closes the session: GOODBYE (protocol version 2) tells the server to end it gracefully, so
   * the owned locks go to their next waiters at once (their `lost` fires with reason
   * `disconnected`), pending acquires reject and nothing is carried over any more. Resolves
   * once the socket is closed.
   */
  close(): Promise<void>;
}
