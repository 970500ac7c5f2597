import { formatHostPort } from "../host_port.ts";

/**
 * What a session needs from a connection, so one session code path serves
 * plain TCP (`Deno.listen`) and TLS/mTLS sockets (`node:tls`) alike.
 */
export interface Transport {
  /** `host:port`, IPv6 in brackets: `[::1]:5000`. */
  readonly remoteAddr: string;
  /** mTLS identity of the peer certificate, or "" without mTLS. */
  readonly identity: string;
  /** Reads into `buffer`; null at a clean end of stream (FIN). Rejects on reset. */
  read(buffer: Uint8Array): Promise<number | null>;
  /** Writes some of `bytes`; resolves with how many. */
  write(bytes: Uint8Array): Promise<number>;
  /** Closes both directions at once; pending reads and writes fail. */
  close(): void;
}

/**
 * A plain TCP connection from `Deno.listen`, with Nagle off (see DENO-NOTES).
 * `onClosed` runs once, when the connection is closed.
 */
export function tcpTransport(conn: Deno.TcpConn, onClosed: () => void = () => {}): Transport {
  try {
    conn.setNoDelay(true);
  } catch {
    // The peer may already be gone; the first read will say so.
  }
  return new TcpTransport(conn, onClosed);
}

/** One object per connection, no closures of its own (memory per idle session, issue 24). */
class TcpTransport implements Transport {
  readonly remoteAddr: string;
  readonly identity = "";
  readonly #conn: Deno.TcpConn;
  #onClosed: (() => void) | null;

  constructor(conn: Deno.TcpConn, onClosed: () => void) {
    const addr = conn.remoteAddr;
    this.remoteAddr = formatHostPort(addr.hostname, addr.port);
    this.#conn = conn;
    this.#onClosed = onClosed;
  }

  read(buffer: Uint8Array): Promise<number | null> {
    return this.#conn.read(buffer);
  }

  write(bytes: Uint8Array): Promise<number> {
    return this.#conn.write(bytes);
  }

  close(): void {
    const onClosed = this.#onClosed;
    if (onClosed === null) return;
    this.#onClosed = null;
    onClosed();
    try {
      this.#conn.close();
    } catch {
      // Already closed by the peer.
    }
  }
}
