/**
 * What leadership tells the rest of the server: the roles a node has (the states of the machine in
 * leadership_machine.ts), why a leader steps down, what a node publishes in the leader key, and
 * the events the driver (leadership.ts) reports. Shared by the machine, its driver, the cluster
 * node and the metrics.
 *
 * @module
 */

export type ClusterRole = "starting" | "standby" | "leader" | "paused" | "stopped";
/** Every role (the label values of `lockd_cluster_role{role}`). */
export const CLUSTER_ROLES: readonly ClusterRole[] = [
  "starting",
  "standby",
  "leader",
  "paused",
  "stopped",
];

/**
 * Why a leader stepped down (label values of `lockd_cluster_step_downs_total{reason}`):
 * - `lease_expired`: etcd says the node's lease no longer exists
 * - `key_lost`: the leader key is gone (deleted by an operator, or with the lease)
 * - `deposed`: the leader key has another create revision (another node leads)
 * - `etcd_unreachable`: paused past `safeUntil + TTL` without an answer from etcd
 * - `shutdown`: planned hand-over (the server is stopping)
 */
export type StepDownReason =
  | "lease_expired"
  | "key_lost"
  | "deposed"
  | "etcd_unreachable"
  | "shutdown";

/** Every step-down reason (the label values of `lockd_cluster_step_downs_total{reason}`). */
export const STEP_DOWN_REASONS: readonly StepDownReason[] = [
  "lease_expired",
  "key_lost",
  "deposed",
  "etcd_unreachable",
  "shutdown",
];

/** What a node publishes in the leader key. */
export interface NodeInfo {
  /** Node name (`-cluster-node`, default the advertised address). */
  readonly name: string;
  /** Protocol address clients should dial (`-advertise`). */
  readonly advertise: string;
  /** Admin API address others redirect to, or null when the leader has no admin listener. */
  readonly admin: string | null;
}

export interface LeaderInfo extends NodeInfo {
  readonly term: number;
}

export type LeadershipEvent =
  | { readonly type: "elected"; readonly term: number }
  | { readonly type: "paused"; readonly term: number }
  | { readonly type: "resumed"; readonly term: number; readonly pausedMs: number }
  | {
    readonly type: "stepped_down";
    readonly term: number;
    readonly reason: StepDownReason;
    /** Set when the step-down ended a pause. */
    readonly pausedMs?: number;
  }
  /** The leader as this node sees it changed (null: none known). */
  | { readonly type: "leader_changed"; readonly leader: LeaderInfo | null };
