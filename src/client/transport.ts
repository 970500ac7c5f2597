/**
 * The client's one seam to the network: a byte stream to the server, plain TCP or TLS.
 *
 * The default, {@link nodeSocketDial}, uses `node:net` and `node:tls`, which Deno, Node and
 * Bun all implement, so the client runs unchanged on each of them (no `Deno.*` call anywhere
 * in the client). Measured in Deno 2.9 against a lockd server, the client's CPU per HEARTBEAT
 * round trip was the same with `node:net` as with `Deno.connect` within the run-to-run noise
 * (17-44 µs one at a time, 0.3-1.0 µs pipelined 64 deep, for both), and `node:tls` speaks
 * mutual TLS with PEM text. Tests put an in-memory {@link Dial} here to drive the client with
 * manual time.
 *
 * @module
 */

import net from "node:net";
import tls from "node:tls";
import type { Scheduler } from "../clock.ts";
import { CLIENT_CLOSE_GRACE_MS } from "../limits.ts";

/** TLS settings of a client: PEM text, not paths (the CLI reads the files). */
export interface ClientTlsOptions {
  /** CA certificates (PEM) that sign the server certificate; the system roots when absent. */
  ca?: string;
  /** Client certificate (PEM) for mutual TLS; goes with `key`. */
  cert?: string;
  /** Private key (PEM) of the client certificate. */
  key?: string;
  /** Server name to verify; the host of `addr` when absent. */
  serverName?: string;
}

/** Where to dial. */
export interface DialTarget {
  readonly hostname: string;
  readonly port: number;
  /** TLS when present, plain TCP otherwise. */
  readonly tls?: ClientTlsOptions;
}

/** What a socket reports; set before the dial, so no byte is missed. */
export interface SocketEvents {
  /** Bytes from the server, in order. The chunk is not reused by the transport. */
  onData(bytes: Uint8Array): void;
  /** The socket closed (by either side, or an error); called once, only after the dial resolved. */
  onClose(error?: Error): void;
}

/** An open byte stream to the server. */
export interface ClientSocket {
  /** Queues bytes for the server; a failure shows up as `onClose`. */
  write(bytes: Uint8Array): void;
  /** Closes the socket gracefully (the server sees the end of the stream); `onClose` follows. */
  close(): void;
}

/**
 * Opens a socket to `target`. Rejects when it cannot; aborting `signal` ends a dial in
 * progress (rejecting with the signal's reason).
 */
export type Dial = (
  target: DialTarget,
  events: SocketEvents,
  signal: AbortSignal,
) => Promise<ClientSocket>;

/**
 * {@link Dial} with `node:net` (TCP_NODELAY on) and `node:tls`; the grace of a graceful close
 * runs on `scheduler` (the client's).
 */
export const nodeSocketDial = (scheduler: Scheduler): Dial => (target, events, signal) =>
  new Promise<ClientSocket>((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const socket: net.Socket = target.tls
      ? tls.connect({
        host: target.hostname,
        port: target.port,
        ca: target.tls.ca,
        cert: target.tls.cert,
        key: target.tls.key,
        // An IP address is not a valid SNI name; the certificate is then checked against it.
        servername: target.tls.serverName ??
          (net.isIP(target.hostname) === 0 ? target.hostname : undefined),
      })
      : net.connect({ host: target.hostname, port: target.port });
    let open = false;
    let closed = false;
    let closing = false;
    const onAbort = () => {
      socket.destroy();
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    socket.once(target.tls ? "secureConnect" : "connect", () => {
      signal.removeEventListener("abort", onAbort);
      socket.setNoDelay(true);
      open = true;
      resolve({
        write(bytes) {
          if (!closed) socket.write(bytes);
        },
        close() {
          if (closed || closing) return;
          closing = true;
          // FIN after what was written, then keep reading until the server closes too: closing
          // with unread bytes in the receive buffer would send a reset, which the server counts
          // as a failure (io_timeout) instead of a graceful end. A stalled path never answers,
          // so the socket is dropped after CLIENT_CLOSE_GRACE_MS.
          socket.end();
          const timer = scheduler.setTimer(() => socket.destroy(), CLIENT_CLOSE_GRACE_MS);
          socket.once("close", () => timer.cancel());
        },
      });
    });
    let lastError: Error | undefined;
    socket.on("error", (error: Error) => {
      lastError = error;
      if (!open) {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      }
    });
    socket.on("data", (bytes: Uint8Array) => events.onData(bytes));
    socket.once("close", () => {
      closed = true;
      if (open) events.onClose(lastError);
      else {
        signal.removeEventListener("abort", onAbort);
        reject(lastError ?? new Error("the connection closed before it was established"));
      }
    });
  });
