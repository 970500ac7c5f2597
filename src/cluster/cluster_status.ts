/**
 * What a cluster node is doing, in the words every status surface uses (`/readyz`, `/api/info`,
 * `lockd admin info`, the console, the admin API's 503s), so they never contradict each other.
 *
 * - `starting`: no etcd lease yet;
 * - `electing`: no leader is known (the last one died or resigned; an election is under way);
 * - `standby`: another node leads;
 * - `taking_over`: this node won the election and reads the ownership records; serves soon;
 * - `paused`: this node leads but its etcd lease is not confirmed: it serves nothing meanwhile;
 * - `reclaiming`: this node serves; locks the last leader may have left held are kept for their
 *   holders' reclaims until the window ends (`untilWallMs`);
 * - `serving`: this node serves;
 * - `stopped`: shut down.
 *
 * @module
 */

import { rfc3339, type Scheduler } from "../clock.ts";
import type { ClusterRole, LeaderInfo } from "./leadership.ts";
import type { StepDownReason } from "./leadership_events.ts";

/** Counters and sums of cluster mode, read by /metrics. */
export interface ClusterStats {
  /** Times this node saw the leader change to a new term (its own elections included). */
  leaderChangesTotal: number;
  stepDowns: Record<StepDownReason, number>;
  pauseSecondsSum: number;
  pauseCount: number;
  /** Per etcd operation: request count, failures, and the sum of their durations. */
  readonly etcd: Map<string, { count: number; failures: number; secondsSum: number }>;
}

export type ClusterPhase =
  | "starting"
  | "electing"
  | "standby"
  | "taking_over"
  | "paused"
  | "reclaiming"
  | "serving"
  | "stopped";

export interface ClusterStatus {
  readonly phase: ClusterPhase;
  /** The term this node leads, or the leader's term (0: none known). */
  readonly term: number;
  /** The leader's node name (standby), "" otherwise. */
  readonly leader: string;
  /** `reclaiming`: when the window ends (wall ms). */
  readonly untilWallMs?: number;
  /** `reclaiming`: locks still kept for reclaims on this node. */
  readonly reservedLocks?: number;
}

/** What a node knows of itself, for `clusterStatus`. */
export interface ClusterStatusInputs {
  readonly serving: boolean;
  readonly role: ClusterRole;
  readonly term: number;
  /** The leader when it is another node, else null. */
  readonly leader: LeaderInfo | null;
  /** The open reclaim window of the term served, or null. */
  readonly window: { readonly endsAtMs: number } | null;
  readonly scheduler: Scheduler;
  readonly reservedLocks: () => number;
}

/** The phase of a node (see the module comment). */
export function clusterStatus(n: ClusterStatusInputs): ClusterStatus {
  const { term } = n;
  if (n.serving) {
    if (n.window === null) return { phase: "serving", term, leader: "" };
    const leftMs = n.window.endsAtMs - n.scheduler.monotonicMs();
    return {
      phase: "reclaiming",
      term,
      leader: "",
      untilWallMs: n.scheduler.wallMs() + leftMs,
      reservedLocks: n.reservedLocks(),
    };
  }
  if (n.role === "paused") return { phase: "paused", term, leader: "" };
  if (n.role === "leader") return { phase: "taking_over", term, leader: "" };
  if (n.role === "stopped") return { phase: "stopped", term: 0, leader: "" };
  if (n.leader === null) {
    return { phase: n.role === "starting" ? "starting" : "electing", term: 0, leader: "" };
  }
  return { phase: "standby", term: n.leader.term, leader: n.leader.name };
}

/** One line saying what the node does, the same everywhere. */
export function clusterStatusText(status: ClusterStatus): string {
  switch (status.phase) {
    case "starting":
      return "starting: no etcd lease yet";
    case "electing":
      return "electing: no leader is known yet (an election is under way)";
    case "standby":
      return `standby: ${status.leader} leads term ${status.term}`;
    case "taking_over":
      return `taking over: elected for term ${status.term}, reading the ownership records; ` +
        "serving in a moment";
    case "paused":
      return `paused: leads term ${status.term} but its etcd lease is not confirmed; ` +
        "serving nothing until it is";
    case "reclaiming":
      return `serving term ${status.term}, reclaiming until ${rfc3339(status.untilWallMs ?? 0)}: ${
        status.reservedLocks ?? 0
      } lock(s) kept for their holders' reclaims`;
    case "serving":
      return `serving term ${status.term}`;
    case "stopped":
      return "stopped";
  }
}
