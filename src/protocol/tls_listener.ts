/**
 * The TLS and mutual-TLS protocol listener (`node:tls`).
 *
 * One code path for TLS and mTLS. `Deno.listenTls` carries more round trips
 * per second for plain TLS (DENO-NOTES: ~93k against ~63k), but it cannot
 * request client certificates, has no `setNoDelay` (a reply split across two
 * writes then waits ~40 ms for a delayed ACK), cannot swap its certificate
 * without re-binding the port, and does not tell why a handshake failed. With
 * `node:tls` both modes get TCP_NODELAY, certificate reload on SIGHUP without
 * dropping sessions (`setSecureContext`), and a counted, logged reason for
 * every failed handshake; a second path for plain TLS would double the code
 * that has to be right for a speed-up only plain-TLS users would see.
 *
 * @module
 */

import type { Socket } from "node:net";
import * as tls from "node:tls";
import { afterIoTurn, type Scheduler, systemScheduler, type Timer } from "../clock.ts";
import { formatHostPort, type HostPort } from "../host_port.ts";
import { TLS_FAILURE_LOG_LINES_PER_S, TLS_READ_QUEUE_BYTES_MAX } from "../limits.ts";
import { WIRE_CODES } from "../wire/codes.ts";
import { encodeFrame } from "../wire/frame.ts";
import { log } from "../log/diagnostic.ts";
import type { ServerCounters, TlsHandshakeFailureReason } from "../counters.ts";
import { CertificateIdentityError, identityFromCertificate } from "../security/identity.ts";
import { loadServerTlsFromConfig, type ServerTlsMaterial } from "../security/tls.ts";
import type { ProtocolListener } from "./listener.ts";
import { TlsAcceptor } from "./tls_accept.ts";
import type { Transport } from "./transport.ts";
import { errorText } from "../error_text.ts";

const logger = log("tls");

/** A TLS protocol listener; its certificates can be replaced while it runs. */
export interface TlsProtocolListener extends ProtocolListener {
  /** True when client certificates are required (a client CA was given). */
  readonly mtls: boolean;
  /** New handshakes use `material` from now on; established sessions keep theirs. */
  setMaterial(material: ServerTlsMaterial): void;
}

export interface TlsListenOptions {
  /** A connection whose TLS handshake has not finished by then is closed (counted as a handshake error). */
  handshakeTimeoutMs: number;
  /** Handshakes started per second at most (0: no limit); see tls_accept.ts. */
  handshakesPerS: number;
  /** Accepted connections whose handshake has not started, at most. */
  pendingMax: number;
  /** The server's clock and timers (handshake timeouts, the rate limit, the accept watchdog). */
  scheduler?: Scheduler;
}

/**
 * Listens with TLS on `at`; with `material.ca` every client must present a
 * certificate signed by that CA, or the handshake fails. Every session gets a
 * `Transport` whose `identity` follows `identityFromCertificate` (mTLS) or is
 * "" (TLS only). Rejects when the address cannot be bound.
 */
export async function listenTls(
  at: HostPort,
  counters: ServerCounters,
  material: ServerTlsMaterial,
  options: TlsListenOptions,
  onTransport: (transport: Transport) => void,
): Promise<TlsProtocolListener> {
  const mtls = material.ca !== undefined;
  const scheduler = options.scheduler ?? systemScheduler;
  const server = tls.createServer({
    cert: material.cert,
    key: material.key,
    ca: material.ca,
    requestCert: mtls,
    rejectUnauthorized: mtls,
    handshakeTimeout: options.handshakeTimeoutMs,
  });
  let closed = false;
  const failureLog = new HandshakeFailureLog(scheduler);
  /**
   * Counts and logs one failed handshake, once per connection however many reports it gets
   * (node's handshake timeout was seen to fire `tlsClientError` twice for one connection in
   * Deno 2.9): `lockd_tls_handshake_errors_total` counts failed handshakes, not reports.
   */
  const failed = new WeakSet<Socket>();
  const handshakeFailed = (
    socket: Socket,
    remoteAddr: string,
    failure: TlsHandshakeFailureReason,
    reason: string,
  ) => {
    if (failed.has(socket)) return;
    failed.add(socket);
    counters.countTlsHandshakeFailure(failure);
    failureLog.warn({ remote_addr: remoteAddr, failure, reason });
  };
  /** Connections still in their TLS handshake (or before it), by remote address, so close() can end them. */
  const handshaking = new Map<string, Socket>();

  // Connections are accepted by a plain TCP server (TlsAcceptor: re-listens if node's accept loop
  // dies, bounds the connections not yet in a handshake) and handed to the TLS server only when
  // their first byte starts a TLS record, and then only as fast as -max-tls-handshake-rate
  // allows. A client that speaks the plain lockd protocol gets an ERROR frame saying that this
  // listener expects TLS, instead of a TLS alert it would read as a frame length of 352518912
  // (0x15030300). Handing an accepted socket to a TLS server with emit("connection") is the
  // documented way to inject connections into node's tls.Server, and the path that verifies
  // client certificates (a TLSSocket built by hand does not check them in Deno 2.9).
  const onConnection = (raw: Socket) => {
    counters.protocolConnectionsOpen++;
    raw.once("close", () => counters.protocolConnectionsOpen--);
    if (closed) {
      raw.destroy();
      return;
    }
    const key = formatHostPort(raw.remoteAddress ?? "unknown", raw.remotePort ?? 0);
    handshaking.set(key, raw);
    raw.once("close", () => {
      if (handshaking.get(key) === raw) handshaking.delete(key);
    });
    raw.on("error", () => {}); // a reset before the first byte: 'close' follows
    const timer = scheduler.setTimer(() => {
      handshakeFailed(
        raw,
        key,
        "timeout",
        `no TLS ClientHello within ${options.handshakeTimeoutMs} ms`,
      );
      raw.destroy();
    }, options.handshakeTimeoutMs);
    raw.once("close", () => timer.cancel());
    raw.once("data", (first: Uint8Array) => {
      timer.cancel();
      raw.pause();
      if (first[0] === TLS_HANDSHAKE_RECORD) {
        raw.unshift(first);
        acceptor.admit(raw, () => server.emit("connection", raw));
        return;
      }
      refuseNotTls(raw, key, first, counters, handshakeFailed, scheduler);
    });
  };

  server.on("tlsClientError", (error: Error & { code?: string }, socket: tls.TLSSocket) => {
    const { failure, reason } = classifyHandshakeFailure(error, socket, mtls);
    handshakeFailed(socket, remoteAddrOf(socket), failure, reason);
    // Deno's node:tls leaves the socket open after a handshake timeout: end it here.
    socket.destroy();
  });

  server.on("secureConnection", (socket: tls.TLSSocket) => {
    const remoteAddr = remoteAddrOf(socket);
    handshaking.delete(remoteAddr);
    if (closed) {
      socket.destroy();
      return;
    }
    if (mtls && !socket.authorized) {
      // rejectUnauthorized already refuses these; never serve one unverified.
      handshakeFailed(
        socket,
        remoteAddr,
        "client_certificate_rejected",
        String(socket.authorizationError ?? "client certificate not verified"),
      );
      socket.destroy();
      return;
    }
    let identity = "";
    try {
      if (mtls) identity = identityFromCertificate(socket.getPeerCertificate());
    } catch (error) {
      if (!(error instanceof CertificateIdentityError)) throw error;
      // A verified certificate whose names cannot be read safely: refused, never guessed.
      handshakeFailed(socket, remoteAddr, "client_certificate_unusable", error.message);
      socket.destroy();
      return;
    }
    logger.debug("TLS session established", {
      remote_addr: remoteAddr,
      identity,
      protocol: socket.getProtocol?.() ?? "",
    });
    onTransport(nodeSocketTransport(socket, remoteAddr, identity));
  });

  const acceptor = await TlsAcceptor.listen(at, {
    scheduler,
    handshakesPerS: options.handshakesPerS,
    pendingMax: options.pendingMax,
    handshakeTimeoutMs: options.handshakeTimeoutMs,
    counters,
  }, onConnection);
  const addr = acceptor.addr;
  const done = Promise.withResolvers<void>();
  return {
    addr,
    mtls,
    done: done.promise,
    close() {
      if (closed) return;
      closed = true;
      // Stops accepting at once; sessions are closed by the shutdown afterwards.
      acceptor.close();
      failureLog.close();
      for (const raw of handshaking.values()) raw.destroy();
      handshaking.clear();
      done.resolve();
    },
    setMaterial(next: ServerTlsMaterial) {
      server.setSecureContext({ cert: next.cert, key: next.key, ca: next.ca });
    },
  };
}

/**
 * The `warn` lines `TLS handshake failed`, at most `TLS_FAILURE_LOG_LINES_PER_S` a second: a
 * flood of bad handshakes must not become a flood of log lines (each costs the event loop and
 * the disk). Lines past the limit are counted (every failure is in
 * `lockd_tls_handshake_errors_total` anyway) and summarised once at the end of the second.
 */
class HandshakeFailureLog {
  readonly #scheduler: Scheduler;
  #windowStartMs = -Infinity;
  #lines = 0;
  #suppressed = 0;
  #flush: Timer | undefined;
  #closed = false;

  constructor(scheduler: Scheduler) {
    this.#scheduler = scheduler;
  }

  warn(fields: Record<string, unknown>): void {
    if (this.#closed) {
      // Stragglers after the listener closed: few, and no timer may outlive the listener.
      logger.warn("TLS handshake failed", fields);
      return;
    }
    const now = this.#scheduler.monotonicMs();
    if (now - this.#windowStartMs >= 1_000) {
      this.#summarise();
      this.#windowStartMs = now;
      this.#lines = 0;
    }
    if (this.#lines < TLS_FAILURE_LOG_LINES_PER_S) {
      this.#lines++;
      logger.warn("TLS handshake failed", fields);
      return;
    }
    this.#suppressed++;
    this.#flush ??= this.#scheduler.setTimer(() => {
      this.#flush = undefined;
      this.#summarise();
    }, this.#windowStartMs + 1_000 - now);
  }

  #summarise(): void {
    this.#flush?.cancel();
    this.#flush = undefined;
    if (this.#suppressed === 0) return;
    logger.warn("TLS handshake failures not logged one by one", {
      failures: this.#suppressed,
      lines_per_s: TLS_FAILURE_LOG_LINES_PER_S,
    });
    this.#suppressed = 0;
  }

  close(): void {
    this.#summarise();
    this.#closed = true;
  }
}

/**
 * SIGHUP: re-reads the certificate, key and client CA named by `config` and
 * hands them to the listener; sessions already established are untouched. A
 * file that cannot be used keeps the old material and logs an error. Returns
 * whether the new material is in use.
 */
export async function reloadCertificates(
  listener: TlsProtocolListener,
  config: { tlsCert: string | null; tlsKey: string | null; tlsClientCa: string | null },
): Promise<boolean> {
  try {
    const material = await loadServerTlsFromConfig(config);
    if (material === null) return false;
    if ((material.ca !== undefined) !== listener.mtls) {
      throw new Error("mutual TLS cannot be switched on or off by a reload");
    }
    listener.setMaterial(material);
    logger.info("TLS certificates reloaded", {
      tls_cert: config.tlsCert,
      tls_client_ca: config.tlsClientCa ?? "",
      not_after: new Date(material.notAfterMs).toISOString(),
    });
    return true;
  } catch (error) {
    logger.error("TLS reload failed; keeping the old certificates", {
      tls_cert: config.tlsCert,
      error: errorText(error),
    });
    return false;
  }
}

/**
 * A `Transport` over a node socket. Reads are served from the chunks of
 * 'data' events. The socket is never paused: node:tls in Deno 2.9 keeps
 * reading the network while paused and buffers the bytes out of sight, so a
 * pause would hide memory instead of bounding it (measured: 256 MiB sent to a
 * paused socket all ended up buffered). Instead, a peer that is more than
 * `TLS_READ_QUEUE_BYTES_MAX` bytes ahead of its session at the end of an
 * event-loop turn is disconnected; sessions read eagerly, so a well-behaved
 * client never comes close. A write
 * resolves once the socket has passed the bytes on (its callback), which is
 * both the back-pressure and the guarantee that a final ERROR frame is out
 * before `close()`.
 */
export function nodeSocketTransport(
  socket: tls.TLSSocket | Socket,
  remoteAddr: string,
  identity: string,
): Transport {
  socket.setNoDelay(true);
  const chunks: Uint8Array[] = [];
  let queuedBytes = 0;
  let ended = false;
  let failure: Error | null = null;
  let closedLocally = false;
  let pendingRead:
    | { buffer: Uint8Array; resolve: (n: number | null) => void; reject: (e: Error) => void }
    | null = null;
  const pendingWrites = new Set<(error: Error) => void>();

  /** Moves queued bytes into `buffer`. */
  const copyInto = (buffer: Uint8Array): number => {
    let n = 0;
    while (n < buffer.length && chunks.length > 0) {
      const chunk = chunks[0];
      const take = Math.min(chunk.length, buffer.length - n);
      buffer.set(take === chunk.length ? chunk : chunk.subarray(0, take), n);
      n += take;
      if (take === chunk.length) chunks.shift();
      else chunks[0] = chunk.subarray(take);
    }
    queuedBytes -= n;
    return n;
  };

  const settleRead = () => {
    if (pendingRead === null) return;
    const read = pendingRead;
    if (queuedBytes > 0) {
      pendingRead = null;
      read.resolve(copyInto(read.buffer));
    } else if (failure !== null) {
      pendingRead = null;
      read.reject(failure);
    } else if (ended) {
      pendingRead = null;
      read.resolve(null);
    }
  };

  const fail = (error: Error) => {
    failure ??= error;
    for (const reject of pendingWrites) reject(failure);
    pendingWrites.clear();
    settleRead();
  };

  /**
   * Deno delivers up to a few MiB of 'data' events in one go, before the
   * session had a chance to read; so the limit is checked once the turn is
   * over: whatever is still queued then, the session did not want.
   */
  let overflowCheck: Timer | undefined;
  const checkOverflow = () => {
    overflowCheck = undefined;
    if (failure !== null || queuedBytes <= TLS_READ_QUEUE_BYTES_MAX) return;
    logger.warn("client sent too far ahead of its session, closing", {
      remote_addr: remoteAddr,
      queued_bytes: queuedBytes,
    });
    chunks.length = 0;
    queuedBytes = 0;
    fail(new Error(`More than ${TLS_READ_QUEUE_BYTES_MAX} bytes received and not read`));
    socket.destroy();
  };

  socket.on("data", (chunk: Uint8Array) => {
    if (failure !== null) return;
    chunks.push(chunk);
    queuedBytes += chunk.length;
    if (queuedBytes > TLS_READ_QUEUE_BYTES_MAX && overflowCheck === undefined) {
      overflowCheck = afterIoTurn(checkOverflow);
    }
    settleRead();
  });
  socket.on("end", () => {
    ended = true;
    settleRead();
  });
  socket.on("error", (error: Error) => fail(error));
  socket.on("close", () => {
    ended = true;
    overflowCheck?.cancel();
    for (const reject of pendingWrites) reject(failure ?? new Error("Connection closed"));
    pendingWrites.clear();
    settleRead();
  });

  return {
    remoteAddr,
    identity,
    read(buffer: Uint8Array): Promise<number | null> {
      if (pendingRead !== null) throw new Error("Only one read at a time");
      if (queuedBytes > 0) return Promise.resolve(copyInto(buffer));
      if (failure !== null) return Promise.reject(failure);
      if (ended) return Promise.resolve(null);
      return new Promise((resolve, reject) => {
        pendingRead = { buffer, resolve, reject };
      });
    },
    write(bytes: Uint8Array): Promise<number> {
      if (failure !== null) return Promise.reject(failure);
      if (closedLocally || socket.destroyed) return Promise.reject(new Error("Connection closed"));
      return new Promise((resolve, reject) => {
        pendingWrites.add(reject);
        socket.write(bytes, (error?: Error | null) => {
          if (!pendingWrites.delete(reject)) return;
          if (error) reject(error);
          else resolve(bytes.length);
        });
      });
    },
    close() {
      if (closedLocally) return;
      closedLocally = true;
      overflowCheck?.cancel();
      fail(new Error("Connection closed"));
      socket.destroy();
    },
  };
}

/** First byte of a TLS record of type handshake: every ClientHello starts with it. */
const TLS_HANDSHAKE_RECORD = 0x16;

/** What a plaintext client on the TLS listener is told (an ERROR frame, MALFORMED_FRAME). */
const EXPECTS_TLS_MESSAGE =
  "This listener expects TLS: the client sent a plaintext lockd frame. Connect with TLS " +
  "(lockd run -ca FILE; connect({ tls: { ca } }) in the client library).";

/**
 * Answers a connection whose first byte does not start a TLS record. A plain
 * lockd client (its first frame starts with the high byte of a length, 0x00)
 * gets an ERROR frame saying that TLS is expected; anything else (an HTTP
 * request, a port scanner) is closed. Both are failed handshakes in the
 * metrics and the log.
 */
function refuseNotTls(
  raw: Socket,
  remoteAddr: string,
  first: Uint8Array,
  counters: ServerCounters,
  handshakeFailed: (
    socket: Socket,
    remoteAddr: string,
    failure: TlsHandshakeFailureReason,
    reason: string,
  ) => void,
  scheduler: Scheduler,
) {
  const lockdFrame = first[0] === 0x00;
  const shown = [...first.subarray(0, 4)].map((b) => b.toString(16).padStart(2, "0")).join(" ");
  handshakeFailed(
    raw,
    remoteAddr,
    "not_tls",
    lockdFrame
      ? "plaintext lockd frame on the TLS listener (the client does not use TLS)"
      : `not TLS (first bytes ${shown})`,
  );
  if (!lockdFrame) {
    raw.destroy();
    return;
  }
  const code = WIRE_CODES.MALFORMED_FRAME.code;
  counters.countError(code);
  const frame = encodeFrame({
    type: "error",
    requestId: 0,
    code,
    name: "",
    message: EXPECTS_TLS_MESSAGE,
  });
  // A peer that never reads must not keep the socket: destroyed in any case after a second.
  const timer = scheduler.setTimer(() => raw.destroy(), 1_000);
  raw.once("close", () => timer.cancel());
  raw.end(frame, () => raw.destroy());
}

/** `host:port` of a TLS socket; while a handshake fails node has only the raw socket's address. */
function remoteAddrOf(socket: tls.TLSSocket): string {
  const parent = (socket as unknown as { _parent?: Socket })._parent;
  const host = socket.remoteAddress ?? parent?.remoteAddress;
  const port = socket.remotePort ?? parent?.remotePort;
  return host === undefined ? "unknown" : formatHostPort(host, port ?? 0);
}

/** Alerts a client sends when it refuses the server's certificate (rustls and OpenSSL names). */
const SERVER_CERTIFICATE_ALERT =
  /fatal alert: (?:UnknownCA|BadCertificate|UnsupportedCertificate|CertificateRevoked|CertificateExpired|CertificateUnknown)\b|ALERT_(?:UNKNOWN_CA|BAD_CERTIFICATE|UNSUPPORTED_CERTIFICATE|CERTIFICATE_REVOKED|CERTIFICATE_EXPIRED|CERTIFICATE_UNKNOWN)$/;

/**
 * Why a handshake failed, as a `lockd_tls_handshake_failures_total` reason and the most telling
 * text for the log: the certificate verdict when there is one. Deno 2.9's node:tls reports a
 * client certificate that does not verify (another CA, expired) as a reset with
 * `authorizationError` set, and a missing one with ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE.
 */
function classifyHandshakeFailure(
  error: Error & { code?: string },
  socket: tls.TLSSocket,
  mtls: boolean,
): { failure: TlsHandshakeFailureReason; reason: string } {
  const verdict = socket.authorizationError;
  if (verdict) {
    return {
      failure: "client_certificate_rejected",
      reason: `client certificate rejected: ${verdict}`,
    };
  }
  const code = error.code ?? "";
  const text = code === "" ? error.message : `${error.message} (${code})`;
  if (mtls && code === "ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE") {
    return { failure: "no_client_certificate", reason: `no client certificate: ${text}` };
  }
  if (SERVER_CERTIFICATE_ALERT.test(error.message) || SERVER_CERTIFICATE_ALERT.test(code)) {
    return {
      failure: "server_certificate_rejected",
      reason: `the client refused the server certificate: ${text}`,
    };
  }
  if (code === "ERR_TLS_HANDSHAKE_TIMEOUT" || /handshake timeout/i.test(error.message)) {
    return { failure: "timeout", reason: text };
  }
  if (code === "ECONNRESET" || code === "EPIPE" || /socket hang up/i.test(error.message)) {
    return { failure: "closed", reason: `the client closed the connection: ${text}` };
  }
  return { failure: "protocol", reason: text };
}
