import { formatHostPort, parseHostPort } from "../../src/host_port.ts";

/**
 * A TCP proxy on loopback port 0 that can misbehave like a real middlebox:
 * stall one direction (bytes are swallowed), hold both directions without
 * closing (bytes are kept and delivered late on `resume()`), partition
 * (swallow everything and leave new connections unanswered), or cut every
 * connection.
 */
export class ChaosProxy implements AsyncDisposable {
  readonly addr: string;
  /** When true, client → server bytes are dropped (the server hears nothing). */
  stallUpstream = false;
  /** When true, server → client bytes are dropped. */
  stallDownstream = false;
  /** Monotonic time (performance.now()) of the last `hold()`, or null. */
  heldSinceMs: number | null = null;
  /** Bytes kept while held, per direction of each connection, in order. */
  readonly #held = new Map<Deno.Conn, Uint8Array[]>();
  /** Connections whose bytes are swallowed both ways (`stallOpen()`); new ones pass. */
  readonly #stalled = new Set<Deno.Conn>();
  readonly #listener: Deno.TcpListener;
  readonly #conns = new Set<Deno.Conn>();
  readonly #pumps = new Set<Promise<void>>();
  readonly #accepting: Promise<void>;
  #partitioned = false;

  constructor(target: string) {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.#listener = listener;
    this.addr = formatHostPort("127.0.0.1", listener.addr.port);
    const to = parseHostPort(target);
    this.#accepting = (async () => {
      for await (const inbound of listener) {
        if (this.#partitioned) {
          this.#blackHole(inbound);
          continue;
        }
        try {
          const outbound = await Deno.connect({ hostname: to.hostname, port: to.port });
          inbound.setNoDelay(true);
          outbound.setNoDelay(true);
          this.#conns.add(inbound);
          this.#conns.add(outbound);
          this.#track(this.#pump(inbound, outbound, () => this.stallUpstream));
          this.#track(this.#pump(outbound, inbound, () => this.stallDownstream));
        } catch {
          inbound.close();
        }
      }
    })();
  }

  /**
   * Stalls the connections open now, both ways and for good (their bytes are swallowed, nothing
   * is closed), while connections made later pass: a path that went silent, and a new one that
   * gets through.
   */
  stallOpen(): void {
    for (const conn of this.#conns) this.#stalled.add(conn);
  }

  /**
   * Stops forwarding in both directions without closing anything: what arrives is kept, as a
   * stalled path would keep it in flight. `resume()` delivers it, late, in order.
   */
  hold(): void {
    this.heldSinceMs ??= performance.now();
  }

  /** Delivers what was kept while held and forwards again. */
  async resume(): Promise<void> {
    this.heldSinceMs = null;
    const writes = [...this.#held].map(async ([to, chunks]) => {
      try {
        // Bytes that arrive meanwhile join `chunks`, so the order holds.
        while (chunks.length > 0) {
          await writeAll(to, chunks[0]);
          chunks.shift();
        }
      } catch {
        // the connection was cut meanwhile
      }
      this.#held.delete(to);
    });
    await Promise.all(writes);
  }

  /**
   * A network partition: bytes of open connections are swallowed both ways, and new
   * connections are accepted but never reach the target (the peer sees timeouts, not refusals).
   */
  partition(): void {
    this.#partitioned = true;
    this.stallUpstream = true;
    this.stallDownstream = true;
  }

  /** Ends a partition: connections that lived through it are cut (their streams lost bytes). */
  heal(): void {
    this.#partitioned = false;
    this.stallUpstream = false;
    this.stallDownstream = false;
    this.cutAll();
  }

  #blackHole(inbound: Deno.Conn): void {
    this.#conns.add(inbound);
    this.#track((async () => {
      const buffer = new Uint8Array(16 * 1024);
      try {
        while ((await inbound.read(buffer)) !== null) {
          // swallowed
        }
      } catch {
        // cut
      }
      if (this.#conns.delete(inbound)) {
        try {
          inbound.close();
        } catch {
          // already closed
        }
      }
    })());
  }

  /** Closes every proxied connection in both directions. */
  cutAll(): void {
    for (const conn of this.#conns) {
      try {
        conn.close();
      } catch {
        // already closed
      }
    }
    this.#conns.clear();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.#listener.close();
    this.cutAll();
    await this.#accepting.catch(() => {});
    await Promise.all(this.#pumps);
  }

  #track(pump: Promise<void>): void {
    this.#pumps.add(pump);
    pump.finally(() => this.#pumps.delete(pump));
  }

  async #pump(from: Deno.Conn, to: Deno.Conn, stalled: () => boolean): Promise<void> {
    const buffer = new Uint8Array(16 * 1024);
    try {
      for (;;) {
        const n = await from.read(buffer);
        if (n === null) break;
        if (stalled() || this.#stalled.has(from)) continue;
        const pending = this.#held.get(to);
        if (this.heldSinceMs !== null || pending !== undefined) {
          // Held, or still delivering what was held: keep the order.
          if (pending === undefined) this.#held.set(to, [buffer.slice(0, n)]);
          else pending.push(buffer.slice(0, n));
          continue;
        }
        await writeAll(to, buffer.subarray(0, n));
      }
    } catch {
      // a cut or a reset ends the pump
    }
    for (const conn of [from, to]) {
      if (this.#conns.delete(conn)) {
        try {
          conn.close();
        } catch {
          // already closed
        }
      }
    }
  }
}

async function writeAll(to: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < bytes.length) offset += await to.write(bytes.subarray(offset));
}
