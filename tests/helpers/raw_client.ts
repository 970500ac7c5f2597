import { parseHostPort } from "../../src/host_port.ts";
import { FrameWriter } from "../../src/wire/frame.ts";
import { FrameReader } from "../../src/wire/frame_reader.ts";
import {
  type ClientMessage,
  type Message,
  PROTOCOL_VERSION,
  type Welcome,
} from "../../src/wire/messages.ts";

/** A bare protocol peer for tests: sends exact frames or bytes, reads messages one by one. */
export class RawClient implements AsyncDisposable {
  readonly conn: Deno.TcpConn | Deno.TlsConn;
  readonly #reader = new FrameReader(1 << 20);
  readonly #buffer = new Uint8Array(64 * 1024);
  #closed = false;
  #pendingRead: Promise<number | null> | null = null;
  /** The session's version: frames are sent in its layouts (1 until a WELCOME says otherwise). */
  version = 1;
  /** The WELCOME of `hello`, once it came. */
  welcome: Welcome | null = null;

  private constructor(conn: Deno.TcpConn | Deno.TlsConn) {
    this.conn = conn;
  }

  /** Connects over TLS (trusting `caCerts`), presenting a client certificate when given. */
  static async connectTls(
    addr: string,
    tls: { caCerts: string[]; cert?: string; key?: string },
  ): Promise<RawClient> {
    const at = parseHostPort(addr);
    const conn = await Deno.connectTls({
      hostname: at.hostname === "127.0.0.1" ? "localhost" : at.hostname,
      port: at.port,
      caCerts: tls.caCerts,
      ...(tls.cert === undefined ? {} : { cert: tls.cert, key: tls.key }),
    });
    await conn.handshake();
    return new RawClient(conn);
  }

  /** Completes HELLO/WELCOME on a connected client, asking for protocol `version`. */
  async hello(clientName = "raw", version = PROTOCOL_VERSION): Promise<this> {
    await this.send({ type: "hello", version, clientName });
    const welcome = await this.next();
    if (welcome?.type !== "welcome") {
      throw new Error(`expected WELCOME, got ${JSON.stringify(welcome)}`);
    }
    this.welcome = welcome;
    this.version = welcome.version;
    return this;
  }

  static async connect(addr: string): Promise<RawClient> {
    const at = parseHostPort(addr);
    const conn = await Deno.connect({ hostname: at.hostname, port: at.port });
    conn.setNoDelay(true);
    return new RawClient(conn);
  }

  /** Connects and completes HELLO/WELCOME (at protocol `version`). */
  static async session(addr: string, version = PROTOCOL_VERSION): Promise<RawClient> {
    return await (await RawClient.connect(addr)).hello("raw", version);
  }

  async send(...messages: ClientMessage[]): Promise<void> {
    const writer = new FrameWriter({ maxFrameBytes: 1 << 20, version: this.version });
    for (const message of messages) writer.push(message);
    await this.sendBytes(writer.take());
  }

  async sendBytes(bytes: Uint8Array): Promise<void> {
    let offset = 0;
    while (offset < bytes.length) offset += await this.conn.write(bytes.subarray(offset));
  }

  /** The next message, or null when the server closed the connection. Fails after `timeoutMs`. */
  async next(timeoutMs = 5_000): Promise<Message | null> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const message = this.#reader.next();
      if (message !== null) return message;
      if (this.#closed) return null;
      this.#pendingRead ??= this.conn.read(this.#buffer).catch(() => null);
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timeout = new Promise<"timeout">((resolve) => {
        timer = setTimeout(() => resolve("timeout"), Math.max(0, deadline - performance.now()));
      });
      const n = await Promise.race([this.#pendingRead, timeout]);
      clearTimeout(timer);
      if (n === "timeout") throw new Error(`no message within ${timeoutMs} ms`);
      this.#pendingRead = null;
      if (n === null) {
        this.#closed = true;
        continue;
      }
      this.#reader.push(this.#buffer.subarray(0, n));
    }
  }

  /** Reads until the server closes; returns every message seen. */
  async drainUntilClosed(timeoutMs = 5_000): Promise<Message[]> {
    const messages: Message[] = [];
    for (;;) {
      const message = await this.next(timeoutMs);
      if (message === null) return messages;
      messages.push(message);
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      this.conn.close();
    } catch {
      // already closed
    }
    await this.#pendingRead;
  }
}
