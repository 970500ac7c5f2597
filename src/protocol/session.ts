import type { Scheduler, Timer } from "../clock.ts";
import type { CloseCause, Peer } from "../core/types.ts";
import {
  HELD_REQUESTS_PER_SESSION_MAX,
  PARTIAL_FRAME_STALL_MS,
  READ_BUFFER_BYTES_MAX,
  READ_BUFFER_BYTES_MIN,
  WRITE_BUFFER_BYTES_MAX,
} from "../limits.ts";
import { debugEnabled, log } from "../log/diagnostic.ts";
import type { ServerCounters } from "../counters.ts";
import type { LockService } from "../service/lock_service.ts";
import type { SessionPort } from "../service/session_registry.ts";
import type { StallWatchdog, StallWatched } from "../service/stall_watchdog.ts";
import { ProtocolError, WIRE_CODES, wireCodeInfo } from "../wire/codes.ts";
import { errorFrame, SESSION_ERRORS, type WireError } from "../service/wire_errors.ts";
import type { EncodedFrame } from "../wire/encoded_frame.ts";
import { type FrameBudget, FrameReader } from "../wire/frame_reader.ts";
import type {
  DecodedClientRequest,
  DecodedMessage,
  ErrorMessage,
  Message,
  ServerMessage,
} from "../wire/messages.ts";
import { peerClosedCause, RequestDispatch, unreachable } from "./dispatch.ts";
import { helloRefusal, welcomeFor } from "./handshake.ts";
import { ReplyOrder, type ReplyOrderOptions } from "./reply_order.ts";
import { frameFields, heldBytes } from "./session_frames.ts";
import { type OutputOwner, SessionOutput } from "./session_output.ts";
import type { Transport } from "./transport.ts";

const logger = log("protocol");

/** What a session needs from the server around it. */
export interface SessionHost {
  /** Every state change goes through it. */
  readonly service: LockService;
  readonly scheduler: Scheduler;
  readonly counters: ServerCounters;
  readonly watchdog: StallWatchdog;
  readonly serverVersion: string;
  readonly frameBytesMax: number;
  readonly handshakeTimeoutMs: number;
  readonly ioTimeoutMs: number;
  readonly leaseDefaultMs: number;
  readonly leaseMaxMs: number;
  /** The server's ration of bytes for frames larger than any valid request. */
  readonly frameBudget: FrameBudget;
  /** The connection left its handshake (a session opened, or it is closing). Once. */
  handshakeEnded(session: Session): void;
  /** The connection is closed (the session is gone from the server's connection set). */
  closed(session: Session): void;
}

/**
 * Session states and their only transitions:
 *   handshake → open      (valid HELLO)
 *   handshake → closing   (bad first frame, version, limit, timeout, shutdown)
 *   open      → closing   (the service closed it, peer left, protocol error)
 *   closing   → closed    (final frames flushed, or the peer is gone, or a write failed)
 */
export type SessionState = "handshake" | "open" | "closing" | "closed";

/**
 * One client connection: reads frames and turns them into service commands;
 * writes the replies the service decides, in the order it decided them, in
 * batches (one socket write per event-loop turn).
 *
 * Reply order: a frame that waits for its audit record holds back every later
 * frame of the session (docs/architecture.md, "Reply order").
 */
export class Session implements SessionPort, StallWatched {
  readonly transport: Transport;
  readonly #host: SessionHost;
  #state: SessionState = "handshake";
  #peer: Peer | null = null;
  /** The protocol version of the session: 1 until a HELLO asking for another passed its checks. */
  #version = 1;
  /** The open session's requests (null before WELCOME). */
  #dispatch: RequestDispatch | null = null;
  readonly #reader: FrameReader;
  readonly #output: SessionOutput;
  #handshakeTimer: Timer | undefined;
  /** Frames in decision order: one decided after a held place waits there (see `hold`). */
  readonly #replies: ReplyOrder<ServerMessage>;
  /** Why the session ends, for the debug line when it closes: a close cause or the final ERROR. */
  #closeReason = "";
  /** A HELLO waits for its answer (cluster mode): later frames wait in the reader. */
  #admitting = false;
  /**
   * Cluster mode: the node cannot prove its leadership now, so requests wait in the reader until
   * this settles (the leader resumed, or stepped down and closed the session).
   */
  #decisionsHeld: Promise<void> | null = null;
  /** The buffer of the next read: the small one, or a larger one while reads fill theirs. */
  #readBuffer: Uint8Array = new Uint8Array(READ_BUFFER_BYTES_MIN);
  readonly #smallReadBuffer = this.#readBuffer;
  /** When bytes last arrived (monotonic ms), for the partial-frame stall check. */
  #lastReadMs = 0;
  #stallTimer: Timer | undefined;

  constructor(transport: Transport, host: SessionHost) {
    this.transport = transport;
    this.#host = host;
    this.#reader = new FrameReader(host.frameBytesMax, host.frameBudget);
    const sink = new Session.#Sink(this);
    this.#replies = new ReplyOrder<ServerMessage>(sink);
    this.#output = new SessionOutput(
      sink,
      this,
      host.watchdog,
      host.counters,
      host.frameBytesMax,
    );
  }

  /**
   * What the reply order and the write path call back: one small object per session whose
   * methods live on its prototype (no closures per session: memory per idle session, issue 24).
   * Declared in the class body, so it may call the session's private methods.
   */
  static readonly #Sink = class implements ReplyOrderOptions<ServerMessage>, OutputOwner {
    readonly #session: Session;
    readonly bytesMax = WRITE_BUFFER_BYTES_MAX;

    constructor(session: Session) {
      this.#session = session;
    }

    get transport(): Transport {
      return this.#session.transport;
    }

    get closed(): boolean {
      return this.#session.#state === "closed";
    }

    deliver(message: ServerMessage): void {
      const session = this.#session;
      if (session.#state === "closed") return;
      if (debugEnabled()) session.#debugFrame("frame sent", message);
      session.#output.push(message);
    }

    weigh(message: ServerMessage | null): number {
      return heldBytes(message);
    }

    overflowed(bytes: number): void {
      // Replies wait for their audit records and the client keeps asking: memory stays bounded.
      const session = this.#session;
      logger.warn("slow reader disconnected", {
        remote_addr: session.transport.remoteAddr,
        held_bytes: bytes,
      });
      queueMicrotask(() => session.closeForStall());
    }

    slowReader(): void {
      this.#session.closeForStall();
    }

    encodeFailed(): void {
      queueMicrotask(() => this.#session.#peerLeft("io_error"));
    }

    writeFailed(): void {
      this.#session.#peerLeft("io_error");
    }

    drained(): void {
      this.#session.#finishWhenFlushed();
    }

    flushed(): void {
      this.#session.#finishWhenFlushed();
    }
  };

  get state(): SessionState {
    return this.#state;
  }

  get peer(): Peer | null {
    return this.#peer;
  }

  /** The protocol version the session speaks (1 until its HELLO asked for another). */
  get version(): number {
    return this.#version;
  }

  get remoteAddr(): string {
    return this.transport.remoteAddr;
  }

  get sessionId(): number {
    return this.#peer?.sessionId ?? 0;
  }

  /** Requests read and not yet handed to the service (held while the leader cannot decide). */
  get heldRequests(): number {
    return this.#reader.readyCount;
  }

  /** Bytes this connection's read side holds: its read buffer and its partial frame's buffer. */
  get readBytes(): number {
    return this.#readBuffer.byteLength + this.#reader.retainedBytes;
  }

  /** Serves the connection until it closes. Never throws. */
  async run(): Promise<void> {
    this.#handshakeTimer = this.#host.scheduler.setTimer(() => {
      this.#handshakeTimer = undefined;
      try {
        if (this.#state === "handshake") {
          logger.warn("handshake timed out", { remote_addr: this.transport.remoteAddr });
          this.#refuse(SESSION_ERRORS.handshakeTimeout(this.#host.handshakeTimeoutMs));
        }
      } catch (error) {
        logger.error("handshake timeout handling failed", { error: String(error) });
      }
    }, this.#host.handshakeTimeoutMs);
    try {
      while (this.#state === "handshake" || this.#state === "open") {
        const buffer = this.#readBuffer;
        let n: number | null;
        try {
          n = await this.transport.read(buffer);
        } catch {
          this.#peerLeft("io_error");
          return;
        }
        if (n === null) {
          this.#peerLeft(peerClosedCause(this.#version));
          return;
        }
        if (this.#state !== "handshake" && this.#state !== "open") return;
        this.#lastReadMs = this.#host.scheduler.monotonicMs();
        this.#receive(buffer.subarray(0, n));
        if (
          this.#decisionsHeld !== null &&
          this.#reader.readyCount > HELD_REQUESTS_PER_SESSION_MAX
        ) {
          // Requests held while the leader cannot decide: read no more until they are handed
          // over (the peer's bytes wait in the kernel), so memory stays bounded. Below this a
          // held session keeps reading, so its I/O deadline keeps moving.
          await this.#decisionsHeld;
        }
        // A read that filled its buffer says more bytes wait: the next one gets a buffer four
        // times larger (up to READ_BUFFER_BYTES_MAX). Any other read means the peer's burst is
        // over, and the next read waits with the small buffer: a connection that goes quiet
        // (or stalls in the middle of a frame) does not keep a large one in its pending read.
        this.#readBuffer = n < buffer.length
          ? this.#smallReadBuffer
          : buffer.length < READ_BUFFER_BYTES_MAX
          ? new Uint8Array(Math.min(READ_BUFFER_BYTES_MAX, buffer.length * 4))
          : buffer;
        if (this.#reader.bufferedBytes > 0) this.#watchPartialFrame();
      }
    } catch (error) {
      logger.error("session failed", { remote_addr: this.transport.remoteAddr, error });
      this.#peerLeft("io_error");
    } finally {
      this.#clearHandshakeTimer();
    }
  }

  // ---- SessionPort: replies in decision order ---------------------------------

  /** Queues a frame after every frame decided before it; one write per turn carries them. */
  send(message: ServerMessage): void {
    if (this.#state === "closed") return;
    this.#replies.send(message);
  }

  /** As `send`, and `written` runs once the frame has been written to the connection. */
  sendObserved(message: ServerMessage, written: () => void): void {
    if (this.#state === "closed") return;
    this.#output.observe(message, written);
    this.#replies.send(message);
  }

  /** A frame encoded for many sessions (a watch event) goes as is unless frames wait before it. */
  sendEncoded(frame: EncodedFrame, requestId: number, written: (() => void) | null): void {
    if (this.#replies.idle && frame.version === this.#version && !debugEnabled()) {
      if (this.#state !== "closed") this.#output.pushEncoded(frame, requestId, written);
    } else if (written === null) this.send(frame.withRequestId(requestId));
    else this.sendObserved(frame.withRequestId(requestId), written);
  }

  /** Reserves the next place in the reply order; every later frame waits until it is filled. */
  hold(): (message: ServerMessage | null) => void {
    if (this.#state === "closed") return () => {};
    return this.#replies.hold();
  }

  /**
   * Ends the session from the server side (the engine already forgot it): sends the final
   * ERROR when given, after every frame decided before it, then closes once it is written.
   */
  terminate(finalError: ErrorMessage | null): void {
    if (this.#state === "closing" || this.#state === "closed") return;
    this.#setState("closing");
    this.#closeReason ||= finalError === null ? "server" : wireCodeInfo(finalError.code).name;
    this.#clearHandshakeTimer();
    if (finalError !== null) this.send(finalError);
    this.#finishWhenFlushed();
  }

  /** A write stalled past the I/O timeout (or too much was queued): end it as io_timeout. */
  closeForStall(): void {
    this.#closeReason ||= "io_timeout";
    if (this.#peer !== null && this.#state === "open") {
      this.#setState("closing");
      this.#host.service.closeSession(this.#peer.sessionId, "io_timeout");
    }
    this.#finish();
  }

  // ---- reading ----------------------------------------------------------------

  /**
   * A partial frame is buffered: once no byte has arrived for PARTIAL_FRAME_STALL_MS, the
   * frame's buffer is cut down to the bytes that did arrive. One timer while a partial frame
   * exists, re-armed lazily (not per read).
   */
  #watchPartialFrame(): void {
    if (this.#stallTimer !== undefined) return;
    const scheduler = this.#host.scheduler;
    const check = () => {
      this.#stallTimer = undefined;
      if (this.#state === "closed" || this.#reader.bufferedBytes === 0) return;
      const quietMs = scheduler.monotonicMs() - this.#lastReadMs;
      if (quietMs >= PARTIAL_FRAME_STALL_MS) {
        this.#reader.compact();
        return; // the next bytes arm the check again
      }
      this.#stallTimer = scheduler.setTimer(check, PARTIAL_FRAME_STALL_MS - quietMs);
    };
    this.#stallTimer = scheduler.setTimer(check, PARTIAL_FRAME_STALL_MS);
  }

  #receive(chunk: Uint8Array): void {
    // The read's own reading of the clock (one `op_now` less per read).
    if (this.#peer !== null) this.#host.service.touch(this.#peer.sessionId, this.#lastReadMs);
    this.#reader.push(chunk);
    if (this.#admitting && this.#reader.bufferedBytes > READ_BUFFER_BYTES_MAX) {
      this.#protocolViolation("Too many bytes sent before WELCOME");
      return;
    }
    this.#handleBuffered();
  }

  /** Handles every whole frame received, unless a HELLO is still waiting for its answer. */
  #handleBuffered(): void {
    try {
      for (;;) {
        if (this.#state !== "handshake" && this.#state !== "open") return;
        if (this.#admitting) return;
        if (this.#state === "open" && this.#holdForLeadership()) return;
        const message = this.#reader.next();
        if (message === null) return;
        this.#handle(message);
      }
    } catch (error) {
      if (!(error instanceof ProtocolError)) throw error;
      this.#protocolViolation(
        error.message,
        error.code === WIRE_CODES.LIMIT_EXCEEDED.code
          ? { code: "LIMIT_EXCEEDED", message: error.message }
          : SESSION_ERRORS.malformed(error.message),
      );
    }
  }

  /**
   * Cluster mode: whether requests must wait because the node cannot prove its leadership now
   * (LockService.decisionsHeld); if so, they are handled once the wait is over.
   */
  #holdForLeadership(): boolean {
    if (this.#decisionsHeld !== null) return true;
    const held = this.#host.service.decisionsHeld();
    if (held === null) return false;
    this.#decisionsHeld = held;
    held.then(() => {
      this.#decisionsHeld = null;
      this.#handleBuffered();
    });
    return true;
  }

  /** One frame of the peer, by its type (every type has its case: the compiler checks). */
  #handle(message: DecodedMessage): void {
    if (debugEnabled()) this.#debugFrame("frame received", message);
    switch (message.type) {
      case "hello":
        if (this.#state === "handshake") this.#hello(message.version, message.clientName);
        else this.#unexpected(message); // a second HELLO: a broken client
        return;
      case "acquire":
      case "release":
      case "heartbeat":
      // Version 2 only: the reader of a version-1 session never decodes these (unknown types).
      case "resume":
      case "reclaim":
      case "goodbye":
      case "set_value":
      case "query":
      case "watch":
      case "unwatch":
      case "downgrade":
        if (this.#state === "handshake") {
          this.#unexpected(message);
          return;
        }
        // GOODBYE is the client closing gracefully: the closed line says so, as for a version-1 FIN.
        if (message.type === "goodbye") this.#closeReason ||= "client_closed";
        this.#dispatch!.apply(message as DecodedClientRequest);
        return;
      case "welcome":
      case "queued":
      case "acquired":
      case "released":
      case "heartbeat_ack":
      case "resumed":
      case "value_set":
      case "lock_state":
      case "watching":
      case "watch_ended":
      case "error":
        // A server-to-client type (whatever its request id): a broken client.
        this.#unexpected(message);
        return;
      default:
        return unreachable(message);
    }
  }

  /** A frame that has no place here: before HELLO anything but HELLO, after it HELLO or a reply. */
  #unexpected(message: Message): void {
    const type = message.type.toUpperCase();
    this.#protocolViolation(
      this.#state === "handshake"
        ? `Expected HELLO first, got ${type}`
        : `Unexpected ${type} from a client`,
    );
  }

  #hello(version: number, clientName: string): void {
    this.#clearHandshakeTimer();
    const refusal = helloRefusal(version, clientName);
    if (refusal !== null) {
      this.#refuse(refusal);
      return;
    }
    this.#version = version;
    const verdict = this.#host.service.admit();
    if (verdict instanceof Promise) {
      // Cluster mode: the answer waits for an election; frames after the HELLO wait in the reader.
      this.#admitting = true;
      verdict.then(
        (error) => this.#admitted(error, clientName),
        (error) => {
          logger.error("HELLO admission failed", { error: String(error) });
          this.#admitted(SESSION_ERRORS.malformed("internal error"), clientName);
        },
      );
      return;
    }
    this.#open(verdict, clientName);
  }

  /** The held HELLO got its answer. */
  #admitted(refusal: WireError | null, clientName: string): void {
    this.#admitting = false;
    if (this.#state !== "handshake") return; // the peer left meanwhile
    this.#open(refusal, clientName);
    this.#handleBuffered();
  }

  #open(refusal: WireError | null, clientName: string): void {
    const opened = refusal ?? this.#host.service.openSession(
      this.transport.identity,
      this.transport.remoteAddr,
      this,
      clientName,
    );
    this.#welcome(opened);
  }

  #welcome(opened: Peer | WireError): void {
    if ("code" in opened) {
      this.#refuse(opened);
      return;
    }
    this.#peer = opened;
    this.#setState("open");
    logger.debug("session opened", {
      session: opened.sessionId,
      remote_addr: opened.remoteAddr,
      identity: opened.identity,
    });
    this.#output.version = this.#version;
    this.#dispatch = new RequestDispatch(
      this.#host.service,
      opened,
      this.#version,
      this.send.bind(this), // a bound function: lighter than a closure and its context
    );
    this.send(welcomeFor(this.#version, opened, this.#host, this.#host.service));
  }

  /** Malformed input: ERROR MALFORMED_FRAME (after the release records), then close; ownerships end as io_timeout. */
  #protocolViolation(reason: string, error: WireError = SESSION_ERRORS.malformed(reason)): void {
    if (this.#state === "closing" || this.#state === "closed") return;
    logger.info("protocol violation", {
      remote_addr: this.transport.remoteAddr,
      session: this.#peer?.sessionId ?? 0,
      reason,
    });
    if (this.#state === "open") {
      this.#host.service.closeSession(this.#peer!.sessionId, "io_error", error);
    } else {
      this.#refuse(error);
    }
  }

  /** Too many connections wait for their HELLO and this one waited longest: close it. */
  evictFromHandshake(error: WireError): void {
    if (this.#state !== "handshake") return;
    logger.info("connection without HELLO closed: too many connections in their handshake", {
      remote_addr: this.transport.remoteAddr,
    });
    this.#refuse(error);
  }

  /** Every state change; leaving the handshake is reported to the host once. */
  #setState(next: SessionState): void {
    if (this.#state === "handshake" && next !== "handshake") this.#host.handshakeEnded(this);
    this.#state = next;
  }

  /** Sends one ERROR and closes (before or outside the engine's knowledge of the session). */
  #refuse(error: WireError): void {
    this.terminate(errorFrame(0, "", error));
  }

  /** Shutdown reached a connection still in its handshake. */
  refuseShuttingDown(error: WireError): void {
    if (this.#state === "handshake") this.#refuse(error);
  }

  /** The peer closed or reset the connection: nothing more can reach it (version 2: orphaned). */
  #peerLeft(cause: CloseCause): void {
    this.#closeReason ||= cause;
    if (this.#peer !== null && this.#state === "open") {
      this.#setState("closing");
      this.#host.service.connectionLost(this.#peer.sessionId, cause);
    }
    this.#finish();
  }

  /** A closing session closes once nothing is held and everything decided is written. */
  #finishWhenFlushed(): void {
    if (this.#state === "closing" && this.#replies.idle && this.#output.idle) this.#finish();
  }

  #finish(): void {
    if (this.#state === "closed") return;
    this.#setState("closed");
    this.#clearHandshakeTimer();
    this.#reader.release();
    this.#stallTimer?.cancel();
    this.#stallTimer = undefined;
    this.#replies.clear();
    this.#output.close();
    this.#host.watchdog.writeEnded(this);
    this.#host.closed(this);
    this.transport.close();
    if (this.#peer !== null) {
      logger.debug("session closed", {
        session: this.#peer.sessionId,
        remote_addr: this.#peer.remoteAddr,
        reason: this.#closeReason,
      });
    }
  }

  /** One debug line per frame: type, request id, lock. Only called when debug is on. */
  #debugFrame(what: string, message: Message): void {
    logger.debug(what, frameFields(message, this.#peer?.sessionId ?? 0, this.remoteAddr));
  }

  #clearHandshakeTimer(): void {
    this.#handshakeTimer?.cancel();
    this.#handshakeTimer = undefined;
  }
}
