/**
 * The etcd gateway client's request deadline and latency on a manual clock: a member that
 * accepts the connection and never answers (a frozen etcd) fails a request exactly when the
 * scheduler says the deadline passed, the duration observed is the scheduler's, and later
 * requests go to the next endpoint. No etcd process and no sleep: a loopback listener that reads
 * and says nothing.
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { EtcdError } from "../../src/cluster/etcd.ts";
import { EtcdHttpClient } from "../../src/cluster/etcd_http.ts";
import { eventually } from "../helpers/start_server.ts";

/** A TCP listener on loopback port 0 that accepts, reads and never answers. */
function silentMember(): { url: string; accepted: () => number } & AsyncDisposable {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns: Deno.Conn[] = [];
  const reading: Promise<void>[] = [];
  const accepting = (async () => {
    for await (const conn of listener) {
      conns.push(conn);
      reading.push((async () => {
        const buffer = new Uint8Array(4096);
        try {
          while ((await conn.read(buffer)) !== null) {
            // Swallow the request.
          }
        } catch {
          // Closed by the test.
        }
      })());
    }
  })();
  return {
    url: `http://127.0.0.1:${listener.addr.port}`,
    accepted: () => conns.length,
    async [Symbol.asyncDispose]() {
      listener.close();
      for (const conn of conns) {
        try {
          conn.close();
        } catch {
          // The client closed it.
        }
      }
      await accepting.catch(() => {});
      await Promise.all(reading);
    },
  };
}

Deno.test("etcd client: a request to a member that never answers fails at its deadline on the scheduler, and the next request goes to the next endpoint", async () => {
  await using member = silentMember();
  const scheduler = new ManualScheduler();
  const observed: [string, number, boolean][] = [];
  // The second endpoint is never dialled: the test only reads which endpoint comes next.
  const etcd = new EtcdHttpClient({
    endpoints: [member.url, "http://127.0.0.1:9"],
    requestTimeoutMs: 1_000,
    scheduler,
    observe: (op, seconds, ok) => observed.push([op, seconds, ok]),
  });
  try {
    let settled = false;
    const request = etcd.get("k").then(
      () => "answered",
      (error) => error,
    ).finally(() => settled = true);
    await eventually(() => member.accepted() === 1, "the request reached the member");
    scheduler.advance(999);
    await new Promise((resolve) => setTimeout(resolve, 50)); // real time passes: still waiting
    assert.equal(settled, false);
    assert.equal(scheduler.pendingTimers, 1, "one deadline timer per request");

    scheduler.advance(1);
    const outcome = await request;
    assert.ok(outcome instanceof EtcdError, String(outcome));
    assert.equal(outcome.kind, "unavailable");
    assert.match(outcome.message, /: get: timed out$/);
    assert.deepEqual(observed, [["get", 1, false]], "the latency is the scheduler's");
    assert.equal(etcd.currentEndpoint, "http://127.0.0.1:9");
    assert.equal(scheduler.pendingTimers, 0);
  } finally {
    etcd.close();
  }
});

Deno.test("etcd client: health measures each endpoint's time on the scheduler and times out there", async () => {
  await using member = silentMember();
  const scheduler = new ManualScheduler();
  const etcd = new EtcdHttpClient({ endpoints: [member.url], requestTimeoutMs: 5_000, scheduler });
  try {
    const health = etcd.health({ timeoutMs: 300 });
    await eventually(() => member.accepted() === 1, "the probe reached the member");
    scheduler.advance(300);
    assert.deepEqual(await health, [{
      endpoint: member.url,
      healthy: false,
      tookMs: 300,
      error: "timed out",
    }]);
  } finally {
    etcd.close();
  }
});

Deno.test("etcd client: close() cancels the deadline timers of requests nobody awaits", async () => {
  await using member = silentMember();
  const scheduler = new ManualScheduler();
  const etcd = new EtcdHttpClient({ endpoints: [member.url], requestTimeoutMs: 1_000, scheduler });
  const revoke = etcd.revokeLease("7").catch((error) => error);
  await eventually(() => member.accepted() === 1, "the request reached the member");
  assert.equal(scheduler.pendingTimers, 1);
  etcd.close();
  assert.equal(scheduler.pendingTimers, 0);
  const error = await revoke;
  assert.ok(error instanceof EtcdError && error.kind === "unavailable", String(error));
  assert.match(error.message, /aborted/);
});
