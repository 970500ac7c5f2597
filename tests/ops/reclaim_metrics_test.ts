/**
 * The reclaim families (cluster mode, protocol version 2): every label value from the start, and
 * the service's and the engine's counters as they are.
 */

import assert from "node:assert/strict";
import { reclaimFamilies } from "../../src/ops/reclaim_metrics.ts";
import { encodePrometheus } from "../../src/ops/prometheus.ts";
import type { ServerView } from "../../src/server/view.ts";
import type { ReclaimStats } from "../../src/service/reclaims.ts";

Deno.test("reclaim metrics: kind × outcome, every void reason, conflicts and restored ownerships", () => {
  const reclaims: ReclaimStats = {
    resumes: { moved: 1, reclaim: 2, none: 3 },
    reclaims: { owned: { kept: 4, void: 5 }, queued: { kept: 6, void: 7 } },
    voids: { window: 1, floor: 2, regranted: 3, ticket: 4, acl: 5, limit: 6, term: 7 },
    conflicts: 8,
  };
  const server = {
    reclaims,
    engine: { stats: { reclaimsTotal: 9 } },
  } as unknown as ServerView;
  const text = encodePrometheus(reclaimFamilies(server));
  for (
    const line of [
      'lockd_cluster_reclaims_total{kind="owned",outcome="kept"} 4',
      'lockd_cluster_reclaims_total{kind="owned",outcome="void"} 5',
      'lockd_cluster_reclaims_total{kind="queued",outcome="kept"} 6',
      'lockd_cluster_reclaims_total{kind="queued",outcome="void"} 7',
      'lockd_cluster_reclaim_void_total{reason="window"} 1',
      'lockd_cluster_reclaim_void_total{reason="term"} 7',
      "lockd_cluster_reclaim_conflicts_total 8",
      "lockd_reclaims_total 9",
    ]
  ) {
    assert.ok(text.includes(`\n${line}\n`), line);
  }
  assert.equal(text.match(/^lockd_cluster_reclaim_void_total\{/gm)?.length, 7);
});
