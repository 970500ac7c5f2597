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
import { type Scheduler, systemScheduler, type Timer } from "../clock.ts";
import { formatHostPort, type HostPort } from "../host_port.ts";
import { TLS_FAILURE_LOG_LINES_PER_S } from "../limits.ts";
import { WIRE_CODES } from "../wire/codes.ts";
import { encodeFrame } from "../wire/frame.ts";
import { log } from "../log/diagnostic.ts";
import type { ServerCounters, TlsHandshakeFailureReason } from "../counters.ts";
import { CertificateIdentityError, identityFromCertificate } from "../security/identity.ts";
import { loadServerTlsFromConfig, type ServerTlsMaterial } from "../security/tls.ts";
import type { ProtocolListener } from "./listener.ts";
import { TlsAcceptor } from "./tls_accept.ts";
import { nodeSocketTransport } from "./node_socket_transport.ts";
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
  const listener = new TlsListener(counters, material, options, onTransport);
  await listener.listen(at);
  return listener;
}

/** The listener `listenTls` returns: node's TLS server behind a plain TCP acceptor. */
class TlsListener implements TlsProtocolListener {
  readonly mtls: boolean;
  addr = "";
  readonly #done = Promise.withResolvers<void>();
  readonly done = this.#done.promise;
  readonly #counters: ServerCounters;
  readonly #options: TlsListenOptions;
  readonly #scheduler: Scheduler;
  readonly #onTransport: (transport: Transport) => void;
  readonly #server: tls.Server;
  readonly #failureLog: HandshakeFailureLog;
  /**
   * Sockets whose failed handshake was counted and logged, once per connection however many
   * reports it gets (node's handshake timeout was seen to fire `tlsClientError` twice for one
   * connection in Deno 2.9): `lockd_tls_handshake_errors_total` counts failed handshakes, not
   * reports.
   */
  readonly #failed = new WeakSet<Socket>();
  /** Connections still in their TLS handshake (or before it), by remote address, so close() can end them. */
  readonly #handshaking = new Map<string, Socket>();
  #acceptor: TlsAcceptor | null = null;
  #closed = false;

  constructor(
    counters: ServerCounters,
    material: ServerTlsMaterial,
    options: TlsListenOptions,
    onTransport: (transport: Transport) => void,
  ) {
    this.mtls = material.ca !== undefined;
    this.#counters = counters;
    this.#options = options;
    this.#onTransport = onTransport;
    this.#scheduler = options.scheduler ?? systemScheduler;
    this.#failureLog = new HandshakeFailureLog(this.#scheduler);
    this.#server = tls.createServer({
      cert: material.cert,
      key: material.key,
      ca: material.ca,
      requestCert: this.mtls,
      rejectUnauthorized: this.mtls,
      handshakeTimeout: options.handshakeTimeoutMs,
    });
    this.#server.on(
      "tlsClientError",
      (error: Error & { code?: string }, socket: tls.TLSSocket) => {
        const { failure, reason } = classifyHandshakeFailure(error, socket, this.mtls);
        this.#handshakeFailed(socket, remoteAddrOf(socket), failure, reason);
        // Deno's node:tls leaves the socket open after a handshake timeout: end it here.
        socket.destroy();
      },
    );
    this.#server.on("secureConnection", (socket: tls.TLSSocket) => this.#secured(socket));
  }

  async listen(at: HostPort): Promise<void> {
    const options = this.#options;
    this.#acceptor = await TlsAcceptor.listen(at, {
      scheduler: this.#scheduler,
      handshakesPerS: options.handshakesPerS,
      pendingMax: options.pendingMax,
      handshakeTimeoutMs: options.handshakeTimeoutMs,
      counters: this.#counters,
    }, (raw) => this.#accepted(raw));
    this.addr = this.#acceptor.addr;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    // Stops accepting at once; sessions are closed by the shutdown afterwards.
    this.#acceptor?.close();
    this.#failureLog.close();
    for (const raw of this.#handshaking.values()) raw.destroy();
    this.#handshaking.clear();
    this.#done.resolve();
  }

  setMaterial(next: ServerTlsMaterial): void {
    this.#server.setSecureContext({ cert: next.cert, key: next.key, ca: next.ca });
  }

  /** Counts and logs one failed handshake, once per connection. */
  #handshakeFailed(
    socket: Socket,
    remoteAddr: string,
    failure: TlsHandshakeFailureReason,
    reason: string,
  ): void {
    if (this.#failed.has(socket)) return;
    this.#failed.add(socket);
    this.#counters.countTlsHandshakeFailure(failure);
    this.#failureLog.warn({ remote_addr: remoteAddr, failure, reason });
  }

  // Connections are accepted by a plain TCP server (TlsAcceptor: re-listens if node's accept loop
  // dies, bounds the connections not yet in a handshake) and handed to the TLS server only when
  // their first byte starts a TLS record, and then only as fast as -max-tls-handshake-rate
  // allows. A client that speaks the plain lockd protocol gets an ERROR frame saying that this
  // listener expects TLS, instead of a TLS alert it would read as a frame length of 352518912
  // (0x15030300). Handing an accepted socket to a TLS server with emit("connection") is the
  // documented way to inject connections into node's tls.Server, and the path that verifies
  // client certificates (a TLSSocket built by hand does not check them in Deno 2.9).
  #accepted(raw: Socket): void {
    const counters = this.#counters;
    counters.protocolConnectionsOpen++;
    raw.once("close", () => counters.protocolConnectionsOpen--);
    if (this.#closed) {
      raw.destroy();
      return;
    }
    const key = formatHostPort(raw.remoteAddress ?? "unknown", raw.remotePort ?? 0);
    const handshaking = this.#handshaking;
    handshaking.set(key, raw);
    raw.once("close", () => {
      if (handshaking.get(key) === raw) handshaking.delete(key);
    });
    raw.on("error", () => {}); // a reset before the first byte: 'close' follows
    const timeoutMs = this.#options.handshakeTimeoutMs;
    const timer = this.#scheduler.setTimer(() => {
      this.#handshakeFailed(raw, key, "timeout", `no TLS ClientHello within ${timeoutMs} ms`);
      raw.destroy();
    }, timeoutMs);
    raw.once("close", () => timer.cancel());
    raw.once("data", (first: Uint8Array) => {
      timer.cancel();
      raw.pause();
      if (first[0] === TLS_HANDSHAKE_RECORD) {
        raw.unshift(first);
        this.#acceptor!.admit(raw, () => this.#server.emit("connection", raw));
        return;
      }
      const failed = this.#handshakeFailed.bind(this);
      refuseNotTls(raw, key, first, counters, failed, this.#scheduler);
    });
  }

  /** A finished handshake: a session with the certificate's identity, or refused. */
  #secured(socket: tls.TLSSocket): void {
    const remoteAddr = remoteAddrOf(socket);
    this.#handshaking.delete(remoteAddr);
    if (this.#closed) {
      socket.destroy();
      return;
    }
    if (this.mtls && !socket.authorized) {
      // rejectUnauthorized already refuses these; never serve one unverified.
      this.#handshakeFailed(
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
      if (this.mtls) identity = identityFromCertificate(socket.getPeerCertificate());
    } catch (error) {
      if (!(error instanceof CertificateIdentityError)) throw error;
      // A verified certificate whose names cannot be read safely: refused, never guessed.
      this.#handshakeFailed(socket, remoteAddr, "client_certificate_unusable", error.message);
      socket.destroy();
      return;
    }
    logger.debug("TLS session established", {
      remote_addr: remoteAddr,
      identity,
      protocol: socket.getProtocol?.() ?? "",
    });
    this.#onTransport(nodeSocketTransport(socket, remoteAddr, identity));
  }
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
