/**
 * The client library's public shapes: the options of {@link connect} and of
 * {@link Client.acquire}, and the {@link Client} a connect resolves to. client.ts builds them.
 *
 * @module
 */

import type { Scheduler } from "../clock.ts";
import type { ServerProtocolError } from "./errors.ts";
import type { Lock } from "./lock_handle.ts";
import type { ClientTlsOptions } from "./transport.ts";

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
   * Closes the session: GOODBYE (protocol version 2) tells the server to end it gracefully, so
   * the owned locks go to their next waiters at once (their `lost` fires with reason
   * `disconnected`), pending acquires reject and nothing is carried over any more. Resolves
   * once the socket is closed.
   */
  close(): Promise<void>;
}
