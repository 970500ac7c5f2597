/**
 * `lockd health -wait` in-process on a manual clock: it probes again every HEALTH_RETRY_MS of
 * the scheduler's time (never on its own), and gives up when `-wait` has passed on it. The ops
 * listener is a real HTTP server on loopback port 0 that answers 503 until told otherwise.
 */

import assert from "node:assert/strict";
import { healthCommand } from "../../src/cli/health.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { HEALTH_RETRY_MS } from "../../src/limits.ts";
import { eventually } from "../helpers/start_server.ts";

function opsListener(): { addr: string; probes: () => number; healthy: boolean } & AsyncDisposable {
  let probes = 0;
  const state = {
    healthy: false,
    probes: () => probes,
    addr: "",
    async [Symbol.asyncDispose]() {
      await server.shutdown();
    },
  };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, () => {
    probes++;
    return state.healthy ? new Response("ok\n") : new Response("shutting down\n", { status: 503 });
  });
  state.addr = `127.0.0.1:${server.addr.port}`;
  return state;
}

/** Lets a probe that is due reach the listener and come back, in real time. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 100));

Deno.test("lockd health -wait probes again on the scheduler's time only, and succeeds once the listener is healthy", async () => {
  await using ops = opsListener();
  const scheduler = new ManualScheduler();
  const stderr: string[] = [];
  const status = healthCommand(["-ops", ops.addr, "-wait", "10s"], {
    stderr: (text) => stderr.push(text),
    scheduler,
  });
  await eventually(() => ops.probes() === 1, "the first probe");
  // Longer than the pause between probes in real time: still one probe.
  await new Promise((resolve) => setTimeout(resolve, HEALTH_RETRY_MS + 100));
  assert.equal(ops.probes(), 1, "no second probe before the scheduler moves");
  scheduler.advance(HEALTH_RETRY_MS);
  await eventually(() => ops.probes() === 2, "the second probe");
  ops.healthy = true;
  await settle();
  scheduler.advance(HEALTH_RETRY_MS);
  assert.equal(await status, 0);
  assert.equal(ops.probes(), 3);
  assert.deepEqual(stderr, []);
});

Deno.test("lockd health -wait gives up when -wait has passed on the scheduler", async () => {
  await using ops = opsListener();
  const scheduler = new ManualScheduler();
  const stderr: string[] = [];
  let done = false;
  const status = healthCommand(["-ops", ops.addr, "-wait", "1s"], {
    stderr: (text) => stderr.push(text),
    scheduler,
  }).finally(() => done = true);
  for (let probe = 1; probe <= 1_000 / HEALTH_RETRY_MS; probe++) {
    await eventually(() => ops.probes() === probe, `probe ${probe}`);
    await settle();
    assert.equal(done, false);
    scheduler.advance(HEALTH_RETRY_MS);
  }
  assert.equal(await status, 1);
  assert.equal(ops.probes(), 1_000 / HEALTH_RETRY_MS + 1);
  assert.deepEqual(stderr, [
    `lockd health: not healthy after -wait 1000 ms: the ops listener at ${ops.addr} answered ` +
    `503 "shutting down" (lockd is shutting down)\n`,
  ]);
});
