/**
 * close() ends the session with a FIN the server reads as a clean end (ownerships end
 * `graceful`), even when replies are still unread in the client's receive buffer: closing a
 * socket with unread bytes would send a reset instead, which the server counts as io_timeout.
 */
import assert from "node:assert/strict";
import { connect } from "../../mod.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

Deno.test("close() with replies still unread ends the ownerships as graceful, not io_timeout", async () => {
  await using t = await startTestServer();
  const { engine } = t.server.context;
  for (let round = 0; round < 10; round++) {
    const client = await connect({ addr: t.addr, reconnect: false });
    const held = `close/${round}/held`;
    await client.acquire(held);
    // Replies the client has not read yet when it closes: waits the server has queued.
    const blocker = await connect({ addr: t.addr, reconnect: false });
    const names = Array.from({ length: 20 }, (_, i) => `close/${round}/${i}`);
    const blocks = await Promise.all(names.map((name) => blocker.acquire(name)));
    const waits = names.map((name) => client.acquire(name).catch(() => "closed"));
    await eventually(
      () => names.every((name) => engine.getLock(name)?.waiters.length === 1),
      "queued",
    );
    await client.close();
    await Promise.all(waits);
    await eventually(() => engine.getLock(held) === undefined, "released");
    for (const block of blocks) await block.release();
    await blocker.close();
  }
  const reasons = t.audit.records()
    .filter((r) => r.event === "release" && String(r.lock).endsWith("/held"))
    .map((r) => r.reason);
  assert.deepEqual(reasons, Array(10).fill("graceful"));
});
