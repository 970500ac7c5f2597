import { formatHostPort, parseHostPort } from "../../src/host_port.ts";

/**
 * A TCP proxy on loopback port 0 that can misbehave like a real middlebox:
 * stall one direction (bytes are swallowed), or cut every connection.
 */
export class ChaosProxy implements AsyncDisposable {
  readonly addr: string;
  /** When true, client → server bytes are dropped (the server hears nothing). */
  stallUpstream = false;
  /** When true, server → client bytes are dropped. */
  stallDownstream = false;
  readonly #listener: Deno.TcpListener;
  readonly #conns = new Set<Deno.Conn>();
  readonly #pumps = new Set<Promise<void>>();
  readonly #accepting: Promise<void>;

  constructor(target: string) {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.#listener = listener;
    this.addr = formatHostPort("127.0.0.1", listener.addr.port);
    const to = parseHostPort(target);
    this.#accepting = (async () => {
      for await (const inbound of listener) {
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
        if (stalled()) continue;
        let offset = 0;
        while (offset < n) offset += await to.write(buffer.subarray(offset, n));
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
