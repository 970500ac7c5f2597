import assert from "node:assert/strict";
import { connect, type Lock } from "../../mod.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";
import { clientTls, serverTlsConfig } from "../fixtures/tls/certs.ts";

/**
 * The client library against a real server, over plain TCP and over TLS: what the lock
 * contract (tests/contract/, frames only) does not cover: a client-side abort cancelling the
 * claim on the server, tokens across a restart on the same data dir, and the audit records of
 * ownerships the client ends by closing.
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
