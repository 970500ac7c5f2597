/**
 * Cluster nodes (leadership, tokens and audit together) on an in-memory etcd with manual time:
 * what each election writes to the audit and diagnostic logs.
 */

import assert from "node:assert/strict";
import type { ManualScheduler } from "../../src/clock.ts";
import { ClusterNode } from "../../src/cluster/cluster_node.ts";
import { AuditLog } from "../../src/log/audit.ts";
import { FAKE_TTL_MS as TTL_MS, fakeCluster } from "../helpers/cluster_fixture.ts";
import type { FakeEtcd } from "../helpers/fake_etcd.ts";
import { MemorySink } from "../helpers/memory_sink.ts";
import { captureDiagnosticLog } from "../log/capture.ts";

function clusterNode(etcd: FakeEtcd, scheduler: ManualScheduler, name: string) {
  const sink = new MemorySink();
  const audit = new AuditLog(sink, { scheduler });
  const node = new ClusterNode({
    etcd: etcd.client(),
    scheduler,
    cluster: "test",
    node: { name, advertise: `${name}:7400`, admin: null },
    ttlMs: TTL_MS,
    audit,
    probe: () => Promise.resolve(true),
  });
  return { node, sink, audit };
}

Deno.test("one election writes one leader_elected record and one elected and one serving line, even when the watch reports the win first", async () => {
  using captured = captureDiagnosticLog("info", "json");
  await using fake = fakeCluster(1_700_000_000_000);
  const { scheduler, etcd } = fake;
  // Answers arrive 5 ms after etcd processed a request, watch events at once: the standby sees
  // its own key on its watch before it reads that its campaign won (a real etcd does either).
  etcd.answerDelayMs = 5;
  const a = clusterNode(etcd, scheduler, "a");
  const b = clusterNode(etcd, scheduler, "b");
  a.node.start();
  await fake.run(200);
  b.node.start();
  await fake.run(200);
  assert.equal(a.node.serving, true);
  assert.equal(b.node.role, "standby");
  // a hands over: b campaigns while its watch runs.
  const handedOver = a.node.handOver();
  await fake.run(300);
  await handedOver;
  assert.equal(b.node.serving, true);
  const term = b.node.term;

  const elected = b.sink.records().filter((r) => r.event === "leader_elected");
  assert.deepEqual(elected.map((r) => r.term), [term]);
  const lines = captured.records().filter((r) => r.node === "b" || r.term === term);
  const messages = lines.map((r) => r.message);
  assert.deepEqual(messages.filter((m) => m === "elected leader"), ["elected leader"]);
  assert.deepEqual(messages.filter((m) => m === "leader serving"), ["leader serving"]);
  assert.deepEqual(
    captured.records().filter((r) => r.level === "WARNING" || r.level === "ERROR"),
    [],
  );
  a.node.close();
  b.node.close();
  await a.audit.close();
  await b.audit.close();
});
