/**
 * A seeded simulation of leader election: three nodes, each a `Leadership` driver with its own
 * clock (rate within ±5 % of etcd's, timers that fire up to 1 ms early or a little late) and its
 * own faulty link to one in-memory etcd (tests/helpers/fake_etcd.ts), all on one manual clock of
 * simulated true time. Each schedule draws, from its seed, latency spikes, lost requests and
 * answers, silent and broken watch streams, etcd stalls (answered late, leases extended as a new
 * etcd leader does) and outages, node freezes (SIGSTOP: the node takes no timer and no answer
 * until it runs again, while time runs on), kills (the lease runs out), planned hand-overs and
 * restarts; then it heals everything and expects one leader.
 *
 * After every instant at which anything happened (every timer of any node, every answer, every
 * fault) it checks, against etcd's truth:
 * 1. at most one node serves (a leader before `safeUntil − margin` on its own clock);
 * 2. a serving node holds the leader key (its lease, its term) and its lease is alive, and it
 *    stops serving on its own before that lease can expire;
 * 3. `safeUntil` never lies: while a node relies on it, its lease lives at least that long (up to
 *    what a slow clock takes from the margin);
 * 4. a running leader does not stay in role `leader` past `safeUntil − margin` (plus timer
 *    lateness), whether or not anything asks `serving()`;
 * 5. events make sense: one `elected` per term, terms grow, pauses and step-downs only while
 *    leading, no two nodes elected for one term; and no machine invariant breaks (they throw).
 *
 * A failure names its seed: replay it with `LOCKD_SIM_SEED=<seed>` (and `LOCKD_SIM_TRACE=1` for
 * the story). `LOCKD_SIM_SCHEDULES` and `LOCKD_SIM_FIRST_SEED` run other or more schedules.
 */

import assert from "node:assert/strict";
import { ManualScheduler, type Scheduler } from "../../src/clock.ts";
import { Leadership, type LeadershipEvent } from "../../src/cluster/leadership.ts";
import { type FakeClient, FakeEtcd, type FakeLink } from "../helpers/fake_etcd.ts";

const SCHEDULES = Number(Deno.env.get("LOCKD_SIM_SCHEDULES") ?? 2_000);
const FIRST_SEED = Number(Deno.env.get("LOCKD_SIM_FIRST_SEED") ?? 1);
const ONE_SEED = Deno.env.get("LOCKD_SIM_SEED");
const TRACE = Deno.env.get("LOCKD_SIM_TRACE") === "1";

const NODES = 3;
const CLUSTER = "sim";
const LEADER_KEY = `${CLUSTER}/leader`;
/** Simulated time with faults, then time with none, at the end of which one node must serve. */
const CHAOS_MS = 12_000;
const HEAL_MS = 12_000;
/** A timer fires at most this much after its time (the node's event loop is busy). */
const TIMER_LATE_MS_MAX = 2;
/** ...and at most this much before it (real timers count whole milliseconds). */
const TIMER_EARLY_MS_MAX = 1;
/** Microtask turns that let every answer of one instant reach its node. */
const SETTLE_TURNS = 100;
const EPSILON_MS = 1e-6;
/** After the heal a leader serves within 2 × TTL and this (an election, a retry or two). */
const RECOVERY_SLACK_MS = 1_000;

/** mulberry32: small, seeded, well mixed. */
class Random {
  #state: number;
  constructor(seed: number) {
    this.#state = seed | 0;
  }
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) | 0;
    let t = Math.imul(this.#state ^ (this.#state >>> 15), 1 | this.#state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  between(low: number, high: number): number {
    return low + (high - low) * this.next();
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)];
  }
}

/** Totals over every schedule, to show the schedules reach every corner. */
const totals = {
  schedules: 0,
  instants: 0,
  simulatedMs: 0,
  elected: 0,
  paused: 0,
  resumed: 0,
  steppedDown: {} as Record<string, number>,
  faults: {} as Record<string, number>,
  servingChecks: 0,
  /** Longest time from the heal to the first instant a node serves. */
  recoveryMsMax: 0,
  recoverySeed: 0,
};

class Breach extends Error {}

/** One run of a node's process, from start to kill, hand-over or the end. */
class Incarnation {
  status: "running" | "frozen" | "dead" = "running";
  readonly #deferred: (() => void)[] = [];
  readonly client: FakeClient;
  readonly leadership: Leadership;
  /** What the events say: the term led (0: none) and whether paused. */
  leading = 0;
  paused = false;
  lastElected = 0;

  constructor(readonly sim: Simulation, readonly node: SimNode) {
    const link: FakeLink = {
      requestDelayMs: () => node.delayMs(),
      answerDelayMs: () => node.delayMs(),
      dropRequest: () => node.drops(),
      dropAnswer: () => node.drops(),
      watchDelayMs: () => node.delayMs(),
      dropWatchBatch: () => sim.nowMs() < node.silentUntilMs,
      deliver: (take) => this.run(take),
      scheduler: this.scheduler(),
    };
    this.client = sim.etcd.client(link);
    this.leadership = new Leadership({
      etcd: this.client,
      scheduler: this.scheduler(),
      cluster: CLUSTER,
      node: { name: node.name, advertise: `${node.name}:7400`, admin: null },
      ttlMs: sim.ttlMs,
      onEvent: (event) => this.#onEvent(event),
    });
  }

  /** Runs `take` in this process: now, when it runs again, or never (dead). */
  run(take: () => void): void {
    if (this.status === "dead") return;
    if (this.status === "frozen") this.#deferred.push(take);
    else take();
  }

  freeze(): void {
    if (this.status === "running") this.status = "frozen";
  }

  thaw(): void {
    if (this.status !== "frozen") return;
    this.status = "running";
    // SIGCONT: everything that fell due meanwhile, in the order it did.
    while (this.#deferred.length > 0 && this.status === "running") this.#deferred.shift()!();
  }

  kill(): void {
    this.status = "dead";
    this.#deferred.length = 0;
    this.client.close(); // the process's connections close with it
  }

  #scheduler: Scheduler | null = null;
  /** The node's clock and timers: its own rate, timers a little early or late, frozen with it. */
  scheduler(): Scheduler {
    if (this.#scheduler !== null) return this.#scheduler;
    const { sim, node } = this;
    this.#scheduler = {
      monotonicMs: () => node.clockMs(sim.nowMs()),
      wallMs: () => 1_700_000_000_000 + node.clockMs(sim.nowMs()),
      setTimer: (callback, delayMs) => {
        const jitterMs = sim.random.chance(0.3)
          ? -sim.random.between(0, TIMER_EARLY_MS_MAX)
          : sim.random.between(0, TIMER_LATE_MS_MAX);
        const trueDelayMs = Math.max(0, Math.max(0, delayMs) / node.rate + jitterMs);
        return sim.truth.setTimer(() => this.run(callback), trueDelayMs);
      },
    };
    return this.#scheduler;
  }

  #onEvent(event: LeadershipEvent): void {
    const sim = this.sim;
    sim.trace(`${this.node.name} ${JSON.stringify(event)}`);
    switch (event.type) {
      case "elected":
        totals.elected++;
        if (this.leading !== 0) sim.breach(`${this.node.name} elected while leading`);
        if (event.term <= this.lastElected) {
          sim.breach(`${this.node.name} elected for term ${event.term} after ${this.lastElected}`);
        }
        if (sim.electedTerms.has(event.term)) sim.breach(`two elections of term ${event.term}`);
        sim.electedTerms.add(event.term);
        this.leading = this.lastElected = event.term;
        return;
      case "paused":
        totals.paused++;
        if (this.leading !== event.term || this.paused) sim.breach(`bad pause ${event.term}`);
        this.paused = true;
        return;
      case "resumed":
        totals.resumed++;
        if (this.leading !== event.term || !this.paused) sim.breach(`bad resume ${event.term}`);
        if (!(event.pausedMs >= 0)) sim.breach(`paused for ${event.pausedMs} ms`);
        this.paused = false;
        return;
      case "stepped_down":
        totals.steppedDown[event.reason] = (totals.steppedDown[event.reason] ?? 0) + 1;
        if (this.leading !== event.term) sim.breach(`bad step-down from ${event.term}`);
        if ((event.pausedMs !== undefined) !== this.paused) {
          sim.breach(`step-down pausedMs ${event.pausedMs} while paused=${this.paused}`);
        }
        this.leading = 0;
        this.paused = false;
        return;
      case "leader_changed":
        return;
    }
  }
}

/** A machine: its clock and its link's faults outlive the processes run on it. */
class SimNode {
  incarnation: Incarnation | null = null;
  /** Clock rate relative to etcd's, and offset. */
  readonly rate: number;
  readonly offsetMs: number;
  spikeUntilMs = -Infinity;
  spikeMs = 0;
  lossUntilMs = -Infinity;
  lossP = 0;
  silentUntilMs = -Infinity;

  constructor(readonly sim: Simulation, readonly name: string) {
    const drift = sim.random.chance(0.5);
    this.rate = drift ? sim.random.between(0.95, 1.05) : 1;
    this.offsetMs = Math.floor(sim.random.between(0, 1e6));
  }

  clockMs(trueMs: number): number {
    return this.offsetMs + this.rate * trueMs;
  }

  /** When (true time) this node's clock reads `clockMs`. */
  trueMs(clockMs: number): number {
    return (clockMs - this.offsetMs) / this.rate;
  }

  delayMs(): number {
    const random = this.sim.random;
    const base = random.between(0.05, 2);
    return this.sim.nowMs() < this.spikeUntilMs ? base + random.between(0, this.spikeMs) : base;
  }

  drops(): boolean {
    return this.sim.nowMs() < this.lossUntilMs && this.sim.random.chance(this.lossP);
  }

  start(): void {
    this.incarnation = new Incarnation(this.sim, this);
    this.incarnation.leadership.start();
  }
}

class Simulation {
  readonly random: Random;
  readonly truth = new ManualScheduler(1_700_000_000_000, 0);
  readonly etcd = new FakeEtcd(this.truth);
  readonly nodes: SimNode[] = [];
  readonly ttlMs: number;
  readonly electedTerms = new Set<number>();
  failure: unknown = null;
  lastServedTerm = 0;
  /** First instant after the heal at which a node served. */
  servedAfterHealMs: number | null = null;
  readonly #trace: string[] = [];

  constructor(readonly seed: number) {
    this.random = new Random(seed);
    this.ttlMs = this.random.chance(0.8) ? 2_000 : 3_000;
    for (let i = 0; i < NODES; i++) this.nodes.push(new SimNode(this, `n${i}`));
  }

  nowMs(): number {
    return this.truth.monotonicMs();
  }

  trace(line: string): void {
    const text = `${this.nowMs().toFixed(3)} ${line}`;
    if (TRACE) console.log(text);
    this.#trace.push(text);
    if (this.#trace.length > 60) this.#trace.shift();
  }

  breach(why: string): void {
    this.failure ??= new Breach(why);
  }

  story(): string {
    return this.#trace.join("\n");
  }

  /** Draws the faults of the chaos phase and sets them on the clock. */
  plan(): void {
    const random = this.random;
    const count = Math.floor(random.between(2, 14));
    const kinds = [
      "spike",
      "lossy",
      "silent",
      "break_watch",
      "etcd_stall",
      "etcd_down",
      "freeze",
      "freeze",
      "kill",
      "resign",
    ] as const;
    for (let i = 0; i < count; i++) {
      const atMs = random.between(0, CHAOS_MS);
      const kind = random.pick(kinds);
      const node = random.pick(this.nodes);
      const all = random.chance(0.3);
      const targets = all ? this.nodes : [node];
      this.truth.setTimer(() => {
        totals.faults[kind] = (totals.faults[kind] ?? 0) + 1;
        this.fault(kind, targets);
      }, atMs);
    }
    this.truth.setTimer(() => this.heal(), CHAOS_MS);
  }

  fault(kind: string, targets: SimNode[]): void {
    const random = this.random;
    const now = this.nowMs();
    const names = targets.map((n) => n.name).join(",");
    switch (kind) {
      case "spike": {
        const untilMs = now + random.between(100, 4_000);
        const spikeMs = random.between(20, 1_500);
        for (const n of targets) Object.assign(n, { spikeUntilMs: untilMs, spikeMs });
        this.trace(`fault spike ${names} ${spikeMs.toFixed(0)} ms until ${untilMs.toFixed(0)}`);
        return;
      }
      case "lossy": {
        const untilMs = now + random.between(100, 5_000);
        const lossP = random.chance(0.3) ? 1 : random.between(0.1, 0.9);
        for (const n of targets) Object.assign(n, { lossUntilMs: untilMs, lossP });
        this.trace(`fault lossy ${names} p=${lossP.toFixed(2)} until ${untilMs.toFixed(0)}`);
        return;
      }
      case "silent": {
        const untilMs = now + random.between(200, 6_000);
        for (const n of targets) n.silentUntilMs = untilMs;
        this.trace(`fault silent watches ${names} until ${untilMs.toFixed(0)}`);
        return;
      }
      case "break_watch":
        this.trace(`fault break watches ${names}`);
        for (const n of targets) n.incarnation?.client.breakWatches();
        return;
      case "etcd_stall": {
        const forMs = random.between(100, 3_000);
        const extendMs = random.between(0, this.ttlMs);
        this.trace(`fault etcd stall ${forMs.toFixed(0)} ms, then leases +${extendMs.toFixed(0)}`);
        this.etcd.setMode("stall");
        this.truth.setTimer(() => {
          if (this.etcd.mode !== "stall") return;
          this.etcd.extendLeases(extendMs); // a new etcd leader extends every lease
          this.etcd.setMode("up");
          this.trace("etcd up");
        }, forMs);
        return;
      }
      case "etcd_down": {
        const forMs = random.between(100, 3_000);
        this.trace(`fault etcd down ${forMs.toFixed(0)} ms`);
        this.etcd.setMode("down");
        this.truth.setTimer(() => {
          if (this.etcd.mode !== "down") return;
          this.etcd.setMode("up");
          this.trace("etcd up");
        }, forMs);
        return;
      }
      case "freeze": {
        const forMs = random.pick([
          () => random.between(5, 400),
          () => random.between(400, 2_500),
          () => random.between(2_500, 8_000),
        ])();
        for (const n of targets) {
          const incarnation = n.incarnation;
          if (incarnation?.status !== "running") continue;
          this.trace(`fault freeze ${n.name} for ${forMs.toFixed(0)} ms`);
          incarnation.freeze();
          this.truth.setTimer(() => {
            this.trace(`thaw ${n.name}`);
            incarnation.thaw();
          }, forMs);
        }
        return;
      }
      case "kill":
      case "resign": {
        const n = targets[0];
        const incarnation = n.incarnation;
        if (incarnation?.status !== "running") return;
        const restartMs = random.between(50, 6_000);
        this.trace(`fault ${kind} ${n.name}, restart in ${restartMs.toFixed(0)} ms`);
        if (kind === "kill") {
          incarnation.kill();
        } else {
          incarnation.leadership.resign(this.ttlMs).then(() => incarnation.kill());
        }
        this.truth.setTimer(() => {
          if (n.incarnation !== incarnation || this.nowMs() >= CHAOS_MS) return;
          if (incarnation.status !== "dead") incarnation.kill();
          this.trace(`restart ${n.name}`);
          n.start();
        }, restartMs);
        return;
      }
    }
  }

  /** The end of the chaos: every fault lifted, every node running. */
  heal(): void {
    this.trace("heal");
    if (this.etcd.mode !== "up") this.etcd.setMode("up");
    for (const n of this.nodes) {
      n.spikeUntilMs = n.lossUntilMs = n.silentUntilMs = -Infinity;
      const incarnation = n.incarnation;
      if (incarnation?.status === "frozen") incarnation.thaw();
      if (incarnation === null || incarnation.status === "dead") {
        incarnation?.kill();
        n.start();
      } else if (incarnation.leadership.role === "stopped") {
        incarnation.kill();
        n.start();
      }
    }
  }

  /** The invariants at this instant (see the module comment). */
  check(): void {
    const trueNow = this.nowMs();
    const key = this.etcd.peek(LEADER_KEY);
    const serving: SimNode[] = [];
    for (const n of this.nodes) {
      const incarnation = n.incarnation;
      if (incarnation === null || incarnation.status === "dead") continue;
      const leadership = incarnation.leadership;
      const state = leadership.state;
      const clockNow = n.clockMs(trueNow);
      const marginMs = leadership.marginMs;
      // 3. safeUntil never lies (a slow clock may take up to its drift from the margin).
      if (state.tag !== "stopped" && state.leaseId !== null && Number.isFinite(state.safeUntilMs)) {
        const slackMs = n.rate < 1 ? (1 / n.rate - 1) * this.ttlMs : 0;
        const claimEndMs = n.trueMs(state.safeUntilMs) - slackMs;
        if (trueNow < claimEndMs) {
          const expiresAtMs = this.etcd.leaseExpiresAtMs(state.leaseId);
          if (expiresAtMs === undefined || expiresAtMs < claimEndMs - EPSILON_MS) {
            this.breach(
              `${n.name}: safeUntil ${state.safeUntilMs} (true ${claimEndMs}) but lease ` +
                `${state.leaseId} ${expiresAtMs === undefined ? "is gone" : `ends ${expiresAtMs}`}`,
            );
          }
        }
      }
      // 1, 2. Serving at this instant: holds the key, on a live lease, and stops in time.
      if (state.tag === "leader" && clockNow < state.safeUntilMs - marginMs) {
        serving.push(n);
        const expiresAtMs = this.etcd.leaseExpiresAtMs(state.leaseId);
        if (key === undefined || key.lease !== state.leaseId || key.createRevision !== state.term) {
          this.breach(`${n.name} serves term ${state.term} but the key is ${JSON.stringify(key)}`);
        } else if (expiresAtMs === undefined || expiresAtMs <= trueNow) {
          this.breach(`${n.name} serves on an expired lease`);
        } else if (n.trueMs(state.safeUntilMs - marginMs) > expiresAtMs + EPSILON_MS) {
          this.breach(`${n.name} would serve past its lease (ends ${expiresAtMs})`);
        }
        if (state.term < this.lastServedTerm) {
          this.breach(`term ${state.term} served after term ${this.lastServedTerm}`);
        }
        this.lastServedTerm = Math.max(this.lastServedTerm, state.term);
        if (trueNow >= CHAOS_MS) this.servedAfterHealMs ??= trueNow;
      }
      // 4. A running leader pauses at its deadline by itself, and a paused one gives up at
      // safeUntil + TTL (or a keep-alive timeout after a freeze), as docs/cluster.md says.
      const lateMs = TIMER_LATE_MS_MAX * n.rate + EPSILON_MS;
      if (
        incarnation.status === "running" && state.tag === "leader" &&
        clockNow >= state.safeUntilMs - marginMs + lateMs
      ) {
        this.breach(
          `${n.name} still in role leader ${clockNow - state.safeUntilMs + marginMs} ms ` +
            `past safeUntil − margin`,
        );
      }
      if (incarnation.status === "running" && state.tag === "paused") {
        const limitMs = Math.max(
          state.safeUntilMs + this.ttlMs,
          state.pausedAtMs + this.ttlMs / 3,
        );
        if (clockNow >= limitMs + lateMs) {
          this.breach(`${n.name} still paused ${clockNow - limitMs} ms past its limit`);
        }
      }
    }
    if (serving.length > 1) {
      this.breach(`${serving.map((n) => n.name).join(" and ")} serve at once`);
    }
    totals.servingChecks++;
  }

  /** What servers do: check `serving()` before deciding (which may pause a leader). */
  probe(): void {
    for (const n of this.nodes) {
      const incarnation = n.incarnation;
      if (incarnation?.status === "running" && this.random.chance(0.2)) {
        incarnation.leadership.serving();
      }
    }
  }

  async run(): Promise<void> {
    this.plan();
    for (const n of this.nodes) n.start();
    const endMs = CHAOS_MS + HEAL_MS;
    for (;;) {
      await settle();
      this.throwIfFailed();
      this.check();
      this.throwIfFailed();
      const nextMs = this.truth.nextTimerAtMs();
      if (nextMs === undefined || nextMs > endMs) break;
      totals.instants++;
      this.truth.advance(Math.max(0, nextMs - this.nowMs()));
      this.probe();
    }
    this.truth.advance(Math.max(0, endMs - this.nowMs()));
    await settle();
    this.check();
    this.throwIfFailed();
    // Liveness: healed for HEAL_MS, one node serves and the others follow it.
    const leaders = this.nodes.filter((n) => n.incarnation!.leadership.serving());
    if (leaders.length !== 1) {
      throw new Breach(
        `no single leader after healing: ${
          this.nodes.map((n) => `${n.name}=${n.incarnation!.leadership.role}`).join(" ")
        }`,
      );
    }
    const term = leaders[0].incarnation!.leadership.term;
    for (const n of this.nodes) {
      if (n === leaders[0]) continue;
      const leadership = n.incarnation!.leadership;
      if (leadership.role !== "standby" || leadership.leader?.term !== term) {
        throw new Breach(
          `${n.name} is ${leadership.role} knowing term ${leadership.leader?.term}, not ${term}`,
        );
      }
    }
    totals.simulatedMs += endMs;
    // The longest a dead leader's lease lasts after the heal (a TTL, and up to a TTL more that
    // an etcd leader change added), then an election.
    const recoveryMs = this.servedAfterHealMs! - CHAOS_MS;
    if (recoveryMs > 2 * this.ttlMs + RECOVERY_SLACK_MS) {
      throw new Breach(`the first leader after the heal served after ${recoveryMs} ms`);
    }
    if (recoveryMs > totals.recoveryMsMax) {
      totals.recoveryMsMax = recoveryMs;
      totals.recoverySeed = this.seed;
    }
  }

  throwIfFailed(): void {
    if (this.failure !== null) throw this.failure;
  }

  close(): void {
    for (const n of this.nodes) {
      n.incarnation?.leadership.close();
      n.incarnation?.kill();
    }
  }
}

/** Lets every answer of this instant reach its node (answers are promise chains). */
async function settle(): Promise<void> {
  for (let i = 0; i < SETTLE_TURNS; i++) await null;
}

async function runSchedule(seed: number): Promise<void> {
  const sim = new Simulation(seed);
  const onRejection = (event: PromiseRejectionEvent) => {
    event.preventDefault();
    sim.failure ??= event.reason;
  };
  globalThis.addEventListener("unhandledrejection", onRejection);
  try {
    await sim.run();
    totals.schedules++;
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    throw new Error(
      `Schedule ${seed} failed at ${sim.nowMs().toFixed(3)} ms: ${why}\n` +
        `Replay: LOCKD_SIM_SEED=${seed} LOCKD_SIM_TRACE=1 deno test --allow-all ` +
        `tests/cluster/leadership_sim_test.ts\nLast steps:\n${sim.story()}`,
      { cause: error },
    );
  } finally {
    sim.close();
    globalThis.removeEventListener("unhandledrejection", onRejection);
  }
}

Deno.test(`leadership simulation: ${ONE_SEED !== undefined ? `schedule ${ONE_SEED}` : `${SCHEDULES} random schedules`} keep at most one serving node and a truthful safeUntil`, async () => {
  const seeds = ONE_SEED !== undefined
    ? [Number(ONE_SEED)]
    : Array.from({ length: SCHEDULES }, (_, i) => FIRST_SEED + i);
  const startedMs = performance.now();
  for (const seed of seeds) await runSchedule(seed);
  const tookMs = performance.now() - startedMs;
  console.log(
    `${totals.schedules} schedules, ${(totals.simulatedMs / 1000).toFixed(0)} simulated s, ` +
      `${totals.instants} instants checked in ${(tookMs / 1000).toFixed(1)} s; ` +
      `elected ${totals.elected}, paused ${totals.paused}, resumed ${totals.resumed}, ` +
      `stepped down ${JSON.stringify(totals.steppedDown)}; a leader served at most ` +
      `${totals.recoveryMsMax.toFixed(0)} ms after the heal (schedule ${totals.recoverySeed})`,
  );
  if (seeds.length >= 200) {
    // The schedules reach every way out of leading (deposed needs an operator: not simulated).
    for (const reason of ["lease_expired", "key_lost", "etcd_unreachable", "shutdown"]) {
      assert.ok((totals.steppedDown[reason] ?? 0) > 0, `no step-down for ${reason}`);
    }
    assert.ok(totals.resumed > 0 && totals.paused > totals.resumed);
  }
});
