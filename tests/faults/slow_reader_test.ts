/**
 * Slow reader: a client that sends requests but never reads its replies.
 * The server must not buffer replies for it without bound: it closes the
 * session (write buffer above WRITE_BUFFER_BYTES_MAX, or a write stalled past
 * the I/O timeout) and the client's ownerships end as io_timeout, after which
 * a waiting client gets the lock.
 */

import assert from "node:assert/strict";
import { FrameWriter } from "../../src/wire/frame.ts";
import { BenchConn } from "../../bench/bench_client.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

const FLOOD_MS_MAX = 10_000;
const BATCH_HEARTBEATS = 2_000;
const HEARTBEAT_EVERY_MS = 100;

/**
 * One turn of the event loop for the timers. The server runs in this process: while the socket
 * has bytes, its read loop and this flood pass each other the turn through I/O alone, and on a
 * loaded machine the timers (the server's watchdog and I/O deadlines, the waiter's heartbeats)
 * were held back for over a second. A client in its own process would not hold them back.
 */
function yieldToTimers(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

Deno.test("a client that never reads is disconnected and its ownerships end as io_timeout", async () => {
  await using ts = await startTestServer({ ioTimeoutMs: 500 });
  const { engine } = ts.server.context;
  const rssBefore = Deno.memoryUsage().rss;

  const [hostname, port] = ts.addr.split(":");
  const slow = await Deno.connect({ hostname, port: Number(port) });
  slow.setNoDelay(true);
  const opening = new FrameWriter();
  opening.push({ type: "hello", version: 1, clientName: "slow" });
  opening.push({ type: "acquire", requestId: 1, name: "slow/a", leaseMs: 60_000, waitMs: 0 });
  opening.push({ type: "acquire", requestId: 2, name: "slow/b", leaseMs: 60_000, waitMs: 0 });
  await slow.write(opening.take());
  await eventually(() => engine.stats.locksHeld === 2, "the slow client owns two locks");

  const waiter = await BenchConn.session(ts.addr, "waiter");
  const waited = waiter.acquire("slow/a", 5_000, 20_000);
  waited.catch(() => {}); // awaited below: a failure shows there, not as an uncaught rejection
  // The waiter heartbeats as every client must: a silent session is closed after the 500 ms I/O
  // timeout, and the flood below can last longer. Without this the waiter was closed too
  // (IO_TIMEOUT) and no session was left open, so "the slow session is closed" timed out
  // although the slow session had been closed (it failed so before the perf2 merge as well).
  const keepAlive = setInterval(() => waiter.heartbeat().catch(() => {}), HEARTBEAT_EVERY_MS);
  using _keepAlive = { [Symbol.dispose]: () => clearInterval(keepAlive) };

  const batch = new FrameWriter({ initialBytes: BATCH_HEARTBEATS * 9 });
  for (let i = 0; i < BATCH_HEARTBEATS; i++) {
    batch.push({ type: "heartbeat", requestId: 10 + i });
  }
  const heartbeats = batch.take();
  let sentBytes = 0;
  let writeFailed = false;
  let pendingWrite: Promise<number | "failed"> | null = null;
  const started = performance.now();
  while (
    !writeFailed && performance.now() - started < FLOOD_MS_MAX && engine.stats.sessionsOpen > 1
  ) {
    // A write that blocks (server stopped reading) ends when the server closes.
    pendingWrite ??= slow.write(heartbeats).catch(() => "failed" as const);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const wrote = await Promise.race([
      pendingWrite,
      new Promise<"blocked">((r) => (timer = setTimeout(() => r("blocked"), 200))),
    ]);
    clearTimeout(timer);
    if (wrote === "blocked") continue;
    pendingWrite = null;
    if (wrote === "failed") writeFailed = true; // reset by the server: expected
    else sentBytes += wrote;
    await yieldToTimers();
  }

  await eventually(() => engine.stats.sessionsOpen === 1, "the slow session is closed", 15_000);
  const grant = await waited;
  assert.equal(grant.type, "acquired", "the waiter got the lock the slow reader held");

  // Only the slow client's endings (the waiter's ownership of slow/a is its own).
  const slowAddr = `${hostname}:${(slow.localAddr as Deno.NetAddr).port}`;
  const endings = ts.audit.records().filter((r) =>
    r.event === "release" && String(r.lock).startsWith("slow/") && r.remote_addr === slowAddr
  );
  assert.deepEqual(
    endings.map((r) => [r.lock, r.reason]).sort(),
    [["slow/a", "io_timeout"], ["slow/b", "io_timeout"]],
  );
  const rssGrowthMiB = (Deno.memoryUsage().rss - rssBefore) / 2 ** 20;
  assert.ok(
    rssGrowthMiB < 128,
    `memory grew ${rssGrowthMiB.toFixed(1)} MiB after ${sentBytes} bytes of unread requests`,
  );
  assert.ok(sentBytes > 0 || writeFailed);

  try {
    slow.close();
  } catch { /* closed */ }
  await pendingWrite;
  clearInterval(keepAlive);
  waiter.close();
  await waiter.done;
});
