/**
 * Leader election and the self-fencing leader as a pure state machine: `step(config, state,
 * input, nowMs)` returns the next state and the commands for the driver (leadership.ts), which
 * carries them out over etcd and the scheduler and feeds every answer, timer and check back in as
 * an input. Nothing here reads a clock, sets a timer or talks to etcd, so every schedule of
 * answers, losses, delays and freezes can be replayed step by step (tests/cluster/
 * leadership_sim_test.ts runs thousands of random ones against the safety invariants).
 *
 * The protocol (docs/cluster.md, "The self-fencing leader"):
 * - Every node holds an etcd lease and renews it every TTL/3 with one keep-alive at a time.
 *   `safeUntil` is the SEND time of the newest keep-alive etcd confirmed plus the TTL it
 *   confirmed: etcd renewed the lease when it processed that request, after the send, so the lease
 *   (and the leader key on it) cannot expire before `safeUntil` (clock rates equal within the
 *   margin; an etcd leader change only extends leases).
 * - A node campaigns with a transaction that creates `<cluster>/leader` on its lease if the key
 *   is absent; the key's create revision is the node's **term**. Standbys watch the key (and
 *   re-read it every TTL) and campaign when it is deleted.
 * - A leader serves while `now < safeUntil − margin`. At that instant (its pause timer, or the
 *   `check` the server makes before every decision and every frame that promises ownership) it
 *   PAUSES, and RESUMES only when a keep-alive sent after the pause began is confirmed and a
 *   linearizable read then shows its key with its term and lease. It STEPS DOWN when the key is
 *   gone (`key_lost`) or has another create revision or lease (`deposed`), when etcd says the
 *   lease is gone (`lease_expired`), or when the pause outlasts `safeUntil + TTL`
 *   (`etcd_unreachable`); it then gives the lease back and starts over with a new one.
 *
 * States (`tag`, also the role operators see) and their legal moves, checked at every move (an
 * illegal one is a programmer error and throws); a move to the same tag updates its fields:
 * - `starting`: no lease yet, or a new lease whose first read of the key is under way
 *   → `standby` (the read or a campaign) | `stopped`
 * - `standby`: another node's key is there, or this node's campaign is under way
 *   → `leader` (its key seen: the campaign's answer, a read or the watch) | `starting` (its lease
 *   is gone) | `stopped`
 * - `leader`: serving while `now < safeUntil − margin` → `paused` | `starting` (stepped down)
 *   | `stopped` (resigned or closed)
 * - `paused`: a leader that must not act → `leader` (re-verified) | `starting` (stepped down)
 *   | `stopped`
 * - `stopped`: final.
 * A leader's term never changes: a second report of the same win is ignored (issue 19 item 7), a
 * report of an older one too, and a newer win of its own (its key was deleted and re-created)
 * makes it step down as `key_lost` rather than lead a second term unannounced.
 *
 * Inputs that answer a request carry the **epoch** the request was sent in; the epoch grows
 * whenever the lease is dropped (a step-down, a lost lease, stop), so answers for an older lease
 * are ignored (a lease granted for an older epoch is revoked). Watch events also carry the number
 * of the watch that saw them.
 *
 * The driver's contract: it carries out the commands of one step in order, then reports the
 * `emit` events in order (so a listener sees the state the step ended in, and may call back, e.g.
 * `serving()`, which is a new step); `set_timer` replaces a timer of the same name; `watch`
 * replaces the running watch; `release` is the resign's etcd work, done last.
 *
 * @module
 */

import type { KeyValue, WatchEvent } from "./etcd.ts";
import type {
  ClusterRole,
  LeaderInfo,
  LeadershipEvent,
  NodeInfo,
  StepDownReason,
} from "./leadership_events.ts";

/** What a machine is configured with (fixed once leadership starts). */
export interface LeadershipConfig {
  /** What the node publishes in the leader key when it leads. */
  readonly node: NodeInfo;
  /** Lease TTL asked of etcd (ms, whole seconds). */
  readonly ttlMs: number;
  /** A leader pauses this long before `safeUntil`. */
  readonly marginMs: number;
  /** Keep-alive cadence while paused or after a failed keep-alive. */
  readonly recheckMs: number;
  /** Delay before retrying a failed grant, read, campaign or watch. */
  readonly retryMs: number;
}

/**
 * The machine's timers, each armed at most once:
 * - `keep_alive`: the next keep-alive (every TTL/3 while a lease is held);
 * - `recheck`: the quicker keep-alive cadence while paused or after a failed keep-alive;
 * - `pause`: a leader's `safeUntil − margin`;
 * - `pause_limit`: a paused leader's `safeUntil + TTL` (then it steps down);
 * - `retry`: a failed grant (without a lease) or read, campaign or watch (with one);
 * - `standby_check`: a standby re-reads the key every TTL in case its watch went silent.
 */
export type LeadershipTimer =
  | "keep_alive"
  | "recheck"
  | "pause"
  | "pause_limit"
  | "retry"
  | "standby_check";

/** What every state knows. */
interface Facts {
  /** Grows whenever the lease is dropped; answers stamped with an older epoch are stale. */
  readonly epoch: number;
  /** The leader as this node knows it (itself included), or null. */
  readonly leader: LeaderInfo | null;
  /** Monotonic ms at which this node last won an election (0: never). */
  readonly electedAtMs: number;
  /** Send time of the newest keep-alive (or grant) etcd confirmed for the lease. */
  readonly confirmedSendMs: number;
  /** Monotonic ms until which the lease certainly lives (−Infinity without a lease). */
  readonly safeUntilMs: number;
  /** A keep-alive failed and none has been confirmed since. */
  readonly keepAliveFailing: boolean;
  /** A read of the leader key (not a leader's verification) is under way. */
  readonly observing: boolean;
  /** Number of the running watch of the leader key (0: none). */
  readonly watch: number;
  /** Watches started so far (numbers them). */
  readonly watches: number;
  /** Armed timers and the monotonic ms each is due. */
  readonly timers: Readonly<Partial<Record<LeadershipTimer, number>>>;
}

export interface StartingState extends Facts {
  readonly tag: "starting";
  /** Null until etcd granted the lease of this epoch. */
  readonly leaseId: string | null;
}

export interface StandbyState extends Facts {
  readonly tag: "standby";
  readonly leaseId: string;
}

export interface LeaderState extends Facts {
  readonly tag: "leader";
  readonly leaseId: string;
  /** Create revision of this node's leader key. */
  readonly term: number;
}

export interface PausedState extends Facts {
  readonly tag: "paused";
  readonly leaseId: string;
  readonly term: number;
  readonly pausedAtMs: number;
  /** `confirmedSendMs` when the pause began: only a newer confirmation can end it. */
  readonly confirmedAtPauseMs: number;
  /** The read that re-verifies the key is under way. */
  readonly verifying: boolean;
  /** A newer confirmation came during that read: read again if it does not resume. */
  readonly verifyAgain: boolean;
}

export interface StoppedState extends Facts {
  readonly tag: "stopped";
}

export type LeadershipState =
  | StartingState
  | StandbyState
  | LeaderState
  | PausedState
  | StoppedState;

/** The legal moves between tags (a move to the same tag is always legal). */
export const LEADERSHIP_TRANSITIONS: Readonly<Record<ClusterRole, readonly ClusterRole[]>> = {
  starting: ["standby", "stopped"],
  standby: ["leader", "starting", "stopped"],
  leader: ["paused", "starting", "stopped"],
  paused: ["leader", "starting", "stopped"],
  stopped: [],
};

/** Everything the driver reports: answers of etcd (with the epoch they were asked in), timers, checks. */
export type LeadershipInput =
  /** Begin: ask for the first lease. */
  | { readonly type: "start" }
  | { readonly type: "timer_fired"; readonly timer: LeadershipTimer }
  | {
    readonly type: "lease_granted";
    readonly epoch: number;
    readonly sendMs: number;
    readonly leaseId: string;
    readonly ttlS: number;
  }
  | { readonly type: "lease_grant_failed"; readonly epoch: number }
  /** etcd renewed the lease to `ttlS` (0: the lease no longer exists). */
  | {
    readonly type: "keep_alive_answered";
    readonly epoch: number;
    readonly sendMs: number;
    readonly ttlS: number;
  }
  | { readonly type: "keep_alive_failed"; readonly epoch: number; readonly leaseNotFound: boolean }
  /** A read of the leader key (to campaign, watch or find its own win). */
  | {
    readonly type: "leader_read";
    readonly epoch: number;
    readonly kv: KeyValue | undefined;
    readonly revision: number;
  }
  | { readonly type: "leader_read_failed"; readonly epoch: number }
  /** A paused leader's read of its key. */
  | {
    readonly type: "verify_read";
    readonly epoch: number;
    readonly term: number;
    readonly kv: KeyValue | undefined;
  }
  | { readonly type: "verify_read_failed"; readonly epoch: number; readonly term: number }
  /** The campaign's transaction; `kv` is the key it found when it did not succeed. */
  | {
    readonly type: "campaign_answered";
    readonly epoch: number;
    readonly succeeded: boolean;
    readonly revision: number;
    readonly kv: KeyValue | undefined;
  }
  | { readonly type: "campaign_failed"; readonly epoch: number; readonly leaseNotFound: boolean }
  | {
    readonly type: "watch_event";
    readonly epoch: number;
    readonly watch: number;
    readonly event: WatchEvent;
  }
  /** The watch stream ended without being stopped (broken, compacted). */
  | { readonly type: "watch_ended"; readonly epoch: number; readonly watch: number }
  /** The server is about to decide or promise: does the arithmetic still hold at `atMs`? */
  | { readonly type: "check"; readonly atMs: number }
  /** Something else (a fenced token reservation) found the key gone or another term's. */
  | { readonly type: "fenced"; readonly current: KeyValue | undefined }
  /** Planned hand-over: stop, then release the key and the lease. */
  | { readonly type: "resign" }
  /** Stop without a word to etcd (the lease runs out). */
  | { readonly type: "close" };

/** What the driver must do; requests echo their `epoch` (and `sendMs`) in their answer. */
export type LeadershipEffect =
  | {
    readonly type: "grant_lease";
    readonly epoch: number;
    readonly sendMs: number;
    readonly ttlS: number;
    readonly timeoutMs: number;
  }
  | {
    readonly type: "keep_alive";
    readonly epoch: number;
    readonly leaseId: string;
    readonly sendMs: number;
    readonly timeoutMs: number;
  }
  /** Give a lease back (errors ignored: it runs out anyway). */
  | { readonly type: "revoke_lease"; readonly leaseId: string; readonly timeoutMs?: number }
  | { readonly type: "read_leader"; readonly epoch: number; readonly timeoutMs: number }
  | {
    readonly type: "verify_leader";
    readonly epoch: number;
    readonly term: number;
    readonly timeoutMs: number;
  }
  /** Create the leader key on `leaseId` if absent (and read it if not). */
  | {
    readonly type: "campaign";
    readonly epoch: number;
    readonly leaseId: string;
    readonly timeoutMs: number;
  }
  /** Watch the leader key from `fromRevision` (replacing the running watch). */
  | {
    readonly type: "watch";
    readonly epoch: number;
    readonly watch: number;
    readonly fromRevision: number;
  }
  | { readonly type: "stop_watch" }
  /** Arm `timer` to fire in `delayMs` (replacing it if armed). */
  | { readonly type: "set_timer"; readonly timer: LeadershipTimer; readonly delayMs: number }
  | { readonly type: "cancel_timer"; readonly timer: LeadershipTimer }
  | { readonly type: "emit"; readonly event: LeadershipEvent }
  /** Resign: delete the key if `term` still holds it, then revoke `leaseId` (each when not null). */
  | { readonly type: "release"; readonly term: number | null; readonly leaseId: string | null };

export interface LeadershipStep {
  readonly state: LeadershipState;
  readonly effects: readonly LeadershipEffect[];
}

/** Before `start`: no lease, epoch 0. */
export function initialLeadershipState(): StartingState {
  return {
    tag: "starting",
    leaseId: null,
    epoch: 0,
    leader: null,
    electedAtMs: 0,
    confirmedSendMs: -Infinity,
    safeUntilMs: -Infinity,
    keepAliveFailing: false,
    observing: false,
    watch: 0,
    watches: 0,
    timers: {},
  };
}

/** The term a state leads (0 when it does not lead). */
export function leadingTerm(state: LeadershipState): number {
  return state.tag === "leader" || state.tag === "paused" ? state.term : 0;
}

/** Whether a state serves at `nowMs` (a leader before `safeUntil − margin`); no side effect. */
export function servesAt(config: LeadershipConfig, state: LeadershipState, nowMs: number): boolean {
  return state.tag === "leader" && nowMs < state.safeUntilMs - config.marginMs;
}

/** One step: the state after `input` at `nowMs`, and what the driver must do. */
export function step(
  config: LeadershipConfig,
  state: LeadershipState,
  input: LeadershipInput,
  nowMs: number,
): LeadershipStep {
  const transition = new Transition(config, state, nowMs);
  transition.handle(input);
  assertLeadershipInvariants(config, transition.state);
  return { state: transition.state, effects: transition.effects };
}

/** The invariants every state the machine returns holds; throws on a breach (a programmer error). */
export function assertLeadershipInvariants(
  config: LeadershipConfig,
  state: LeadershipState,
): void {
  const fail = (why: string) => {
    throw new Error(`Leadership invariant broken in "${state.tag}": ${why}`);
  };
  const { timers } = state;
  const holding = state.tag !== "stopped" && state.leaseId !== null;
  if (!Number.isSafeInteger(state.epoch) || state.epoch < 0) fail(`epoch ${state.epoch}`);
  if (!holding) {
    if (state.observing || state.watch !== 0) fail("a read or watch without a lease");
    if (state.keepAliveFailing) fail("a failing keep-alive without a lease");
    for (
      const timer of ["keep_alive", "recheck", "pause", "pause_limit", "standby_check"] as const
    ) {
      if (timers[timer] !== undefined) fail(`timer ${timer} armed without a lease`);
    }
  } else if (timers.keep_alive === undefined) {
    fail("a lease without keep-alives");
  }
  if (state.tag === "stopped" && Object.keys(timers).length > 0) fail("a stopped timer");
  if (state.tag !== "leader" && timers.pause !== undefined) fail("a pause timer off the lead");
  if (state.tag !== "paused" && timers.pause_limit !== undefined) fail("a pause limit unpaused");
  if (state.tag === "leader" || state.tag === "paused") {
    if (!Number.isSafeInteger(state.term) || state.term <= 0) fail(`term ${state.term}`);
    if (state.leader?.term !== state.term) fail("the known leader is not this term");
  }
  if (state.tag === "leader") {
    // A leader serves until its pause timer: armed, at safeUntil − margin at the latest.
    const pauseAtMs = timers.pause;
    if (pauseAtMs === undefined || pauseAtMs > state.safeUntilMs - config.marginMs + 1e-6) {
      fail(`pause timer at ${pauseAtMs}, safeUntil ${state.safeUntilMs}`);
    }
  }
  if (state.tag === "paused") {
    if (timers.pause_limit === undefined) fail("paused without a limit");
    if (state.confirmedAtPauseMs > state.confirmedSendMs) fail("confirmations went back");
  }
}

const LEADING = new Set<ClusterRole>(["leader", "paused"]);

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

/** The input of one type. */
type InputOf<T extends LeadershipInput["type"]> = Extract<LeadershipInput, { readonly type: T }>;

/** One step in the making: the state so far and the commands so far. */
class Transition {
  readonly #config: LeadershipConfig;
  readonly #nowMs: number;
  state: LeadershipState;
  readonly effects: LeadershipEffect[] = [];

  constructor(config: LeadershipConfig, state: LeadershipState, nowMs: number) {
    this.#config = config;
    this.state = state;
    this.#nowMs = nowMs;
  }

  handle(input: LeadershipInput): void {
    const s = this.state;
    switch (input.type) {
      case "start":
        if (s.tag === "stopped") return; // closed before it started: final all the same
        if (s.tag !== "starting" || s.epoch !== 0) throw new Error("Leadership already started");
        this.#set({ ...s, epoch: 1 });
        this.#grantLease();
        return;
      case "timer_fired":
        return this.#timerFired(input.timer);
      case "lease_granted":
        return this.#leaseGranted(input);
      case "lease_grant_failed":
        if (this.#current(input.epoch)) this.#retryLater();
        return;
      case "keep_alive_answered":
        return this.#keepAliveAnswered(input);
      case "keep_alive_failed":
        if (!this.#current(input.epoch)) return;
        if (input.leaseNotFound) return this.#leaseGone();
        this.#set({ ...s, keepAliveFailing: true });
        this.#armRecheck();
        return;
      case "leader_read":
        return this.#leaderRead(input);
      case "leader_read_failed":
        if (!this.#current(input.epoch)) return;
        this.#set({ ...s, observing: false });
        this.#retryLater();
        return;
      case "verify_read":
      case "verify_read_failed":
        return this.#verifyReadEnded(input);
      case "campaign_answered":
        return this.#campaignAnswered(input);
      case "campaign_failed":
        if (!this.#current(input.epoch)) return;
        if (input.leaseNotFound) return this.#leaseGone();
        // The outcome is unknown: the read that follows tells whether the key is ours.
        this.#retryLater();
        return;
      case "watch_event":
        if (!this.#current(input.epoch) || input.watch !== s.watch) return;
        if (input.event.type === "delete") this.#keyDeleted();
        else this.#seeKey(input.event.kv);
        return;
      case "watch_ended":
        // Broken stream (or a compacted revision): read again, which restarts the watch.
        if (!this.#current(input.epoch) || input.watch !== s.watch) return;
        this.#set({ ...s, watch: 0 });
        this.#retryLater();
        return;
      case "check":
        this.#checkDeadline(input.atMs);
        return;
      case "fenced":
        return this.#fenced(input);
      case "resign":
        return this.#resign();
      case "close":
        this.#shutdown();
        return;
    }
  }

  // ---- inputs --------------------------------------------------------------------

  #leaseGranted(input: InputOf<"lease_granted">): void {
    const s = this.state;
    if (!this.#current(input.epoch)) {
      // Answer to a lease request of a past life: give the lease back.
      this.effects.push({ type: "revoke_lease", leaseId: input.leaseId });
      return;
    }
    if (s.tag !== "starting" || s.leaseId !== null) {
      throw new Error(`A second lease granted in epoch ${s.epoch}`);
    }
    this.#set({ ...s, leaseId: input.leaseId });
    this.#confirm(input.sendMs, input.ttlS);
    this.#armKeepAlive();
    this.#observe();
  }

  #keepAliveAnswered(input: InputOf<"keep_alive_answered">): void {
    const s = this.state;
    if (!this.#current(input.epoch)) return;
    if (input.ttlS <= 0) return this.#leaseGone();
    const wasFailing = s.keepAliveFailing;
    this.#set({ ...s, keepAliveFailing: false });
    this.#confirm(input.sendMs, input.ttlS);
    // A black-holed connection can leave a watch stream silent: start it again.
    const now = this.state;
    if (wasFailing && (now.tag === "standby" || now.tag === "leader")) this.#observe();
  }

  #leaderRead(input: InputOf<"leader_read">): void {
    const s = this.state;
    if (!this.#current(input.epoch)) return;
    this.#set({ ...s, observing: false });
    if (input.kv === undefined) {
      if (LEADING.has(s.tag)) this.#stepDown("key_lost");
      else this.#campaign();
      return;
    }
    this.#seeKey(input.kv);
    if (this.state.epoch === input.epoch) this.#startWatch(input.revision + 1);
  }

  #campaignAnswered(input: InputOf<"campaign_answered">): void {
    if (!this.#current(input.epoch)) return;
    if (input.succeeded) {
      this.#becomeLeader(input.revision);
    } else if (input.kv === undefined) {
      // Deleted again between the compare and now: try again.
      this.#retryLater(0);
      return;
    } else {
      this.#seeKey(input.kv);
    }
    if (this.state.epoch === input.epoch) this.#startWatch(input.revision + 1);
  }

  /** A paused leader's read of the key came back (or failed): still the leader, or not. */
  #verifyReadEnded(input: InputOf<"verify_read" | "verify_read_failed">): void {
    const s = this.state;
    if (!this.#current(input.epoch) || s.tag !== "paused") return;
    this.#set({ ...s, verifying: false });
    if (input.type === "verify_read_failed") {
      if (s.term === input.term && s.verifyAgain) this.#verify();
      return;
    }
    if (s.term !== input.term) return;
    return this.#verified(s, input.kv);
  }

  #fenced(input: InputOf<"fenced">): void {
    const s = this.state;
    if (!LEADING.has(s.tag)) return;
    if (input.current === undefined) this.#stepDown("key_lost");
    else if (input.current.createRevision !== leadingTerm(s)) {
      this.#stepDown("deposed", input.current);
    }
  }

  #resign(): void {
    const s = this.state;
    const term = leadingTerm(s);
    const leaseId = s.tag === "stopped" ? null : s.leaseId;
    const pausedMs = s.tag === "paused" ? this.#nowMs - s.pausedAtMs : undefined;
    this.#shutdown();
    if (term !== 0) {
      this.#emit({
        type: "stepped_down",
        term,
        reason: "shutdown",
        ...(pausedMs !== undefined ? { pausedMs } : {}),
      });
    }
    this.effects.push({ type: "release", term: term !== 0 ? term : null, leaseId });
  }

  // ---- moves ---------------------------------------------------------------------

  /** Replaces the state, checking the move against the table. */
  #set(next: LeadershipState): void {
    const from = this.state;
    if (from.tag !== next.tag && !LEADERSHIP_TRANSITIONS[from.tag].includes(next.tag)) {
      throw new Error(`Illegal leadership transition ${from.tag} → ${next.tag}`);
    }
    if (LEADING.has(from.tag) && LEADING.has(next.tag) && leadingTerm(from) !== leadingTerm(next)) {
      throw new Error(`A leader's term changed from ${leadingTerm(from)} to ${leadingTerm(next)}`);
    }
    if (next.epoch < from.epoch) throw new Error("The epoch went back");
    this.state = next;
  }

  #current(epoch: number): boolean {
    return epoch === this.state.epoch && this.state.tag !== "stopped";
  }

  #emit(event: LeadershipEvent): void {
    this.effects.push({ type: "emit", event });
  }

  #arm(timer: LeadershipTimer, delayMs: number): void {
    const s = this.state;
    this.#set({ ...s, timers: { ...s.timers, [timer]: this.#nowMs + Math.max(0, delayMs) } });
    this.effects.push({ type: "set_timer", timer, delayMs });
  }

  #disarm(timer: LeadershipTimer): void {
    const s = this.state;
    if (s.timers[timer] === undefined) return;
    const timers = { ...s.timers };
    delete timers[timer];
    this.#set({ ...s, timers });
    this.effects.push({ type: "cancel_timer", timer });
  }

  #timerFired(timer: LeadershipTimer): void {
    if (this.state.timers[timer] === undefined) {
      throw new Error(`Timer ${timer} fired but is not armed`);
    }
    const timers = { ...this.state.timers };
    delete timers[timer];
    this.#set({ ...this.state, timers });
    const s = this.state;
    switch (timer) {
      case "keep_alive":
        this.#sendKeepAlive();
        this.#armKeepAlive();
        return;
      case "recheck":
        if (s.tag === "paused" || s.keepAliveFailing) {
          this.#sendKeepAlive();
          this.#armRecheck();
        }
        return;
      case "pause":
        if (s.tag !== "leader") return;
        // A timer can fire a little early (real timers count whole ms): wait out the rest.
        if (this.#nowMs < s.safeUntilMs - this.#config.marginMs) this.#armPause();
        else this.#pause();
        return;
      case "pause_limit":
        if (s.tag !== "paused") return;
        if (this.#nowMs >= this.#pauseLimitMs(s)) this.#stepDown("etcd_unreachable");
        else this.#armPauseLimit(); // a confirmation moved safeUntil on without a resume yet
        return;
      case "retry":
        if (s.tag === "stopped") return;
        if (s.leaseId === null) this.#grantLease();
        else this.#observe();
        return;
      case "standby_check":
        if (s.tag === "standby") this.#observe();
        return;
    }
  }

  #retryLater(delayMs = this.#config.retryMs): void {
    this.#arm("retry", delayMs);
  }

  #requestTimeoutMs(): number {
    return this.#config.ttlMs / 2;
  }

  #grantLease(): void {
    if (this.state.tag === "stopped") return;
    this.effects.push({
      type: "grant_lease",
      epoch: this.state.epoch,
      sendMs: this.#nowMs,
      ttlS: this.#config.ttlMs / 1000,
      timeoutMs: this.#requestTimeoutMs(),
    });
  }

  #armKeepAlive(): void {
    this.#arm("keep_alive", this.#config.ttlMs / 3);
  }

  /** A quicker keep-alive cadence while paused or after a failed keep-alive. */
  #armRecheck(): void {
    if (this.state.timers.recheck !== undefined) return;
    this.#arm("recheck", this.#config.recheckMs);
  }

  #sendKeepAlive(): void {
    const s = this.state;
    if (s.tag === "stopped" || s.leaseId === null) return;
    this.effects.push({
      type: "keep_alive",
      epoch: s.epoch,
      leaseId: s.leaseId,
      sendMs: this.#nowMs,
      timeoutMs: this.#config.ttlMs / 3,
    });
  }

  /** A keep-alive (or the grant) sent at `sendMs` was confirmed with `ttlS`. */
  #confirm(sendMs: number, ttlS: number): void {
    const s = this.state;
    if (sendMs <= s.confirmedSendMs) return;
    this.#set({ ...s, confirmedSendMs: sendMs, safeUntilMs: sendMs + ttlS * 1000 });
    const now = this.state;
    if (now.tag === "leader") this.#armPause();
    else if (now.tag === "paused" && sendMs > now.confirmedAtPauseMs) this.#verify();
  }

  #armPause(): void {
    this.#arm("pause", this.state.safeUntilMs - this.#config.marginMs - this.#nowMs);
  }

  /** The server's check before a decision: a leader past its deadline pauses here. */
  #checkDeadline(atMs: number): void {
    const s = this.state;
    if (s.tag === "leader" && atMs >= s.safeUntilMs - this.#config.marginMs) this.#pause();
  }

  #pause(): void {
    const s = this.state;
    if (s.tag !== "leader") return;
    this.#disarm("pause");
    const after = this.state as LeaderState;
    this.#set({
      ...after,
      tag: "paused",
      pausedAtMs: this.#nowMs,
      confirmedAtPauseMs: after.confirmedSendMs,
      verifying: false,
      verifyAgain: false,
    });
    this.#emit({ type: "paused", term: s.term });
    this.#armPauseLimit();
    this.#sendKeepAlive();
    this.#armRecheck();
  }

  /**
   * Past `safeUntil + TTL` a paused leader gives up: a new leader may exist by then. A leader
   * that wakes from a freeze already past it still gets one keep-alive timeout (TTL/3) to hear
   * from etcd, so the step-down names the real reason (usually `lease_expired`).
   */
  #pauseLimitMs(s: PausedState): number {
    return Math.max(s.safeUntilMs + this.#config.ttlMs, s.pausedAtMs + this.#config.ttlMs / 3);
  }

  #armPauseLimit(): void {
    const s = this.state as PausedState;
    this.#arm("pause_limit", this.#pauseLimitMs(s) - this.#nowMs);
  }

  /** Paused, and a newer keep-alive was confirmed: read the key before resuming. */
  #verify(): void {
    const s = this.state;
    if (s.tag !== "paused") return;
    if (s.verifying) {
      this.#set({ ...s, verifyAgain: true });
      return;
    }
    this.#set({ ...s, verifying: true, verifyAgain: false });
    this.effects.push({
      type: "verify_leader",
      epoch: s.epoch,
      term: s.term,
      timeoutMs: this.#requestTimeoutMs(),
    });
  }

  #verified(s: PausedState, kv: KeyValue | undefined): void {
    if (kv === undefined) {
      this.#stepDown("key_lost");
    } else if (kv.createRevision !== s.term || kv.lease !== s.leaseId) {
      this.#stepDown("deposed", kv);
    } else if (this.#nowMs < this.state.safeUntilMs - this.#config.marginMs) {
      this.#resume();
    } else if ((this.state as PausedState).verifyAgain) {
      this.#verify();
    }
  }

  #resume(): void {
    const pausedMs = this.#nowMs - (this.state as PausedState).pausedAtMs;
    this.#disarm("pause_limit");
    this.#disarm("recheck");
    const { pausedAtMs: _p, confirmedAtPauseMs: _c, verifying: _v, verifyAgain: _a, ...rest } = this
      .state as PausedState;
    this.#set({ ...rest, tag: "leader" });
    this.#armPause();
    this.#emit({ type: "resumed", term: rest.term, pausedMs });
  }

  /** The lease no longer exists. */
  #leaseGone(): void {
    if (LEADING.has(this.state.tag)) {
      this.#stepDown("lease_expired");
      return;
    }
    this.#dropLease();
    this.#grantLease();
  }

  /** Forgets the lease and everything that hung on it; a new epoch begins. */
  #dropLease(): void {
    for (const timer of Object.keys(this.state.timers) as LeadershipTimer[]) this.#disarm(timer);
    this.#stopWatch();
    const s = this.state;
    const next: StartingState = {
      tag: "starting",
      leaseId: null,
      epoch: s.epoch + 1,
      leader: s.leader,
      electedAtMs: s.electedAtMs,
      confirmedSendMs: -Infinity,
      safeUntilMs: -Infinity,
      keepAliveFailing: false,
      observing: false,
      watch: 0,
      watches: s.watches,
      timers: {},
    };
    this.#set(next);
  }

  /**
   * Steps down from leading (or pausing) for `reason`: gives the lease back when etcd can be
   * reached, then starts over as a candidate with a new lease.
   */
  #stepDown(reason: StepDownReason, current?: KeyValue): void {
    const s = this.state;
    if (s.tag !== "leader" && s.tag !== "paused") return;
    const pausedMs = s.tag === "paused" ? this.#nowMs - s.pausedAtMs : undefined;
    this.#dropLease();
    this.#emit({
      type: "stepped_down",
      term: s.term,
      reason,
      ...(pausedMs !== undefined ? { pausedMs } : {}),
    });
    this.#setLeader(current !== undefined ? parseLeader(current) : null);
    this.effects.push({
      type: "revoke_lease",
      leaseId: s.leaseId,
      timeoutMs: this.#requestTimeoutMs(),
    });
    this.#grantLease();
  }

  #shutdown(): void {
    for (const timer of Object.keys(this.state.timers) as LeadershipTimer[]) this.#disarm(timer);
    this.#stopWatch();
    const s = this.state;
    this.#set({
      tag: "stopped",
      epoch: s.epoch + 1,
      leader: s.leader,
      electedAtMs: s.electedAtMs,
      confirmedSendMs: s.confirmedSendMs,
      safeUntilMs: s.safeUntilMs,
      keepAliveFailing: false,
      observing: false,
      watch: 0,
      watches: s.watches,
      timers: {},
    });
  }

  #setLeader(leader: LeaderInfo | null): void {
    const before = this.state.leader;
    if (
      before === leader ||
      before !== null && leader !== null && before.term === leader.term &&
        before.advertise === leader.advertise
    ) {
      return;
    }
    this.#set({ ...this.state, leader });
    this.#emit({ type: "leader_changed", leader });
  }

  /** Reads the leader key: becomes leader if it is ours, campaigns if absent, else watches. */
  #observe(): void {
    const s = this.state;
    if (s.tag === "stopped" || s.leaseId === null || s.observing) return;
    this.#set({ ...s, observing: true });
    this.effects.push({
      type: "read_leader",
      epoch: s.epoch,
      timeoutMs: this.#requestTimeoutMs(),
    });
  }

  /** Acts on the current leader key. */
  #seeKey(kv: KeyValue): void {
    const s = this.state;
    if (s.tag === "stopped" || s.leaseId === null) {
      throw new Error(`The leader key was seen without a lease in "${s.tag}"`);
    }
    if (s.tag === "leader" || s.tag === "paused") {
      if (kv.createRevision !== s.term || kv.lease !== s.leaseId) this.#stepDown("deposed", kv);
      return;
    }
    if (kv.lease === s.leaseId) {
      // Our own campaign won although its answer was lost (or has not arrived yet).
      this.#becomeLeader(kv.createRevision);
      return;
    }
    this.#set({ ...s, tag: "standby", leaseId: s.leaseId });
    this.#setLeader(parseLeader(kv));
    this.#armStandbyCheck();
  }

  #campaign(): void {
    const s = this.state;
    if (s.tag === "stopped" || s.leaseId === null) return;
    if (s.tag === "starting") this.#set({ ...s, tag: "standby", leaseId: s.leaseId });
    this.#setLeader(null);
    this.effects.push({
      type: "campaign",
      epoch: s.epoch,
      leaseId: s.leaseId,
      timeoutMs: this.#requestTimeoutMs(),
    });
  }

  #becomeLeader(term: number): void {
    const s = this.state;
    if (s.tag === "leader" || s.tag === "paused") {
      // One win can be reported twice: by the campaign's answer and by the watch (or a read)
      // that sees the key with this node's lease first; they travel on different connections.
      // A report of an older win comes late; a newer win means the key of this term was
      // deleted (and re-created by a second campaign): this term is over.
      if (term > s.term) this.#stepDown("key_lost");
      return;
    }
    if (s.tag !== "standby") throw new Error(`Elected while "${s.tag}"`);
    this.#disarm("standby_check");
    this.#set({ ...(this.state as StandbyState), tag: "leader", term, electedAtMs: this.#nowMs });
    this.#emit({ type: "elected", term });
    this.#setLeader({ ...this.#config.node, term });
    // Elected on an old confirmation: pause at once (and re-check) rather than serve.
    if (this.#nowMs >= this.state.safeUntilMs - this.#config.marginMs) this.#pause();
    else this.#armPause();
  }

  /** Standbys re-read the key every TTL as well, in case a watch stream went silent. */
  #armStandbyCheck(): void {
    this.#arm("standby_check", this.#config.ttlMs);
  }

  #startWatch(fromRevision: number): void {
    const s = this.state;
    const watch = s.watches + 1;
    this.#set({ ...s, watch, watches: watch });
    this.effects.push({ type: "watch", epoch: s.epoch, watch, fromRevision });
  }

  #stopWatch(): void {
    if (this.state.watch === 0) return;
    this.#set({ ...this.state, watch: 0 });
    this.effects.push({ type: "stop_watch" });
  }

  #keyDeleted(): void {
    if (LEADING.has(this.state.tag)) {
      this.#stepDown("key_lost");
      return;
    }
    this.#setLeader(null);
    this.#campaign();
  }
}
