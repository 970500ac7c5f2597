/**
 * The operator spec names the label values of its metrics exactly: `lockd_releases_total{reason}`
 * is graceful, expired, io_timeout or force. A single node exposes exactly those (and no sample for
 * a wire code only cluster mode sends); cluster mode adds `failover` and 0x11 NOT_LEADER, its
 * documented additions (issue 19.4).
 */

import assert from "node:assert/strict";
import { CLUSTER_ONLY_WIRE_CODES, formatWireCode, WIRE_CODES } from "../../src/wire/codes.ts";
import { http } from "../admin/admin_helpers.ts";
import { fakeCluster } from "../helpers/cluster_fixture.ts";
import { startTestServer } from "../helpers/start_server.ts";

/** Every value of `label` in the samples of `family`, in exposition order. */
function labelValues(text: string, family: string, label: string): string[] {
  const values: string[] = [];
  for (const line of text.split("\n")) {
    const m = new RegExp(`^${family}\\{${label}="([^"]*)"\\} `).exec(line);
    if (m !== null) values.push(m[1]);
  }
  return values;
}

const SPEC_REASONS = ["graceful", "expired", "io_timeout", "force"];
const ALL_CODES = Object.values(WIRE_CODES).map((info) => info.code).sort((a, b) => a - b);

Deno.test("a single node exposes exactly the spec's four release reasons and no cluster-only wire code", async () => {
  await using t = await startTestServer({ opsListen: "127.0.0.1:0" });
  const text = (await http(t.server.opsAddr!, "GET", "/metrics")).text;
  assert.deepEqual(labelValues(text, "lockd_releases_total", "reason"), SPEC_REASONS);
  assert.match(
    text,
    /^# HELP lockd_releases_total Ended ownerships by reason \(graceful, expired, io_timeout, force\)\.$/m,
  );
  assert.deepEqual(
    labelValues(text, "lockd_protocol_errors_total", "code"),
    ALL_CODES.filter((code) => !CLUSTER_ONLY_WIRE_CODES.has(code)).map(formatWireCode),
  );
  assert.ok(!text.includes('code="0x11"'));
});

Deno.test("a cluster node adds failover and 0x11 NOT_LEADER", async () => {
  await using fake = fakeCluster(1_700_000_000_000);
  const t = await fake.server("n1", { opsListen: "127.0.0.1:0" });
  const text = (await http(t.server.opsAddr!, "GET", "/metrics")).text;
  assert.deepEqual(labelValues(text, "lockd_releases_total", "reason"), [
    ...SPEC_REASONS,
    "failover",
  ]);
  assert.deepEqual(
    labelValues(text, "lockd_protocol_errors_total", "code"),
    ALL_CODES.map(formatWireCode),
  );
  assert.deepEqual([...CLUSTER_ONLY_WIRE_CODES], [WIRE_CODES.NOT_LEADER.code]);
});
