/**
 * A tiny scripted lockd peer on 127.0.0.1 port 0 (TCP, or TLS with the test certificates) that
 * sends whatever frames a test crafts, with the real codec (src/wire/frame.ts): a server
 * that lies, to check that the clients treat every frame as untrusted input.
 */

import { formatHostPort } from "../../src/host_port.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { FrameWriter } from "../../src/wire/frame.ts";
import { FrameReader } from "../../src/wire/frame_reader.ts";
import type { ClientMessage, Message, Welcome } from "../../src/wire/messages.ts";

/** A WELCOME as a default lockd server sends it. */
export const GOOD_WELCOME: Welcome = {
  type: "welcome",
  version: 1,
  serverVersion: "0.0.0-hostile",
  sessionId: 1,
  ioTimeoutMs: 30_000,
  leaseDefaultMs: 15_000,
  leaseMaxMs: 300_000,
};

/** A WELCOME for a version-2 session, as a single node sends it (term 0) but taking reclaims. */
export const GOOD_WELCOME_V2: Welcome = {
  ...GOOD_WELCOME,
  version: 2,
  term: 0,
  reclaimWindowMs: 8_000,
  valueBytesMax: 0,
};

/** One accepted connection, as the script sees it. */
export interface HostileConn {
  /** 1 for the first connection of this server, 2 for the next, ... */
  readonly index: number;
  /** The protocol version of its HELLO (1 until HELLO): the layouts `send` writes. */
  readonly version: number;
  /** Sends frames in one write (they arrive together). */
  send(...messages: Message[]): void;
  /** Closes the connection. */
  close(): void;
}

/**
 * What the server does: `hello` answers a HELLO (default: a WELCOME of the HELLO's version),
 * `request` every later frame. Frames may be anything the codec can encode, replies to nothing
 * included. `versions` are the protocol versions a HELLO may ask for (default `[1]`, a server of
 * before version 2): a HELLO for another one gets UNSUPPORTED_VERSION and the connection closes,
 * before `hello` is called, so a version-2 client falls back to version 1 as it does at such a
 * server.
 */
export interface HostileScript {
  versions?: readonly number[];
  hello?: (conn: HostileConn, hello: Extract<ClientMessage, { type: "hello" }>) => void;
  request?: (conn: HostileConn, message: ClientMessage) => void;
}

export class HostileServer implements AsyncDisposable {
  readonly addr: string;
  readonly port: number;
  /** Every frame received, with the index of its connection. */
  readonly received: { conn: number; message: ClientMessage }[] = [];
  connections = 0;
  readonly #listener: Deno.Listener;
  readonly #conns = new Set<Deno.Conn>();
  readonly #served: Promise<void>[] = [];
  readonly #accepting: Promise<void>;
  #killed = false;

  constructor(
    readonly script: HostileScript = {},
    tls?: { cert: string; key: string },
  ) {
    const listener = tls === undefined
      ? Deno.listen({ hostname: "127.0.0.1", port: 0 })
      : Deno.listenTls({ hostname: "127.0.0.1", port: 0, cert: tls.cert, key: tls.key });
    this.#listener = listener;
    this.port = (listener.addr as Deno.NetAddr).port;
    this.addr = formatHostPort("127.0.0.1", this.port);
    this.#accepting = (async () => {
      try {
        for await (const conn of listener) {
          this.#conns.add(conn);
          this.#served.push(this.#serve(conn, ++this.connections));
        }
      } catch {
        // the listener was closed
      }
    })();
  }

  /** Frames of one type received so far. */
  sent<T extends ClientMessage["type"]>(type: T): Extract<ClientMessage, { type: T }>[] {
    return this.received.map((r) => r.message).filter((m) => m.type === type) as Extract<
      ClientMessage,
      { type: T }
    >[];
  }

  async #serve(conn: Deno.Conn, index: number): Promise<void> {
    const reader = new FrameReader();
    const buffer = new Uint8Array(16 * 1024);
    let writing = Promise.resolve();
    let version = 1;
    const handle: HostileConn = {
      index,
      get version() {
        return version;
      },
      send: (...messages) => {
        const writer = new FrameWriter({ version });
        for (const message of messages) writer.push(message);
        const bytes = writer.take();
        writing = writing.then(() => writeAll(conn, bytes)).catch(() => {});
      },
      close: () => {
        writing = writing.then(() => closeQuietly(conn));
      },
    };
    try {
      for (;;) {
        const n = await conn.read(buffer);
        if (n === null) break;
        reader.push(buffer.subarray(0, n));
        for (let m = reader.next(); m !== null; m = reader.next()) {
          const message = m as ClientMessage;
          this.received.push({ conn: index, message });
          if (message.type === "hello") {
            if (!(this.script.versions ?? [1]).includes(message.version)) {
              handle.send({
                type: "error",
                requestId: 0,
                code: WIRE_CODES.UNSUPPORTED_VERSION.code,
                name: "",
                message: `protocol version ${message.version} is not supported`,
              });
              handle.close();
              continue;
            }
            version = message.version;
            if (this.script.hello) this.script.hello(handle, message);
            else if (version === 2) handle.send({ ...GOOD_WELCOME_V2, sessionId: index });
            else handle.send({ ...GOOD_WELCOME, sessionId: index });
          } else {
            this.script.request?.(handle, message);
          }
        }
      }
    } catch {
      // reset by the peer, or closed by dispose
    }
    await writing;
    this.#conns.delete(conn);
    closeQuietly(conn);
  }

  /**
   * The server dies: every connection ends (EOF) and new ones are refused from then on. Called
   * again (or by dispose), it does nothing more.
   */
  kill(): void {
    if (this.#killed) return;
    this.#killed = true;
    this.#listener.close();
    for (const conn of this.#conns) closeQuietly(conn);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.kill();
    await this.#accepting;
    await Promise.all(this.#served);
  }
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < bytes.length) offset += await conn.write(bytes.subarray(offset));
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // already closed
  }
}
