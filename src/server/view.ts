/**
 * What the admin API and the ops server see of a running server: a read-only view, and the
 * operator port through which the admin API acts. `admin/` and `ops/` import only these types,
 * never the composition root (`start.ts`), so no import points back up at it.
 *
 * @module
 */

import type { ClusterNode } from "../cluster/cluster_node.ts";
import type { Scheduler } from "../clock.ts";
import type { ServerConfig } from "../config.ts";
import type { LockEngineView } from "../core/lock_queries.ts";
import type { AuditLog } from "../log/audit.ts";
import type { ServerCounters } from "../counters.ts";
import type { LockService } from "../service/lock_service.ts";
import type { ReclaimStats } from "../service/reclaims.ts";

/**
 * The operator's actions (admin API): each goes through `LockService`, which writes its audit
 * record before the engine acts.
 */
export type OperatorPort = Pick<LockService, "forceRelease" | "kickWaiter" | "liftReservation">;

/** Cluster mode as the admin API and the metrics read it: leadership, tokens, records, etcd health. */
export type ClusterView = Pick<
  ClusterNode,
  | "role"
  | "term"
  | "leader"
  | "node"
  | "serving"
  | "horizonMs"
  | "leadership"
  | "tokens"
  | "stats"
  | "health"
  | "ownership"
  | "status"
>;

/** The audit log's figures (metrics). */
export type AuditView = Pick<AuditLog, "pendingCount" | "writeFailures" | "lostRecords">;

/** A running server, read-only: every change goes through the {@link OperatorPort}. */
export interface ServerView {
  readonly config: Readonly<ServerConfig>;
  readonly engine: LockEngineView;
  /** Read by the metrics; the HTTP listeners count their connections into it. */
  readonly counters: ServerCounters;
  readonly audit: AuditView;
  readonly scheduler: Scheduler;
  readonly version: string;
  readonly startedAtWallMs: number;
  /** Monotonic reading at the start (the console's history measures uptime from it). */
  readonly startedAtMonoMs: number;
  /** Bound protocol address (real port). */
  readonly listenAddr: string;
  /** False once shutdown began. */
  readonly live: boolean;
  /** Live and able to grant (no grant block: audit log and token store work; the serving leader in cluster mode). */
  readonly ready: boolean;
  /** Cluster mode (`-cluster-etcd`): this node's leadership, tokens and etcd; null on a single node. */
  readonly cluster: ClusterView | null;
  /** RESUME and RECLAIM decisions (protocol version 2) so far. */
  readonly reclaims: Readonly<ReclaimStats>;
}
