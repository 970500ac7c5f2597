/**
 * The metric families of `GET /metrics`, read at scrape time from the
 * engine's stats, the adapters' counters and the runtime probe, so every
 * value is exact and nothing is updated on the hot path twice.
 *
 * Labelled counters are complete from the start: every release reason and
 * every wire code of `WIRE_CODES` has a sample (0 until it happens), so
 * `rate()` and alert expressions work before the first event.
 *
 * @module
 */

import { END_REASONS, type LockKind, SINGLE_NODE_END_REASONS } from "../core/types.ts";
import { AUDIT_LOSS_CAUSES } from "../log/audit.ts";
import { diagnosticLinesDropped } from "../log/diagnostic.ts";
import { CLUSTER_ONLY_WIRE_CODES, formatWireCode, WIRE_CODES } from "../wire/codes.ts";
import type { ServerView } from "../server/view.ts";
import { clusterFamilies } from "./cluster_metrics.ts";
import { LIMIT_NAMES } from "../counters.ts";
import { listenerFamilies } from "./listener_metrics.ts";
import { reclaimFamilies } from "./reclaim_metrics.ts";
import type { MetricFamily } from "./prometheus.ts";
import type { RuntimeSample } from "./runtime.ts";

/** Everything a scrape reads. */
export interface MetricsSource {
  readonly server: ServerView;
  readonly runtime: RuntimeSample;
}

/** Label values of `lockd_lock_owners{kind}`, every one from the start. */
const LOCK_KINDS: readonly LockKind[] = ["exclusive", "shared", "semaphore"];

function gauge(name: string, help: string, value: number): MetricFamily {
  return { name, help, type: "gauge", samples: [{ value }] };
}

function counter(name: string, help: string, value: number): MetricFamily {
  return { name, help, type: "counter", samples: [{ value }] };
}

function summary(name: string, help: string, sum: number, count: number): MetricFamily {
  return {
    name,
    help,
    type: "summary",
    samples: [{ suffix: "_sum", value: sum }, { suffix: "_count", value: count }],
  };
}

/** The families in exposition order: lock service first, then runtime, then build info. */
export function collectMetrics({ server, runtime }: MetricsSource): MetricFamily[] {
  const stats = server.engine.stats;
  const counters = server.counters;
  return [
    ...lockFamilies(stats, counters),
    ...outcomeFamilies(stats, counters, server.cluster !== null),
    ...listenerFamilies(counters),
    ...durationFamilies(stats),
    ...auditFamilies(server.audit),
    ...runtimeFamilies(runtime),
    ...(server.cluster === null
      ? []
      : clusterFamilies(server.cluster, server.scheduler.monotonicMs())),
    ...(server.cluster === null ? [] : reclaimFamilies(server)),
    {
      name: "lockd_build_info",
      help: "Build information; the value is always 1.",
      type: "gauge",
      samples: [{ labels: { version: server.version }, value: 1 }],
    },
  ];
}

type Stats = ServerView["engine"]["stats"];
type Counters = ServerView["counters"];

/** Sessions, locks, waiters, grants and the refusals on the way. */
function lockFamilies(stats: Stats, counters: Counters): MetricFamily[] {
  return [
    gauge("lockd_connections_active", "Open sessions.", stats.sessionsOpen),
    gauge(
      "lockd_sessions_orphaned",
      "Version-2 sessions whose connection ended without GOODBYE, keeping their ownerships " +
        "until their leases end or a RESUME moves them.",
      stats.sessionsOrphaned,
    ),
    gauge(
      "lockd_connections_open",
      "Protocol connections open now, in any state (TLS handshake, before HELLO, session).",
      counters.protocolConnectionsOpen,
    ),
    gauge("lockd_locks_held", "Locks that have an owner now (at least one).", stats.locksHeld),
    {
      name: "lockd_lock_owners",
      help: "Owners now, by the kind of their lock (exclusive, shared, semaphore).",
      type: "gauge",
      samples: LOCK_KINDS.map((kind) => ({ labels: { kind }, value: stats.owners[kind] })),
    },
    gauge("lockd_waiters", "Waiting claims across all queues.", stats.waiters),
    counter(
      "lockd_acquires_total",
      "Granted ownerships (issued fencing tokens).",
      stats.acquiresTotal,
    ),
    counter(
      "lockd_handoffs_total",
      "Ownerships granted to a claim that waited in a queue (the lock passed to the next waiter).",
      stats.handoffsTotal,
    ),
    counter("lockd_acl_denials_total", "ACQUIREs refused by the ACL.", counters.aclDenials),
    counter(
      "lockd_acl_read_denials_total",
      "Reads (QUERY, WATCH) refused by the ACL.",
      counters.aclReadDenials,
    ),
    counter(
      "lockd_lock_delays_total",
      "Lock-delays started (a lock rule's delay after a non-graceful end of an ownership).",
      stats.lockDelaysTotal,
    ),
    gauge(
      "lockd_lock_delays_active",
      "Locks under a lock-delay now (nothing is granted on them until it ends).",
      stats.lockDelaysActive,
    ),
    {
      name: "lockd_limit_refusals_total",
      help: "Requests refused and connections closed because a limit was reached, by limit.",
      type: "counter",
      samples: LIMIT_NAMES.map((limit) => ({
        labels: { limit },
        value: counters.limitRefusals[limit],
      })),
    },
    counter(
      "lockd_log_lines_dropped_total",
      "Diagnostic log lines dropped because standard error did not take them.",
      diagnosticLinesDropped(),
    ),
    gauge(
      "lockd_partial_frame_bytes",
      "Bytes held for unfinished frames larger than any valid request, all connections.",
      counters.partialFrameBytes,
    ),
  ];
}

/**
 * How ownerships ended and which errors were sent, then connections and heartbeats. Label
 * values: a single node exposes exactly those of the operator spec; cluster mode adds its own
 * (reason `failover`, code 0x11 NOT_LEADER), documented as its additions.
 */
function outcomeFamilies(stats: Stats, counters: Counters, clusterMode: boolean): MetricFamily[] {
  const endReasons = clusterMode ? END_REASONS : SINGLE_NODE_END_REASONS;
  const errorCounts = new Map<number, number>();
  for (const info of Object.values(WIRE_CODES)) {
    if (clusterMode || !CLUSTER_ONLY_WIRE_CODES.has(info.code)) errorCounts.set(info.code, 0);
  }
  for (const [code, count] of counters.protocolErrors) errorCounts.set(code, count);
  return [
    {
      name: "lockd_releases_total",
      help: `Ended ownerships by reason (${endReasons.join(", ")}).`,
      type: "counter",
      samples: endReasons.map((reason) => ({
        labels: { reason },
        value: stats.releasesTotal[reason],
      })),
    },
    {
      name: "lockd_protocol_errors_total",
      help: "ERROR messages sent, by wire code.",
      type: "counter",
      samples: [...errorCounts].sort(([a], [b]) => a - b).map(([code, value]) => ({
        labels: { code: formatWireCode(code) },
        value,
      })),
    },
    counter(
      "lockd_connections_accepted_total",
      "Accepted protocol connections.",
      counters.connectionsAccepted,
    ),
    counter(
      "lockd_accept_errors_total",
      "Failed accepts on every listener, including descriptor-exhaustion back-off.",
      counters.acceptErrors,
    ),
    counter(
      "lockd_tls_handshake_errors_total",
      "Failed TLS handshakes.",
      counters.tlsHandshakeErrors,
    ),
    counter("lockd_heartbeats_total", "Handled HEARTBEAT messages.", stats.heartbeatsTotal),
  ];
}

/** How long claims waited and ownerships lasted. */
function durationFamilies(stats: Stats): MetricFamily[] {
  return [
    summary(
      "lockd_wait_seconds",
      "Time from ACQUIRE to ACQUIRED.",
      stats.waitSecondsSum,
      stats.waitSecondsCount,
    ),
    summary(
      "lockd_hold_seconds",
      "Duration of ownerships.",
      stats.holdSecondsSum,
      stats.holdSecondsCount,
    ),
  ];
}

/** The audit log's backlog, failures and losses. */
function auditFamilies(audit: ServerView["audit"]): MetricFamily[] {
  return [
    gauge(
      "lockd_audit_backlog_records",
      "Audit records not yet written (queued or in the write in flight).",
      audit.pendingCount,
    ),
    counter(
      "lockd_audit_write_failures_total",
      "Failed audit writes: each error, and each write timeout a write stays pending.",
      audit.writeFailures,
    ),
    {
      name: "lockd_audit_records_lost_total",
      help: "Audit records never written: dropped with the backlog full, or still pending at exit.",
      type: "counter",
      samples: AUDIT_LOSS_CAUSES.map((cause) => ({
        labels: { cause },
        value: audit.lostRecords[cause],
      })),
    },
  ];
}

/** The process and the runtime, from the runtime probe. */
function runtimeFamilies(runtime: RuntimeSample): MetricFamily[] {
  return [
    gauge(
      "process_resident_memory_bytes",
      "Resident memory size in bytes.",
      runtime.residentMemoryBytes,
    ),
    gauge(
      "process_start_time_seconds",
      "Start time of the process since the Unix epoch in seconds.",
      runtime.startTimeSeconds,
    ),
    ...(runtime.openFds === null
      ? []
      : [gauge("process_open_fds", "Open file descriptors.", runtime.openFds)]),
    gauge("deno_heap_used_bytes", "V8 heap in use in bytes.", runtime.heapUsedBytes),
    gauge("deno_heap_total_bytes", "V8 heap reserved in bytes.", runtime.heapTotalBytes),
    gauge(
      "deno_event_loop_lag_seconds",
      "How late the last event-loop probe tick ran, in seconds.",
      runtime.eventLoopLagSeconds,
    ),
  ];
}
