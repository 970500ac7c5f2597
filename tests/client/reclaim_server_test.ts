/**
 * Protocol version 2 against a real single node (in-process, loopback port 0): GOODBYE makes the
 * end of a session graceful, a version-2 connection that just ends is not (its ownership stays
 * with its client until its lease ends, then ends as expired); a connection the
 * client gives up on as silent (its path stalled) is resumed on the same server (RESUME `moved`),
 * the lock keeping its token without a moment of being lost. The Python client's
 * tests/test_reclaim_server.py has the same cases.
 */
import assert from "node:assert/strict";
import { connect, LockdError } from "../../mod.ts";
import { ChaosProxy } from "../helpers/chaos_proxy.ts";
import { eventually, startTestServer, type TestServer } from "../helpers/start_server.ts";

function releases(t: TestServer, token: number): Record<string, unknown>[] {
  return t.audit.records().filter((r) => r.event === "release" && r.token === token);
}

Deno.test("version 2 on a real server: close() says GOODBYE and the ownership ends gracefully; a connection that just ends keeps it until its lease ends", async () => {
  await using t = await startTestServer();
  const client = await connect({ addr: t.addr });
  assert.equal(client.protocolVersion, 2);
  const lock = await client.acquire("ts/v2/goodbye");
  await client.close();
  await eventually(() => releases(t, lock.token).length > 0, "the release record");
  assert.equal(releases(t, lock.token)[0].reason, "graceful");

  // Without GOODBYE (the stream just ends), the server cannot tell a client that let go from one
  // that vanished and may still count on its lock (and carry it over with RESUME): it keeps the
  // ownership, orphaned, until its lease ends (expired); nobody else gets the lock before
  // (docs/protocol.md, "End of a connection").
  await using proxy = new ChaosProxy(t.addr);
  await using cut = await connect({ addr: proxy.addr, reconnect: false });
  const orphan = await cut.acquire("ts/v2/goodbye", { leaseMs: 2_000 });
  proxy.cutAll();
  await using other = await connect({ addr: t.addr });
  await assert.rejects(
    other.acquire("ts/v2/goodbye", { waitMs: 1_000 }),
    (e: unknown) => e instanceof LockdError && e.codeName === "WAIT_TIMEOUT",
  );
  assert.deepEqual(releases(t, orphan.token), []);
  const successor = await other.acquire("ts/v2/goodbye", { waitMs: 5_000 });
  assert.ok(successor.token > orphan.token);
  assert.equal(releases(t, orphan.token)[0].reason, "expired");
});

Deno.test("version 2 on a real server: a silent connection is given up and resumed on the same server; the lock moves with its token, never lost", async () => {
  await using t = await startTestServer();
  await using proxy = new ChaosProxy(t.addr);
  await using client = await connect({ addr: proxy.addr });
  // Lease 8 s: heartbeats every 2.7 s, the silence check 3 s after an unanswered one, the local
  // deadline 7.2 s after the last acknowledged one.
  const lock = await client.acquire("ts/v2/moved", { leaseMs: 8_000 });
  const firstSession = client.sessionId;
  const engine = t.server.context.engine;
  assert.equal(engine.holderOf("ts/v2/moved")?.sessionId, firstSession);
  proxy.stallOpen(); // the old path goes silent; a new connection gets through
  await eventually(
    () => client.sessionId !== 0 && client.sessionId !== firstSession,
    "reconnected",
    10_000,
  );
  await eventually(
    () => engine.holderOf("ts/v2/moved")?.sessionId === client.sessionId,
    "the ownership moved to the new session",
  );
  assert.deepEqual([lock.state, lock.lost.aborted], ["held", false]);
  assert.equal(engine.holderOf("ts/v2/moved")?.token, lock.token);
  assert.equal(releases(t, lock.token).length, 0, "never ended on the server");
  await lock.release();
  await eventually(() => releases(t, lock.token).length > 0, "released");
  assert.equal(releases(t, lock.token)[0].reason, "graceful");
});
