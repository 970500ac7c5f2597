/**
 * The HTTP listeners (admin API and ops server): bounded, and alive whatever
 * happens to their sockets.
 *
 * `Deno.serve` has no header timeout, no idle timeout, no connection limit,
 * and stops serving for good when an accept fails (descriptor exhaustion).
 * So the listening socket is lockd's own (`Deno.listen`, with the back-off
 * accept loop of net/accept_loop.ts), and every connection passes through a
 * small guard before it reaches a private `Deno.serve` on a Unix socket
 * (backend.ts):
 *
 * - at most `connectionsMax` connections per listener; at the cap, the
 *   oldest connection that has not completed a request is closed for the new
 *   one (a slowloris cannot lock out a probe), else the new one is answered
 *   503 and closed;
 * - the first request must arrive complete (head and body) within
 *   `headerTimeoutMs` of the accept, and every later one within
 *   `headerTimeoutMs` of its first byte;
 * - a connection with no byte in either direction for `idleTimeoutMs` is
 *   closed (a streaming response that sends something, e.g. a server-sent
 *   event comment every 15 s, keeps its connection);
 * - heads are checked by request_framer.ts (size, syntax, body length) and
 *   get the peer's address as a header whose name holds a random secret, so
 *   the handler sees the real client address (the admin audit records it) and
 *   no client can forge it.
 *
 * The internal server is reached only once a complete head has arrived, so
 * idle and half-open connections cost one descriptor, not three.
 *
 * @module
 */

import { type Scheduler, systemScheduler, type Timer } from "../clock.ts";
import { formatHostPort, type HostPort } from "../host_port.ts";
import { log } from "../log/diagnostic.ts";
import { runAcceptLoop } from "../net/accept_loop.ts";
import type {
  HttpDropReason,
  HttpListenerName,
  HttpListenerStats,
  ServerCounters,
} from "../ops/counters.ts";
import { HttpBackend, type HttpHandler } from "./backend.ts";
import { HTTP_CLOSE_DRAIN_MS } from "../limits.ts";
import { problemResponseBytes, type ProblemSlug } from "./problem.ts";
import { RequestFramer } from "./request_framer.ts";

export type { HttpHandler } from "./backend.ts";

const logger = log("http");

/** Bytes read from a client at once (request heads are small; bodies at most a few KiB). */
const CLIENT_READ_BYTES = 8 * 1024;
/** Bytes copied from the internal server to a client at once (large GET /api/locks answers). */
const RESPONSE_COPY_BYTES = 64 * 1024;

/** A running HTTP listener (admin API or ops server). */
export interface HttpListener {
  /** The bound address (the real port when 0 was asked for). */
  readonly addr: string;
  /**
   * Stops accepting, lets requests in flight finish (their connections close
   * after the response), closes every other connection.
   */
  close(): Promise<void>;
}

/** The bounds of one HTTP listener (defaults and flags in limits.ts / config.ts). */
export interface HttpLimits {
  readonly headerTimeoutMs: number;
  readonly idleTimeoutMs: number;
  readonly connectionsMax: number;
  readonly headBytesMax: number;
  readonly bodyBytesMax: number;
}

export interface HttpListenOptions {
  readonly name: HttpListenerName;
  readonly limits: HttpLimits;
  /** Accept errors and the listener's connection counts go here. */
  readonly counters: ServerCounters;
  readonly scheduler?: Scheduler;
}

/**
 * Starts an HTTP listener on `at`. The only file that calls `Deno.listen` for
 * HTTP; backend.ts is the only one that calls `Deno.serve`.
 */
export function listenHttp(
  at: HostPort,
  options: HttpListenOptions,
  handler: HttpHandler,
): HttpListener {
  const { name, counters } = options;
  const stats = counters.http[name];
  const scheduler = options.scheduler ?? systemScheduler;
  const peerHeader = `x-lockd-peer-${randomHex(16)}`;
  const backend = new HttpBackend({
    name,
    peerHeader,
    handler,
    scheduler,
    onRestart: () => stats.serverRestarts++,
  });
  let listener: Deno.TcpListener;
  try {
    listener = Deno.listen({ hostname: at.hostname, port: at.port, transport: "tcp" });
  } catch (error) {
    void backend.close();
    throw error;
  }
  const guard: GuardContext = {
    name,
    limits: options.limits,
    stats,
    scheduler,
    backend,
    peerHeader,
    open: new Set(),
    evictable: new Set(),
    onAllClosed: null,
  };
  const loop = runAcceptLoop(listener, (conn) => admit(guard, conn), {
    scheduler,
    onAcceptError(error, backoffMs) {
      counters.countAcceptError(name);
      logger.warn("accept failed, backing off", {
        server: name,
        error: error instanceof Error ? error.message : String(error),
        backoff_ms: backoffMs,
      });
    },
  });
  const addr = listener.addr;
  let closing: Promise<void> | undefined;
  return {
    addr: formatHostPort(addr.hostname, addr.port),
    close() {
      closing ??= (async () => {
        loop.close();
        await loop.done;
        // Nothing in flight on these: close them now, so the backend's shutdown is not kept waiting.
        for (const connection of guard.open) {
          if (connection.backendConn === null) connection.close(null);
        }
        await backend.close();
        // The server has written its last responses; let the guard pass them on before the
        // connections close (a cut would lose the end of an answer), but not for a client that
        // does not read.
        await allClosed(guard, HTTP_CLOSE_DRAIN_MS);
        for (const connection of guard.open) connection.close(null);
      })();
      return closing;
    },
  };
}

interface GuardContext {
  readonly name: string;
  readonly limits: HttpLimits;
  readonly stats: HttpListenerStats;
  readonly scheduler: Scheduler;
  readonly backend: HttpBackend;
  readonly peerHeader: string;
  /** Every open connection. */
  readonly open: Set<GuardedConnection>;
  /** Open connections that have not passed a request yet, oldest first (Set keeps insertion order). */
  readonly evictable: Set<GuardedConnection>;
  /** Called when the last open connection closes (see allClosed). */
  onAllClosed: (() => void) | null;
}

/** Resolves when no connection is open any more, or after `timeoutMs`. */
function allClosed(guard: GuardContext, timeoutMs: number): Promise<void> {
  if (guard.open.size === 0) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = guard.scheduler.setTimer(done, timeoutMs);
    guard.onAllClosed = done;
    function done() {
      timer.cancel();
      guard.onAllClosed = null;
      resolve();
    }
  });
}

/** Applies the connection cap to a new connection, then guards it. */
function admit(guard: GuardContext, conn: Deno.TcpConn): void {
  if (guard.open.size >= guard.limits.connectionsMax) {
    const oldest = guard.evictable.values().next();
    if (oldest.done) {
      guard.stats.dropped.limit++;
      refuseAtOnce(
        conn,
        problemResponseBytes(
          "too-many-connections",
          `The ${guard.name} listener has ${guard.limits.connectionsMax} connections open`,
        ),
      );
      return;
    }
    oldest.value.close("evicted");
  }
  const connection = new GuardedConnection(guard, conn);
  connection.run();
}

/** Writes a short answer to a connection that is not guarded, then closes it; never throws. */
function refuseAtOnce(conn: Deno.TcpConn, bytes: Uint8Array): void {
  conn.write(bytes).catch(() => {}).finally(() => {
    try {
      conn.close();
    } catch {
      // Already closed.
    }
  });
}

/** One client connection and, once it has sent a complete head, its connection to the backend. */
class GuardedConnection {
  readonly #guard: GuardContext;
  readonly #conn: Deno.TcpConn;
  readonly #framer: RequestFramer;
  backendConn: Deno.UnixConn | null = null;
  #closed = false;
  /** The current request (or the first one) must be complete by then; null between requests. */
  #headDeadlineMs: number | null;
  #lastActivityMs: number;
  #timer: Timer | null = null;
  #timerAtMs = Infinity;
  /** Written once the backend has finished its responses (a refused pipelined request). */
  #finalAnswer: Uint8Array | null = null;

  constructor(guard: GuardContext, conn: Deno.TcpConn) {
    this.#guard = guard;
    this.#conn = conn;
    const peer = conn.remoteAddr;
    this.#framer = new RequestFramer({
      headBytesMax: guard.limits.headBytesMax,
      bodyBytesMax: guard.limits.bodyBytesMax,
      injectedHeaderName: guard.peerHeader,
      injectedHeaderValue: formatHostPort(peer.hostname, peer.port),
    });
    const now = guard.scheduler.monotonicMs();
    this.#lastActivityMs = now;
    this.#headDeadlineMs = now + guard.limits.headerTimeoutMs;
    guard.open.add(this);
    guard.evictable.add(this);
    guard.stats.open++;
    try {
      conn.setNoDelay(true);
    } catch {
      // The peer may be gone already; the first read will say so.
    }
    this.#armTimer();
  }

  /** Reads the client until it stops, passing requests on (the request pump). */
  async run(): Promise<void> {
    const buffer = new Uint8Array(CLIENT_READ_BYTES);
    while (!this.#closed) {
      let n: number | null;
      try {
        n = await this.#conn.read(buffer);
      } catch {
        n = null; // A reset reads as the end.
      }
      if (this.#closed) return;
      if (n === null) return this.#clientEnded();
      this.#touch();
      const steps = this.#framer.push(buffer.subarray(0, n));
      this.#updateHeadDeadline();
      for (const step of steps) {
        if (step.kind === "refuse") return this.#refuse(step.slug, step.detail);
        if (!(await this.#forward(step.bytes))) return;
      }
    }
  }

  /** Sends bytes to the backend, connecting first; false when the connection was closed instead. */
  async #forward(bytes: Uint8Array): Promise<boolean> {
    if (this.backendConn === null) {
      this.#guard.evictable.delete(this);
      try {
        this.backendConn = await this.#guard.backend.connect();
      } catch (error) {
        if (this.#closed) return false;
        logger.warn("cannot reach the HTTP server", {
          server: this.#guard.name,
          error: error instanceof Error ? error.message : String(error),
        });
        this.#refuse(
          "unavailable",
          "The server cannot take this request now (out of file descriptors, or restarting); " +
            "retry later",
        );
        return false;
      }
      if (this.#closed) {
        closeQuietly(this.backendConn);
        return false;
      }
      void this.#pumpResponses(this.backendConn);
    }
    try {
      await writeAll(this.backendConn, bytes);
      return true;
    } catch {
      // The backend closed (e.g. after `Connection: close`); the response pump finishes up.
      return false;
    }
  }

  /** Copies the backend's responses to the client until the backend closes, then closes. */
  async #pumpResponses(backendConn: Deno.UnixConn): Promise<void> {
    const buffer = new Uint8Array(RESPONSE_COPY_BYTES);
    for (;;) {
      let n: number | null;
      try {
        n = await backendConn.read(buffer);
      } catch {
        n = null;
      }
      if (this.#closed) return;
      if (n === null) break;
      try {
        await writeAll(this.#conn, buffer.subarray(0, n));
      } catch {
        return this.close(null);
      }
      this.#touch();
    }
    if (this.#finalAnswer !== null) {
      try {
        await writeAll(this.#conn, this.#finalAnswer);
      } catch {
        // The client is gone; nothing to tell.
      }
    }
    this.close(null);
  }

  /** The client closed its side (or reset). */
  #clientEnded(): void {
    if (this.#framer.inRequest || this.backendConn === null) return this.close(null);
    // Half-close: let the backend finish the responses it owes, then close.
    this.backendConn.closeWrite().catch(() => this.close(null));
  }

  /** Answers a request the guard refuses, after the responses already owed, then closes. */
  #refuse(slug: ProblemSlug, detail: string): void {
    const stats = this.#guard.stats;
    if (slug === "unavailable") stats.dropped.unavailable++;
    else stats.dropped.invalid_request++;
    const answer = problemResponseBytes(slug, detail);
    if (this.backendConn === null) {
      writeAll(this.#conn, answer).catch(() => {}).finally(() => this.close(null));
      return;
    }
    this.#finalAnswer = answer;
    this.backendConn.closeWrite().catch(() => this.close(null));
  }

  #touch(): void {
    this.#lastActivityMs = this.#guard.scheduler.monotonicMs();
  }

  #updateHeadDeadline(): void {
    if (this.#framer.inRequest) {
      if (this.#headDeadlineMs === null) {
        this.#headDeadlineMs = this.#guard.scheduler.monotonicMs() +
          this.#guard.limits.headerTimeoutMs;
        this.#armTimer();
      }
    } else if (this.#framer.requestsComplete > 0) {
      this.#headDeadlineMs = null;
    }
  }

  /** Makes sure the timer fires no later than the next deadline (it re-arms itself when early). */
  #armTimer(): void {
    const atMs = Math.min(
      this.#headDeadlineMs ?? Infinity,
      this.#lastActivityMs + this.#guard.limits.idleTimeoutMs,
    );
    if (this.#timer !== null && this.#timerAtMs <= atMs) return;
    this.#timer?.cancel();
    this.#timerAtMs = atMs;
    this.#timer = this.#guard.scheduler.setTimer(
      () => this.#onTimer(),
      atMs - this.#guard.scheduler.monotonicMs(),
    );
  }

  #onTimer(): void {
    this.#timer = null;
    this.#timerAtMs = Infinity;
    if (this.#closed) return;
    const now = this.#guard.scheduler.monotonicMs();
    if (this.#headDeadlineMs !== null && now >= this.#headDeadlineMs) {
      return this.close("header_timeout");
    }
    if (now >= this.#lastActivityMs + this.#guard.limits.idleTimeoutMs) {
      return this.close("idle_timeout");
    }
    this.#armTimer();
  }

  /** Closes both sides at once; `reason` counts a close the guard decided on. Idempotent. */
  close(reason: HttpDropReason | null): void {
    const guard = this.#guard;
    if (!guard.open.delete(this)) return;
    this.#closed = true;
    guard.evictable.delete(this);
    guard.stats.open--;
    if (reason !== null) guard.stats.dropped[reason]++;
    this.#timer?.cancel();
    this.#timer = null;
    closeQuietly(this.#conn);
    if (this.backendConn !== null) closeQuietly(this.backendConn);
    if (guard.open.size === 0) guard.onAllClosed?.();
  }
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < bytes.length) offset += await conn.write(bytes.subarray(offset));
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // Already closed.
  }
}

function randomHex(bytes: number): string {
  return Array.from(
    crypto.getRandomValues(new Uint8Array(bytes)),
    (b) => b.toString(16).padStart(2, "0"),
  ).join("");
}
