/**
 * Accepting TLS connections without letting them take the server down
 * (issue 9 items 5 and 17). Two things `tls.createServer` does not do:
 *
 * 1. **Its accept loop stops for good after a failed accept.** In Deno 2.9
 *    a node `net.Server` whose accept fails (EMFILE) emits nothing and never
 *    accepts again (measured: after the descriptors are free, connections sit
 *    in the backlog forever). So a watchdog (src/net/accept_watchdog.ts)
 *    checks, once a second when no connection came in, that the listener
 *    still accepts its own probe connection, and makes a listener that does
 *    not listen again on the same address. The probe is never a client.
 * 2. **Handshakes are not bounded.** Each costs the one JavaScript thread
 *    about half a millisecond (ECDSA P-256) to several milliseconds (RSA
 *    4096) of key exchange and signing, and a client can ask for that with a
 *    few recorded bytes. Unbounded, a flood of ClientHellos queues more work
 *    than the thread can do and heartbeats of established sessions wait
 *    behind it until their leases expire. So a connection's handshake starts
 *    only once it has sent a ClientHello (the listener looks at the first
 *    bytes, see tls_listener.ts) and a token is free: at most `handshakesPerS`
 *    per second (a token bucket with a tenth of a second of burst), in arrival
 *    order. A connection that sends nothing costs no token. At most
 *    `pendingMax` connections may be accepted and not yet started (a new one
 *    drops the oldest, the likeliest to be stale), and one that waited past
 *    the handshake timeout for its turn is dropped instead of started.
 *    Established sessions are never touched.
 *
 * @module
 */

import * as net from "node:net";
import { type Scheduler, systemScheduler, type Timer } from "../clock.ts";
import { formatHostPort, type HostPort } from "../host_port.ts";
import { log } from "../log/diagnostic.ts";
import { AcceptWatchdog } from "../net/accept_watchdog.ts";
import type { ServerCounters } from "../counters.ts";
import { errorText } from "../error_text.ts";

const logger = log("tls");

export interface TlsAcceptOptions {
  /** Handshakes started per second; 0 means no limit. */
  readonly handshakesPerS: number;
  /** Connections accepted whose handshake has not started (first bytes, or waiting for a token). */
  readonly pendingMax: number;
  /** A connection that waited this long for its handshake is dropped. */
  readonly handshakeTimeoutMs: number;
  readonly counters: ServerCounters;
  readonly scheduler?: Scheduler;
}

/** An accepted connection whose handshake has not started; `start` is set once it may start. */
interface Pending {
  readonly socket: net.Socket;
  readonly acceptedAtMs: number;
  start: (() => void) | null;
}

/**
 * The accepting half of the TLS listener. Every accepted connection is passed
 * to `onConnection`, which calls `admit()` once the connection asked for a
 * handshake; `admit` starts it when the rate allows.
 */
export class TlsAcceptor {
  readonly #at: HostPort;
  readonly #options: TlsAcceptOptions;
  readonly #scheduler: Scheduler;
  readonly #onConnection: (socket: net.Socket) => void;
  #server: net.Server | null = null;
  #port = 0;
  #closed = false;
  /** Accepted, not started, in arrival order (a Map keeps insertion order). */
  readonly #pending = new Map<net.Socket, Pending>();
  #queued = 0;
  #tokens: number;
  #tokensAtMs: number;
  #drainTimer: Timer | null = null;
  #watchdog: AcceptWatchdog | null = null;

  private constructor(
    at: HostPort,
    options: TlsAcceptOptions,
    onConnection: (socket: net.Socket) => void,
  ) {
    this.#at = at;
    this.#options = options;
    this.#scheduler = options.scheduler ?? systemScheduler;
    this.#onConnection = onConnection;
    this.#tokens = this.#burst;
    this.#tokensAtMs = this.#scheduler.monotonicMs();
  }

  /** Binds `at` (rejects when it cannot) and starts accepting. */
  static async listen(
    at: HostPort,
    options: TlsAcceptOptions,
    onConnection: (socket: net.Socket) => void,
  ): Promise<TlsAcceptor> {
    const acceptor = new TlsAcceptor(at, options, onConnection);
    await acceptor.#bind(at.port);
    acceptor.#watchdog = new AcceptWatchdog(
      {
        bound: () => {
          const bound = acceptor.#server?.address();
          return typeof bound === "object" && bound !== null ? bound : null;
        },
        relisten: () => {
          // Not waiting for close()'s callback: node calls it only once every connection the
          // server ever accepted has ended, sessions included.
          acceptor.#server?.close();
          acceptor.#server = null;
          return acceptor.#bind(acceptor.#port);
        },
        countAcceptError: () => options.counters.countAcceptError("protocol"),
        get addr() {
          return acceptor.addr;
        },
      },
      acceptor.#scheduler,
      (socket) => acceptor.#client(socket),
    );
    return acceptor;
  }

  /** The bound address. */
  get addr(): string {
    const bound = this.#server?.address();
    return typeof bound === "object" && bound !== null
      ? formatHostPort(bound.address, bound.port)
      : formatHostPort(this.#at.hostname, this.#port);
  }

  get #burst(): number {
    return Math.max(1, Math.ceil(this.#options.handshakesPerS / 10));
  }

  #bind(port: number): Promise<void> {
    const server = net.createServer((socket) => this.#accepted(socket));
    if (this.#closed) return Promise.reject(new Error("TLS listener closed"));
    return new Promise<void>((resolve, reject) => {
      const onError = (error: Error) => reject(error);
      server.once("error", onError);
      server.listen({ host: this.#at.hostname, port }, () => {
        server.off("error", onError);
        // After listening, an error is a failed accept; count it (the watchdog does the rest).
        server.on("error", (error: Error) => {
          this.#options.counters.countAcceptError("protocol");
          logger.warn("accept failed", { error: error.message });
        });
        this.#server = server;
        const bound = server.address();
        if (typeof bound === "object" && bound !== null) this.#port = bound.port;
        resolve();
      });
    });
  }

  #accepted(socket: net.Socket): void {
    // Errors of a socket nobody reads yet (a reset) must not become uncaught.
    socket.on("error", () => {});
    if (this.#closed || this.#watchdog === null) {
      socket.destroy();
      return;
    }
    this.#watchdog.accepted(socket);
  }

  /** An accepted connection that is not the watchdog's probe. */
  #client(socket: net.Socket): void {
    if (this.#closed) {
      socket.destroy();
      return;
    }
    const counters = this.#options.counters;
    counters.connectionsAccepted++;
    if (this.#pending.size >= this.#options.pendingMax) {
      const oldest = this.#pending.values().next().value!;
      this.#forget(oldest);
      oldest.socket.destroy();
      counters.tlsShed.pending_full++;
    }
    const entry: Pending = { socket, acceptedAtMs: this.#scheduler.monotonicMs(), start: null };
    this.#pending.set(socket, entry);
    socket.once("close", () => {
      if (this.#pending.get(socket) === entry) this.#forget(entry);
    });
    this.#onConnection(socket);
  }

  /** `socket` asked for a handshake: `start` runs when the rate allows (or never, if it is dropped). */
  admit(socket: net.Socket, start: () => void): void {
    const entry = this.#pending.get(socket);
    if (entry === undefined || entry.start !== null) return;
    entry.start = start;
    this.#queued++;
    this.#drain();
  }

  #forget(entry: Pending): void {
    this.#pending.delete(entry.socket);
    if (entry.start !== null) this.#queued--;
    this.#options.counters.tlsHandshakesQueued = this.#queued;
  }

  /** Starts as many admitted handshakes as the token bucket allows; re-arms itself for the rest. */
  #drain(): void {
    const rate = this.#options.handshakesPerS;
    const now = this.#scheduler.monotonicMs();
    if (rate > 0) {
      this.#tokens = Math.min(this.#burst, this.#tokens + ((now - this.#tokensAtMs) * rate) / 1000);
      this.#tokensAtMs = now;
    }
    const counters = this.#options.counters;
    for (const entry of this.#pending.values()) {
      if (rate > 0 && this.#tokens < 1) break;
      if (entry.start === null) continue;
      this.#forget(entry);
      if (now - entry.acceptedAtMs >= this.#options.handshakeTimeoutMs) {
        entry.socket.destroy();
        counters.tlsShed.queue_timeout++;
        continue;
      }
      if (rate > 0) this.#tokens--;
      counters.tlsHandshakesStarted++;
      try {
        entry.start();
      } catch (error) {
        entry.socket.destroy();
        logger.warn("TLS handshake could not start", {
          error: errorText(error),
        });
      }
    }
    counters.tlsHandshakesQueued = this.#queued;
    if (this.#queued > 0 && this.#drainTimer === null && !this.#closed) {
      const waitMs = Math.max(1, Math.ceil(((1 - this.#tokens) * 1000) / rate));
      this.#drainTimer = this.#scheduler.setTimer(() => {
        this.#drainTimer = null;
        this.#drain();
      }, waitMs);
    }
  }

  /** Stops accepting and drops every connection whose handshake has not started. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#watchdog?.close();
    this.#drainTimer?.cancel();
    this.#server?.close();
    for (const entry of [...this.#pending.values()]) entry.socket.destroy();
    this.#pending.clear();
    this.#queued = 0;
    this.#options.counters.tlsHandshakesQueued = 0;
  }
}
