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
 * - at most `connectionsMax` connections per listener. At the cap, the least
 *   recently active connection that is not serving a request is closed for
 *   the new one: one that never completed a request (its accept is its last
 *   activity: a slowloris dribbling bytes gains nothing), or a keep-alive
 *   connection idle between requests (the end of its last response). A
 *   connection closed before its request was answered gets a 503
 *   `too-many-connections` answer, an idle one is just closed (issue 19
 *   item 2). Whether a request's response is over, response_counter.ts says;
 * - probes always find room: when every connection is serving a request, a
 *   new one may take one of `HTTP_PROBE_CONNECTIONS_RESERVED` slots above the
 *   cap, and is served there only if it comes from a loopback address (a
 *   container's health check) or its first request is a probe (`priority`:
 *   `/healthz`, `/readyz`, an admin request with the token); any other gets
 *   503. A connection from a loopback address that has not completed a request
 *   is never closed for a newcomer from elsewhere, so remote clients cannot
 *   crowd out a local health check;
 * - a connection the guard answers itself (503 at the cap, 4xx for a refused
 *   head) gets the answer, then a lingering close: its side is shut, and what
 *   the client still sends is read and dropped until it closes or
 *   `HTTP_REFUSAL_LINGER_MS` passed, so the answer is not lost to a reset (a
 *   socket closed with unread bytes resets the connection, and the client's
 *   kernel discards the answer it had received);
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
import { type AcceptLoop, runAcceptLoop } from "../net/accept_loop.ts";
import type {
  HttpDropReason,
  HttpListenerName,
  HttpListenerStats,
  ServerCounters,
} from "../counters.ts";
import { HttpBackend, type HttpHandler } from "./backend.ts";
import {
  HTTP_CLOSE_DRAIN_MS,
  HTTP_LINGERING_CONNECTIONS_MAX,
  HTTP_PROBE_CONNECTIONS_RESERVED,
  HTTP_REFUSAL_LINGER_MS,
} from "../limits.ts";
import { problemResponseBytes, type ProblemSlug } from "./problem.ts";
import { RequestFramer, type RequestHead } from "./request_framer.ts";
import { ResponseCounter } from "./response_counter.ts";
import { errorText } from "../error_text.ts";

export type { HttpHandler } from "./backend.ts";
export type { RequestHead } from "./request_framer.ts";

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
  /**
   * Whether a request is a probe that must find room when every connection is serving one
   * (the ops server: `/healthz`, `/readyz`; the admin API: a request with the token).
   */
  readonly priority?: (head: RequestHead) => boolean | Promise<boolean>;
  /**
   * Whether a peer is on this host (its connections are served in the reserved slots, and
   * not closed for remote newcomers before their first request). Loopback addresses by
   * default; tests choose.
   */
  readonly localPeer?: (peer: Deno.NetAddr) => boolean;
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
    priority: options.priority ?? (() => false),
    localPeer: options.localPeer ?? isLoopback,
    open: new Set(),
    evictable: new Set(),
    reserve: new Set(),
    lingering: new Set(),
    onAllClosed: null,
  };
  const loop = runAcceptLoop(listener, (conn) => admit(guard, conn), {
    scheduler,
    onAcceptError(error, backoffMs) {
      counters.countAcceptError(name);
      logger.warn("accept failed, backing off", {
        server: name,
        error: errorText(error),
        backoff_ms: backoffMs,
      });
    },
  });
  const addr = listener.addr;
  let closing: Promise<void> | undefined;
  return {
    addr: formatHostPort(addr.hostname, addr.port),
    close() {
      closing ??= closeListener(loop, guard);
      return closing;
    },
  };
}

/**
 * Stops accepting, lets the backend answer what it has, gives the guard a bounded time to pass
 * the last responses on, then closes every connection left.
 */
async function closeListener(loop: AcceptLoop, guard: GuardContext): Promise<void> {
  loop.close();
  await loop.done;
  // Nothing in flight on these: close them now, so the backend's shutdown is not kept waiting.
  for (const connection of guard.open) {
    if (connection.backendConn === null) connection.close(null);
  }
  await guard.backend.close();
  // The server has written its last responses; let the guard pass them on before the
  // connections close (a cut would lose the end of an answer), but not for a client that
  // does not read.
  await allClosed(guard, HTTP_CLOSE_DRAIN_MS);
  for (const connection of guard.open) connection.close(null);
  for (const end of guard.lingering) end();
}

interface GuardContext {
  readonly name: string;
  readonly limits: HttpLimits;
  readonly stats: HttpListenerStats;
  readonly scheduler: Scheduler;
  readonly backend: HttpBackend;
  readonly peerHeader: string;
  readonly priority: (head: RequestHead) => boolean | Promise<boolean>;
  readonly localPeer: (peer: Deno.NetAddr) => boolean;
  /** Every open connection (those in the reserved slots included). */
  readonly open: Set<GuardedConnection>;
  /**
   * Connections that may be closed for a newcomer at the cap, least recently active first: a
   * connection joins at its accept and again whenever its last response is delivered, and
   * leaves while it has a request in flight (a Set keeps insertion order).
   */
  readonly evictable: Set<GuardedConnection>;
  /** Connections in the reserved slots whose first request has not been judged yet, oldest first. */
  readonly reserve: Set<GuardedConnection>;
  /** Ends of the lingering closes in progress (see lingerThenClose). */
  readonly lingering: Set<() => void>;
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

/** Applies the connection cap to a new connection, then guards it (see the module comment). */
function admit(guard: GuardContext, conn: Deno.TcpConn): void {
  const max = guard.limits.connectionsMax;
  if (guard.open.size < max) {
    new GuardedConnection(guard, conn, false).run();
    return;
  }
  const local = guard.localPeer(conn.remoteAddr);
  const victim = evictionCandidate(guard, local);
  if (victim !== null) {
    victim.evict();
    new GuardedConnection(guard, conn, false).run();
    return;
  }
  if (guard.open.size >= max + HTTP_PROBE_CONNECTIONS_RESERVED) {
    // The reserved slots are taken: the oldest newcomer not judged yet makes room, unless it
    // is local and this one is not.
    let oldest: GuardedConnection | null = null;
    for (const candidate of guard.reserve) {
      if (local || !candidate.local) {
        oldest = candidate;
        break;
      }
    }
    if (oldest === null) {
      guard.stats.dropped.limit++;
      lingerThenClose(guard, conn, tooManyConnections(guard));
      return;
    }
    oldest.evict();
  }
  new GuardedConnection(guard, conn, true).run();
}

/** The least recently active connection a newcomer may close, or null. */
function evictionCandidate(guard: GuardContext, newcomerLocal: boolean): GuardedConnection | null {
  for (const candidate of guard.evictable) {
    // A local connection that has not completed a request yet (a health check on its way) is
    // not closed for a remote newcomer.
    if (!newcomerLocal && candidate.phase === "fresh" && candidate.local) continue;
    return candidate;
  }
  return null;
}

function tooManyConnections(guard: GuardContext): Uint8Array {
  return problemResponseBytes(
    "too-many-connections",
    `The ${guard.name} listener has ${guard.limits.connectionsMax} connections open, each ` +
      "serving a request; retry later",
  );
}

/**
 * Writes `answer` to a connection nobody else reads, shuts its side, then reads and drops
 * what the client still sends until it closes or HTTP_REFUSAL_LINGER_MS passed, then closes:
 * the answer reaches the client instead of being lost to a reset. Past
 * HTTP_LINGERING_CONNECTIONS_MAX lingering closes at once, the connection is closed right
 * after the write. Never throws.
 */
function lingerThenClose(guard: GuardContext, conn: Deno.Conn, answer: Uint8Array | null): void {
  const linger = guard.lingering.size < HTTP_LINGERING_CONNECTIONS_MAX;
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    timer?.cancel();
    guard.lingering.delete(end);
    closeQuietly(conn);
  };
  let timer: Timer | null = null;
  if (linger) {
    guard.lingering.add(end);
    timer = guard.scheduler.setTimer(end, HTTP_REFUSAL_LINGER_MS);
  }
  void (async () => {
    try {
      if (answer !== null) await writeAll(conn, answer);
      if (!linger) return end();
      await conn.closeWrite();
      const sink = new Uint8Array(CLIENT_READ_BYTES);
      while (!ended && (await conn.read(sink)) !== null) {
        // Dropped: the client's request (or the rest of it) gets no other answer.
      }
    } catch {
      // A reset or a closed socket: nothing more to deliver.
    }
    end();
  })();
}

/**
 * Where a guarded connection is. Transitions: `fresh` → `busy` (a request head passed on)
 * → `idle` (every response delivered) → `busy` → ...; any phase → `lingering` (the guard
 * answered it and shut its side; its slot is free, what the client still sends is dropped)
 * → `closed`; any phase → `closed`. `fresh` and `idle` connections are the ones a newcomer at
 * the cap may close.
 */
type ConnectionPhase = "fresh" | "busy" | "idle" | "lingering" | "closed";

/** One client connection and, once it has sent a complete head, its connection to the backend. */
class GuardedConnection {
  readonly #guard: GuardContext;
  readonly #conn: Deno.TcpConn;
  readonly #framer: RequestFramer;
  readonly #responses = new ResponseCounter();
  backendConn: Deno.UnixConn | null = null;
  #phase: ConnectionPhase = "fresh";
  /** In a reserved slot and its first request not judged yet. */
  #unjudged: boolean;
  /** The current request (or the first one) must be complete by then; null between requests. */
  #headDeadlineMs: number | null;
  #lastActivityMs: number;
  #timer: Timer | null = null;
  #timerAtMs = Infinity;
  /** Written once the backend has finished its responses (a refused pipelined request). */
  #finalAnswer: Uint8Array | null = null;

  constructor(guard: GuardContext, conn: Deno.TcpConn, reserved: boolean) {
    this.#guard = guard;
    this.#conn = conn;
    this.#unjudged = reserved;
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
    if (reserved) guard.reserve.add(this);
    else guard.evictable.add(this);
    guard.stats.open++;
    try {
      conn.setNoDelay(true);
    } catch {
      // The peer may be gone already; the first read will say so.
    }
    this.#armTimer();
  }

  get phase(): ConnectionPhase {
    return this.#phase;
  }

  /** The peer is on this host (see HttpListenOptions.localPeer). */
  get local(): boolean {
    return this.#guard.localPeer(this.#conn.remoteAddr);
  }

  /**
   * Reads the client until it stops, passing requests on (the request pump). It is the
   * socket's only reader, also while the connection lingers (it then drops what it reads).
   */
  async run(): Promise<void> {
    const buffer = new Uint8Array(CLIENT_READ_BYTES);
    while (this.#phase !== "closed") {
      let n: number | null;
      try {
        n = await this.#conn.read(buffer);
      } catch {
        n = null; // A reset reads as the end.
      }
      // Read again after the await: a newcomer or a timer may have closed it meanwhile.
      const phase = this.#phase as ConnectionPhase;
      if (phase === "closed") return;
      if (phase === "lingering") {
        if (n === null) this.#endLinger();
        continue;
      }
      if (n === null) return this.#clientEnded();
      this.#touch();
      const steps = this.#framer.push(buffer.subarray(0, n));
      this.#updateHeadDeadline();
      for (const step of steps) {
        if (step.kind === "refuse") {
          this.#refuse(step.slug, step.detail);
          break;
        }
        if (step.head !== undefined) {
          if (this.#unjudged && !(await this.#judge(step.head))) break;
          this.#responses.requestSent(step.head.method);
          this.#setPhase("busy");
        }
        if (!(await this.#forward(step.bytes))) break;
      }
    }
  }

  /** Neither lingering nor closed. */
  get #serving(): boolean {
    return this.#phase !== "lingering" && this.#phase !== "closed";
  }

  /**
   * The first request of a connection in a reserved slot: served if the peer is local or the
   * request is a probe, else answered 503. False when the connection is closed instead.
   */
  async #judge(head: RequestHead): Promise<boolean> {
    this.#unjudged = false;
    this.#guard.reserve.delete(this);
    let served = this.local;
    if (!served) {
      try {
        served = await this.#guard.priority(head);
      } catch {
        served = false;
      }
    }
    if (!this.#serving) return false;
    if (served) return true;
    this.#guard.stats.dropped.limit++;
    this.#closeWithAnswer(tooManyConnections(this.#guard));
    return false;
  }

  /** Closed for a newcomer at the cap: a request on its way gets 503, an idle connection just closes. */
  evict(): void {
    const guard = this.#guard;
    guard.stats.dropped.evicted++;
    if (this.#phase === "idle" && !this.#framer.inRequest) {
      this.close(null);
      return;
    }
    this.#closeWithAnswer(
      problemResponseBytes(
        "too-many-connections",
        `The ${guard.name} listener has ${guard.limits.connectionsMax} connections open; this ` +
          "one was closed for a newer one before it completed a request; retry",
      ),
    );
  }

  /** Sends bytes to the backend, connecting first; false when the connection was closed instead. */
  async #forward(bytes: Uint8Array): Promise<boolean> {
    if (this.backendConn === null) {
      try {
        this.backendConn = await this.#guard.backend.connect();
      } catch (error) {
        if (!this.#serving) return false;
        logger.warn("cannot reach the HTTP server", {
          server: this.#guard.name,
          error: errorText(error),
        });
        this.#refuse(
          "unavailable",
          "The server cannot take this request now (out of file descriptors, or restarting); " +
            "retry later",
        );
        return false;
      }
      if (!this.#serving) {
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
      if (!this.#serving) return;
      if (n === null) break;
      const bytes = buffer.subarray(0, n);
      try {
        await writeAll(this.#conn, bytes);
      } catch {
        return this.close(null);
      }
      if (!this.#serving) return;
      this.#touch();
      this.#responses.push(bytes);
      if (this.#responses.idle && this.#finalAnswer === null) this.#setPhase("idle");
    }
    if (this.#finalAnswer !== null) return this.#closeWithAnswer(this.#finalAnswer);
    this.close(null);
  }

  /** Moves to `phase`, keeping the order of the evictable set (least recently active first). */
  #setPhase(phase: "busy" | "idle"): void {
    const evictable = this.#guard.evictable;
    evictable.delete(this);
    this.#phase = phase;
    if (phase === "idle") evictable.add(this);
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
    if (this.backendConn === null) return this.#closeWithAnswer(answer);
    // Wound down after the responses owed: no newcomer closes it meanwhile (its answer must
    // get out).
    this.#guard.evictable.delete(this);
    this.#phase = "busy";
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
    if (!this.#serving) return;
    const now = this.#guard.scheduler.monotonicMs();
    if (this.#headDeadlineMs !== null && now >= this.#headDeadlineMs) {
      return this.close("header_timeout");
    }
    if (now >= this.#lastActivityMs + this.#guard.limits.idleTimeoutMs) {
      return this.close("idle_timeout");
    }
    this.#armTimer();
  }

  /** Takes the connection off the listener's books (its slot is free); false if already off. */
  #release(reason: HttpDropReason | null, next: "lingering" | "closed"): boolean {
    const guard = this.#guard;
    if (!guard.open.delete(this)) return false;
    this.#phase = next;
    guard.evictable.delete(this);
    guard.reserve.delete(this);
    guard.stats.open--;
    if (reason !== null) guard.stats.dropped[reason]++;
    this.#timer?.cancel();
    this.#timer = null;
    if (this.backendConn !== null) closeQuietly(this.backendConn);
    if (guard.open.size === 0) guard.onAllClosed?.();
    return true;
  }

  /**
   * Frees the slot at once, writes `answer`, shuts the connection's side and lingers (see the
   * module comment); past HTTP_LINGERING_CONNECTIONS_MAX it closes right after the write.
   */
  #closeWithAnswer(answer: Uint8Array): void {
    const guard = this.#guard;
    if (!this.#release(null, "lingering")) return;
    const linger = guard.lingering.size < HTTP_LINGERING_CONNECTIONS_MAX;
    if (linger) {
      guard.lingering.add(this.#endLinger);
      this.#lingerTimer = guard.scheduler.setTimer(this.#endLinger, HTTP_REFUSAL_LINGER_MS);
    }
    void (async () => {
      try {
        await writeAll(this.#conn, answer);
        if (!linger) return this.#endLinger();
        await this.#conn.closeWrite();
      } catch {
        this.#endLinger();
      }
    })();
  }

  #lingerTimer: Timer | null = null;

  /** Ends a lingering close (the client closed, the time is up, or the listener closes). */
  readonly #endLinger = (): void => {
    if (this.#phase !== "lingering") return;
    this.#phase = "closed";
    this.#lingerTimer?.cancel();
    this.#lingerTimer = null;
    this.#guard.lingering.delete(this.#endLinger);
    closeQuietly(this.#conn);
  };

  /** Closes both sides at once; `reason` counts a close the guard decided on. Idempotent. */
  close(reason: HttpDropReason | null): void {
    if (!this.#release(reason, "closed")) return;
    closeQuietly(this.#conn);
  }
}

/** Loopback addresses: 127.0.0.0/8, ::1, and IPv4-mapped 127.x. */
function isLoopback(peer: Deno.NetAddr): boolean {
  const host = peer.hostname.startsWith("::ffff:") ? peer.hostname.slice(7) : peer.hostname;
  return host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
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
