/**
 * One connection to a lockd server: dial, HELLO/WELCOME within a time bound, then frames in
 * both directions. It knows the wire, not locks: the client (client.ts) decides what frames
 * mean.
 *
 * @module
 */

import type { Scheduler } from "../clock.ts";
import { type HostPort, parseHostPort } from "../host_port.ts";
import { ProtocolError, WIRE_CODES, wireCodeInfo } from "../wire/codes.ts";
import { FrameWriter } from "../wire/frame.ts";
import { FrameReader } from "../wire/frame_reader.ts";
import type { ClientMessage, ErrorMessage, ServerMessage, Welcome } from "../wire/messages.ts";
import {
  IO_TIMEOUT_MS_MAX,
  IO_TIMEOUT_MS_MIN,
  LEASE_MS_MAX_MAX,
  LEASE_MS_MIN,
  RECLAIM_WINDOW_MS_MAX,
  WELCOME_VALUE_BYTES_MAX,
} from "../limits.ts";
import { ConnectionError, LockdError, ServerProtocolError } from "./errors.ts";
import type { ClientSocket, ClientTlsOptions, Dial } from "./transport.ts";
import { wrongProtocolError } from "./wrong_protocol.ts";
import { errorText } from "../error_text.ts";

export type { ClientTlsOptions } from "./transport.ts";

/**
 * The protocol version HELLO asks for first, and the one it falls back to at a server of before
 * version 2 (UNSUPPORTED_VERSION), within the same connect bound (docs/protocol.md, "Reclaiming
 * after a fail-over"). The next connection asks for 2 again: in a rolling upgrade the node may
 * speak it by then.
 */
const HELLO_VERSION = 2;
const HELLO_VERSION_FALLBACK = 1;

/**
 * Failures no retry mends (another protocol on that port, TLS against a plain listener, a
 * certificate refused, a redirect the client may not follow): a first connect over several
 * addresses ends with one at once instead of going round the list again until its bound.
 */
const FINAL = new WeakSet<object>();

/** Marks `error` as one no retry mends (see {@link isFinal}); returns it. */
export function final<E extends Error>(error: E): E {
  FINAL.add(error);
  return error;
}

/** Whether `error` is one no retry mends: marked so, or a LockdError that is not retryable. */
export function isFinal(error: unknown): boolean {
  if (typeof error !== "object" || error === null) return false;
  return FINAL.has(error) || (error instanceof LockdError && !error.retryable);
}

/** How to open a connection. */
export interface ConnectionOptions {
  readonly addr: string;
  readonly clientName: string;
  readonly tls?: ClientTlsOptions;
  /** Bound on dial + TLS + HELLO/WELCOME. */
  readonly timeoutMs: number;
  /** Aborting it abandons the attempt (rejects with its reason). */
  readonly signal?: AbortSignal;
  readonly scheduler: Scheduler;
  readonly dial: Dial;
}

/**
 * Legal transitions: `handshaking` → `open` (WELCOME) → `closed`; `handshaking` → `closed`
 * (error, timeout, abort). Once `closed`, nothing more is delivered.
 */
type ConnectionState = "handshaking" | "open" | "closed";

/**
 * A connection after its WELCOME. Frames sent in one turn of the event loop go out in one
 * write. An ERROR that ends the session (request id 0, or a code that closes the connection)
 * is the last frame delivered: whatever follows it on the wire is ignored.
 */
export class Connection {
  #welcome: Welcome | undefined;
  #state: ConnectionState = "handshaking";
  /** False until `start()`: frames wait in the reader so none is lost between WELCOME and wiring. */
  #started = false;
  #socket: ClientSocket | null = null;
  readonly #reader = new FrameReader();
  readonly #writer = new FrameWriter({ initialBytes: 256 });
  #flushScheduled = false;
  #closingError: ErrorMessage | null = null;
  #onHandshake: ((error: Error | null) => void) | null = null;
  readonly #socketClosed: Promise<void>;
  /** Whether this connection speaks TLS, and where it dials: for wrong_protocol.ts's messages. */
  #tls = false;
  /** Whether this connection presents a client certificate (mutual TLS). */
  #clientCertificate = false;
  #addr = "";
  /** The protocol version the HELLO asked for (the WELCOME must answer with it). */
  #version = HELLO_VERSION;
  /** The connect bound the timeout's message names. */
  #boundMs = 0;
  #firstBytesSeen = false;
  #resolveSocketClosed: () => void = () => {};

  /** Every server frame after WELCOME, in order, up to and including a session-ending ERROR. */
  onMessage: (message: ServerMessage) => void = () => {};
  /** Called once when the connection ends, with the ERROR that ended it, if the server sent one. */
  onClose: (closingError: ErrorMessage | null) => void = () => {};
  /**
   * Called (before `onClose`) when the server broke the framing or sent a frame no server
   * sends after WELCOME: the connection closes right after.
   */
  onViolation: (what: string) => void = () => {};

  private constructor() {
    this.#socketClosed = new Promise((resolve) => this.#resolveSocketClosed = resolve);
  }

  /**
   * Dials and completes the handshake within `options.timeoutMs`, asking for protocol version 2
   * and, at a server that does not speak it, for version 1 within what is left of the bound.
   * Never throws: rejects.
   */
  static async open(options: ConnectionOptions): Promise<Connection> {
    const startMs = options.scheduler.monotonicMs();
    try {
      return await Connection.#openVersion(options, HELLO_VERSION);
    } catch (error) {
      if (!(error instanceof LockdError && error.code === WIRE_CODES.UNSUPPORTED_VERSION.code)) {
        throw error;
      }
    }
    const leftMs = options.timeoutMs - (options.scheduler.monotonicMs() - startMs);
    if (leftMs <= 0) {
      throw new ConnectionError(
        `Cannot connect to lockd at ${options.addr}: no WELCOME within ${options.timeoutMs} ms`,
      );
    }
    return await Connection.#openVersion(
      { ...options, timeoutMs: leftMs },
      HELLO_VERSION_FALLBACK,
      options.timeoutMs,
    );
  }

  /** One HELLO of `version`; `boundMs`: the whole connect bound, for the timeout's message. */
  static #openVersion(
    options: ConnectionOptions,
    version: number,
    boundMs = options.timeoutMs,
  ): Promise<Connection> {
    let target;
    try {
      target = parseHostPort(options.addr);
    } catch (error) {
      return Promise.reject(
        new ConnectionError(`Cannot connect to lockd at ${options.addr}: ${errorText(error)}`, {
          cause: error,
        }),
      );
    }
    const connection = new Connection();
    connection.#version = version;
    connection.#boundMs = Math.ceil(boundMs);
    connection.#tls = options.tls !== undefined;
    connection.#clientCertificate = options.tls?.cert !== undefined;
    connection.#addr = options.addr;
    return new Promise<Connection>((resolve, reject) =>
      connection.#handshake(options, target, resolve, reject)
    );
  }

  /**
   * Dials and says HELLO; settles once: with the WELCOME (or the refusal that answers the
   * HELLO), the dial's failure, the timeout or the caller's abort.
   */
  #handshake(
    options: ConnectionOptions,
    target: HostPort,
    resolve: (connection: Connection) => void,
    reject: (error: Error) => void,
  ): void {
    const attempt = new AbortController();
    const onOuterAbort = () => attempt.abort(options.signal!.reason);
    const timer = options.scheduler.setTimer(
      () =>
        attempt.abort(
          new ConnectionError(
            `Cannot connect to lockd at ${options.addr}: no WELCOME within ${this.#boundMs} ms`,
          ),
        ),
      options.timeoutMs,
    );
    let settled = false;
    const settle = (error: Error | null) => {
      if (settled) return;
      settled = true;
      timer.cancel();
      options.signal?.removeEventListener("abort", onOuterAbort);
      attempt.signal.removeEventListener("abort", onAttemptAbort);
      this.#onHandshake = null;
      if (error === null) {
        this.#state = "open";
        resolve(this);
      } else {
        this.#shut();
        reject(error);
      }
    };
    const onAttemptAbort = () => settle(attempt.signal.reason);
    this.#onHandshake = settle;
    attempt.signal.addEventListener("abort", onAttemptAbort, { once: true });
    if (options.signal?.aborted) attempt.abort(options.signal.reason);
    else options.signal?.addEventListener("abort", onOuterAbort, { once: true });
    if (settled) return;
    this.#dial(options, target, attempt.signal, () => settled, settle);
  }

  /** Dials the server and writes HELLO; a socket that arrives after the end is closed. */
  #dial(
    options: ConnectionOptions,
    target: HostPort,
    signal: AbortSignal,
    settled: () => boolean,
    settle: (error: Error) => void,
  ): void {
    options.dial(
      { hostname: target.hostname, port: target.port, tls: options.tls },
      {
        onData: (bytes) => this.#onData(bytes),
        onClose: (error) => this.#onSocketClosed(error),
      },
      signal,
    ).then(
      (socket) => {
        if (settled()) {
          socket.close();
          return;
        }
        this.#socket = socket;
        const hello = new FrameWriter();
        hello.push({ type: "hello", version: this.#version, clientName: options.clientName });
        socket.write(hello.take());
      },
      (error) => {
        const failure = new ConnectionError(
          `Cannot connect to lockd at ${options.addr}: ${dialFailureText(error, options)}`,
          { cause: error },
        );
        settle(dialFailureIsFinal(error, options) ? final(failure) : failure);
      },
    );
  }

  /** The server's WELCOME. */
  get welcome(): Welcome {
    return this.#welcome!;
  }

  /** True once the connection has ended (nothing more is sent or delivered). */
  get closed(): boolean {
    return this.#state === "closed";
  }

  /** Resolves once the socket is closed at the operating-system level. */
  get socketClosed(): Promise<void> {
    return this.#socketClosed;
  }

  /** Starts delivering frames (those that came with WELCOME first); call once after wiring. */
  start(): void {
    this.#started = true;
    this.#drain();
    if (this.#state === "closed") this.onClose(this.#closingError);
  }

  /** Queues a frame; every frame queued in this turn goes out in one write. */
  send(message: ClientMessage): void {
    if (this.#state !== "open") return;
    this.#writer.push(message);
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      queueMicrotask(() => this.#flush());
    }
  }

  /** The protocol version of the session (WELCOME's: 2, or 1 at a server of before version 2). */
  get version(): number {
    return this.#welcome?.version ?? this.#version;
  }

  /**
   * Version 2: sends GOODBYE (the server ends the session gracefully, nothing of it kept for a
   * reclaim) behind every frame queued, then closes as `close()` does. Version 1: `close()`.
   */
  goodbye(requestId: number): void {
    if (this.#state === "open" && this.version === 2) {
      this.#writer.push({ type: "goodbye", requestId });
      this.#flushScheduled = false;
      this.#socket!.write(this.#writer.take());
    }
    this.close();
  }

  /** Closes the connection; `onClose` runs at once (not again later). */
  close(): void {
    if (this.#state === "closed") return;
    this.#shut();
    if (this.#started) this.onClose(this.#closingError);
  }

  #shut(): void {
    this.#state = "closed";
    if (this.#socket === null) this.#resolveSocketClosed();
    else this.#socket.close();
  }

  #onSocketClosed(error?: Error): void {
    this.#resolveSocketClosed();
    if (this.#state === "handshaking") {
      const why = this.#firstBytesSeen
        ? null
        : handshakeCloseCause(error, this.#tls, this.#clientCertificate);
      this.#onHandshake?.(
        why === null
          ? new ConnectionError(
            `lockd at ${this.#addr} closed the connection during the handshake`,
            { cause: error },
          )
          : final(
            new ConnectionError(`Cannot connect to lockd at ${this.#addr}: ${why}`, {
              cause: error,
            }),
          ),
      );
      return;
    }
    this.close();
  }

  #onData(bytes: Uint8Array): void {
    if (this.#state === "closed") return;
    if (this.#state === "handshaking" && !this.#firstBytesSeen && bytes.length > 0) {
      this.#firstBytesSeen = true;
      // Another protocol on that port (a TLS record, an HTTP answer) is said at once: it would
      // read as a frame of gigabytes, or leave the handshake waiting for its timeout.
      const wrong = wrongProtocolError(this.#addr, bytes, this.#tls);
      if (wrong !== null) {
        this.#onHandshake?.(final(wrong));
        return;
      }
    }
    this.#reader.push(bytes);
    if (this.#state === "handshaking") this.#handshakeStep();
    if (this.#state === "open" && this.#started) this.#drain();
  }

  #handshakeStep(): void {
    let message;
    try {
      message = this.#reader.next();
    } catch (error) {
      this.#onHandshake?.(
        new ServerProtocolError(this.#addr, `a malformed frame: ${errorText(error)}`),
      );
      return;
    }
    if (message === null) return;
    if (message.type === "welcome") {
      const outOfBounds = welcomeOutOfBounds(message, this.#version);
      if (outOfBounds !== null) {
        this.#onHandshake?.(new ServerProtocolError(this.#addr, outOfBounds));
        return;
      }
      this.#welcome = message;
      this.#writer.version = message.version;
      this.#onHandshake?.(null);
    } else if (message.type === "error") {
      this.#onHandshake?.(new LockdError(message.code, message.name, message.message));
    } else {
      this.#onHandshake?.(
        new ServerProtocolError(this.#addr, `it sent ${message.type.toUpperCase()} before WELCOME`),
      );
    }
  }

  #drain(): void {
    while (this.#state === "open") {
      let message;
      try {
        message = this.#reader.next();
      } catch (error) {
        if (!(error instanceof ProtocolError)) throw error;
        // A server that sends garbage: the session cannot be trusted.
        this.#violate(`a malformed frame: ${error.message}`);
        return;
      }
      if (message === null) return;
      if (!isServerReply(message)) {
        // WELCOME again or a client-side type.
        this.#violate(`it sent ${message.type.toUpperCase()} after WELCOME`);
        return;
      }
      if (message.type === "error" && endsSession(message)) {
        this.#closingError = message;
        this.close();
        return;
      }
      this.onMessage(message);
    }
  }

  #violate(what: string): void {
    if (this.#started) this.onViolation(what);
    this.close();
  }

  #flush(): void {
    this.#flushScheduled = false;
    if (this.#state !== "open" || this.#writer.byteLength === 0) return;
    this.#socket!.write(this.#writer.take());
  }
}

/**
 * What is wrong with a WELCOME whose fields lie outside the bounds of docs/protocol.md (the
 * server's own flag bounds, src/limits.ts), or null. A client that believed `ioTimeoutMs` 0
 * would heartbeat without pause and drop every connection at once.
 */
function welcomeOutOfBounds(welcome: Welcome, asked: number): string | null {
  const bounds: [string, number, number, number][] = [
    ["ioTimeoutMs", welcome.ioTimeoutMs, IO_TIMEOUT_MS_MIN, IO_TIMEOUT_MS_MAX],
    ["leaseMaxMs", welcome.leaseMaxMs, LEASE_MS_MIN, LEASE_MS_MAX_MAX],
    ["leaseDefaultMs", welcome.leaseDefaultMs, LEASE_MS_MIN, welcome.leaseMaxMs],
    ["sessionId", welcome.sessionId, 1, Number.MAX_SAFE_INTEGER],
    ["term", welcome.term ?? 0, 0, Number.MAX_SAFE_INTEGER],
    ["reclaimWindowMs", welcome.reclaimWindowMs ?? 0, 0, RECLAIM_WINDOW_MS_MAX],
    ["valueBytesMax", welcome.valueBytesMax ?? 0, 0, WELCOME_VALUE_BYTES_MAX],
  ];
  if (welcome.version !== asked) {
    return `WELCOME for protocol version ${welcome.version}; this client asked for ${asked}`;
  }
  for (const [field, value, min, max] of bounds) {
    if (value < min || value > max) return `WELCOME with ${field} ${value}, outside ${min}..${max}`;
  }
  return null;
}

function isServerReply(message: { type: string }): message is ServerMessage {
  switch (message.type) {
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
      return true;
    default:
      return false;
  }
}

/**
 * After WELCOME, an ERROR ends the session when it has request id 0 and any code but
 * INVALID_ARGUMENT (the answer to a request with id 0, which this client never sends), or a
 * code that always closes the connection (docs/protocol.md, "Requests in flight").
 */
function endsSession(error: ErrorMessage): boolean {
  if (error.requestId === 0) return error.code !== WIRE_CODES.INVALID_ARGUMENT.code;
  return wireCodeInfo(error.code).closes;
}

/**
 * Why a TLS server closed the connection after the TLS handshake and before any lockd byte, in
 * words, or null when it was not that. With TLS 1.3 the client finishes its side of the
 * handshake before the server has checked the client certificate, so a refused certificate shows
 * up as a closed connection (with a `certificate_required` alert when there was none, often
 * nothing at all when it was not accepted): name the likely cause and the option to look at.
 */
function handshakeCloseCause(
  error: unknown,
  tls: boolean,
  clientCertificate: boolean,
): string | null {
  if (!tls) return null;
  const code = String((error as { code?: unknown } | null | undefined)?.code ?? "");
  const text = `${code} ${error instanceof Error ? error.message : ""}`;
  if (/CERTIFICATE_REQUIRED|certificate required/i.test(text)) {
    return "the server requires a client certificate (mutual TLS): give tls: { cert, key } to " +
      "connect() (lockd run: -cert FILE -key FILE), signed by a CA the server trusts " +
      "(its -tls-client-ca)";
  }
  const alert = /ALERT_[A-Z_]+|alert[^,;)]*/i.exec(text)?.[0];
  if (clientCertificate) {
    return "the server did not accept the client certificate" +
      (alert === undefined ? "" : ` (TLS alert: ${alert})`) +
      ": is it signed by a CA the server trusts (its -tls-client-ca), still valid, and made " +
      "for client authentication?";
  }
  return "the server closed the connection right after the TLS handshake" +
    (alert === undefined ? "" : ` (TLS alert: ${alert})`) +
    "; it probably requires a client certificate (mutual TLS): give tls: { cert, key } to " +
    "connect() (lockd run: -cert FILE -key FILE)";
}

/**
 * Whether a dial failure is one no retry mends: TLS against a plain listener, or a server
 * certificate this client does not accept (another CA, expired, another name).
 */
function dialFailureIsFinal(error: unknown, options: { tls?: unknown }): boolean {
  if (options.tls === undefined) return false;
  const code = String((error as { code?: unknown } | null)?.code ?? "");
  const text = `${code} ${errorText(error)}`;
  return /ERR_SSL_WRONG_VERSION_NUMBER|wrong version number|InvalidContentType|packet length too long|CERT|SELF_SIGNED|UNABLE_TO_VERIFY|UnknownIssuer|certificate/i
    .test(text);
}

/**
 * Why a dial failed, in words. A TLS client that meets a plaintext server
 * gets bytes that are not a TLS record: the TLS stack calls that a "wrong
 * version number"; say what it means.
 */
function dialFailureText(error: unknown, options: { tls?: unknown }): string {
  const text = errorText(error);
  const code = (error as { code?: unknown } | null)?.code;
  if (
    options.tls !== undefined &&
    (code === "ERR_SSL_WRONG_VERSION_NUMBER" ||
      /wrong version number|InvalidContentType|packet length too long/i.test(text))
  ) {
    return `the server does not speak TLS (its answer is not a TLS record: ${text}); it ` +
      `listens without -tls-cert, so connect without tls, or point at the TLS listener`;
  }
  if (code === "ECONNREFUSED" || /ECONNREFUSED|connection refused/i.test(text)) {
    return `connection refused, nothing listens there (${text}); is lockd running with that ` +
      `-listen address? (lockd run: -addr HOST:PORT)`;
  }
  return text;
}
