/**
 * Issue 9.11: with a non-default -max-frame-bytes, a wait timeout or a lease expiry on a
 * 1,024-byte lock name threw a RangeError in a timer and killed the server. The smallest frame
 * limit is now the largest frame the server sends (an ERROR with a longest name and message),
 * checked at start-up, and a frame that still cannot be encoded never escapes a callback.
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { ConfigError } from "../../src/config.ts";
import { FRAME_BYTES_MAX_MIN, LOCK_NAME_BYTES_MAX } from "../../src/limits.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { DeadlineTimer } from "../../src/service/deadline_timer.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { startTestServer } from "../helpers/start_server.ts";
import { captureDiagnosticLog } from "../log/capture.ts";

Deno.test("a frame limit below the largest frame the server sends is refused at start-up", async () => {
  for (const frameBytesMax of [1088, 2200 - 143, FRAME_BYTES_MAX_MIN - 1]) {
    await assert.rejects(
      startTestServer({ frameBytesMax }),
      (error: unknown) =>
        error instanceof ConfigError &&
        error.message === `-max-frame-bytes must be between ${FRAME_BYTES_MAX_MIN} and 65536`,
    );
  }
});

Deno.test("at the smallest frame limit, a wait timeout and a lease expiry on a 1,024-byte name reach their clients and the server keeps serving", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer({ frameBytesMax: FRAME_BYTES_MAX_MIN }, { scheduler });
  const name = "锁".repeat(341) + "n"; // 1,024 UTF-8 bytes: the longest message quotes it
  assert.equal(new TextEncoder().encode(name).length, LOCK_NAME_BYTES_MAX);
  await using a = await RawClient.session(t.addr);
  await using b = await RawClient.session(t.addr);
  await a.send({ type: "acquire", requestId: 1, name, leaseMs: 300, waitMs: 0 });
  assert.equal((await a.next())?.type, "acquired");
  await b.send({ type: "acquire", requestId: 1, name, leaseMs: 60_000, waitMs: 100 });
  assert.equal((await b.next())?.type, "queued");
  scheduler.advance(100);
  const timedOut = await b.next();
  assert.ok(timedOut?.type === "error" && timedOut.code === WIRE_CODES.WAIT_TIMEOUT.code);
  assert.equal(timedOut.name, name);
  scheduler.advance(200);
  const expired = await a.next();
  assert.ok(expired?.type === "error" && expired.code === WIRE_CODES.LEASE_EXPIRED.code);
  assert.equal(expired.name, name);
  // An invalid, longer name echoed in its ERROR is cut to fit the frame limit.
  const long = "x".repeat(FRAME_BYTES_MAX_MIN - 20);
  await a.send({ type: "acquire", requestId: 2, name: long, leaseMs: 0, waitMs: 0 });
  const refused = await a.next();
  assert.ok(refused?.type === "error" && refused.code === WIRE_CODES.INVALID_ARGUMENT.code);
  assert.ok(long.startsWith(refused.name.slice(0, -1)) && refused.name.endsWith("…"));
  await a.send({ type: "heartbeat", requestId: 3 });
  assert.deepEqual(await a.next(), { type: "heartbeat_ack", requestId: 3, renewed: 0 });
});

Deno.test("an error in the deadline timer's callback is logged and the timer keeps working", () => {
  using log = captureDiagnosticLog("error", "json");
  const scheduler = new ManualScheduler();
  let calls = 0;
  const timer = new DeadlineTimer(scheduler, () => {
    calls++;
    if (calls === 1) throw new RangeError("Cannot encode error message: frame too long");
  });
  timer.arm(scheduler.monotonicMs() + 10);
  scheduler.advance(10); // would throw out of the timer without the guard
  assert.equal(calls, 1);
  assert.ok(log.records().some((r) => r.message === "deadline handling failed"));
  timer.arm(scheduler.monotonicMs() + 10);
  scheduler.advance(10);
  assert.equal(calls, 2);
  timer.stop();
});
