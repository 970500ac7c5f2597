/**
 * Leader election through etcd, with a self-fencing leader: the driver of the pure state machine
 * in leadership_machine.ts (which holds the protocol, the states and their legal moves).
 *
 * `Leadership` keeps the machine's state and feeds it every input: the answers of etcd (each
 * stamped with the epoch it was asked in), the timers it armed, and the check the server makes
 * right before every decision (grant, hand-off, expiry) and every frame that promises ownership
 * (`serving()`), so a leader frozen by the OS (SIGSTOP, a VM pause) sees on waking that its time
 * ran out, pauses, and re-verifies before it decides or says anything, even if no timer has fired
 * yet. It carries out the machine's commands over the `Etcd` interface (real: etcd_http.ts) and
 * the injected Scheduler, then reports the machine's events to `onEvent`, in order, with the
 * state already updated (a listener may call back in).
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import {
  CLUSTER_MARGIN_TTL_SHARE,
  CLUSTER_RECHECK_MS,
  CLUSTER_RETRY_MS,
  CLUSTER_TTL_MS_DEFAULT,
  CLUSTER_TTL_MS_MAX,
  CLUSTER_TTL_MS_MIN,
} from "../limits.ts";
import { type Etcd, EtcdError, type KeyValue, type TxnOp } from "./etcd.ts";
import type { ClusterRole, LeaderInfo, LeadershipEvent, NodeInfo } from "./leadership_events.ts";
import {
  initialLeadershipState,
  type LeadershipConfig,
  type LeadershipEffect,
  type LeadershipInput,
  type LeadershipState,
  type LeadershipTimer,
  leadingTerm,
  servesAt,
  step,
} from "./leadership_machine.ts";

export { CLUSTER_ROLES, STEP_DOWN_REASONS } from "./leadership_events.ts";
export type {
  ClusterRole,
  LeaderInfo,
  LeadershipEvent,
  NodeInfo,
  StepDownReason,
} from "./leadership_events.ts";

export interface LeadershipOptions {
  readonly etcd: Etcd;
  readonly scheduler: Scheduler;
  /** The cluster name; keys live under it (`<cluster>/leader`). */
  readonly cluster: string;
  readonly node: NodeInfo;
  /** Lease TTL in ms, whole seconds (etcd leases have a TTL in seconds); `CLUSTER_TTL_MS_DEFAULT`. */
  readonly ttlMs?: number;
  /** Safety margin before `safeUntil` (default `CLUSTER_MARGIN_TTL_SHARE` of the TTL). */
  readonly marginMs?: number;
  /** Keep-alive cadence while paused or after a failed keep-alive (`CLUSTER_RECHECK_MS`). */
  readonly recheckMs?: number;
  /** Delay before retrying a failed grant, read, campaign or watch (`CLUSTER_RETRY_MS`). */
  readonly retryMs?: number;
  readonly onEvent?: (event: LeadershipEvent) => void;
}

/** Key names under a cluster. */
export function clusterKeys(
  cluster: string,
): { leader: string; tokens: string; horizon: string } {
  return {
    leader: `${cluster}/leader`,
    tokens: `${cluster}/tokens`,
    horizon: `${cluster}/horizon`,
  };
}

type Release = Extract<LeadershipEffect, { type: "release" }>;

export class Leadership {
  readonly #etcd: Etcd;
  readonly #scheduler: Scheduler;
  readonly #keys: ReturnType<typeof clusterKeys>;
  #config: LeadershipConfig;
  readonly #onEvent: (event: LeadershipEvent) => void;

  #state: LeadershipState = initialLeadershipState();
  #started = false;
  readonly #timers = new Map<LeadershipTimer, Timer>();
  #watch: AbortController | null = null;

  constructor(options: LeadershipOptions) {
    const ttlMs = options.ttlMs ?? CLUSTER_TTL_MS_DEFAULT;
    if (
      !Number.isInteger(ttlMs / 1000) || ttlMs < CLUSTER_TTL_MS_MIN || ttlMs > CLUSTER_TTL_MS_MAX
    ) {
      throw new RangeError(
        `The cluster TTL must be whole seconds from ${CLUSTER_TTL_MS_MIN / 1000} to ${
          CLUSTER_TTL_MS_MAX / 1000
        } s, got ${ttlMs} ms`,
      );
    }
    this.#etcd = options.etcd;
    this.#scheduler = options.scheduler;
    this.#keys = clusterKeys(options.cluster);
    this.#config = {
      node: options.node,
      ttlMs,
      marginMs: options.marginMs ?? ttlMs * CLUSTER_MARGIN_TTL_SHARE,
      recheckMs: options.recheckMs ?? CLUSTER_RECHECK_MS,
      retryMs: options.retryMs ?? CLUSTER_RETRY_MS,
    };
    this.#onEvent = options.onEvent ?? (() => {});
  }

  // ---- what the server reads -------------------------------------------------

  get role(): ClusterRole {
    return this.#state.tag;
  }

  /** The machine's state (read-only; for tests and the operator view). */
  get state(): LeadershipState {
    return this.#state;
  }

  /** The term this node leads (create revision of its key), or 0 when it does not lead. */
  get term(): number {
    return leadingTerm(this.#state);
  }

  /** The leader as this node knows it (itself included), or null. */
  get leader(): LeaderInfo | null {
    return this.#state.leader;
  }

  get node(): NodeInfo {
    return this.#config.node;
  }

  /** Sets what the node publishes when it leads (before start(): the bound addresses). */
  setNode(node: NodeInfo): void {
    if (this.#started) throw new Error("The node info is fixed once leadership started");
    this.#config = { ...this.#config, node };
  }

  get ttlMs(): number {
    return this.#config.ttlMs;
  }

  get marginMs(): number {
    return this.#config.marginMs;
  }

  /** Monotonic ms until which the lease certainly lives (−Infinity without a lease). */
  get safeUntilMs(): number {
    return this.#state.safeUntilMs;
  }

  /** Monotonic ms at which this node last won an election. */
  get electedAtMs(): number {
    return this.#state.electedAtMs;
  }

  /** The etcd lease ID, or null. */
  get leaseId(): string | null {
    return this.#state.tag === "stopped" ? null : this.#state.leaseId;
  }

  /**
   * Whether this node may act as leader right now. Call it right before sending anything that
   * promises ownership: it does the arithmetic itself, so a leader that slept through its
   * timers pauses here instead of acting on stale leadership.
   */
  serving(nowMs: number = this.#scheduler.monotonicMs()): boolean {
    if (this.#state.tag !== "leader") return false;
    if (servesAt(this.#config, this.#state, nowMs)) return true;
    this.#apply({ type: "check", atMs: nowMs });
    return false;
  }

  // ---- life cycle ------------------------------------------------------------

  /** Starts the lease, the keep-alives and the first campaign. */
  start(): void {
    if (this.#started) throw new Error("Leadership already started");
    this.#started = true;
    this.#apply({ type: "start" });
  }

  /**
   * Planned hand-over: stops acting at once, deletes the leader key (only if it is still this
   * term's) and revokes the lease, so a standby is elected without waiting for the TTL. Waits
   * at most `timeoutMs`; a failure leaves the key to expire with the lease. `alsoPut` joins the
   * same transaction (only if the term still holds).
   */
  async resign(timeoutMs = this.#config.ttlMs, alsoPut: readonly TxnOp[] = []): Promise<void> {
    const release = this.#apply({ type: "resign" });
    try {
      if (release?.term != null) {
        await this.#etcd.txn(
          [{ key: this.#keys.leader, target: "create", revision: release.term }],
          [...alsoPut, { type: "delete", key: this.#keys.leader }],
          [],
          { timeoutMs },
        );
      }
      if (release?.leaseId != null) await this.#etcd.revokeLease(release.leaseId, { timeoutMs });
    } catch {
      // The key goes with the lease when the TTL runs out.
    }
  }

  /** Stops every timer and watch without telling etcd anything (the lease runs out). */
  close(): void {
    this.#apply({ type: "close" });
  }

  /** Tells the node from outside (a fenced token reservation) that another term is current. */
  deposed(current: KeyValue | undefined): void {
    this.#apply({ type: "fenced", current });
  }

  // ---- the driver ----------------------------------------------------------------

  /** One step: commits the state, carries out the commands, then reports the events. */
  #apply(input: LeadershipInput): Release | null {
    const { state, effects } = step(
      this.#config,
      this.#state,
      input,
      this.#scheduler.monotonicMs(),
    );
    this.#state = state;
    let release: Release | null = null;
    const events: LeadershipEvent[] = [];
    for (const effect of effects) {
      if (effect.type === "emit") events.push(effect.event);
      else if (effect.type === "release") release = effect;
      else this.#execute(effect);
    }
    for (const event of events) this.#onEvent(event);
    return release;
  }

  #execute(effect: Exclude<LeadershipEffect, { type: "emit" | "release" }>): void {
    switch (effect.type) {
      case "set_timer":
        return this.#setTimer(effect.timer, effect.delayMs);
      case "cancel_timer":
        this.#timers.get(effect.timer)?.cancel();
        this.#timers.delete(effect.timer);
        return;
      case "grant_lease": {
        const { epoch, sendMs } = effect;
        this.#etcd.grantLease(effect.ttlS, { timeoutMs: effect.timeoutMs }).then(
          (granted) =>
            this.#apply({
              type: "lease_granted",
              epoch,
              sendMs,
              leaseId: granted.id,
              ttlS: granted.ttlS,
            }),
          () => this.#apply({ type: "lease_grant_failed", epoch }),
        );
        return;
      }
      case "keep_alive": {
        const { epoch, sendMs } = effect;
        this.#etcd.keepAliveOnce(effect.leaseId, { timeoutMs: effect.timeoutMs }).then(
          (ttlS) => this.#apply({ type: "keep_alive_answered", epoch, sendMs, ttlS }),
          (error) =>
            this.#apply({ type: "keep_alive_failed", epoch, leaseNotFound: leaseNotFound(error) }),
        );
        return;
      }
      case "revoke_lease":
        this.#etcd.revokeLease(
          effect.leaseId,
          effect.timeoutMs !== undefined ? { timeoutMs: effect.timeoutMs } : undefined,
        ).catch(() => {});
        return;
      case "read_leader": {
        const { epoch } = effect;
        this.#etcd.get(this.#keys.leader, { timeoutMs: effect.timeoutMs }).then(
          ({ kv, revision }) => this.#apply({ type: "leader_read", epoch, kv, revision }),
          () => this.#apply({ type: "leader_read_failed", epoch }),
        );
        return;
      }
      case "verify_leader": {
        const { epoch, term } = effect;
        this.#etcd.get(this.#keys.leader, { timeoutMs: effect.timeoutMs }).then(
          ({ kv }) => this.#apply({ type: "verify_read", epoch, term, kv }),
          () => this.#apply({ type: "verify_read_failed", epoch, term }),
        );
        return;
      }
      case "campaign":
        return this.#campaign(effect);
      case "watch":
        this.#startWatch(effect.epoch, effect.watch, effect.fromRevision);
        return;
      case "stop_watch":
        this.#watch?.abort();
        this.#watch = null;
        return;
    }
  }

  /** Arms a named timer (replacing the one of that name): its firing is an input. */
  #setTimer(name: LeadershipTimer, delayMs: number): void {
    this.#timers.get(name)?.cancel();
    const timer = this.#scheduler.setTimer(() => {
      if (this.#timers.get(name) !== timer) return;
      this.#timers.delete(name);
      this.#apply({ type: "timer_fired", timer: name });
    }, delayMs);
    this.#timers.set(name, timer);
  }

  /** Creates the leader key under this node's lease unless it exists; reads it either way. */
  #campaign(effect: Extract<LeadershipEffect, { type: "campaign" }>): void {
    const { epoch } = effect;
    this.#etcd.txn(
      [{ key: this.#keys.leader, target: "create", revision: 0 }],
      [{
        type: "put",
        key: this.#keys.leader,
        value: JSON.stringify(this.#config.node),
        lease: effect.leaseId,
      }],
      [{ type: "get", key: this.#keys.leader }],
      { timeoutMs: effect.timeoutMs },
    ).then(
      (result) =>
        this.#apply({
          type: "campaign_answered",
          epoch,
          succeeded: result.succeeded,
          revision: result.revision,
          kv: result.gets[0],
        }),
      (error) =>
        this.#apply({ type: "campaign_failed", epoch, leaseNotFound: leaseNotFound(error) }),
    );
  }

  #startWatch(epoch: number, watch: number, fromRevision: number): void {
    this.#watch?.abort();
    const controller = new AbortController();
    this.#watch = controller;
    const { signal } = controller;
    (async () => {
      // A throw of the machine (a programmer error) must not pass for a broken stream.
      let failed = false;
      let failure: unknown;
      try {
        stream: for await (
          const events of this.#etcd.watch(this.#keys.leader, fromRevision, signal)
        ) {
          for (const event of events) {
            if (signal.aborted) break stream;
            try {
              this.#apply({ type: "watch_event", epoch, watch, event });
            } catch (error) {
              failed = true;
              failure = error;
              break stream;
            }
          }
        }
      } catch {
        // Broken stream (or a compacted revision): the machine reads again.
      }
      if (failed) throw failure;
      if (signal.aborted) return;
      if (this.#watch === controller) this.#watch = null;
      this.#apply({ type: "watch_ended", epoch, watch });
    })();
  }
}

function leaseNotFound(error: unknown): boolean {
  return error instanceof EtcdError && error.kind === "lease_not_found";
}
