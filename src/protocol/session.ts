import type { LockEngine } from "../core/engine.ts";
import type { CloseCause, Peer } from "../core/types.ts";
import {
  CLIENT_NAME_BYTES_MAX,
  READ_BUFFER_BYTES,
  READ_BUFFER_BYTES_MAX,
  WRITE_BUFFER_BYTES_MAX,
} from "../limits.ts";
import { debugEnabled, log } from "../log/diagnostic.ts";
import type { ServerCounters } from "../ops/counters.ts";
import { ProtocolError, WIRE_CODES, type WireCodeName } from "./codes.ts";
import { FrameWriter } from "./frame.ts";
import { FrameReader } from "./frame_reader.ts";
import {
  type Acquire,
  type Message,
  PROTOCOL_VERSION,
  type Release,
  type ServerMessage,
  WAIT_FOREVER,
} from "./messages.ts";
import type { Transport } from "./transport.ts";

const logger = log("protocol");

/** What a session needs from the server around it. */
export interface SessionHost {
  readonly engine: LockEngine;
  readonly counters: ServerCounters;
  readonly serverVersion: string;
  readonly frameBytesMax: number;
  readonly handshakeTimeoutMs: number;
  /** True once shutdown began: new sessions are refused. */
  readonly shuttingDown: boolean;
  /** ACL check before an ACQUIRE reaches the engine; returns false (and records the denial) when refused. */
  admitAcquire(peer: Peer, requestId: number, name: string): boolean;
  /** Carries out engine events (audit, frames, closes). */
  apply(events: ReturnType<LockEngine["tick"]>): void;
  register(session: Session): void;
  unregister(session: Session): void;
  /** Sessions with a write in flight, watched for stalls. */
  readonly writesInFlight: Set<Session>;
}

/**
 * Session states and their only transitions:
 *   handshake → open      (valid HELLO)
 *   handshake → closing   (bad first frame, version, limit, timeout, shutdown)
 *   open      → closing   (engine closed it, peer left, protocol error)
 *   closing   → closed    (final frames flushed or the write failed)
 */
export type SessionState = "handshake" | "open" | "closing" | "closed";

/** One client connection: reads frames, drives the engine, writes replies in batches. */
export class Session {
  readonly transport: Transport;
  readonly #host: SessionHost;
  #state: SessionState = "handshake";
  #peer: Peer | null = null;
  readonly #reader: FrameReader;
  readonly #writer: FrameWriter;
  #writing = false;
  #flushScheduled = false;
  #handshakeTimer: ReturnType<typeof setTimeout> | undefined;
  /** Why the session ends, for the debug line when it closes: a close cause or the final ERROR. */
  #closeReason = "";
  /** Monotonic ms when the current write started (for the stall watchdog). */
  writeStartedMs = 0;

  constructor(transport: Transport, host: SessionHost) {
    this.transport = transport;
    this.#host = host;
    this.#reader = new FrameReader(host.frameBytesMax);
    this.#writer = new FrameWriter({ initialBytes: 256, maxFrameBytes: host.frameBytesMax });
  }

  get state(): SessionState {
    return this.#state;
  }

  get peer(): Peer | null {
    return this.#peer;
  }

  /** Serves the connection until it closes. Never throws. */
  async run(): Promise<void> {
    this.#handshakeTimer = setTimeout(() => {
      this.#handshakeTimer = undefined;
      if (this.#state === "handshake") {
        logger.warn("handshake timed out", { remote_addr: this.transport.remoteAddr });
        this.#refuse("HANDSHAKE_TIMEOUT", `No HELLO within ${this.#host.handshakeTimeoutMs} ms`);
      }
    }, this.#host.handshakeTimeoutMs);
    // Idle sessions keep a small buffer in their pending read; one that fills it is busy
    // (pipelining) and gets a larger one, up to READ_BUFFER_BYTES_MAX.
    let buffer = new Uint8Array(READ_BUFFER_BYTES);
    try {
      while (this.#state === "handshake" || this.#state === "open") {
        let n: number | null;
        try {
          n = await this.transport.read(buffer);
        } catch {
          this.#peerLeft("io_error");
          return;
        }
        if (n === null) {
          this.#peerLeft("client_closed");
          return;
        }
        if (this.#state !== "handshake" && this.#state !== "open") return;
        this.#receive(buffer.subarray(0, n));
        if (n === buffer.length && buffer.length < READ_BUFFER_BYTES_MAX) {
          buffer = new Uint8Array(Math.min(READ_BUFFER_BYTES_MAX, buffer.length * 4));
        }
      }
    } catch (error) {
      logger.error("session failed", { remote_addr: this.transport.remoteAddr, error });
      this.#peerLeft("io_error");
    } finally {
      this.#clearHandshakeTimer();
    }
  }

  /** Queues a frame; all frames queued in one turn go out in one write. */
  send(message: ServerMessage): void {
    if (this.#state === "closed") return;
    if (debugEnabled()) this.#debugFrame("frame sent", message);
    this.#writer.push(message);
    if (this.#writer.byteLength > WRITE_BUFFER_BYTES_MAX) {
      // The client does not read its replies: close it as an I/O timeout, memory stays bounded.
      logger.warn("slow reader disconnected", {
        remote_addr: this.transport.remoteAddr,
        buffered_bytes: this.#writer.byteLength,
      });
      this.#writer.take();
      this.closeForStall();
      return;
    }
    if (!this.#flushScheduled && !this.#writing) {
      this.#flushScheduled = true;
      queueMicrotask(() => this.#flush());
    }
  }

  /** Sends an ERROR frame and counts it. */
  sendError(code: WireCodeName, requestId: number, name: string, message: string): void {
    const info = WIRE_CODES[code];
    this.#host.counters.countError(info.code);
    this.send({ type: "error", requestId, code: info.code, name, message });
  }

  /**
   * Ends the session from the server side (the engine already forgot it):
   * sends a final ERROR when given, then closes once it is written.
   */
  terminate(finalError?: { code: WireCodeName; name: string; message: string }): void {
    if (this.#state === "closing" || this.#state === "closed") return;
    this.#state = "closing";
    this.#closeReason ||= finalError?.code ?? "server";
    this.#clearHandshakeTimer();
    if (finalError) this.sendError(finalError.code, 0, finalError.name, finalError.message);
    if (!this.#writing && !this.#flushScheduled) this.#finish();
  }

  /** A write stalled past the I/O timeout (or the buffer overflowed): end it as io_timeout. */
  closeForStall(): void {
    this.#closeReason ||= "io_timeout";
    if (this.#peer !== null && this.#state === "open") {
      this.#host.apply(this.#host.engine.closeSession(this.#peer.sessionId, "io_timeout"));
    }
    this.#finish();
  }

  #receive(chunk: Uint8Array): void {
    if (this.#peer !== null) this.#host.engine.touch(this.#peer.sessionId);
    this.#reader.push(chunk);
    try {
      for (;;) {
        if (this.#state !== "handshake" && this.#state !== "open") return;
        const message = this.#reader.next();
        if (message === null) return;
        this.#handle(message);
      }
    } catch (error) {
      if (!(error instanceof ProtocolError)) throw error;
      this.#protocolViolation(error.message);
    }
  }

  #handle(message: Message): void {
    if (debugEnabled()) this.#debugFrame("frame received", message);
    if (this.#state === "handshake") {
      if (message.type !== "hello") {
        this.#protocolViolation(`Expected HELLO first, got ${message.type.toUpperCase()}`);
        return;
      }
      this.#hello(message.version, message.clientName);
      return;
    }
    const peer = this.#peer!;
    if ("requestId" in message && message.requestId === 0 && message.type !== "error") {
      const name = "name" in message ? message.name : "";
      this.sendError("INVALID_ARGUMENT", 0, name, "Request id 0 is reserved for the server");
      return;
    }
    switch (message.type) {
      case "acquire":
        this.#acquire(peer, message);
        return;
      case "release":
        this.#release(peer, message);
        return;
      case "heartbeat": {
        const renewed = this.#host.engine.heartbeat(peer.sessionId);
        this.send({ type: "heartbeat_ack", requestId: message.requestId, renewed });
        return;
      }
      default:
        this.#protocolViolation(`Unexpected ${message.type.toUpperCase()} from a client`);
    }
  }

  #hello(version: number, clientName: string): void {
    this.#clearHandshakeTimer();
    if (new TextEncoder().encode(clientName).length > CLIENT_NAME_BYTES_MAX) {
      this.#refuse("INVALID_ARGUMENT", `Client name is longer than ${CLIENT_NAME_BYTES_MAX} bytes`);
      return;
    }
    if (version !== PROTOCOL_VERSION) {
      this.#refuse(
        "UNSUPPORTED_VERSION",
        `Protocol version ${version} is not supported; this server speaks ${PROTOCOL_VERSION}`,
      );
      return;
    }
    if (this.#host.shuttingDown) {
      this.#refuse("SHUTTING_DOWN", "The server is shutting down");
      return;
    }
    const engine = this.#host.engine;
    const peer = engine.openSession(this.transport.identity, this.transport.remoteAddr);
    if (peer === null) {
      logger.warn("session limit reached", { remote_addr: this.transport.remoteAddr });
      this.#refuse("LIMIT_EXCEEDED", "The server has reached its session limit");
      return;
    }
    this.#peer = peer;
    this.#state = "open";
    this.#host.register(this);
    logger.debug("session opened", {
      session: peer.sessionId,
      remote_addr: peer.remoteAddr,
      identity: peer.identity,
    });
    this.send({
      type: "welcome",
      version: PROTOCOL_VERSION,
      serverVersion: this.#host.serverVersion,
      sessionId: peer.sessionId,
      ioTimeoutMs: engine.ioTimeoutMs,
      leaseDefaultMs: engine.leaseDefaultMs,
      leaseMaxMs: engine.leaseMaxMs,
    });
    // The session's I/O deadline joined the heap: let the timer see it.
    this.#host.apply([]);
  }

  #acquire(peer: Peer, message: Acquire): void {
    if (!this.#host.admitAcquire(peer, message.requestId, message.name)) return;
    const waitMs = message.waitMs === WAIT_FOREVER ? null : message.waitMs;
    this.#host.apply(
      this.#host.engine.acquire(
        peer.sessionId,
        message.requestId,
        message.name,
        message.leaseMs,
        waitMs,
      ),
    );
  }

  #release(peer: Peer, message: Release): void {
    this.#host.apply(
      this.#host.engine.release(peer.sessionId, message.requestId, message.name, message.token),
    );
  }

  /** Malformed input: ERROR MALFORMED_FRAME, then close; ownerships end as io_timeout. */
  #protocolViolation(reason: string): void {
    if (this.#state === "closing" || this.#state === "closed") return;
    logger.info("protocol violation", {
      remote_addr: this.transport.remoteAddr,
      session: this.#peer?.sessionId ?? 0,
      reason,
    });
    const wasOpen = this.#state === "open";
    this.terminate({ code: "MALFORMED_FRAME", name: "", message: reason });
    if (wasOpen) {
      this.#host.apply(this.#host.engine.closeSession(this.#peer!.sessionId, "io_error"));
    }
  }

  /** Sends one ERROR and closes (before or outside the engine's knowledge of the session). */
  #refuse(code: WireCodeName, message: string): void {
    this.terminate({ code, name: "", message });
  }

  /** The peer closed or reset the connection. */
  #peerLeft(cause: CloseCause): void {
    this.#closeReason ||= cause;
    if (this.#peer !== null && this.#state === "open") {
      this.#state = "closing";
      this.#host.apply(this.#host.engine.closeSession(this.#peer.sessionId, cause));
    }
    this.#finish();
  }

  async #flush(): Promise<void> {
    this.#flushScheduled = false;
    if (this.#writing) return;
    this.#writing = true;
    try {
      while (this.#writer.byteLength > 0 && this.#state !== "closed") {
        const bytes = this.#writer.take();
        this.writeStartedMs = performance.now();
        this.#host.writesInFlight.add(this);
        let offset = 0;
        while (offset < bytes.length) {
          offset += await this.transport.write(offset === 0 ? bytes : bytes.subarray(offset));
        }
        this.#host.writesInFlight.delete(this);
      }
    } catch {
      this.#host.writesInFlight.delete(this);
      this.#writing = false;
      this.#peerLeft("io_error");
      return;
    }
    this.#writing = false;
    if (this.#state === "closing") this.#finish();
  }

  #finish(): void {
    if (this.#state === "closed") return;
    this.#state = "closed";
    this.#clearHandshakeTimer();
    this.#host.writesInFlight.delete(this);
    this.#host.unregister(this);
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
    logger.debug(what, {
      session: this.#peer?.sessionId ?? 0,
      remote_addr: this.transport.remoteAddr,
      type: message.type,
      request_id: "requestId" in message ? message.requestId : 0,
      lock: "name" in message ? message.name : "",
      ...(message.type === "error" ? { code: message.code } : {}),
    });
  }

  #clearHandshakeTimer(): void {
    if (this.#handshakeTimer !== undefined) {
      clearTimeout(this.#handshakeTimer);
      this.#handshakeTimer = undefined;
    }
  }
}
