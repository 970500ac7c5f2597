/**
 * The metric families of cluster mode (`-cluster-etcd`); a single node exposes none of them.
 * Labelled families are complete from the start (every role, reason and etcd operation has a
 * sample), so alerts work before the first event.
 *
 * @module
 */

import { ETCD_OPS } from "../cluster/etcd_http.ts";
import { CLUSTER_ROLES, STEP_DOWN_REASONS } from "../cluster/leadership.ts";
import type { ClusterView } from "../server/view.ts";
import type { MetricFamily } from "./prometheus.ts";

export function clusterFamilies(cluster: ClusterView, nowMs: number): MetricFamily[] {
  return [
    ...leadershipFamilies(cluster, nowMs),
    ...recordFamilies(cluster),
    ...takeoverFamilies(cluster, nowMs),
    ...etcdFamilies(cluster.stats),
  ];
}

/** Milestone 2: the ownership records. */
function recordFamilies(cluster: ClusterView): MetricFamily[] {
  const ownership = cluster.ownership;
  const records = ownership.recordStats;
  return [
    {
      name: "lockd_cluster_records",
      help: "Ownership records in etcd as this node knows them (0 when it does not lead).",
      type: "gauge",
      samples: [{ value: records.records }],
    },
    {
      name: "lockd_cluster_record_commits_total",
      help: "Record writes committed, by kind (held: W1, floor: W2, delete: W3).",
      type: "counter",
      samples: RECORD_COMMIT_KINDS.map((kind) => ({
        labels: { kind },
        value: records.commits[kind],
      })),
    },
    {
      name: "lockd_cluster_record_commit_seconds",
      help: "Record transactions, from first send to commit.",
      type: "summary",
      samples: [
        { suffix: "_sum", value: records.commitSecondsSum },
        { suffix: "_count", value: records.commitSecondsCount },
      ],
    },
    {
      name: "lockd_cluster_record_batch_ops",
      help: "Operations per committed record transaction.",
      type: "summary",
      samples: [
        { suffix: "_sum", value: records.batchOpsSum },
        { suffix: "_count", value: records.batchOpsCount },
      ],
    },
    {
      name: "lockd_cluster_grants_waiting_commit",
      help: "Grants whose ACQUIRED waits for a record to commit.",
      type: "gauge",
      samples: [{ value: records.grantsWaitingCommit }],
    },
  ];
}

/** Milestone 2: the takeover and the reclaim window. */
function takeoverFamilies(cluster: ClusterView, nowMs: number): MetricFamily[] {
  const ownership = cluster.ownership;
  const takeover = ownership.takeoverStats;
  const window = cluster.serving ? ownership.window : null;
  return [
    {
      name: "lockd_cluster_reserved_locks",
      help: "Locks this node keeps reserved for reclaims after a fail-over.",
      type: "gauge",
      samples: [{ value: window === null ? 0 : ownership.reservedLocks() }],
    },
    {
      name: "lockd_cluster_reclaim_window_seconds",
      help: "Seconds until this node's reclaim window ends (0 when none is open).",
      type: "gauge",
      samples: [{ value: window === null ? 0 : Math.max(0, (window.endsAtMs - nowMs) / 1000) }],
    },
    {
      name: "lockd_cluster_takeover_seconds",
      help: "Takeovers by this node, by phase: load (reading the records), window (serving to " +
        "the window's end).",
      type: "summary",
      samples: [
        { suffix: "_sum", labels: { phase: "load" }, value: takeover.loadSecondsSum },
        { suffix: "_count", labels: { phase: "load" }, value: takeover.loadCount },
        { suffix: "_sum", labels: { phase: "window" }, value: takeover.windowSecondsSum },
        { suffix: "_count", labels: { phase: "window" }, value: takeover.windowCount },
      ],
    },
  ];
}

const RECORD_COMMIT_KINDS = ["held", "floor", "delete"] as const;

/** The node's role, term, step-downs, pauses, lease and token mark. */
function leadershipFamilies(cluster: ClusterView, nowMs: number): MetricFamily[] {
  const stats = cluster.stats;
  const role = cluster.role;
  const safeUntilMs = cluster.leadership.safeUntilMs;
  return [
    {
      name: "lockd_cluster_role",
      help: "1 for this node's role in the cluster (leader serves; paused leads but must not act).",
      type: "gauge",
      samples: CLUSTER_ROLES.map((r) => ({ labels: { role: r }, value: r === role ? 1 : 0 })),
    },
    {
      name: "lockd_cluster_serving",
      help: "1 while this node is the leader and grants (the one /readyz answers 200 on).",
      type: "gauge",
      samples: [{ value: cluster.serving ? 1 : 0 }],
    },
    {
      name: "lockd_cluster_term",
      help: "The term this node leads (create revision of the leader key in etcd), 0 when none.",
      type: "gauge",
      samples: [{ value: cluster.term }],
    },
    {
      name: "lockd_cluster_leader_changes_total",
      help: "Times this node saw a new leader term (its own elections included).",
      type: "counter",
      samples: [{ value: stats.leaderChangesTotal }],
    },
    {
      name: "lockd_cluster_step_downs_total",
      help: "Times this node stopped leading, by reason.",
      type: "counter",
      samples: STEP_DOWN_REASONS.map((reason) => ({
        labels: { reason },
        value: stats.stepDowns[reason],
      })),
    },
    {
      name: "lockd_cluster_pause_seconds",
      help:
        "Pauses of the leader (its etcd lease not confirmed in time), until resumed or stepped down.",
      type: "summary",
      samples: [
        { suffix: "_sum", value: stats.pauseSecondsSum },
        { suffix: "_count", value: stats.pauseCount },
      ],
    },
    {
      name: "lockd_cluster_safe_until_seconds",
      help:
        "Seconds until this node's etcd lease may run out (negative: past; -1e9 without a lease).",
      type: "gauge",
      samples: [{
        value: Number.isFinite(safeUntilMs) ? (safeUntilMs - nowMs) / 1000 : -1e9,
      }],
    },
    {
      name: "lockd_cluster_token_high_water",
      help: "The fencing-token mark this node reserved in etcd for its term (0 when not leading).",
      type: "gauge",
      samples: [{ value: cluster.term === 0 ? 0 : cluster.tokens.reservedThrough }],
    },
  ];
}

/** The requests to etcd, by operation. */
function etcdFamilies(stats: ClusterView["stats"]): MetricFamily[] {
  const etcd = (op: string) => stats.etcd.get(op) ?? { count: 0, failures: 0, secondsSum: 0 };
  return [
    {
      name: "lockd_etcd_request_seconds",
      help: "Duration of requests to etcd, by operation (answered or not).",
      type: "summary",
      samples: ETCD_OPS.flatMap((op) => [
        { suffix: "_sum", labels: { op }, value: etcd(op).secondsSum },
        { suffix: "_count", labels: { op }, value: etcd(op).count },
      ]),
    },
    {
      name: "lockd_etcd_request_failures_total",
      help: "Requests to etcd that failed (no answer, or an error), by operation.",
      type: "counter",
      samples: ETCD_OPS.map((op) => ({ labels: { op }, value: etcd(op).failures })),
    },
  ];
}
