/**
 * The standby's probe of the leader named in etcd, on a manual clock: a live lockd (plain and
 * TLS) is alive, a process that accepts and never answers (SIGSTOP) is not once the scheduler's
 * timeout passes, and a closed port is not at once. Real loopback listeners, no sleep.
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { leaderProbe } from "../../src/cluster/leader_probe.ts";
import { serverTlsConfig } from "../fixtures/tls/certs.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

/** A loopback listener that accepts and reads, and never writes a byte: a frozen process. */
function frozenProcess(): { addr: string; accepted: () => number } & AsyncDisposable {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of listener) conns.push(conn);
  })();
  return {
    addr: `127.0.0.1:${listener.addr.port}`,
    accepted: () => conns.length,
    async [Symbol.asyncDispose]() {
      listener.close();
      for (const conn of conns) conn.close();
      await accepting.catch(() => {});
    },
  };
}

/** `promise`'s value, or "still pending" after `ms` of real time. */
async function withinRealMs<T>(promise: Promise<T>, ms: number): Promise<T | "still pending"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"still pending">((resolve) => {
    timer = setTimeout(() => resolve("still pending"), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

for (const tls of [false, true]) {
  Deno.test(`leader probe (${tls ? "TLS" : "plain"}): a process that accepts and never answers is dead when the scheduler's timeout passes, not before`, async () => {
    await using frozen = frozenProcess();
    const scheduler = new ManualScheduler();
    let settled = false;
    const alive = leaderProbe(tls, scheduler)(frozen.addr, 10_000).finally(() => settled = true);
    await eventually(() => frozen.accepted() === 1, "the probe connected");
    scheduler.advance(9_999);
    await new Promise((resolve) => setTimeout(resolve, 50)); // real time passes: still waiting
    assert.equal(settled, false);
    scheduler.advance(1);
    assert.equal(await withinRealMs(alive, 2_000), false, "dead as soon as the scheduler says");
    assert.equal(scheduler.pendingTimers, 0);
  });

  Deno.test(`leader probe (${tls ? "TLS" : "plain"}): a live lockd answers within the timeout, and no timer is left`, async () => {
    await using t = await startTestServer(tls ? serverTlsConfig(false) : {});
    const scheduler = new ManualScheduler();
    assert.equal(await leaderProbe(tls, scheduler)(t.addr, 500), true);
    assert.equal(scheduler.pendingTimers, 0);
  });
}

Deno.test("leader probe: a closed port is dead at once, without the timeout", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const addr = `127.0.0.1:${listener.addr.port}`;
  listener.close();
  const scheduler = new ManualScheduler();
  assert.equal(await leaderProbe(false, scheduler)(addr, 500), false);
  assert.equal(scheduler.pendingTimers, 0);
});

Deno.test("leader probe (plain): a lockd that refuses the HELLO (shutting down, a planned hand-over) is no leader to send clients to", async () => {
  await using t = await startTestServer({});
  t.server.context.service.beginShutdown();
  const scheduler = new ManualScheduler();
  assert.equal(await leaderProbe(false, scheduler)(t.addr, 500), false);
  assert.equal(scheduler.pendingTimers, 0);
});
