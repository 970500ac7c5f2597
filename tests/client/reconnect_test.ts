import assert from "node:assert/strict";
import { connect, LockLostError } from "../../mod.ts";
import { eventually, startTestServer, TEST_ACTOR } from "../helpers/start_server.ts";

Deno.test("after ERROR 0x02 a waiting claim reconnects, rejoins the tail and still resolves", async () => {
  await using t = await startTestServer();
  const engine = t.server.context.engine;
  await using owner = await connect({ addr: t.addr });
  await using kicked = await connect({ addr: t.addr });
  await using other = await connect({ addr: t.addr });
  const held = await owner.acquire("x");
  const kickedWait = kicked.acquire("x");
  await eventually(() => engine.getLock("x")!.waiters.length === 1, "kicked queued");
  const otherWait = other.acquire("x");
  await eventually(() => engine.getLock("x")!.waiters.length === 2, "other queued");
  const firstSession = kicked.sessionId;
  const addr = engine.getLock("x")!.waiters[0].remoteAddr;
  t.server.context.service.kickWaiter("x", addr, TEST_ACTOR);
  // It comes back behind `other`.
  await eventually(
    () =>
      engine.getLock("x")!.waiters.map((w) => w.sessionId).includes(kicked.sessionId) &&
      kicked.sessionId !== firstSession,
    "kicked client requeued on a new session",
  );
  assert.deepEqual(engine.getLock("x")!.waiters.map((w) => w.sessionId), [
    other.sessionId,
    kicked.sessionId,
  ]);
  await held.release();
  const otherLock = await otherWait;
  await otherLock.release();
  const kickedLock = await kickedWait;
  assert.ok(kickedLock.token > otherLock.token);
  await kickedLock.release();
});

Deno.test("an owned lock reports lost with reason force after a force-release", async () => {
  await using t = await startTestServer();
  await using owner = await connect({ addr: t.addr });
  const lock = await owner.acquire("x");
  t.server.context.service.forceRelease("x", TEST_ACTOR);
  await eventually(() => lock.lost.aborted, "lost signalled");
  assert.ok(lock.lost.reason instanceof LockLostError);
  assert.equal(lock.lost.reason.reason, "force");
  await lock.release(); // a lost lock releases quietly
  // The client reconnected and works again.
  const again = await owner.acquire("x");
  assert.ok(again.token > lock.token);
  await again.release();
});

Deno.test("closing the client rejects pending acquires and reports owned locks lost", async () => {
  await using t = await startTestServer();
  await using a = await connect({ addr: t.addr });
  const b = await connect({ addr: t.addr });
  await a.acquire("x");
  const owned = await b.acquire("y");
  const waiting = b.acquire("x");
  await eventually(() => t.server.context.engine.getLock("x")!.waiters.length === 1, "b queued");
  const rejected = assert.rejects(waiting, /The client is closed/);
  await b.close();
  await rejected;
  assert.equal((owned.lost.reason as LockLostError).reason, "disconnected");
  await eventually(() => t.server.context.engine.getLock("y") === undefined, "y released");
});
