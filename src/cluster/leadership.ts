/**
 * Leader election through etcd, with a self-fencing leader.
 *
 * Every node holds an etcd lease (TTL from `-cluster-ttl`) and renews it every TTL/3 with one
 * keep-alive request at a time. A node campaigns with a transaction that creates
 * `<cluster>/leader` (attached to its lease) only if the key is absent; the key's create
 * revision is the node's **term**. Standbys watch the key and campaign when it is deleted.
 *
 * The leader fences itself by arithmetic on its own clock: `safeUntil` is the SEND time of the
 * newest keep-alive etcd confirmed plus the TTL it confirmed. etcd renewed the lease when it
 * processed that request, after the send, so the lease (and the key) cannot expire before
 * `safeUntil` (clock rates equal within the margin; an etcd leader change only extends leases).
 * Before `safeUntil − margin` passes without a newer confirmation, the leader PAUSES: it must not
 * grant, acknowledge or act, and it re-checks. It RESUMES when a keep-alive newer than the last
 * one before the pause is confirmed and a linearizable read then shows its key with its term. It
 * STEPS DOWN when the key is gone or has another create revision, when the lease is gone, or when
 * the pause outlasts `safeUntil + TTL` (etcd unreachable: a new leader may exist by then). A
 * leader that steps down revokes its old lease (when it can) and starts over as a new candidate.
 *
 * `serving()` is the check the server makes right before every decision (grant, hand-off,
 * expiry) and every frame that promises ownership, so a leader frozen by the OS (SIGSTOP, a VM
 * pause) sees on waking that its time ran out, pauses, and re-verifies before it decides or says
 * anything, even if no timer has fired yet (or its deadline timer fires first).
 *
 * Roles and their legal moves:
 * - `starting`: no lease yet (at start, and after a step-down) → `standby` | `leader` | `stopped`
 * - `standby`: has a lease; another node's key is there, or a campaign is under way
 *   → `leader` (campaign won) | `starting` (own lease gone) | `stopped`
 * - `leader`: serving while `now < safeUntil − margin` → `paused` | `starting` (stepped down)
 *   | `stopped` (resigned or closed)
 * - `paused`: leader that must not act → `leader` (re-verified) | `starting` (stepped down)
 *   | `stopped`
 * - `stopped`: final.
 *
 * All waiting goes through the injected Scheduler; etcd is an interface (real: etcd_http.ts).
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

function parseLeader(kv: KeyValue): LeaderInfo {
  let info: Partial<NodeInfo> = {};
  try {
    info = JSON.parse(kv.value);
  } catch {
    // A value written by something else: show it as the name.
  }
  return {
    name: typeof info.name === "string" ? info.name : kv.value,
    advertise: typeof info.advertise === "string" ? info.advertise : "",
    admin: typeof info.admin === "string" ? info.admin : null,
    term: kv.createRevision,
  };
}

interface Lease {
  readonly id: string;
  readonly ttlMs: number;
}

export class Leadership {
  readonly #etcd: Etcd;
  readonly #scheduler: Scheduler;
  readonly #keys: ReturnType<typeof clusterKeys>;
  #node: NodeInfo;
  readonly #ttlMs: number;
  readonly #marginMs: number;
  readonly #recheckMs: number;
  readonly #retryMs: number;
  readonly #onEvent: (event: LeadershipEvent) => void;

  #role: ClusterRole = "starting";
  #started = false;
  /** Bumped whenever the lease is dropped: answers for an older lease are ignored. */
  #epoch = 0;
  #lease: Lease | null = null;
  #confirmedSendMs = -Infinity;
  #safeUntilMs = -Infinity;
  #term = 0;
  #electedAtMs = 0;
  #leader: LeaderInfo | null = null;
  #pausedAtMs = 0;
  #confirmedAtPauseMs = -Infinity;
  #verifying = false;
  #verifyAgain = false;
  #keepAliveFailing = false;
  #watch: AbortController | null = null;
  #observing = false;

  #keepAliveTimer: Timer | null = null;
  #recheckTimer: Timer | null = null;
  #pauseTimer: Timer | null = null;
  #pauseLimitTimer: Timer | null = null;
  #retryTimer: Timer | null = null;
  #standbyCheckTimer: Timer | null = null;

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
    this.#node = options.node;
    this.#ttlMs = ttlMs;
    this.#marginMs = options.marginMs ?? ttlMs * CLUSTER_MARGIN_TTL_SHARE;
    this.#recheckMs = options.recheckMs ?? CLUSTER_RECHECK_MS;
    this.#retryMs = options.retryMs ?? CLUSTER_RETRY_MS;
    this.#onEvent = options.onEvent ?? (() => {});
  }

  // ---- what the server reads -------------------------------------------------

  get role(): ClusterRole {
    return this.#role;
  }

  /** The term this node leads (create revision of its key), or 0 when it does not lead. */
  get term(): number {
    return this.#role === "leader" || this.#role === "paused" ? this.#term : 0;
  }

  /** The leader as this node knows it (itself included), or null. */
  get leader(): LeaderInfo | null {
    return this.#leader;
  }

  get node(): NodeInfo {
    return this.#node;
  }

  /** Sets what the node publishes when it leads (before start(): the bound addresses). */
  setNode(node: NodeInfo): void {
    if (this.#started) throw new Error("The node info is fixed once leadership started");
    this.#node = node;
  }

  get ttlMs(): number {
    return this.#ttlMs;
  }

  get marginMs(): number {
    return this.#marginMs;
  }

  /** Monotonic ms until which the lease certainly lives (−Infinity without a lease). */
  get safeUntilMs(): number {
    return this.#safeUntilMs;
  }

  /** Monotonic ms at which this node last won an election. */
  get electedAtMs(): number {
    return this.#electedAtMs;
  }

  /** The etcd lease ID, or null. */
  get leaseId(): string | null {
    return this.#lease?.id ?? null;
  }

  /**
   * Whether this node may act as leader right now. Call it right before sending anything that
   * promises ownership: it does the arithmetic itself, so a leader that slept through its
   * timers pauses here instead of acting on stale leadership.
   */
  serving(nowMs: number = this.#scheduler.monotonicMs()): boolean {
    if (this.#role !== "leader") return false;
    if (nowMs >= this.#safeUntilMs - this.#marginMs) {
      this.#pause();
      return false;
    }
    return true;
  }

  // ---- life cycle ------------------------------------------------------------

  /** Starts the lease, the keep-alives and the first campaign. */
  start(): void {
    if (this.#started) throw new Error("Leadership already started");
    this.#started = true;
    this.#grantLease();
  }

  /**
   * Planned hand-over: stops acting at once, deletes the leader key (only if it is still this
   * term's) and revokes the lease, so a standby is elected without waiting for the TTL. Waits
   * at most `timeoutMs`; a failure leaves the key to expire with the lease. `alsoPut` joins the
   * same transaction (only if the term still holds).
   */
  async resign(timeoutMs = this.#ttlMs, alsoPut: readonly TxnOp[] = []): Promise<void> {
    const wasLeading = this.#role === "leader" || this.#role === "paused";
    const term = this.#term;
    const lease = this.#lease;
    const pausedMs = this.#role === "paused"
      ? this.#scheduler.monotonicMs() - this.#pausedAtMs
      : undefined;
    this.#shutdown();
    if (wasLeading) {
      this.#emit({
        type: "stepped_down",
        term,
        reason: "shutdown",
        ...(pausedMs !== undefined ? { pausedMs } : {}),
      });
    }
    try {
      if (wasLeading) {
        await this.#etcd.txn(
          [{ key: this.#keys.leader, target: "create", revision: term }],
          [...alsoPut, { type: "delete", key: this.#keys.leader }],
          [],
          { timeoutMs },
        );
      }
      if (lease !== null) await this.#etcd.revokeLease(lease.id, { timeoutMs });
    } catch {
      // The key goes with the lease when the TTL runs out.
    }
  }

  /** Stops every timer and watch without telling etcd anything (the lease runs out). */
  close(): void {
    this.#shutdown();
  }

  // ---- internals ---------------------------------------------------------------

  #emit(event: LeadershipEvent): void {
    this.#onEvent(event);
  }

  #setLeader(leader: LeaderInfo | null): void {
    const before = this.#leader;
    if (
      before === leader ||
      before !== null && leader !== null && before.term === leader.term &&
        before.advertise === leader.advertise
    ) {
      return;
    }
    this.#leader = leader;
    this.#emit({ type: "leader_changed", leader });
  }

  #shutdown(): void {
    this.#role = "stopped";
    this.#epoch++;
    this.#lease = null;
    this.#term = 0;
    this.#cancelTimersAndWatch();
  }

  /** Stops every timer and the watch of the current lease (shutdown, a dropped lease). */
  #cancelTimersAndWatch(): void {
    for (
      const timer of [
        this.#keepAliveTimer,
        this.#recheckTimer,
        this.#pauseTimer,
        this.#pauseLimitTimer,
        this.#retryTimer,
        this.#standbyCheckTimer,
      ]
    ) timer?.cancel();
    this.#keepAliveTimer = this.#recheckTimer = this.#pauseTimer = null;
    this.#pauseLimitTimer = this.#retryTimer = this.#standbyCheckTimer = null;
    this.#watch?.abort();
    this.#watch = null;
  }

  #retryLater(action: () => void, epoch: number, delayMs = this.#retryMs): void {
    this.#retryTimer?.cancel();
    this.#retryTimer = this.#scheduler.setTimer(() => {
      this.#retryTimer = null;
      if (epoch === this.#epoch && this.#role !== "stopped") action();
    }, delayMs);
  }

  #requestTimeoutMs(): number {
    return this.#ttlMs / 2;
  }

  #grantLease(): void {
    if (this.#role === "stopped") return;
    const epoch = this.#epoch;
    const sendMs = this.#scheduler.monotonicMs();
    this.#etcd.grantLease(this.#ttlMs / 1000, { timeoutMs: this.#requestTimeoutMs() }).then(
      (granted) => {
        if (epoch !== this.#epoch || this.#role === "stopped") {
          // Answer to a lease request of a past life: give the lease back.
          this.#etcd.revokeLease(granted.id).catch(() => {});
          return;
        }
        this.#lease = { id: granted.id, ttlMs: granted.ttlS * 1000 };
        this.#confirm(sendMs, granted.ttlS);
        this.#armKeepAlive();
        this.#observe();
      },
      () => this.#retryLater(() => this.#grantLease(), epoch),
    );
  }

  #armKeepAlive(): void {
    this.#keepAliveTimer?.cancel();
    this.#keepAliveTimer = this.#scheduler.setTimer(() => {
      this.#keepAliveTimer = null;
      this.#sendKeepAlive();
      this.#armKeepAlive();
    }, this.#ttlMs / 3);
  }

  /** A quicker keep-alive cadence while paused or after a failed keep-alive. */
  #armRecheck(): void {
    if (this.#recheckTimer !== null) return;
    this.#recheckTimer = this.#scheduler.setTimer(() => {
      this.#recheckTimer = null;
      if (this.#role === "paused" || this.#keepAliveFailing) {
        this.#sendKeepAlive();
        this.#armRecheck();
      }
    }, this.#recheckMs);
  }

  #sendKeepAlive(): void {
    const lease = this.#lease;
    if (lease === null || this.#role === "stopped") return;
    const epoch = this.#epoch;
    const sendMs = this.#scheduler.monotonicMs();
    this.#etcd.keepAliveOnce(lease.id, { timeoutMs: this.#ttlMs / 3 }).then(
      (ttlS) => {
        if (epoch !== this.#epoch) return;
        if (ttlS <= 0) {
          this.#leaseGone();
          return;
        }
        const wasFailing = this.#keepAliveFailing;
        this.#keepAliveFailing = false;
        this.#confirm(sendMs, ttlS);
        // A black-holed connection can leave a watch stream silent: start it again.
        if (wasFailing && (this.#role === "standby" || this.#role === "leader")) this.#observe();
      },
      (error) => {
        if (epoch !== this.#epoch) return;
        if (error instanceof EtcdError && error.kind === "lease_not_found") {
          this.#leaseGone();
          return;
        }
        this.#keepAliveFailing = true;
        this.#armRecheck();
      },
    );
  }

  /** A keep-alive (or the grant) sent at `sendMs` was confirmed with `ttlS`. */
  #confirm(sendMs: number, ttlS: number): void {
    if (sendMs <= this.#confirmedSendMs) return;
    this.#confirmedSendMs = sendMs;
    this.#safeUntilMs = sendMs + ttlS * 1000;
    if (this.#role === "leader") this.#armPause();
    else if (this.#role === "paused" && sendMs > this.#confirmedAtPauseMs) this.#verify();
  }

  #armPause(): void {
    this.#pauseTimer?.cancel();
    this.#pauseTimer = this.#scheduler.setTimer(() => {
      this.#pauseTimer = null;
      this.serving();
    }, this.#safeUntilMs - this.#marginMs - this.#scheduler.monotonicMs());
  }

  #pause(): void {
    if (this.#role !== "leader") return;
    this.#role = "paused";
    this.#pausedAtMs = this.#scheduler.monotonicMs();
    this.#confirmedAtPauseMs = this.#confirmedSendMs;
    this.#pauseTimer?.cancel();
    this.#pauseTimer = null;
    this.#emit({ type: "paused", term: this.#term });
    this.#armPauseLimit();
    this.#sendKeepAlive();
    this.#armRecheck();
  }

  /**
   * Past `safeUntil + TTL` a paused leader gives up: a new leader may exist by then. A leader
   * that wakes from a freeze already past it still gets one keep-alive timeout (TTL/3) to hear
   * from etcd, so the step-down names the real reason (usually `lease_expired`).
   */
  #pauseLimitMs(): number {
    return Math.max(this.#safeUntilMs + this.#ttlMs, this.#pausedAtMs + this.#ttlMs / 3);
  }

  #armPauseLimit(): void {
    this.#pauseLimitTimer?.cancel();
    this.#pauseLimitTimer = this.#scheduler.setTimer(() => {
      this.#pauseLimitTimer = null;
      if (this.#role !== "paused") return;
      if (this.#scheduler.monotonicMs() >= this.#pauseLimitMs()) {
        this.#stepDown("etcd_unreachable");
      } else {
        this.#armPauseLimit(); // a confirmation moved safeUntil on without a resume yet
      }
    }, this.#pauseLimitMs() - this.#scheduler.monotonicMs());
  }

  /** Paused, and a newer keep-alive was confirmed: read the key before resuming. */
  #verify(): void {
    if (this.#verifying) {
      this.#verifyAgain = true;
      return;
    }
    this.#verifying = true;
    this.#verifyAgain = false;
    const epoch = this.#epoch;
    const term = this.#term;
    const leaseId = this.#lease?.id;
    this.#etcd.get(this.#keys.leader, { timeoutMs: this.#requestTimeoutMs() }).then(
      ({ kv }) => {
        this.#verifying = false;
        if (epoch !== this.#epoch || this.#role !== "paused" || this.#term !== term) return;
        if (kv === undefined) {
          this.#stepDown("key_lost");
        } else if (kv.createRevision !== term || kv.lease !== leaseId) {
          this.#stepDown("deposed", kv);
        } else if (this.#scheduler.monotonicMs() < this.#safeUntilMs - this.#marginMs) {
          this.#resume();
        } else if (this.#verifyAgain) {
          this.#verify();
        }
      },
      () => {
        this.#verifying = false;
        if (epoch === this.#epoch && this.#role === "paused" && this.#verifyAgain) this.#verify();
      },
    );
  }

  #resume(): void {
    const pausedMs = this.#scheduler.monotonicMs() - this.#pausedAtMs;
    this.#role = "leader";
    this.#pauseLimitTimer?.cancel();
    this.#pauseLimitTimer = null;
    this.#recheckTimer?.cancel();
    this.#recheckTimer = null;
    this.#armPause();
    this.#emit({ type: "resumed", term: this.#term, pausedMs });
  }

  /** The lease no longer exists. */
  #leaseGone(): void {
    if (this.#role === "leader" || this.#role === "paused") {
      this.#stepDown("lease_expired");
      return;
    }
    this.#dropLease();
    this.#grantLease();
  }

  #dropLease(): void {
    this.#epoch++;
    this.#lease = null;
    this.#confirmedSendMs = -Infinity;
    this.#safeUntilMs = -Infinity;
    this.#keepAliveFailing = false;
    this.#verifying = false;
    this.#cancelTimersAndWatch();
    this.#observing = false;
    this.#role = "starting";
  }

  /**
   * Steps down from leading (or pausing) for `reason`: gives the lease back when etcd can be
   * reached, then starts over as a candidate with a new lease.
   */
  #stepDown(reason: StepDownReason, current?: KeyValue): void {
    if (this.#role !== "leader" && this.#role !== "paused") return;
    const term = this.#term;
    const pausedMs = this.#role === "paused"
      ? this.#scheduler.monotonicMs() - this.#pausedAtMs
      : undefined;
    const lease = this.#lease;
    this.#dropLease();
    this.#term = 0;
    this.#emit({
      type: "stepped_down",
      term,
      reason,
      ...(pausedMs !== undefined ? { pausedMs } : {}),
    });
    this.#setLeader(current !== undefined ? parseLeader(current) : null);
    if (lease !== null) {
      this.#etcd.revokeLease(lease.id, { timeoutMs: this.#requestTimeoutMs() }).catch(() => {});
    }
    this.#grantLease();
  }

  /** Tells the node from outside (a fenced token reservation) that another term is current. */
  deposed(current: KeyValue | undefined): void {
    if (this.#role !== "leader" && this.#role !== "paused") return;
    if (current === undefined) this.#stepDown("key_lost");
    else if (current.createRevision !== this.#term) this.#stepDown("deposed", current);
  }

  /** Reads the leader key, becomes leader if it is ours, campaigns if absent, else watches. */
  #observe(): void {
    if (this.#lease === null || this.#role === "stopped" || this.#observing) return;
    this.#observing = true;
    const epoch = this.#epoch;
    this.#etcd.get(this.#keys.leader, { timeoutMs: this.#requestTimeoutMs() }).then(
      ({ kv, revision }) => {
        this.#observing = false;
        if (epoch !== this.#epoch || this.#role === "stopped") return;
        if (kv === undefined) {
          if (this.#role === "leader" || this.#role === "paused") this.#stepDown("key_lost");
          else this.#campaign();
          return;
        }
        this.#seeKey(kv);
        this.#startWatch(revision + 1);
      },
      () => {
        this.#observing = false;
        this.#retryLater(() => this.#observe(), epoch);
      },
    );
  }

  /** Acts on the current leader key. */
  #seeKey(kv: KeyValue): void {
    const lease = this.#lease;
    if (this.#role === "leader" || this.#role === "paused") {
      if (kv.createRevision !== this.#term || kv.lease !== lease?.id) this.#stepDown("deposed", kv);
      return;
    }
    if (lease !== null && kv.lease === lease.id) {
      // Our own campaign won although its answer was lost.
      this.#becomeLeader(kv.createRevision);
      return;
    }
    this.#role = "standby";
    this.#setLeader(parseLeader(kv));
    this.#armStandbyCheck();
  }

  #campaign(): void {
    const lease = this.#lease;
    if (lease === null || this.#role === "stopped") return;
    if (this.#role === "starting") this.#role = "standby";
    this.#setLeader(null);
    const epoch = this.#epoch;
    const value = JSON.stringify(this.#node);
    this.#etcd.txn(
      [{ key: this.#keys.leader, target: "create", revision: 0 }],
      [{ type: "put", key: this.#keys.leader, value, lease: lease.id }],
      [{ type: "get", key: this.#keys.leader }],
      { timeoutMs: this.#requestTimeoutMs() },
    ).then(
      (result) => {
        if (epoch !== this.#epoch || this.#role === "stopped") return;
        if (result.succeeded) {
          this.#becomeLeader(result.revision);
          this.#startWatch(result.revision + 1);
          return;
        }
        const kv = result.gets[0];
        if (kv === undefined) {
          // Deleted again between the compare and now: try again.
          this.#retryLater(() => this.#observe(), epoch, 0);
          return;
        }
        this.#seeKey(kv);
        this.#startWatch(result.revision + 1);
      },
      (error) => {
        if (epoch !== this.#epoch) return;
        if (error instanceof EtcdError && error.kind === "lease_not_found") {
          this.#leaseGone();
          return;
        }
        // The outcome is unknown: the read in #observe tells whether the key is ours.
        this.#retryLater(() => this.#observe(), epoch);
      },
    );
  }

  #becomeLeader(term: number): void {
    // One win can be reported twice: by the campaign's answer and by the watch (or a read) that
    // sees the key with this node's lease first; they travel on different connections. Once.
    if ((this.#role === "leader" || this.#role === "paused") && this.#term === term) return;
    this.#role = "leader";
    this.#term = term;
    this.#electedAtMs = this.#scheduler.monotonicMs();
    this.#standbyCheckTimer?.cancel();
    this.#standbyCheckTimer = null;
    this.#emit({ type: "elected", term });
    this.#setLeader({ ...this.#node, term });
    // Elected on an old confirmation: pause at once (and re-check) rather than serve.
    if (!this.serving()) return;
    this.#armPause();
  }

  /** Standbys re-read the key every TTL as well, in case a watch stream went silent. */
  #armStandbyCheck(): void {
    this.#standbyCheckTimer?.cancel();
    this.#standbyCheckTimer = this.#scheduler.setTimer(() => {
      this.#standbyCheckTimer = null;
      if (this.#role === "standby") this.#observe();
    }, this.#ttlMs);
  }

  #startWatch(fromRevision: number): void {
    this.#watch?.abort();
    const controller = new AbortController();
    this.#watch = controller;
    const epoch = this.#epoch;
    (async () => {
      try {
        for await (
          const events of this.#etcd.watch(this.#keys.leader, fromRevision, controller.signal)
        ) {
          if (controller.signal.aborted || epoch !== this.#epoch) return;
          for (const event of events) {
            if (event.type === "delete") this.#keyDeleted();
            else this.#seeKey(event.kv);
            if (controller.signal.aborted || epoch !== this.#epoch) return;
          }
        }
      } catch {
        // Broken stream (or a compacted revision): read again, which restarts the watch.
      }
      if (controller.signal.aborted || epoch !== this.#epoch) return;
      if (this.#watch === controller) this.#watch = null;
      this.#retryLater(() => this.#observe(), epoch);
    })();
  }

  #keyDeleted(): void {
    if (this.#role === "leader" || this.#role === "paused") {
      this.#stepDown("key_lost");
      return;
    }
    this.#setLeader(null);
    this.#campaign();
  }
}
