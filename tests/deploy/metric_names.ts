/**
 * Metric names used by the operations kit (deploy/), and helpers to check them.
 *
 * `EXPECTED_FAMILIES` is the list of metric families that lockd's `GET /metrics` must expose,
 * spelled as in the `# TYPE` lines of the Prometheus text format 0.0.4 (counters keep their
 * `_total` suffix; summaries are named without `_sum`/`_count`). The Grafana dashboard and the
 * alert rules may only use these names (tests/deploy/deploy_test.ts), and a server test can
 * compare this list with a real scrape using `familiesInExposition`.
 */

export const EXPECTED_FAMILIES: readonly string[] = [
  // lock service (docs: operator-api.md, "Metrics")
  "lockd_connections_active",
  "lockd_sessions_orphaned", // issue 20: version-2 sessions kept for their client after a reset
  "lockd_connections_open", // issue 13.6: the descriptor figure without --allow-all
  "lockd_locks_held",
  "lockd_waiters",
  "lockd_acquires_total",
  "lockd_handoffs_total", // issue 15: the console's hand-offs/s
  "lockd_acl_denials_total",
  "lockd_releases_total",
  "lockd_protocol_errors_total",
  "lockd_connections_accepted_total",
  "lockd_accept_errors_total",
  "lockd_tls_handshake_errors_total",
  "lockd_heartbeats_total",
  "lockd_wait_seconds",
  "lockd_hold_seconds",
  "lockd_build_info",
  "lockd_audit_backlog_records",
  "lockd_audit_write_failures_total",
  "lockd_audit_records_lost_total",
  // per listener (issue 9 items 5, 6)
  "lockd_listener_accept_errors_total",
  "lockd_http_connections_open",
  "lockd_http_connections_dropped_total",
  "lockd_http_server_restarts_total",
  // TLS handshake admission (issue 9 item 17)
  "lockd_tls_handshakes_started_total",
  "lockd_tls_handshakes_queued",
  "lockd_tls_connections_shed_total",
  // why handshakes fail, by reason (issue 19 item 11)
  "lockd_tls_handshake_failures_total",
  // memory and limits (issue 9 item 13)
  "lockd_limit_refusals_total",
  "lockd_partial_frame_bytes",
  // the diagnostic log never blocks (a standard error nobody reads)
  "lockd_log_lines_dropped_total",
  // lock kinds and lock-delays (issue 22 item 6), reads refused by the ACL (issue 23 item 4)
  "lockd_lock_owners",
  "lockd_lock_delays_total",
  "lockd_lock_delays_active",
  "lockd_acl_read_denials_total",
  // runtime
  "process_resident_memory_bytes",
  "process_start_time_seconds",
  "process_open_fds",
  "deno_heap_used_bytes",
  "deno_heap_total_bytes",
  "deno_event_loop_lag_seconds",
];

/**
 * Families only cluster mode exposes (`-cluster-etcd`): the alerts may use them too, and
 * tests/cluster/cluster_metrics_test.ts checks them against a real scrape of a cluster node.
 */
export const CLUSTER_FAMILIES: readonly string[] = [
  "lockd_cluster_role",
  "lockd_cluster_serving",
  "lockd_cluster_term",
  "lockd_cluster_leader_changes_total",
  "lockd_cluster_step_downs_total",
  "lockd_cluster_pause_seconds",
  "lockd_cluster_safe_until_seconds",
  "lockd_cluster_token_high_water",
  "lockd_etcd_request_seconds",
  "lockd_etcd_request_failures_total",
  // reclaims (issue 20, protocol version 2)
  "lockd_cluster_reclaims_total",
  "lockd_cluster_reclaim_void_total",
  "lockd_cluster_reclaim_conflicts_total",
  "lockd_reclaims_total",
  // ownership records, takeover and reclaim window (issue 20)
  "lockd_cluster_records",
  "lockd_cluster_record_commits_total",
  "lockd_cluster_record_commit_seconds",
  "lockd_cluster_record_batch_ops",
  "lockd_cluster_grants_waiting_commit",
  "lockd_cluster_reserved_locks",
  "lockd_cluster_reclaim_window_seconds",
  "lockd_cluster_takeover_seconds",
];

/** Label values of the cluster families the kit relies on. */
export const CLUSTER_LABEL_VALUES: Readonly<Record<string, Readonly<Record<string, string[]>>>> = {
  lockd_cluster_role: { role: ["starting", "standby", "leader", "paused", "stopped"] },
  lockd_cluster_step_downs_total: {
    reason: ["lease_expired", "key_lost", "deposed", "etcd_unreachable", "shutdown"],
  },
  lockd_etcd_request_failures_total: { op: ["grant", "keepalive", "revoke", "get", "txn"] },
  lockd_cluster_reclaim_void_total: {
    reason: ["window", "floor", "regranted", "ticket", "acl", "limit", "term"],
  },
  lockd_cluster_record_commits_total: { kind: ["held", "floor", "delete"] },
  // A single node exposes exactly the operator spec's label values; cluster mode adds
  // `failover` and 0x11 (NOT_LEADER).
  lockd_releases_total: { reason: ["graceful", "expired", "io_timeout", "force", "failover"] },
  lockd_protocol_errors_total: { code: ["0x02", "0x11"] },
};

/** Label values that the kit relies on, by family and label name. */
export const EXPECTED_LABEL_VALUES: Readonly<Record<string, Readonly<Record<string, string[]>>>> = {
  lockd_releases_total: { reason: ["graceful", "expired", "io_timeout", "force"] },
  lockd_lock_owners: { kind: ["exclusive", "shared", "semaphore"] },
  lockd_audit_records_lost_total: { cause: ["backlog_full", "exit"] },
  lockd_tls_handshake_failures_total: {
    reason: [
      "no_client_certificate",
      "client_certificate_rejected",
      "client_certificate_unusable",
      "server_certificate_rejected",
      "not_tls",
      "timeout",
      "closed",
      "protocol",
    ],
  },
};

/** Suffixes of the samples of a summary (and a histogram) that belong to the base family. */
const SAMPLE_SUFFIXES = ["_sum", "_count", "_bucket"] as const;

const METRIC_RE = /\b(?:lockd|process|deno)_[A-Za-z0-9_]+/g;

/**
 * The family a sample name belongs to: `lockd_wait_seconds_sum` → `lockd_wait_seconds`.
 * Counters keep `_total` (text format 0.0.4 names the family with it).
 */
export function familyOf(sampleName: string): string {
  for (const suffix of SAMPLE_SUFFIXES) {
    if (sampleName.endsWith(suffix) && sampleName.length > suffix.length) {
      return sampleName.slice(0, -suffix.length);
    }
  }
  return sampleName;
}

/**
 * Metric families named in a PromQL expression: identifiers matching
 * `lockd_\w+|process_\w+|deno_\w+`, mapped to their family with `familyOf`. Label names and
 * values inside `{...}` and strings are skipped, so `{reason="expired"}` adds nothing.
 */
export function metricFamilies(expr: string): Set<string> {
  const withoutStrings = expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""');
  const found = new Set<string>();
  for (const match of withoutStrings.matchAll(METRIC_RE)) {
    found.add(familyOf(match[0]));
  }
  return found;
}

/** The families announced by `# TYPE` lines in a `/metrics` response body. */
export function familiesInExposition(text: string): Map<string, string> {
  const families = new Map<string, string>();
  for (const line of text.split("\n")) {
    const m = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)\s*$/.exec(line);
    if (m) families.set(m[1], m[2]);
  }
  return families;
}
