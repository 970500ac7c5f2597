/**
 * `deno run bench/engine_cycles.ts [rounds]`: the pure engine's cost per operation, without
 * sockets: uncontended acquire+release, hand-offs of one exclusive lock among 2 and 64
 * sessions, cold names, a semaphore of 8 among 64 sessions and a read-mostly shared lock. Each
 * row is the median of `rounds` rounds (default 9) of user+system CPU time, so a machine shared
 * with other work skews it less than wall time would. Compare runs on the same machine only.
 */

import process from "node:process";
import { LockEngine } from "../src/core/engine.ts";
import { TokenIssuer } from "../src/core/tokens.ts";
import type { AcquireOptions, EngineEvent, Instant } from "../src/core/types.ts";

const ROUND_OPS = 300_000;
const now: Instant = { monoMs: 1_000, wallMs: Date.UTC(2026, 0, 1) };

function cpuMs(): number {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1000;
}

function newEngine(): LockEngine {
  return new LockEngine({
    tokens: new TokenIssuer(0, 1_000_000, () => {}),
    sessionsMax: 1_000_000,
    claimsPerSessionMax: 1_000_000,
  });
}

function open(engine: LockEngine, count: number): number[] {
  return Array.from(
    { length: count },
    (_, i) => engine.openSession(now, "", `10.0.${i >> 8}.${i & 255}:1`)!.sessionId,
  );
}

function acquire(
  engine: LockEngine,
  sessionId: number,
  name: string,
  more: Partial<AcquireOptions> = {},
): EngineEvent[] {
  return engine.acquire(now, { sessionId, requestId: 1, name, leaseMs: 0, waitMs: null, ...more });
}

function tokenOf(events: EngineEvent[], sessionId: number): number {
  for (const e of events) {
    if (e.type === "granted" && e.peer.sessionId === sessionId) return e.token;
  }
  return 0;
}

/** Operations per second of CPU time for `ops` operations of `step`. */
function rate(ops: number, setup: () => (i: number) => void): number {
  const step = setup();
  const startMs = cpuMs();
  for (let i = 0; i < ops; i++) step(i);
  return ops / ((cpuMs() - startMs) / 1000);
}

/** Acquire then release one lock, one session: one cycle per operation. */
const uncontended = () => {
  const engine = newEngine();
  const [s] = open(engine, 1);
  return () => {
    const token = tokenOf(acquire(engine, s, "x"), s);
    engine.release(now, { sessionId: s, requestId: 2, name: "x", token });
  };
};

/** The owner releases (a hand-off to the head) and queues again: one hand-off per operation. */
const handoff = (sessions: number) => () => {
  const engine = newEngine();
  const ids = open(engine, sessions);
  const tokens = new Map<number, number>();
  for (const s of ids) tokens.set(s, tokenOf(acquire(engine, s, "x"), s));
  let owner = 0;
  return () => {
    const s = ids[owner];
    for (
      const e of engine.release(now, {
        sessionId: s,
        requestId: 2,
        name: "x",
        token: tokens.get(s)!,
      })
    ) {
      if (e.type === "granted") tokens.set(e.peer.sessionId, e.token);
    }
    acquire(engine, s, "x");
    owner = (owner + 1) % sessions;
  };
};

/** A new name every cycle among 1,000 (each lock is made and forgotten). */
const coldNames = () => {
  const engine = newEngine();
  const [s] = open(engine, 1);
  const names = Array.from({ length: 1_000 }, (_, i) => `jobs/name-${i}`);
  return (i: number) => {
    const name = names[i % 1_000];
    const token = tokenOf(acquire(engine, s, name), s);
    engine.release(now, { sessionId: s, requestId: 2, name, token });
  };
};

/** 64 sessions on a semaphore of 8 (or a shared lock, 1 writer in 10): one release per operation. */
const kinds = (kind: "semaphore" | "shared") => () => {
  const engine = newEngine();
  const ids = open(engine, 64);
  const options = (i: number): Partial<AcquireOptions> =>
    kind === "semaphore" ? { limit: 8 } : { mode: i % 10 === 0 ? "exclusive" : "shared" };
  const tokens = new Map<number, number>();
  const collect = (events: EngineEvent[]) => {
    for (const e of events) if (e.type === "granted") tokens.set(e.peer.sessionId, e.token);
  };
  for (const [i, s] of ids.entries()) collect(acquire(engine, s, "k", options(i)));
  let next = 0;
  return (i: number) => {
    // Release the oldest owner still holding, then queue it again.
    while (!tokens.has(ids[next])) next = (next + 1) % ids.length;
    const s = ids[next];
    const token = tokens.get(s)!;
    tokens.delete(s);
    collect(engine.release(now, { sessionId: s, requestId: 2, name: "k", token }));
    collect(acquire(engine, s, "k", options(i)));
  };
};

const rows: [string, () => (i: number) => void][] = [
  ["uncontended acquire+release", uncontended],
  ["hand-off, 2 sessions", handoff(2)],
  ["hand-off, 64 sessions", handoff(64)],
  ["cold names (1,000)", coldNames],
  ["semaphore of 8, 64 sessions", kinds("semaphore")],
  ["shared, 90 % readers, 64 sessions", kinds("shared")],
];
const rounds = Number(Deno.args[0] ?? 9);
console.log("| engine operation | per second of CPU (median) |\n|---|---|");
for (const [label, setup] of rows) {
  for (let w = 0; w < 2; w++) rate(ROUND_OPS, setup);
  const rates = Array.from({ length: rounds }, () => rate(ROUND_OPS, setup)).sort((a, b) => a - b);
  console.log(`| ${label} | ${Math.round(rates[rounds >> 1]).toLocaleString("en")} |`);
}
