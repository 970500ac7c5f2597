/**
 * An in-memory network for client tests in manual time: the client's `dial` goes here, and
 * each dial gives the test a {@link FakeServerConn} that decodes what the client sent and sends
 * scripted replies. Nothing here reads a clock or sets a timer.
 */

import type { ClientSocket, Dial, DialTarget, SocketEvents } from "../../src/client/transport.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { FrameWriter } from "../../src/wire/frame.ts";
import { FrameReader } from "../../src/wire/frame_reader.ts";
import type { ClientMessage, ServerMessage, Welcome } from "../../src/wire/messages.ts";

/** What a new connection does with the client's HELLO. */
export type HelloPolicy = "welcome" | "silent" | "close";

/** One connection as the fake server sees it. */
export class FakeServerConn {
  readonly target: DialTarget;
  /** Every frame the client sent, decoded, in order. */
  readonly received: ClientMessage[] = [];
  /** True once either side closed it. */
  closed = false;
  /** True when the client closed it. */
  closedByClient = false;
  /** The protocol version of its HELLO (1 until then): the layouts `send` writes. */
  version = 1;
  readonly #events: SocketEvents;
  readonly #reader = new FrameReader();
  readonly #network: FakeNetwork;

  constructor(network: FakeNetwork, target: DialTarget, events: SocketEvents) {
    this.#network = network;
    this.target = target;
    this.#events = events;
  }

  /** The client side of the socket. */
  socket(): ClientSocket {
    return {
      write: (bytes) => {
        if (this.closed) return;
        this.#reader.push(bytes.slice());
        for (let m = this.#reader.next(); m !== null; m = this.#reader.next()) {
          this.received.push(m as ClientMessage);
          this.#network.onFrame(this, m as ClientMessage);
        }
      },
      close: () => {
        if (this.closed) return;
        this.closed = true;
        this.closedByClient = true;
        queueMicrotask(() => this.#events.onClose());
      },
    };
  }

  /** Sends frames to the client as one chunk (so they arrive together). */
  send(...messages: ServerMessage[]): void {
    if (this.closed) throw new Error("the fake connection is closed");
    const writer = new FrameWriter({ version: this.version });
    for (const message of messages) writer.push(message);
    this.#events.onData(writer.take());
  }

  /** The server closes the connection. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.#events.onClose();
  }

  /** Frames of one type the client sent. */
  sent<T extends ClientMessage["type"]>(type: T): Extract<ClientMessage, { type: T }>[] {
    return this.received.filter((m) => m.type === type) as Extract<ClientMessage, { type: T }>[];
  }
}

/** The network: a {@link Dial} for the client and the connections it made. */
export class FakeNetwork {
  /** Every connection, in dial order. */
  readonly conns: FakeServerConn[] = [];
  /** Called with the clock reading of every dial (the test passes its scheduler's clock). */
  readonly dialTimesMs: number[] = [];
  hello: HelloPolicy = "welcome";
  /**
   * The protocol versions a HELLO may ask for; another one gets UNSUPPORTED_VERSION and the
   * connection closes (a server of before version 2: `[1]`). The WELCOME is of the HELLO's
   * version, with `welcomeV2`'s fields for version 2 (by default a single node that takes no
   * reclaims, so the client behaves as with version 1).
   */
  versions: readonly number[] = [1, 2];
  welcomeV2: { term: number; reclaimWindowMs: number; valueBytesMax: number } = {
    term: 0,
    reclaimWindowMs: 0,
    valueBytesMax: 0,
  };
  /** Dials fail at once (connection refused) while true. */
  refuse = false;
  welcome: Welcome = {
    type: "welcome",
    version: 1,
    serverVersion: "0.0.0-test",
    sessionId: 0,
    ioTimeoutMs: 30_000,
    leaseDefaultMs: 15_000,
    leaseMaxMs: 300_000,
  };
  /** Frames of a connection after HELLO (the test's scripted server). */
  onRequest: (conn: FakeServerConn, message: ClientMessage) => void = () => {};
  readonly #now: () => number;
  #sessions = 0;

  constructor(now: () => number) {
    this.#now = now;
  }

  readonly dial: Dial = (target, events, signal) => {
    this.dialTimesMs.push(this.#now());
    if (signal.aborted) return Promise.reject(signal.reason);
    if (this.refuse) return Promise.reject(new Error("connection refused"));
    const conn = new FakeServerConn(this, target, events);
    this.conns.push(conn);
    return Promise.resolve(conn.socket());
  };

  /** The newest connection. */
  get last(): FakeServerConn {
    const conn = this.conns.at(-1);
    if (conn === undefined) throw new Error("no connection yet");
    return conn;
  }

  onFrame(conn: FakeServerConn, message: ClientMessage): void {
    if (message.type !== "hello") {
      this.onRequest(conn, message);
      return;
    }
    if (!this.versions.includes(message.version)) {
      conn.send({
        type: "error",
        requestId: 0,
        code: WIRE_CODES.UNSUPPORTED_VERSION.code,
        name: "",
        message: `protocol version ${message.version} is not supported`,
      });
      conn.close();
      return;
    }
    conn.version = message.version;
    if (this.hello === "welcome") {
      const v2 = message.version === 2 ? { ...this.welcomeV2, version: 2 } : {};
      conn.send({ ...this.welcome, ...v2, sessionId: ++this.#sessions });
    } else if (this.hello === "close") {
      conn.close();
    }
  }
}

/** Lets pending promise callbacks and microtasks run (the client flushes writes in a microtask). */
export async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => queueMicrotask(resolve));
}
