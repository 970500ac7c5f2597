/**
 * The connect timeout and the client-side wait bound over real sockets, against a server that
 * accepts TCP but is slow or mute. (The exact timing is tested in manual time in
 * client_timing_test.ts; here the point is the real socket.)
 */
import assert from "node:assert/strict";
import { connect, ConnectionError, LockdError } from "../../mod.ts";
import { formatHostPort } from "../../src/host_port.ts";
import { FrameWriter } from "../../src/wire/frame.ts";
import { FrameReader } from "../../src/wire/frame_reader.ts";
import type { ClientMessage, ServerMessage } from "../../src/wire/messages.ts";

/** A TCP server on port 0 that answers what `reply` says (nothing, by default). */
class ScriptedServer implements AsyncDisposable {
  readonly addr: string;
  readonly received: ClientMessage[] = [];
  /** Resolves when an accepted connection ends (the client closed it). */
  readonly ended: Promise<void>[] = [];
  readonly #listener: Deno.TcpListener;
  readonly #conns = new Set<Deno.Conn>();
  readonly #serving: Promise<void>;

  constructor(reply: (message: ClientMessage) => ServerMessage[] = () => []) {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.#listener = listener;
    this.addr = formatHostPort("127.0.0.1", listener.addr.port);
    this.#serving = (async () => {
      for await (const conn of listener) {
        this.#conns.add(conn);
        this.ended.push(this.#serve(conn, reply));
      }
    })();
  }

  async #serve(conn: Deno.Conn, reply: (message: ClientMessage) => ServerMessage[]) {
    const reader = new FrameReader();
    const buffer = new Uint8Array(4096);
    try {
      for (;;) {
        const n = await conn.read(buffer);
        if (n === null) break;
        reader.push(buffer.subarray(0, n));
        for (let m = reader.next(); m !== null; m = reader.next()) {
          this.received.push(m as ClientMessage);
          const writer = new FrameWriter();
          for (const out of reply(m as ClientMessage)) writer.push(out);
          if (writer.byteLength > 0) await conn.write(writer.take());
        }
      }
    } catch {
      // closed by dispose
    }
    this.#conns.delete(conn);
    try {
      conn.close();
    } catch {
      // already closed
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.#listener.close();
    for (const conn of this.#conns) conn.close();
    await this.#serving.catch(() => {});
    await Promise.all(this.ended);
  }
}

Deno.test("connect() to a server that accepts TCP but never answers HELLO fails after connectTimeoutMs", async () => {
  await using server = new ScriptedServer();
  const started = performance.now();
  await assert.rejects(
    connect({ addr: server.addr, connectTimeoutMs: 300 }),
    (error: unknown) => {
      assert.ok(error instanceof ConnectionError);
      assert.match(error.message, /no WELCOME within 300 ms/);
      return true;
    },
  );
  const elapsedMs = performance.now() - started;
  assert.ok(elapsedMs >= 290 && elapsedMs < 3_000, `gave up after ${elapsedMs} ms`);
  assert.equal(server.received[0]?.type, "hello");
  // The client closed its socket: the server's side of the connection ends.
  await server.ended[0];
});

Deno.test("acquire() with waitMs rejects with WAIT_TIMEOUT on the client's clock when the server never answers, and cancels the claim", async () => {
  await using server = new ScriptedServer((message) =>
    message.type === "hello"
      ? [{
        type: "welcome",
        version: message.version, // version 2: a single node that takes no reclaims
        serverVersion: "slow",
        sessionId: 1,
        ioTimeoutMs: 30_000,
        leaseDefaultMs: 15_000,
        leaseMaxMs: 300_000,
      }]
      : message.type === "heartbeat"
      ? [{ type: "heartbeat_ack", requestId: message.requestId, renewed: 0 }]
      : [] // ACQUIRE: silence, like a server whose audit log is stalled
  );
  await using client = await connect({ addr: server.addr });
  const started = performance.now();
  await assert.rejects(client.acquire("jobs/slow", { waitMs: 300 }), (error: unknown) => {
    assert.ok(error instanceof LockdError);
    assert.equal(error.codeName, "WAIT_TIMEOUT");
    return true;
  });
  const elapsedMs = performance.now() - started;
  assert.ok(elapsedMs >= 290 && elapsedMs < 3_000, `gave up after ${elapsedMs} ms`);
  const deadline = performance.now() + 5_000;
  while (!server.received.some((m) => m.type === "release")) {
    assert.ok(performance.now() < deadline, "the cancel reached the server");
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const release = server.received.find((m) => m.type === "release");
  assert.deepEqual(release && [release.type, "name" in release && release.name], [
    "release",
    "jobs/slow",
  ]);
  assert.equal(release && "token" in release && release.token, 0);
});
