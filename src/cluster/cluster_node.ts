/**
 * Cluster mode inside one lockd process: the leadership (leadership.ts), the fencing tokens in
 * etcd (cluster_tokens.ts) and the lock service, tied together. It is the service's
 * `LeadershipGate`:
 *
 * - **HELLO**: a leader that serves WELCOMEs at once. A standby sends the client to the leader
 *   (NOT_LEADER with the leader's address) when that leader answers a probe; otherwise, and on
 *   a leader that is not serving yet or paused, the HELLO is held until a leader serves (then
 *   WELCOME or NOT_LEADER naming it), 1.5 × TTL, on to 2 × TTL while a leader is still coming
 *   (`CLUSTER_HELLO_HOLD_MS_MAX` at most; hello_hold.ts).
 * - **Decisions**: the service grants, hands off, expires and ends ownerships only while the node
 *   serves and its arithmetic proves it leads at that instant (`mayDecide`); otherwise (paused,
 *   frozen past its lease) the work waits until the leader resumes, or is dropped at the
 *   step-down, which ends every ownership as `failover`.
 * - **Promises**: ACQUIRED and HEARTBEAT_ACK leave only while the node serves, and only when
 *   the promise ends within the node's own `safeUntil` (the lease length counted from now) or
 *   within the *horizon* published in etcd for this term (`<cluster>/horizon`). Leases shorter
 *   than the time to `safeUntil` (about 2/3 of the TTL) never need a horizon.
 * - **Takeover** (milestone 2, cluster_ownership.ts): a new leader reads the ownership records
 *   and serves at once; locks the last term may have left held stay reserved for RECLAIMs until
 *   the window ends (the grace, or `electedAt + horizon − margin` if later), so a client frozen
 *   out never holds a lock the new leader grants again (after a leader that kept no records, a
 *   rolling upgrade: nothing is granted before then).
 * - **Step-down**: every promise waiting is dropped and every session closed with NOT_LEADER;
 *   ownerships end as `failover` (on this node; the records keep them for the next leader).
 * - **Planned hand-over** (shutdown): grants stop, the records are flushed and the sessions with
 *   claims listed for the next leader, sessions closed with NOT_LEADER, then the leader key is
 *   deleted (with the horizon reset) so a standby is elected within a round trip.
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import {
  CLUSTER_HELLO_HOLD_MS_MAX,
  CLUSTER_PROBE_CACHE_MS,
  CLUSTER_PROBE_TIMEOUT_MS,
  CLUSTER_RECLAIM_GRACE_MS_DEFAULT,
  CLUSTER_RECORD_LINGER_MS_DEFAULT,
  CLUSTER_RETRY_MS,
  TOKENS_PER_BLOCK,
} from "../limits.ts";
import type { AuditLog } from "../log/audit.ts";
import { log } from "../log/diagnostic.ts";
import { notLeaderError, type WireError } from "../service/wire_errors.ts";
import type {
  ClusterVoidReason,
  LeadershipGate,
  ReclaimClaim,
} from "../service/leadership_gate.ts";
import type { Tickets } from "../security/tickets.ts";
import type { LockEngineView } from "../core/lock_queries.ts";
import type { LockService } from "../service/lock_service.ts";
import { ClusterOwnership, type Takeover } from "./cluster_ownership.ts";
import { type ClusterStats, type ClusterStatus, clusterStatus } from "./cluster_status.ts";

export type { ClusterStats } from "./cluster_status.ts";
import { ClusterTokens } from "./cluster_tokens.ts";
import { HelloHold } from "./hello_hold.ts";
import type { EndpointHealth, Etcd } from "./etcd.ts";
import type { LeaderProbe } from "./leader_probe.ts";
import {
  clusterKeys,
  type ClusterRole,
  type LeaderInfo,
  Leadership,
  type LeadershipEvent,
  type NodeInfo,
  type StepDownReason,
} from "./leadership.ts";

const logger = log("cluster");

export interface ClusterNodeOptions {
  readonly etcd: Etcd;
  readonly scheduler: Scheduler;
  readonly cluster: string;
  readonly node: NodeInfo;
  readonly ttlMs: number;
  readonly audit: AuditLog;
  /** Is the leader at this address alive? (leader_probe.ts) */
  readonly probe: LeaderProbe;
  /** Tokens per etcd reservation (default TOKENS_PER_BLOCK). */
  readonly tokenBlockSize?: number;
  /** A new leader's shortest reclaim window (`-cluster-reclaim-grace`). */
  readonly reclaimGraceMs?: number;
  /** How long an idle lock's record stays (`-cluster-record-linger`). */
  readonly recordLingerMs?: number;
}

interface HeldPromise {
  readonly leaseMs: number;
  readonly deliver: () => void;
  readonly drop: () => void;
}

export class ClusterNode implements LeadershipGate {
  readonly leadership: Leadership;
  readonly tokens: ClusterTokens;
  /** Records, ticket key, takeover and reclaim window (milestone 2). */
  readonly ownership: ClusterOwnership;
  readonly stats: ClusterStats = {
    leaderChangesTotal: 0,
    stepDowns: { lease_expired: 0, key_lost: 0, deposed: 0, etcd_unreachable: 0, shutdown: 0 },
    pauseSecondsSum: 0,
    pauseCount: 0,
    etcd: new Map(),
  };
  readonly #etcd: Etcd;
  readonly #scheduler: Scheduler;
  readonly #keys: ReturnType<typeof clusterKeys>;
  #node: NodeInfo;
  readonly #audit: AuditLog;
  readonly #probe: LeaderProbe;
  #service: LockService | null = null;
  #locks: LockEngineView | null = null;
  /** The term this node serves: tokens reserved and the fail-over hold passed (0: none). */
  #readyTerm = 0;
  /** Longest promise this term published in etcd (ms). */
  #horizonMs = 0;
  /** The horizon of the publication in flight (0: none). */
  #publishingMs = 0;
  #retryTimer: Timer | null = null;
  readonly #promises: HeldPromise[] = [];
  readonly #hellos: HelloHold;
  #probed: { addr: string; atMs: number; alive: Promise<boolean> } | null = null;
  #lastLeaderTerm = 0;
  #stopping = false;

  constructor(options: ClusterNodeOptions) {
    this.#etcd = options.etcd;
    this.#scheduler = options.scheduler;
    this.#keys = clusterKeys(options.cluster);
    this.#node = options.node;
    this.#audit = options.audit;
    this.#probe = options.probe;
    // 1.5 × TTL, on to 2 × TTL while this node takes over or an election is under way.
    this.#hellos = new HelloHold(
      options.scheduler,
      Math.min(CLUSTER_HELLO_HOLD_MS_MAX, options.ttlMs * 1.5),
      Math.min(CLUSTER_HELLO_HOLD_MS_MAX, options.ttlMs * 2),
      (last) => {
        if (this.serving) return null;
        const leader = this.leadership.leader;
        if (leader === null || this.#isSelf(leader)) {
          return last ? notLeaderError("", "no leader serves yet") : "hold";
        }
        return notLeaderError(leader.advertise, `standby of ${leader.name}`);
      },
    );
    this.leadership = new Leadership({
      etcd: options.etcd,
      scheduler: options.scheduler,
      cluster: options.cluster,
      node: options.node,
      ttlMs: options.ttlMs,
      onEvent: (event) => this.#onEvent(event),
    });
    this.tokens = new ClusterTokens({
      etcd: options.etcd,
      scheduler: options.scheduler,
      cluster: options.cluster,
      blockSize: options.tokenBlockSize ?? TOKENS_PER_BLOCK,
      requestTimeoutMs: options.ttlMs / 2,
      onFenced: (current) => this.leadership.deposed(current),
      onReserved: () => this.#service?.tokensReserved(),
    });
    this.ownership = new ClusterOwnership({
      etcd: options.etcd,
      scheduler: options.scheduler,
      cluster: options.cluster,
      ttlMs: options.ttlMs,
      graceMs: options.reclaimGraceMs ?? CLUSTER_RECLAIM_GRACE_MS_DEFAULT,
      lingerMs: options.recordLingerMs ?? CLUSTER_RECORD_LINGER_MS_DEFAULT,
      term: () => this.leadership.term,
      onDeposed: (current) => this.leadership.deposed(current),
      service: () => this.#service,
      locks: () => this.#locks,
      ownHorizonMs: () => this.#publishingMs === 0 ? this.#horizonMs : null,
      onClosed: () => this.#flushPromises(),
    });
  }

  /**
   * Connects the service and the engine's read side (created after this node: the service takes
   * this node as its gate).
   */
  attach(service: LockService, locks: LockEngineView): void {
    this.#service = service;
    this.#locks = locks;
    service.notLeader();
  }

  /** Starts campaigning; `node` replaces the node info given at construction (bound addresses). */
  start(node: NodeInfo = this.#node): void {
    this.#node = node;
    this.leadership.setNode(node);
    this.leadership.start();
  }

  // ---- what operators and probes see ------------------------------------------

  get role(): ClusterRole {
    return this.leadership.role;
  }

  get term(): number {
    return this.leadership.term;
  }

  get leader(): LeaderInfo | null {
    return this.leadership.leader;
  }

  get node(): NodeInfo {
    return this.#node;
  }

  /** True while this node leads, serves (not paused) and has passed its start-up steps. */
  get serving(): boolean {
    return this.#readyTerm !== 0 && this.#readyTerm === this.leadership.term &&
      this.leadership.serving();
  }

  /** What this node does now (cluster_status.ts): the one source of every status text. */
  get status(): ClusterStatus {
    const leader = this.leadership.leader;
    return clusterStatus({
      serving: this.serving,
      role: this.leadership.role,
      term: this.leadership.term,
      leader: leader !== null && !this.#isSelf(leader) ? leader : null,
      window: this.ownership.window,
      scheduler: this.#scheduler,
      reservedLocks: () => this.ownership.reservedLocks(),
    });
  }

  /** The term's longest promise published in etcd (ms). */
  get horizonMs(): number {
    return this.#horizonMs;
  }

  /** One etcd request finished (the etcd client's `observe`). */
  recordEtcd(op: string, seconds: number, ok: boolean): void {
    let entry = this.stats.etcd.get(op);
    if (entry === undefined) {
      entry = { count: 0, failures: 0, secondsSum: 0 };
      this.stats.etcd.set(op, entry);
    }
    entry.count++;
    entry.secondsSum += seconds;
    if (!ok) entry.failures++;
  }

  health(): Promise<EndpointHealth[]> {
    return this.#etcd.health({ timeoutMs: 500 });
  }

  // ---- LeadershipGate -----------------------------------------------------------

  admit(): WireError | null | Promise<WireError | null> {
    if (this.#stopping) return notLeaderError("", "this node is shutting down");
    if (this.serving) return null;
    const leader = this.leadership.leader;
    if (leader !== null && !this.#isSelf(leader)) {
      // A standby: send the client on if the leader lives, else hold it for the next one.
      return this.#alive(leader.advertise).then((alive) => {
        if (this.#stopping) return notLeaderError("", "this node is shutting down");
        if (this.serving) return null;
        const now = this.leadership.leader;
        if (alive && now !== null && now.term === leader.term) {
          return notLeaderError(now.advertise, `standby of ${now.name}`);
        }
        return this.#hellos.hold();
      });
    }
    return this.#hellos.hold();
  }

  promise(leaseMs: number, deliver: () => void, drop: () => void): void {
    if (this.#promises.length === 0 && this.#mayPromise(leaseMs)) {
      deliver();
      return;
    }
    this.#promises.push({ leaseMs, deliver, drop });
    this.#flushPromises();
  }

  mayAct(): boolean {
    return this.serving;
  }

  mayDecide(): boolean {
    return this.serving;
  }

  // ---- OwnershipGate: the records, the ticket key and the window (cluster_ownership.ts) ----

  get tickets(): Tickets {
    return this.ownership.tickets;
  }

  get reclaimWindowMs(): number {
    return this.ownership.reclaimWindowMs;
  }

  readonly reclaimWindowLeftMs = (prevTerm: number): number =>
    this.ownership.reclaimWindowLeftMs(prevTerm);
  readonly reclaimCheck = (claim: ReclaimClaim): ClusterVoidReason | null =>
    this.ownership.reclaimCheck(claim);
  readonly beforeDeliver = (name: string, restored: boolean): Promise<void> | null =>
    this.ownership.beforeDeliver(name, restored);
  readonly ended: LeadershipGate["ended"] = (...end) => this.ownership.ended(...end);
  readonly idle = (name: string): void => this.ownership.idle(name);
  readonly busy = (name: string): void => this.ownership.busy(name);
  readonly reclaimsDone = (prevTerm: number, prevSessionId: number): void =>
    this.ownership.reclaimsDone(prevTerm, prevSessionId);

  // ---- hand-over and stop --------------------------------------------------------

  /**
   * Planned hand-over at shutdown: refuses new HELLOs and stops granting; commits the pending
   * records and writes the list of sessions with claims (they RESUME at the next leader, whose
   * window then ends as soon as they all did); closes every session with NOT_LEADER; then gives
   * up the leader key (resetting the horizon: nothing is promised any more, but for locks still
   * reserved for the last term's reclaims) and the lease, so a standby takes over at once.
   */
  async handOver(): Promise<void> {
    this.#stopping = true;
    this.#hellos.answerAll(notLeaderError("", "this node is shutting down"));
    const term = this.leadership.term;
    const leading = term !== 0;
    const serving = this.serving;
    const inheritedMs = this.ownership.inheritedHorizonMs(this.leadership.marginMs);
    if (serving && this.#service !== null) {
      this.#service.notLeader();
      await this.ownership.prepareHandover(
        term,
        this.#service.sessionsWithClaims(),
        this.leadership.ttlMs / 2,
      );
    }
    this.#endTerm();
    if (leading) {
      this.#service?.closeAllForFailover("", "the leader is shutting down; a new one is elected");
    }
    await this.leadership.resign(
      this.leadership.ttlMs,
      leading
        ? [{ type: "put", key: this.#keys.horizon, value: horizonValue(term, inheritedMs) }]
        : [],
    );
    this.#audit.term = null;
  }

  /** Stops timers and etcd traffic (after handOver, or in tests). */
  close(): void {
    this.#stopping = true;
    this.#hellos.answerAll(notLeaderError("", "this node is shutting down"));
    this.#endTerm();
    this.leadership.close();
    this.#etcd.close();
  }

  // ---- leadership events -----------------------------------------------------------

  #onEvent(event: LeadershipEvent): void {
    try {
      switch (event.type) {
        case "elected":
          this.#elected(event.term);
          return;
        case "paused":
          logger.warn("leader paused: its etcd lease is not confirmed; re-checking", {
            term: event.term,
          });
          return;
        case "resumed":
          this.stats.pauseCount++;
          this.stats.pauseSecondsSum += event.pausedMs / 1000;
          logger.info("leader resumed", {
            term: event.term,
            paused_ms: Math.round(event.pausedMs),
          });
          this.#flushPromises();
          this.#service?.decisionsResumed();
          this.#admitHeld();
          return;
        case "stepped_down":
          this.#steppedDown(event.term, event.reason, event.pausedMs);
          return;
        case "leader_changed":
          this.#leaderChanged(event.leader);
          return;
      }
    } catch (error) {
      logger.error("cluster event handling failed", { event: event.type, error: String(error) });
    }
  }

  #elected(term: number): void {
    this.#audit.term = term;
    this.#audit.append({
      event: "leader_elected",
      lock: "",
      token: null,
      identity: "",
      remote_addr: this.#node.advertise,
      session: 0,
      node: this.#node.name,
      term,
    });
    logger.info("elected leader", { term, node: this.#node.name });
    this.#beginTerm(term);
  }

  /**
   * Reserves the first token block and takes over (records, ticket key, `terms`: see
   * cluster_ownership.ts); serves once both are done. Locks the last term may have left held stay
   * reserved for their holders' reclaims; every other lock is grantable at once.
   */
  #beginTerm(term: number): void {
    const electedAtMs = this.leadership.electedAtMs;
    Promise.all([
      this.tokens.begin(term, this.#scheduler.wallMs()),
      this.ownership.takeover(term, electedAtMs, this.leadership.marginMs),
    ]).then(
      ([, takeover]) => {
        if (takeover === null || this.leadership.term !== term) return;
        const waitMs = takeover.holdAllUntilMs - this.#scheduler.monotonicMs();
        if (waitMs <= 0) this.#ready(term, takeover);
        else this.#retryTimer = this.#scheduler.setTimer(() => this.#ready(term, takeover), waitMs);
      },
      (error) => {
        if (this.leadership.term !== term) return;
        logger.warn("new term could not start yet; retrying", { term, error: String(error) });
        this.#retryTimer = this.#scheduler.setTimer(() => {
          this.#retryTimer = null;
          if (this.leadership.term === term) this.#beginTerm(term);
        }, CLUSTER_RETRY_MS);
      },
    );
  }

  #ready(term: number, takeover: Takeover): void {
    if (this.leadership.term !== term) return;
    this.#readyTerm = term;
    this.#horizonMs = 0;
    logger.info("leader serving", { term, tokens_from: this.tokens.lastIssued + 1 });
    // Reservations first: the term's first grant must not take a lock of H.
    this.ownership.serve(takeover);
    this.#service?.tokensReserved();
    this.#service?.leading();
    this.#flushPromises();
    this.#admitHeld();
  }

  #steppedDown(term: number, reason: StepDownReason, pausedMs: number | undefined): void {
    this.stats.stepDowns[reason]++;
    if (pausedMs !== undefined) this.stats.pauseCount++;
    this.stats.pauseSecondsSum += (pausedMs ?? 0) / 1000;
    this.#endTerm();
    const leader = this.leadership.leader;
    const why = `stepped down: ${reason.replaceAll("_", " ")}`;
    logger.warn("stepped down", { term, reason, paused_ms: Math.round(pausedMs ?? 0) });
    if (reason !== "shutdown") {
      this.#service?.closeAllForFailover(
        leader !== null && !this.#isSelf(leader) ? leader.advertise : "",
        why,
      );
    }
    this.#audit.append({
      event: "stepped_down",
      lock: "",
      token: null,
      identity: "",
      remote_addr: this.#node.advertise,
      session: 0,
      reason,
      node: this.#node.name,
      term,
    });
    this.#audit.term = null;
  }

  /** The node no longer serves a term: tokens stop, promises waiting are dropped. */
  #endTerm(): void {
    this.#readyTerm = 0;
    this.#horizonMs = 0;
    this.tokens.end();
    this.ownership.end();
    this.#retryTimer?.cancel();
    this.#retryTimer = null;
    for (const held of this.#promises.splice(0)) held.drop();
  }

  #leaderChanged(leader: LeaderInfo | null): void {
    if (leader === null) return;
    if (leader.term !== this.#lastLeaderTerm) {
      this.#lastLeaderTerm = leader.term;
      this.stats.leaderChangesTotal++;
    }
    if (!this.#isSelf(leader)) {
      this.#hellos.answerAll(notLeaderError(leader.advertise, `standby of ${leader.name}`));
    }
  }

  // ---- held HELLOs -------------------------------------------------------------------

  /** This node serves now: every held HELLO is welcome. */
  #admitHeld(): void {
    if (this.serving) this.#hellos.answerAll(null);
  }

  #isSelf(leader: LeaderInfo): boolean {
    return leader.term === this.leadership.term && this.leadership.term !== 0 ||
      leader.name === this.#node.name && leader.advertise === this.#node.advertise;
  }

  /** Probes the leader, sharing one probe among the HELLOs of CLUSTER_PROBE_CACHE_MS. */
  #alive(addr: string): Promise<boolean> {
    const nowMs = this.#scheduler.monotonicMs();
    const last = this.#probed;
    if (last !== null && last.addr === addr && nowMs - last.atMs < CLUSTER_PROBE_CACHE_MS) {
      return last.alive;
    }
    const alive = this.#probe(addr, CLUSTER_PROBE_TIMEOUT_MS).catch(() => false);
    this.#probed = { addr, atMs: nowMs, alive };
    return alive;
  }

  // ---- promises ------------------------------------------------------------------------

  /** Whether a promise of `leaseMs` may leave now (see the module comment). */
  #mayPromise(leaseMs: number): boolean {
    if (!this.serving) return false;
    const nowMs = this.#scheduler.monotonicMs();
    return nowMs + leaseMs <= this.leadership.safeUntilMs || leaseMs <= this.#horizonMs;
  }

  /** Delivers held promises in order while they may leave; publishes a horizon when needed. */
  #flushPromises(): void {
    while (this.#promises.length > 0) {
      const head = this.#promises[0];
      if (!this.#mayPromise(head.leaseMs)) {
        if (this.serving) {
          this.#publishHorizon(Math.max(...this.#promises.map((p) => p.leaseMs)));
        }
        return;
      }
      this.#promises.shift();
      head.deliver();
    }
  }

  /** Publishes (in etcd, under this term) that promises may reach `leaseMs` ahead. */
  #publishHorizon(leaseMs: number): void {
    if (this.#publishingMs !== 0 || this.ownership.closing) return;
    const term = this.leadership.term;
    if (term === 0) return;
    this.#publishingMs = leaseMs;
    // While the reclaim window is open the horizon covers it too (cluster_ownership.ts).
    const published = Math.max(
      leaseMs,
      this.ownership.inheritedHorizonMs(this.leadership.marginMs),
    );
    this.#etcd.txn(
      [{ key: this.#keys.leader, target: "create", revision: term }],
      [{ type: "put", key: this.#keys.horizon, value: horizonValue(term, published) }],
      [{ type: "get", key: this.#keys.leader }],
      { timeoutMs: this.leadership.ttlMs / 2 },
    ).then(
      (result) => {
        this.#publishingMs = 0;
        if (this.leadership.term !== term) return;
        if (!result.succeeded) {
          this.leadership.deposed(result.gets[0]);
          return;
        }
        this.#horizonMs = Math.max(this.#horizonMs, leaseMs);
        logger.info("lease horizon published", { term, horizon_ms: this.#horizonMs });
        this.#flushPromises();
      },
      () => {
        this.#publishingMs = 0;
        if (this.leadership.term !== term) return;
        this.#retryTimer ??= this.#scheduler.setTimer(() => {
          this.#retryTimer = null;
          this.#flushPromises();
        }, CLUSTER_RETRY_MS);
      },
    );
  }
}

function horizonValue(term: number, leaseMs: number): string {
  return JSON.stringify({ term, lease_ms: leaseMs });
}
