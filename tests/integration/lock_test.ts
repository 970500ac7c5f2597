import assert from "node:assert/strict";
import { connect, type Lock, LockdError, LockLostError } from "../../mod.ts";
import { ChaosProxy } from "../helpers/chaos_proxy.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";
import { clientTls, serverTlsConfig } from "../fixtures/tls/certs.ts";

/**
 * The client library (mod.ts) against a real server, over plain TCP and over TLS: what a user
 * of `connect()` sees (locks, `tryAcquire` returning null, typed errors, `lost`, abort). The
 * server's lock semantics, frame by frame and on a manual clock, are the lock contract in
 * tests/contract/, run against the service, TCP, TLS and mTLS.
 */
const TRANSPORTS = [
  { name: "tcp", server: {}, client: (addr: string) => ({ addr }) },
  {
    name: "tls",
    server: serverTlsConfig(false),
    client: (addr: string) => ({ addr: addr.replace("127.0.0.1", "localhost"), tls: clientTls() }),
  },
];

for (const transport of TRANSPORTS) {
  Deno.test(`${transport.name}: 10 clients contending for one lock each get it once, in FIFO order, with growing tokens`, async () => {
    await using t = await startTestServer(transport.server);
    const clients = await Promise.all(
      Array.from({ length: 10 }, () => connect(transport.client(t.addr))),
    );
    try {
      const first = await clients[0].acquire("shared");
      const order: number[] = [];
      const tokens: number[] = [first.token];
      const waits: Promise<void>[] = [];
      for (let i = 1; i < 10; i++) {
        // Queue one at a time so the FIFO order is known.
        const before = t.server.context.engine.getLock("shared")!.waiters.length;
        waits.push(
          clients[i].acquire("shared").then(async (lock) => {
            order.push(i);
            tokens.push(lock.token);
            await lock.release();
          }),
        );
        await eventually(
          () => t.server.context.engine.getLock("shared")!.waiters.length === before + 1,
          `client ${i} queued`,
        );
      }
      await first.release();
      await Promise.all(waits);
      assert.deepEqual(order, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
      for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1], `${tokens}`);
      assert.equal(t.server.context.engine.lockCount, 0);
    } finally {
      await Promise.all(clients.map((c) => c.close()));
    }
  });

  Deno.test(`${transport.name}: a holder that stops heartbeating loses the lock to the next waiter with a larger token`, async () => {
    await using t = await startTestServer({ ...transport.server, ioTimeoutMs: 60_000 });
    await using proxy = new ChaosProxy(t.addr);
    await using holder = await connect(transport.client(proxy.addr));
    await using waiter = await connect(transport.client(t.addr));
    const lock = await holder.acquire("job", { leaseMs: 200 });
    // The holder keeps sending heartbeats, but the server no longer hears them.
    proxy.stallUpstream = true;
    const next = waiter.acquire("job", { leaseMs: 5_000 });
    const lost = new Promise<LockLostError>((resolve) =>
      lock.lost.addEventListener("abort", () => resolve(lock.lost.reason))
    );
    const nextLock = await next;
    assert.ok(nextLock.token > lock.token);
    const reason = await lost;
    // The holder's local lease deadline passes before the server's lease ends.
    assert.equal(reason.reason, "lease_unconfirmed");
    await nextLock.release();
  });

  Deno.test(`${transport.name}: try-lock returns null when held; a wait bound fails with WAIT_TIMEOUT`, async () => {
    await using t = await startTestServer(transport.server);
    await using a = await connect(transport.client(t.addr));
    await using b = await connect(transport.client(t.addr));
    const lock = await a.acquire("x");
    assert.equal(await b.tryAcquire("x"), null);
    const started = performance.now();
    await assert.rejects(b.acquire("x", { waitMs: 100 }), (error: unknown) => {
      assert.ok(error instanceof LockdError);
      assert.equal(error.codeName, "WAIT_TIMEOUT");
      assert.equal(error.code, 0x07);
      assert.equal(error.retryable, true);
      return true;
    });
    assert.ok(performance.now() - started >= 95);
    // The client's own bound rejected; its cancel (RELEASE token 0) follows on the wire.
    await eventually(
      () => t.server.context.engine.getLock("x")?.waiters.length === 0,
      "the claim left the queue",
    );
    await lock.release();
    const free = await b.tryAcquire("x");
    assert.ok(free !== null && free.token > lock.token);
    await free.release();
  });

  Deno.test(`${transport.name}: an aborted wait leaves the queue and the others keep their order`, async () => {
    await using t = await startTestServer(transport.server);
    await using a = await connect(transport.client(t.addr));
    await using b = await connect(transport.client(t.addr));
    await using c = await connect(transport.client(t.addr));
    const lock = await a.acquire("x");
    const controller = new AbortController();
    const bWait = b.acquire("x", { signal: controller.signal });
    await eventually(() => t.server.context.engine.getLock("x")!.waiters.length === 1, "b queued");
    const cWait = c.acquire("x");
    await eventually(() => t.server.context.engine.getLock("x")!.waiters.length === 2, "c queued");
    controller.abort(new Error("gave up"));
    await assert.rejects(bWait, /gave up/);
    await eventually(() => t.server.context.engine.getLock("x")!.waiters.length === 1, "b left");
    await lock.release();
    const cLock: Lock = await cWait;
    assert.ok(cLock.token > lock.token);
    await cLock.release();
  });

  Deno.test(`${transport.name}: a restart with the same data dir issues larger tokens than before`, async () => {
    const dataDir = await Deno.makeTempDir();
    try {
      let lastToken = 0;
      {
        await using t = await startTestServer({ ...transport.server, dataDir });
        await using client = await connect(transport.client(t.addr));
        for (let i = 0; i < 5; i++) {
          const lock = await client.acquire("x");
          lastToken = lock.token;
          await lock.release();
        }
      }
      await using t = await startTestServer({ ...transport.server, dataDir });
      await using client = await connect(transport.client(t.addr));
      const lock = await client.acquire("x");
      assert.ok(lock.token > lastToken, `${lock.token} > ${lastToken}`);
      await lock.release();
    } finally {
      await Deno.remove(dataDir, { recursive: true });
    }
  });

  Deno.test(`${transport.name}: every ownership has one acquire and one release record in the audit log`, async () => {
    await using t = await startTestServer(transport.server);
    {
      await using a = await connect(transport.client(t.addr));
      const lock = await a.acquire("audited");
      await lock.release();
      await a.acquire("left-open");
    }
    await eventually(() => t.audit.lines.length === 4, "four records");
    const records = t.audit.records();
    assert.deepEqual(
      records.map((r) => [r.event, r.lock, r.reason ?? ""]),
      [
        ["acquire", "audited", ""],
        ["release", "audited", "graceful"],
        ["acquire", "left-open", ""],
        ["release", "left-open", "graceful"],
      ],
    );
  });
}
