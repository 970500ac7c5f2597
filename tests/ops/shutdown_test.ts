import assert from "node:assert/strict";
import { connect, type LockLostError } from "../../mod.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { parseHostPort } from "../../src/host_port.ts";
import { http } from "../admin/admin_helpers.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

/** Whether a TCP connection to `addr` is refused (closes it when it is not). */
async function refuses(addr: string): Promise<boolean> {
  const at = parseHostPort(addr);
  try {
    const conn = await Deno.connect({ hostname: at.hostname, port: at.port });
    conn.close();
    return false;
  } catch (error) {
    if (error instanceof Deno.errors.ConnectionRefused) return true;
    // Connected to the backlog of a listener that was closing: not refused yet, ask again.
    if (error instanceof Deno.errors.ConnectionReset) return false;
    throw error;
  }
}

const GRACE_MS = 500;

Deno.test("shutdown: probes 503 at once, sessions end with SHUTTING_DOWN, admin closes, ops answers for the grace window and stops last", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer({
    adminListen: "127.0.0.1:0",
    opsListen: "127.0.0.1:0",
    shutdownGraceMs: GRACE_MS,
  }, { scheduler });
  const { addr } = t;
  const adminAddr = t.server.adminAddr!;
  const opsAddr = t.server.opsAddr!;
  await using client = await connect({ addr, reconnect: false });
  const lock = await client.acquire("held/by-client");
  const lost = new Promise<LockLostError>((resolve) =>
    lock.lost.addEventListener("abort", () => resolve(lock.lost.reason), { once: true })
  );
  await using raw = await RawClient.session(addr);
  await raw.send({ type: "acquire", requestId: 1, name: "held/by-raw", leaseMs: 0, waitMs: 0 });
  assert.equal((await raw.next())?.type, "acquired");
  assert.equal((await http(opsAddr, "GET", "/healthz")).status, 200);

  const startedMs = scheduler.monotonicMs();
  let resolved = false;
  const done = t.server.shutdown().then(() => {
    resolved = true;
  });

  // 1. Probes turn 503 at once.
  for (const path of ["/healthz", "/readyz"]) {
    const probe = await http(opsAddr, "GET", path);
    assert.equal(probe.status, 503, path);
    assert.equal(probe.text, "shutting down");
  }
  // 2. The protocol listener is closed; sessions get SHUTTING_DOWN and their ownerships end.
  assert.ok(await refuses(addr), "protocol port refuses");
  const messages = await raw.drainUntilClosed();
  const last = messages.at(-1);
  assert.ok(last?.type === "error", JSON.stringify(messages));
  assert.equal(last.code, 0x0a);
  assert.equal((await lost).reason, "disconnected");
  // 3. The admin API closes.
  await eventually(() => refuses(adminAddr), "admin port refuses");
  // 4. The ops server still answers: probes 503, metrics live.
  const metrics = await http(opsAddr, "GET", "/metrics");
  assert.equal(metrics.status, 200);
  assert.match(metrics.text, /^lockd_connections_active 0$/m);
  assert.match(metrics.text, /^lockd_releases_total\{reason="graceful"\} 2$/m);
  assert.match(metrics.text, /^lockd_protocol_errors_total\{code="0x0a"\} 2$/m);
  assert.equal((await http(opsAddr, "GET", "/healthz")).status, 503);
  await eventually(
    () => scheduler.nextTimerAtMs() === startedMs + GRACE_MS,
    "shutdown waits for the end of the grace window",
  );
  assert.equal(resolved, false, "shutdown waits for the grace window");

  // 5. After the window the ops server stops too, and shutdown resolves.
  scheduler.advance(GRACE_MS - 1);
  assert.equal((await http(opsAddr, "GET", "/healthz")).status, 503, "still up 1 ms before");
  assert.equal(resolved, false);
  scheduler.advance(1);
  await done;
  assert.ok(await refuses(opsAddr), "ops port refuses");
  assert.deepEqual(
    t.audit.records().filter((r) => r.event === "release").map((r) => [r.lock, r.reason]).sort(),
    [["held/by-client", "graceful"], ["held/by-raw", "graceful"]].sort(),
  );
});

Deno.test("shutdown without an ops server does not wait for the grace window", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer(
    { adminListen: "127.0.0.1:0", shutdownGraceMs: 10_000 },
    { scheduler },
  );
  // No time passes on the server's clock: shutdown completes without waiting for any timer.
  await t.server.shutdown();
  assert.ok(await refuses(t.server.adminAddr!));
});

Deno.test("shutdown is idempotent: a second call returns the same completion", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer(
    { opsListen: "127.0.0.1:0", shutdownGraceMs: 50 },
    { scheduler },
  );
  const first = t.server.shutdown();
  const second = t.server.shutdown();
  assert.equal(first, second);
  await eventually(() => scheduler.pendingTimers === 1, "the grace timer is set");
  scheduler.advance(50);
  await Promise.all([first, second]);
  assert.ok(await refuses(t.server.opsAddr!));
});

Deno.test("shutdown grants nothing: owners' ownerships end once, waiters get SHUTTING_DOWN only, and no ownership in the audit log begins after shutdown started", async () => {
  await using t = await startTestServer();
  const owners = [await RawClient.session(t.addr), await RawClient.session(t.addr)];
  const waiters = [await RawClient.session(t.addr), await RawClient.session(t.addr)];
  try {
    // Each lock has an owner and a queue; the owners' sessions close first at shutdown.
    for (const [i, name] of ["a", "b"].entries()) {
      await owners[i].send({ type: "acquire", requestId: 1, name, leaseMs: 0, waitMs: 0 });
      assert.equal((await owners[i].next())?.type, "acquired");
    }
    for (const waiter of waiters) {
      for (const [i, name] of ["a", "b"].entries()) {
        await waiter.send({
          type: "acquire",
          requestId: i + 1,
          name,
          leaseMs: 0,
          waitMs: 0xffff_ffff,
        });
        assert.equal((await waiter.next())?.type, "queued");
      }
    }
    const recordsBefore = t.audit.lines.length;
    await t.server.shutdown();
    for (const client of [...owners, ...waiters]) {
      const frames = await client.drainUntilClosed();
      assert.deepEqual(
        frames.map((m) => m.type === "error" ? `error 0x${m.code.toString(16)}` : m.type),
        ["error 0xa"],
        "SHUTTING_DOWN and nothing else",
      );
    }
    const after = t.audit.records().slice(recordsBefore);
    assert.deepEqual(after.map((r) => [r.event, r.lock, r.reason]).sort(), [
      ["release", "a", "graceful"],
      ["release", "b", "graceful"],
    ]);
    assert.equal(t.server.context.engine.stats.acquiresTotal, 2, "no grant after shutdown began");
  } finally {
    for (const client of [...owners, ...waiters]) await client[Symbol.asyncDispose]();
  }
});
