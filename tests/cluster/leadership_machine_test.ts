/**
 * The leadership state machine alone: inputs in, state and commands out, no etcd, no timers.
 * (leadership_test.ts runs it through its driver on a fake etcd; leadership_sim_test.ts runs
 * thousands of random schedules against etcd's truth.)
 */

import assert from "node:assert/strict";
import type { KeyValue } from "../../src/cluster/etcd.ts";
import { CLUSTER_ROLES } from "../../src/cluster/leadership_events.ts";
import {
  assertLeadershipInvariants,
  initialLeadershipState,
  LEADERSHIP_TRANSITIONS,
  type LeadershipConfig,
  type LeadershipEffect,
  type LeadershipInput,
  type LeadershipState,
  servesAt,
  step,
} from "../../src/cluster/leadership_machine.ts";

const CONFIG: LeadershipConfig = {
  node: { name: "a", advertise: "a:7400", admin: null },
  ttlMs: 2_000,
  marginMs: 200,
  recheckMs: 100,
  retryMs: 250,
};
const LEASE = "7000";

/** A state and the commands of its last step, stepped on by `feed`. */
class Machine {
  state: LeadershipState = initialLeadershipState();
  effects: readonly LeadershipEffect[] = [];
  feed(input: LeadershipInput, nowMs: number): this {
    const next = step(CONFIG, this.state, input, nowMs);
    this.state = next.state;
    this.effects = next.effects;
    return this;
  }
  types(): string[] {
    return this.effects.map((e) =>
      e.type === "emit"
        ? `emit:${e.event.type}`
        : e.type === "set_timer" || e.type === "cancel_timer"
        ? `${e.type}:${e.timer}`
        : e.type
    );
  }
  /** The state's tag (a getter, so that asserting it does not narrow `state` for the rest). */
  get tag(): string {
    return this.state.tag;
  }
  get epoch(): number {
    return this.state.epoch;
  }
}

function ownKey(term: number, lease = LEASE): KeyValue {
  return {
    key: "test/leader",
    value: JSON.stringify(CONFIG.node),
    createRevision: term,
    modRevision: term,
    lease,
  };
}

/** A machine that won term 5 at 10 ms on a lease granted (sent) at 0: safeUntil 2000. */
function leader(): Machine {
  const m = new Machine().feed({ type: "start" }, 0);
  m.feed({ type: "lease_granted", epoch: m.epoch, sendMs: 0, leaseId: LEASE, ttlS: 2 }, 5);
  m.feed({ type: "leader_read", epoch: m.epoch, kv: undefined, revision: 4 }, 8);
  m.feed(
    { type: "campaign_answered", epoch: m.epoch, succeeded: true, revision: 5, kv: undefined },
    10,
  );
  return m;
}

Deno.test("machine: start asks for a lease; the grant starts keep-alives and a read; an absent key is campaigned for", () => {
  const m = new Machine().feed({ type: "start" }, 0);
  assert.deepEqual(m.effects, [
    { type: "grant_lease", epoch: 1, sendMs: 0, ttlS: 2, timeoutMs: 1_000 },
  ]);
  assert.equal(m.tag, "starting");
  m.feed({ type: "lease_granted", epoch: 1, sendMs: 0, leaseId: LEASE, ttlS: 2 }, 5);
  assert.deepEqual(m.types(), ["set_timer:keep_alive", "read_leader"]);
  assert.equal(m.state.safeUntilMs, 2_000); // from the request's send time, not its answer
  assert.equal(m.state.timers.keep_alive, 5 + 2_000 / 3);
  m.feed({ type: "leader_read", epoch: 1, kv: undefined, revision: 4 }, 8);
  assert.equal(m.tag, "standby");
  assert.deepEqual(m.types(), ["campaign"]);
});

Deno.test("machine: a won campaign elects the node, arms its pause at safeUntil − margin and watches", () => {
  const m = leader();
  assert.equal(m.tag, "leader");
  assert.deepEqual(m.types(), [
    "emit:elected",
    "emit:leader_changed",
    "set_timer:pause",
    "watch",
  ]);
  assert.equal(m.state.timers.pause, 1_800);
  assert.equal(m.state.electedAtMs, 10);
  assert.ok(servesAt(CONFIG, m.state, 1_799.9));
  assert.ok(!servesAt(CONFIG, m.state, 1_800));
});

Deno.test("machine: one win reported twice elects once; an older win reported late changes nothing", () => {
  const m = leader();
  const before = m.state;
  // The watch saw the key first (here: after), or the campaign's answer came late.
  m.feed(
    { type: "watch_event", epoch: m.epoch, watch: 1, event: { type: "put", kv: ownKey(5) } },
    20,
  );
  assert.deepEqual(m.effects, []);
  assert.equal(m.state, before);
  m.feed(
    { type: "campaign_answered", epoch: m.epoch, succeeded: true, revision: 3, kv: undefined },
    30,
  );
  assert.equal(m.tag, "leader");
  assert.ok(m.state.tag === "leader" && m.state.term === 5);
  assert.ok(!m.types().includes("emit:elected"));
});

Deno.test("machine: a newer win of its own while leading (its key was deleted and re-created) ends the term as key_lost", () => {
  const m = leader();
  m.feed(
    { type: "campaign_answered", epoch: m.epoch, succeeded: true, revision: 9, kv: undefined },
    30,
  );
  assert.equal(m.tag, "starting");
  const stepped = m.effects.find((e) => e.type === "emit" && e.event.type === "stepped_down");
  assert.deepEqual(stepped, {
    type: "emit",
    event: { type: "stepped_down", term: 5, reason: "key_lost" },
  });
  assert.ok(m.types().includes("revoke_lease") && m.types().includes("grant_lease"));
  assert.ok(!m.types().includes("watch"), "a watch for the next, lease-less epoch");
});

Deno.test("machine: answers stamped with an older epoch change nothing; a lease granted for one is given back", () => {
  const m = leader();
  const old = m.epoch;
  m.feed({ type: "fenced", current: undefined }, 100); // steps down: a new epoch
  assert.equal(m.epoch, old + 1);
  const state = m.state;
  const stale: LeadershipInput[] = [
    { type: "keep_alive_answered", epoch: old, sendMs: 90, ttlS: 2 },
    { type: "keep_alive_failed", epoch: old, leaseNotFound: true },
    { type: "leader_read", epoch: old, kv: undefined, revision: 6 },
    { type: "leader_read_failed", epoch: old },
    { type: "campaign_failed", epoch: old, leaseNotFound: false },
    { type: "watch_ended", epoch: old, watch: 1 },
    { type: "lease_grant_failed", epoch: old },
  ];
  for (const input of stale) {
    m.feed(input, 200);
    assert.equal(m.state, state, input.type);
    assert.deepEqual(m.effects, [], input.type);
  }
  m.feed({ type: "lease_granted", epoch: old, sendMs: 0, leaseId: "6999", ttlS: 2 }, 200);
  assert.deepEqual(m.effects, [{ type: "revoke_lease", leaseId: "6999" }]);
  assert.equal(m.state, state);
});

Deno.test("machine: the check before a decision pauses a leader at its deadline; a newer confirmation and a read of its key resume it", () => {
  const m = leader();
  m.feed({ type: "check", atMs: 1_799 }, 1_799);
  assert.equal(m.tag, "leader");
  assert.deepEqual(m.effects, []);
  m.feed({ type: "check", atMs: 1_800 }, 1_800);
  assert.equal(m.tag, "paused");
  assert.deepEqual(m.types(), [
    "cancel_timer:pause",
    "emit:paused",
    "set_timer:pause_limit",
    "keep_alive",
    "set_timer:recheck",
  ]);
  assert.equal(m.state.timers.pause_limit, 2_000 + 2_000); // safeUntil + TTL
  // The keep-alive sent at the pause is confirmed: read the key before resuming.
  m.feed({ type: "keep_alive_answered", epoch: m.epoch, sendMs: 1_800, ttlS: 2 }, 1_850);
  assert.deepEqual(m.types(), ["verify_leader"]);
  assert.equal(m.tag, "paused");
  m.feed({ type: "verify_read", epoch: m.epoch, term: 5, kv: ownKey(5) }, 1_860);
  assert.equal(m.tag, "leader");
  assert.deepEqual(m.types(), [
    "cancel_timer:pause_limit",
    "cancel_timer:recheck",
    "set_timer:pause",
    "emit:resumed",
  ]);
  assert.equal(m.state.timers.pause, 1_800 + 2_000 - 200);
});

Deno.test("machine: a paused leader whose read shows another key, or none, steps down", () => {
  for (
    const [kv, reason, leaderName] of [
      [undefined, "key_lost", undefined],
      [{ ...ownKey(7, "7001"), value: '{"name":"b","advertise":"b:7400"}' }, "deposed", "b"],
      [ownKey(5, "7001"), "deposed", "a"], // its revision, on another lease
    ] as const
  ) {
    const m = leader();
    m.feed({ type: "check", atMs: 1_800 }, 1_800);
    m.feed({ type: "keep_alive_answered", epoch: m.epoch, sendMs: 1_800, ttlS: 2 }, 1_850);
    m.feed({ type: "verify_read", epoch: m.epoch, term: 5, kv }, 1_860);
    assert.equal(m.tag, "starting");
    const event = m.effects.find((e) => e.type === "emit" && e.event.type === "stepped_down");
    assert.deepEqual(event, {
      type: "emit",
      event: { type: "stepped_down", term: 5, reason, pausedMs: 60 },
    });
    assert.equal(m.state.leader?.name, leaderName);
  }
});

Deno.test("machine: a paused leader steps down at safeUntil + TTL without an answer (etcd_unreachable)", () => {
  const m = leader();
  m.feed({ type: "timer_fired", timer: "pause" }, 1_800);
  assert.equal(m.tag, "paused");
  m.feed({ type: "timer_fired", timer: "pause_limit" }, 4_000);
  assert.equal(m.tag, "starting");
  assert.ok(
    m.effects.some((e) =>
      e.type === "emit" && e.event.type === "stepped_down" &&
      e.event.reason === "etcd_unreachable" && e.event.pausedMs === 2_200
    ),
  );
});

Deno.test("machine: a pause timer that fires early waits out the rest instead of leaving the leader past its deadline", () => {
  const m = leader();
  m.feed({ type: "timer_fired", timer: "pause" }, 1_799.4);
  assert.equal(m.tag, "leader");
  assert.equal(m.effects.length, 1);
  const [rearm] = m.effects;
  assert.ok(rearm.type === "set_timer" && rearm.timer === "pause");
  assert.ok(Math.abs(rearm.delayMs - 0.6) < 1e-9, String(rearm.delayMs));
  assert.ok(Math.abs(m.state.timers.pause! - 1_800) < 1e-9);
  m.feed({ type: "timer_fired", timer: "pause" }, 1_800);
  assert.equal(m.tag, "paused");
});

Deno.test("machine: resign stops at once, reports the step-down and asks to release key and lease", () => {
  const m = leader();
  m.feed({ type: "resign" }, 500);
  assert.equal(m.tag, "stopped");
  assert.deepEqual(m.state.timers, {});
  assert.deepEqual(m.types().filter((t) => !t.startsWith("cancel_timer")), [
    "stop_watch",
    "emit:stepped_down",
    "release",
  ]);
  assert.deepEqual(m.effects.at(-1), { type: "release", term: 5, leaseId: LEASE });
  // Stopped is final: everything after is ignored, a late lease is given back.
  const stopped = m.state;
  m.feed({ type: "check", atMs: 600 }, 600);
  m.feed({ type: "fenced", current: undefined }, 600);
  assert.equal(m.tag, "stopped");
  assert.equal(m.state.epoch, stopped.epoch);
  m.feed(
    { type: "lease_granted", epoch: stopped.epoch, sendMs: 550, leaseId: "7002", ttlS: 2 },
    600,
  );
  assert.deepEqual(m.effects, [{ type: "revoke_lease", leaseId: "7002" }]);
});

Deno.test("machine: programmer errors throw: a second start, a timer that is not armed, two leases in one epoch", () => {
  const m = leader();
  assert.throws(() => m.feed({ type: "start" }, 20), /already started/);
  assert.throws(() => m.feed({ type: "timer_fired", timer: "pause_limit" }, 20), /not armed/);
  // (Closed before it started is not an error: stopped is final, the start does nothing.)
  const closed = new Machine().feed({ type: "close" }, 0).feed({ type: "start" }, 1);
  assert.equal(closed.tag, "stopped");
  assert.deepEqual(closed.effects, []);
  const starting = new Machine().feed({ type: "start" }, 0);
  starting.feed({ type: "lease_granted", epoch: 1, sendMs: 0, leaseId: LEASE, ttlS: 2 }, 5);
  assert.throws(
    () =>
      starting.feed({ type: "lease_granted", epoch: 1, sendMs: 0, leaseId: "7001", ttlS: 2 }, 6),
    /second lease/,
  );
});

Deno.test("machine: the transition table names every role, stopped is final, and a leader never becomes a standby directly", () => {
  assert.deepEqual(Object.keys(LEADERSHIP_TRANSITIONS).sort(), [...CLUSTER_ROLES].sort());
  assert.deepEqual(LEADERSHIP_TRANSITIONS.stopped, []);
  assert.ok(!LEADERSHIP_TRANSITIONS.leader.includes("standby"));
  assert.ok(!LEADERSHIP_TRANSITIONS.paused.includes("standby"));
  for (const [from, tos] of Object.entries(LEADERSHIP_TRANSITIONS)) {
    assert.ok(tos.includes("stopped") || from === "stopped", `${from} cannot stop`);
  }
});

Deno.test("machine: the invariants catch a leader without its pause timer, and a stopped machine with a timer", () => {
  const m = leader();
  assert.ok(m.state.tag === "leader");
  const { pause: _, ...timers } = m.state.timers;
  assert.throws(
    () => assertLeadershipInvariants(CONFIG, { ...m.state, timers }),
    /pause timer at undefined/,
  );
  assert.throws(
    () =>
      assertLeadershipInvariants(CONFIG, {
        ...initialLeadershipState(),
        tag: "stopped",
        timers: { retry: 5 },
      } as LeadershipState),
    /stopped timer/,
  );
});
