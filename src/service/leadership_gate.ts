import type { WireError } from "./wire_errors.ts";

/**
 * What the lock service asks of cluster mode (implemented by src/cluster/cluster_node.ts;
 * absent on a single node, where the service behaves exactly as without it).
 */
export interface LeadershipGate {
  /**
   * A HELLO arrived: null to WELCOME it now, an error (NOT_LEADER) to refuse it, or a promise
   * of either when the answer has to wait (an election in progress, a paused leader).
   */
  admit(): WireError | null | Promise<WireError | null>;
  /**
   * A frame that promises ownership for `leaseMs` (ACQUIRED, HEARTBEAT_ACK) is ready. The gate
   * calls `deliver` once the node may make that promise (at once when it serves and its own
   * etcd lease covers it), or `drop` if it never may (the node stepped down). Calls are
   * answered in the order they were made.
   */
  promise(leaseMs: number, deliver: () => void, drop: () => void): void;
  /** Whether an operator action (force-release, waiter removal) may run now. */
  mayAct(): boolean;
  /**
   * Whether the node may decide a change of ownership right now (grant, hand-off, expiry, the
   * end of a session's ownerships): only while it serves and can prove its leadership at this
   * instant. It does the arithmetic itself, so a node that slept through its timers (SIGSTOP, a
   * VM pause) finds out here, before its first decision. When it may not, the service decides
   * and audits nothing: the work waits for `LockService.decisionsResumed()` (the leader
   * re-proved its lease), or is dropped at the step-down (`closeAllForFailover`).
   */
  mayDecide(): boolean;
}
