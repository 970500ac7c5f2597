/**
 * A slowloris on the admin port (issue 9 item 6): its connections are bounded
 * per listener, the ops port keeps answering /healthz at once (its own
 * budget), and a new admin request still gets in (the oldest connection that
 * never completed a request is evicted for it).
 */

import assert from "node:assert/strict";
import { start } from "../admin/admin_helpers.ts";
import { RawHttp } from "../helpers/raw_http.ts";
import { eventually } from "../helpers/start_server.ts";

Deno.test("a slowloris on the admin port is capped per listener; /healthz on the ops port and new admin requests are answered", async () => {
  const cap = 8;
  await using t = await start({ httpConnectionsMax: cap });
  const counters = t.server.context.counters;
  const slow: RawHttp[] = [];
  try {
    for (let i = 0; i < 30; i++) {
      const c = await RawHttp.connect(t.server.adminAddr!);
      await c.send("GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
      slow.push(c);
    }
    await eventually(() => counters.http.admin.dropped.evicted >= 30 - cap, "evictions");
    assert.equal(counters.http.admin.open, cap);

    const started = performance.now();
    const healthz = await fetch(`http://${t.server.opsAddr}/healthz`);
    assert.equal(await healthz.text(), "ok");
    assert.ok(performance.now() - started < 1_000, "healthz answered at once");

    const info = await fetch(`http://${t.server.adminAddr}/api/info`);
    assert.equal(info.status, 200);
    await info.body?.cancel();

    // The oldest slowloris connections are the ones that were closed, by the server.
    let closed = 0;
    for (const c of slow) if (await c.closedWithin(20)) closed++;
    assert.ok(closed >= 30 - cap, `${closed} slow connections closed`);
  } finally {
    for (const c of slow) c.close();
  }
});
