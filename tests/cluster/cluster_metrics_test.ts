/**
 * The metrics of cluster mode on a real scrape: every cluster family of the operations kit is
 * exposed with the label values the alerts rely on, and the values say who leads; the single
 * node exposes none of them (tests/deploy/exposition_test.ts covers its families).
 */

import assert from "node:assert/strict";
import { http } from "../admin/admin_helpers.ts";
import {
  CLUSTER_FAMILIES,
  CLUSTER_LABEL_VALUES,
  familiesInExposition,
} from "../deploy/metric_names.ts";
import { startEtcdCluster } from "../helpers/cluster_fixture.ts";
import { skipWithoutEtcd } from "../helpers/etcd.ts";
import { hasPromtool, promtoolCheckMetrics } from "../helpers/promtool.ts";
import { startTestServer } from "../helpers/start_server.ts";

const options = { ignore: skipWithoutEtcd, sanitizeOps: true, sanitizeResources: true };

function sample(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(series + " "));
  assert.ok(line !== undefined, `${series} is not exposed`);
  return Number(line.slice(series.length + 1));
}

Deno.test({
  name:
    "cluster metrics: every cluster family is exposed, and the values tell the leader from a standby",
  ...options,
  fn: async () => {
    await using servers = await startEtcdCluster({ nodes: 2 });
    const { leader, standbys: [standby] } = await servers.waitLeaderKnown();
    // A keep-alive or two has been confirmed.
    await new Promise((r) => setTimeout(r, 800));
    const scrape = async (addr: string) => (await http(addr, "GET", "/metrics")).text;
    const text = await scrape(leader.server.opsAddr!);
    const families = familiesInExposition(text);
    assert.deepEqual(CLUSTER_FAMILIES.filter((f) => !families.has(f)), []);
    for (const [family, labels] of Object.entries(CLUSTER_LABEL_VALUES)) {
      for (const [label, values] of Object.entries(labels)) {
        for (const value of values) {
          assert.ok(
            text.includes(`${family}{${label}="${value}"}`),
            `${family}{${label}="${value}"}`,
          );
        }
      }
    }
    assert.equal(sample(text, 'lockd_cluster_role{role="leader"}'), 1);
    assert.equal(sample(text, "lockd_cluster_serving"), 1);
    assert.equal(sample(text, "lockd_cluster_term"), leader.server.context.cluster!.term);
    assert.ok(sample(text, "lockd_cluster_token_high_water") > 0);
    assert.ok(sample(text, "lockd_cluster_safe_until_seconds") > 1);
    assert.ok(sample(text, 'lockd_etcd_request_seconds_count{op="keepalive"}') >= 1);
    assert.equal(sample(text, "lockd_cluster_leader_changes_total"), 1);

    const other = await scrape(standby.server.opsAddr!);
    assert.equal(sample(other, 'lockd_cluster_role{role="standby"}'), 1);
    assert.equal(sample(other, "lockd_cluster_serving"), 0);
    assert.equal(sample(other, "lockd_cluster_term"), 0);

    if (await hasPromtool()) {
      const { code, report } = await promtoolCheckMetrics(text);
      assert.equal(code, 0, report);
      assert.equal(report.trim(), "", report);
    }
  },
});

Deno.test("a single node exposes no cluster family", async () => {
  await using t = await startTestServer({ opsListen: "127.0.0.1:0" });
  const text = (await http(t.server.opsAddr!, "GET", "/metrics")).text;
  const families = familiesInExposition(text);
  assert.deepEqual(CLUSTER_FAMILIES.filter((f) => families.has(f)), []);
});
