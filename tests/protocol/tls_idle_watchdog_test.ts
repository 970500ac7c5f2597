/**
 * Issue 19 item 1: an idle TLS or mTLS listener must not raise a false alarm. The accept
 * watchdog probes the listener once a second while no client comes; its probe is accepted
 * before `connect()` returns the probe's port, and was taken for a client (counted in
 * `lockd_connections_accepted_total`), never recognised, and so the listener was declared stuck
 * (`lockd_accept_errors_total` +1, `listening again`) every few seconds.
 *
 * A simulated minute on the ManualScheduler, in steps that leave the real sockets time to move.
 * That the watchdog still re-listens a listener that really stopped accepting is proven by
 * tests/faults/tls_flood_test.ts (descriptor exhaustion on a real `lockd serve`).
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { ACCEPT_PROBE_INTERVAL_MS } from "../../src/limits.ts";
import { connect } from "../../mod.ts";
import { clientTls, serverTlsConfig } from "../fixtures/tls/certs.ts";
import { captureDiagnosticLog } from "../log/capture.ts";
import { http } from "../admin/admin_helpers.ts";
import { startTestServer, type TestServer } from "../helpers/start_server.ts";

async function sample(t: TestServer, name: string): Promise<number> {
  const answer = await http(t.server.opsAddr!, "GET", "/metrics");
  const line = answer.text.split("\n").find((l) => l.startsWith(`${name} `));
  assert.ok(line !== undefined, `${name} is exposed`);
  return Number(line.slice(name.length + 1));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

for (const mtls of [false, true]) {
  const kind = mtls ? "mTLS" : "TLS";
  Deno.test(`an idle ${kind} listener gets no accept error and no re-listen in a simulated minute`, async () => {
    using log = captureDiagnosticLog("debug", "json");
    const scheduler = new ManualScheduler();
    await using t = await startTestServer(
      { ...serverTlsConfig(mtls), opsListen: "127.0.0.1:0" },
      { scheduler },
    );
    const accepted0 = await sample(t, "lockd_connections_accepted_total");
    const errors0 = await sample(t, "lockd_accept_errors_total");
    for (let ms = 0; ms < 60_000; ms += 100) {
      scheduler.advance(100);
      await sleep(2);
    }
    const records = log.records();
    const alarms = records.filter((r) =>
      /listening again|stopped accepting|cannot listen again|accept check failed/.test(
        String(r.message),
      )
    );
    assert.deepEqual(alarms, []);
    // The watchdog did probe (not a vacuous minute): about one probe a second, each accepted.
    const probes = records.filter((r) =>
      r.message === "accept check: the listener accepted its probe"
    );
    assert.ok(probes.length >= 60_000 / ACCEPT_PROBE_INTERVAL_MS / 2, `${probes.length} probes`);
    assert.equal(await sample(t, "lockd_accept_errors_total"), errors0);
    assert.equal(await sample(t, "lockd_connections_accepted_total"), accepted0);
    assert.equal(t.server.context.counters.protocolConnectionsOpen, 0);

    // The listener still serves, on the port it was bound to at the start.
    await using client = await connect({
      addr: t.addr,
      tls: mtls ? clientTls("client-uri") : clientTls(),
      reconnect: false,
    });
    const lock = await client.acquire("idle/after");
    await lock.release();
    assert.equal(await sample(t, "lockd_connections_accepted_total"), accepted0 + 1);
  });
}
