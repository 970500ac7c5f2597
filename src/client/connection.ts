import { parseHostPort } from "../host_port.ts";
import { READ_BUFFER_BYTES } from "../limits.ts";
import { FrameWriter } from "../protocol/frame.ts";
import { FrameReader } from "../protocol/frame_reader.ts";
import {
  type ClientMessage,
  type Message,
  PROTOCOL_VERSION,
  type Welcome,
} from "../protocol/messages.ts";
import { ConnectionError, LockdError } from "./errors.ts";

/** TLS settings of a client: PEM text, not paths (the CLI reads the files). */
export interface ClientTlsOptions {
  /** CA certificates (PEM) that sign the server certificate; system roots when absent. */
  ca?: string;
  /** Client certificate (PEM) for mutual TLS. */
  cert?: string;
  /** Client private key (PEM) for mutual TLS. */
  key?: string;
  /** Server name to verify; defaults to the host of `addr`. */
  serverName?: string;
}

/**
 * One connection to a lockd server: dials, says HELLO, then reads frames
 * and hands them to `onMessage`. Writes are coalesced: every frame sent in
 * one turn of the event loop goes out in one write.
 */
export class Connection {
  readonly welcome: Welcome;
  readonly #conn: Deno.Conn;
  readonly #reader: FrameReader;
  readonly #writer = new FrameWriter({ initialBytes: 256 });
  #flushScheduled = false;
  #writing = false;
  #closed = false;
  onMessage: (message: Message) => void = () => {};
  /** Called once when the connection ends, with the server's last ERROR code if it sent one. */
  onClose: (lastErrorCode: number | null) => void = () => {};
  #lastErrorCode: number | null = null;

  private constructor(conn: Deno.Conn, reader: FrameReader, welcome: Welcome) {
    this.#conn = conn;
    this.#reader = reader;
    this.welcome = welcome;
  }

  /** Dials `addr` and completes the handshake. */
  static async open(addr: string, clientName: string, tls?: ClientTlsOptions): Promise<Connection> {
    const at = parseHostPort(addr);
    let conn: Deno.Conn;
    try {
      if (tls) {
        conn = await Deno.connectTls({
          hostname: at.hostname,
          port: at.port,
          caCerts: tls.ca ? [tls.ca] : undefined,
          cert: tls.cert,
          key: tls.key,
          serverName: tls.serverName,
        } as Deno.ConnectTlsOptions);
      } else {
        const tcp = await Deno.connect({ hostname: at.hostname, port: at.port });
        tcp.setNoDelay(true);
        conn = tcp;
      }
    } catch (error) {
      throw new ConnectionError(`Cannot connect to lockd at ${addr}: ${messageOf(error)}`, {
        cause: error,
      });
    }
    const reader = new FrameReader();
    try {
      const hello = new FrameWriter();
      hello.push({ type: "hello", version: PROTOCOL_VERSION, clientName });
      await writeAll(conn, hello.take());
      const buffer = new Uint8Array(READ_BUFFER_BYTES);
      for (;;) {
        const message = reader.next();
        if (message !== null) {
          if (message.type === "welcome") return new Connection(conn, reader, message);
          if (message.type === "error") {
            throw new LockdError(message.code, message.name, message.message);
          }
          throw new ConnectionError(`Unexpected ${message.type} before WELCOME`);
        }
        const n = await conn.read(buffer);
        if (n === null) throw new ConnectionError(`lockd at ${addr} closed the connection`);
        reader.push(buffer.subarray(0, n));
      }
    } catch (error) {
      try {
        conn.close();
      } catch {
        // already closed
      }
      if (error instanceof LockdError || error instanceof ConnectionError) throw error;
      throw new ConnectionError(`Handshake with lockd at ${addr} failed: ${messageOf(error)}`, {
        cause: error,
      });
    }
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Starts the read loop; call once after wiring the callbacks. */
  start(): void {
    // Frames that arrived together with WELCOME.
    this.#drain();
    this.#readLoop();
  }

  send(message: ClientMessage): void {
    if (this.#closed) return;
    this.#writer.push(message);
    if (!this.#flushScheduled && !this.#writing) {
      this.#flushScheduled = true;
      queueMicrotask(() => this.#flush());
    }
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch {
      // already closed
    }
    this.onClose(this.#lastErrorCode);
  }

  async #readLoop(): Promise<void> {
    const buffer = new Uint8Array(READ_BUFFER_BYTES);
    try {
      while (!this.#closed) {
        const n = await this.#conn.read(buffer);
        if (n === null) break;
        this.#reader.push(buffer.subarray(0, n));
        this.#drain();
      }
    } catch {
      // reset or closed locally: either way the connection is over
    }
    this.close();
  }

  #drain(): void {
    for (;;) {
      const message = this.#reader.next();
      if (message === null) return;
      if (message.type === "error" && message.requestId === 0) this.#lastErrorCode = message.code;
      this.onMessage(message);
    }
  }

  async #flush(): Promise<void> {
    this.#flushScheduled = false;
    this.#writing = true;
    try {
      while (this.#writer.byteLength > 0 && !this.#closed) {
        await writeAll(this.#conn, this.#writer.take());
      }
    } catch {
      this.close();
    } finally {
      this.#writing = false;
    }
  }
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < bytes.length) offset += await conn.write(bytes.subarray(offset));
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
