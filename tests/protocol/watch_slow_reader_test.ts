/**
 * A watcher that stops reading (protocol version 2, WATCH): the server hands its connection one
 * batch of events at a time and coalesces the rest, so it buffers almost nothing for it; once the
 * socket's buffers are full, the write stalls and the existing slow-reader rule closes the
 * session after the I/O timeout. The holder whose changes it watched is not disturbed.
 */

import assert from "node:assert/strict";
import { FrameWriter } from "../../src/wire/frame.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

const FLOOD_MS_MAX = 15_000;
const VALUE_BYTES = 16 * 1024;
const BATCH = 16;

Deno.test("a watcher that stops reading is closed by the slow-reader rule; the holder it watched goes on", async () => {
  await using ts = await startTestServer({ ioTimeoutMs: 500, lockValueBytesMax: VALUE_BYTES });
  const { engine } = ts.server.context;
  const rssBefore = Deno.memoryUsage().rss;

  const [hostname, port] = ts.addr.split(":");
  const watcher = await Deno.connect({ hostname, port: Number(port) });
  const opening = new FrameWriter();
  opening.push({ type: "hello", version: 2, clientName: "never-reads" });
  opening.version = 2;
  opening.push({ type: "watch", requestId: 1, pattern: "slow/**" });
  await watcher.write(opening.take());

  await using holder = await RawClient.session(ts.addr, 2);
  await eventually(() => engine.stats.sessionsOpen === 2, "both sessions open");
  await holder.send({ type: "acquire", requestId: 1, name: "slow/w", leaseMs: 60_000, waitMs: 0 });
  const granted = await holder.next();
  assert.ok(granted?.type === "acquired");

  let changes = 0;
  const started = performance.now();
  let requestId = 10;
  while (engine.stats.sessionsOpen > 1 && performance.now() - started < FLOOD_MS_MAX) {
    const batch = Array.from({ length: BATCH }, () => ({
      type: "set_value" as const,
      requestId: requestId++,
      token: granted.token,
      name: "slow/w",
      value: new Uint8Array(VALUE_BYTES).fill(requestId & 0xff),
    }));
    await holder.send(...batch);
    for (let i = 0; i < BATCH; i++) assert.equal((await holder.next())?.type, "value_set");
    changes += BATCH;
  }
  await eventually(() => engine.stats.sessionsOpen === 1, "the watcher is closed", 5_000);
  assert.equal(engine.holderOf("slow/w")?.token, granted.token, "the holder keeps its lock");
  const rssGrowthMiB = (Deno.memoryUsage().rss - rssBefore) / 2 ** 20;
  assert.ok(
    rssGrowthMiB < 128,
    `memory grew ${rssGrowthMiB.toFixed(1)} MiB after ${changes} changes of 16 KiB values`,
  );
  await holder.send({ type: "heartbeat", requestId: 2 });
  assert.equal((await holder.next())?.type, "heartbeat_ack", "the holder's session goes on");
  watcher.close();
});
