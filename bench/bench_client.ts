/**
 * The minimal protocol client the benchmark, the soak and the fault tests use:
 * FrameWriter/FrameReader over `Deno.connect`, requests matched to replies by
 * request id, every frame queued in one microtask sent as one write. It is
 * deliberately lighter than `mod.ts` (no reconnect, no heartbeat timer) so
 * that 10,000 of them fit in one process and the floor measures the same code.
 */

import { FrameWriter } from "../src/wire/frame.ts";
import { FrameReader } from "../src/wire/frame_reader.ts";
import {
  type ClientMessage,
  type LockMode,
  type LockState,
  type Message,
  PROTOCOL_VERSION,
} from "../src/wire/messages.ts";

const READ_BUFFER_BYTES = 16 * 1024;

/** A reply that ends a request: ACQUIRED, RELEASED, HEARTBEAT_ACK, ERROR, or the echoed frame. */
export type Reply = Message;

interface Pending {
  resolve: (reply: Reply) => void;
  reject: (error: Error) => void;
}

/** Client side of TLS or mutual TLS (PEM text), for `BenchConn.connect`. */
export interface BenchTls {
  readonly ca: string;
  readonly cert?: string;
  readonly key?: string;
  /** Name to verify the server certificate against (default "localhost"). */
  readonly serverName?: string;
}

/** Version-2 fields of an ACQUIRE (`BenchConn.acquireWith`); left out = neutral. */
export interface AcquireOptions {
  readonly leaseMs?: number;
  readonly waitMs?: number;
  readonly mode?: LockMode;
  /** 0: no opinion; N ≥ 2: a semaphore of N. */
  readonly limit?: number;
  readonly value?: Uint8Array;
}

/** What a watch hears: each LOCK_STATE with its id (snapshots, then events), then its end. */
export interface WatchListener {
  onState(state: LockState): void;
  /** WATCH_ENDED, or the connection closed (`reason` null). */
  onEnd?(reason: string | number | null): void;
}

export class BenchConn {
  readonly conn: Deno.TcpConn | Deno.TlsConn;
  readonly #writer = new FrameWriter({ initialBytes: 64 });
  readonly #reader = new FrameReader();
  readonly #pending = new Map<number, Pending>();
  #nextRequestId = 1;
  #flushQueued = false;
  #writing: Promise<void> = Promise.resolve();
  closed = false;
  /** Messages with no pending request (ERROR id 0, unexpected grants). */
  unsolicited: Message[] = [];
  /** Called for every QUEUED message (deep-queue scenario counts them). */
  onQueued: ((msg: Message) => void) | null = null;
  /** Open watches by the WATCH's request id (version 2). */
  readonly #watches = new Map<number, WatchListener>();
  /** The protocol version WELCOME settled (1 until then). */
  version = 1;
  readonly done: Promise<void>;

  private constructor(conn: Deno.TcpConn | Deno.TlsConn) {
    this.conn = conn;
    this.done = this.#readLoop();
  }

  /** Connects over TCP, or over TLS (handshake completed) when `tls` is given. */
  static async connect(addr: string, tls?: BenchTls): Promise<BenchConn> {
    const i = addr.lastIndexOf(":");
    const hostname = addr.slice(0, i).replace(/^\[|\]$/g, "");
    const port = Number(addr.slice(i + 1));
    if (tls !== undefined) {
      // Deno.TlsConn has no setNoDelay; every request here is one write, so Nagle does not bite.
      const conn = await Deno.connectTls({
        hostname: tls.serverName ?? "localhost",
        port,
        caCerts: [tls.ca],
        ...(tls.cert !== undefined ? { cert: tls.cert, key: tls.key } : {}),
      });
      try {
        await conn.handshake();
      } catch (error) {
        conn.close();
        throw error;
      }
      return new BenchConn(conn);
    }
    const conn = await Deno.connect({ hostname, port });
    conn.setNoDelay(true);
    return new BenchConn(conn);
  }

  /**
   * Connects and completes HELLO → WELCOME, asking for `version` (1 by default; 2 for lock kinds,
   * values, QUERY and WATCH: the server must answer 2, or this throws).
   */
  static async session(
    addr: string,
    clientName = "bench",
    tls?: BenchTls,
    version = PROTOCOL_VERSION,
  ): Promise<BenchConn> {
    const c = await BenchConn.connect(addr, tls);
    const welcome = await c.request({ type: "hello", version, clientName });
    if (welcome.type !== "welcome" || welcome.version !== version) {
      c.close();
      throw new Error(`Cannot open session: expected WELCOME, got ${JSON.stringify(welcome)}`);
    }
    return c;
  }

  get localAddr(): string {
    const a = this.conn.localAddr as Deno.NetAddr;
    return a.hostname.includes(":") ? `[${a.hostname}]:${a.port}` : `${a.hostname}:${a.port}`;
  }

  get pendingCount(): number {
    return this.#pending.size;
  }

  /** Sends `msg` (its requestId is assigned here; HELLO uses key 0) and resolves with the reply. */
  request(msg: ClientMessage): Promise<Reply> {
    if (this.closed) return Promise.reject(new Error("connection closed"));
    let key = 0;
    if (msg.type !== "hello") {
      key = this.#nextRequestId++;
      if (this.#nextRequestId > 0xffff_fff0) this.#nextRequestId = 1;
      msg = { ...msg, requestId: key };
    }
    const p = new Promise<Reply>((resolve, reject) => this.#pending.set(key, { resolve, reject }));
    this.send(msg);
    return p;
  }

  acquire(name: string, leaseMs = 0, waitMs = 0xffff_ffff): Promise<Reply> {
    return this.request({ type: "acquire", requestId: 0, name, leaseMs, waitMs });
  }

  release(name: string, token: number): Promise<Reply> {
    return this.request({ type: "release", requestId: 0, name, token });
  }

  heartbeat(): Promise<Reply> {
    return this.request({ type: "heartbeat", requestId: 0 });
  }

  /** A version-2 ACQUIRE (mode, limit, value); default lease, wait forever. */
  acquireWith(name: string, options: AcquireOptions): Promise<Reply> {
    return this.request({
      type: "acquire",
      requestId: 0,
      name,
      leaseMs: options.leaseMs ?? 0,
      waitMs: options.waitMs ?? 0xffff_ffff,
      ...(options.mode !== undefined ? { mode: options.mode } : {}),
      ...(options.limit !== undefined ? { limit: options.limit } : {}),
      ...(options.value !== undefined ? { value: options.value } : {}),
    });
  }

  setValue(name: string, token: number, value: Uint8Array): Promise<Reply> {
    return this.request({ type: "set_value", requestId: 0, name, token, value });
  }

  downgrade(name: string, token: number): Promise<Reply> {
    return this.request({ type: "downgrade", requestId: 0, name, token });
  }

  query(name: string): Promise<Reply> {
    return this.request({ type: "query", requestId: 0, name });
  }

  /**
   * WATCH `pattern`: resolves with WATCHING (after `listener` heard the snapshots) or the ERROR;
   * events go on to `listener` until WATCH_ENDED or the connection closes. `id` is the watch's
   * request id (for `unwatch`).
   */
  watch(pattern: string, listener: WatchListener): { id: number; reply: Promise<Reply> } {
    const id = this.#nextRequestId;
    this.#watches.set(id, listener);
    const reply = this.request({ type: "watch", requestId: 0, pattern });
    reply.then((r) => {
      if (r.type === "error") this.#watches.delete(id);
    }, () => {});
    return { id, reply };
  }

  /** UNWATCH: resolves with WATCH_ENDED. */
  unwatch(id: number): Promise<Reply> {
    if (this.closed) return Promise.reject(new Error("connection closed"));
    const p = new Promise<Reply>((resolve, reject) => this.#pending.set(id, { resolve, reject }));
    this.send({ type: "unwatch", requestId: id });
    return p;
  }

  /** GOODBYE (version 2), then close: the session's ownerships end graceful. */
  async goodbye(): Promise<void> {
    if (!this.closed) {
      this.send({ type: "goodbye", requestId: this.#nextRequestId++ });
      await this.#writing;
      // Let the scheduled flush write it.
      await new Promise((r) => setTimeout(r, 0));
      await this.#writing;
    }
    this.close();
  }

  /** Queues a frame without waiting for a reply. */
  send(msg: ClientMessage): void {
    this.#writer.push(msg);
    this.#scheduleFlush();
  }

  /** Queues raw bytes (fuzzing). */
  sendBytes(bytes: Uint8Array): void {
    this.#writing = this.#writing.then(() => this.#writeAll(bytes));
  }

  #scheduleFlush(): void {
    if (this.#flushQueued) return;
    this.#flushQueued = true;
    queueMicrotask(() => {
      this.#flushQueued = false;
      if (this.#writer.byteLength === 0) return;
      const bytes = this.#writer.take();
      this.#writing = this.#writing.then(() => this.#writeAll(bytes));
    });
  }

  async #writeAll(bytes: Uint8Array): Promise<void> {
    if (this.closed) return;
    try {
      let off = 0;
      while (off < bytes.length) off += await this.conn.write(bytes.subarray(off));
    } catch {
      this.close();
    }
  }

  async #readLoop(): Promise<void> {
    const buf = new Uint8Array(READ_BUFFER_BYTES);
    try {
      for (;;) {
        const n = await this.conn.read(buf);
        if (n === null) break;
        this.#reader.push(buf.subarray(0, n));
        for (let msg = this.#reader.next(); msg !== null; msg = this.#reader.next()) {
          this.#deliver(msg);
        }
      }
    } catch {
      // reset or protocol error: the connection is over either way
    }
    this.close();
  }

  #deliver(msg: Message): void {
    if (msg.type === "queued") {
      this.onQueued?.(msg);
      return;
    }
    const key = msg.type === "welcome" ? 0 : "requestId" in msg ? msg.requestId : -1;
    if (msg.type === "welcome") {
      this.version = msg.version;
      this.#writer.version = msg.version;
    } else if (msg.type === "lock_state" || msg.type === "watch_ended") {
      const watch = this.#watches.get(key);
      if (watch !== undefined) {
        if (msg.type === "lock_state") return watch.onState(msg);
        this.#watches.delete(key);
        watch.onEnd?.(msg.reason);
      }
    }
    const pending = this.#pending.get(key);
    if (pending === undefined) {
      this.unsolicited.push(msg);
      return;
    }
    this.#pending.delete(key);
    pending.resolve(msg);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    try {
      this.conn.close();
    } catch {
      // already closed
    }
    const error = new Error("connection closed");
    for (const p of this.#pending.values()) p.reject(error);
    this.#pending.clear();
    for (const w of this.#watches.values()) w.onEnd?.(null);
    this.#watches.clear();
  }
}

/** Value at quantile `q` (0..1) of an ascending-sorted array. */
export function quantile(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

export function sortedCopy(values: number[]): Float64Array {
  return Float64Array.from(values).sort();
}
