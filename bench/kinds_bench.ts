/**
 * Scenarios 9 to 11 of `deno task bench` (issues 22 and 23), over protocol version 2:
 *
 * 9. a semaphore of 8 with 64 clients: grants/s, fairness, hand-off p50/p99 (from a slot's RELEASE
 *    answered to its next ACQUIRED);
 * 10. a read-mostly shared lock (16 clients, 90 % readers, 1 ms hold): grants/s, writer and reader
 *    wait p50/p99;
 * 11. one lock handed off as fast as it goes (16 clients) without and with 1,000 watchers in the
 *    same run, alternating: hand-offs/s and their ratio, event latency p50/p99 from the holder
 *    reading its ACQUIRED to a watcher reading the LOCK_STATE that shows it, server RSS per watch.
 *
 * main.ts lends its helpers (`KindsBenchKit`) and calls `kindScenarios`.
 */

import { BenchConn, quantile, sortedCopy } from "./bench_client.ts";
import { cpuSeconds, type LockdProc, rssBytes } from "./lockd_proc.ts";
import type { PhaseCost } from "./server_cost.ts";

/** What bench/main.ts lends these scenarios. */
export interface KindsBenchKit {
  readonly root: string;
  readonly commands: string[];
  readonly notes: string[];
  row(r: {
    scenario: string;
    metric: string;
    value: number | string;
    unit: string;
    target?: string;
    met?: boolean | null;
  }): void;
  withServer<T>(fn: (addr: string, proc: LockdProc | null) => Promise<T>): Promise<T>;
  timedLoops(
    n: number,
    loop: (i: number, measuring: () => boolean, stop: () => boolean) => Promise<void>,
  ): Promise<{ elapsedMs: number; cost: PhaseCost | null }>;
}

const WAIT_FOREVER = 0xffff_ffff;
const round = (x: number, digits = 3) => Number(x.toFixed(digits));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pq = (sorted: Float64Array) =>
  `${round(quantile(sorted, 0.5))} / ${round(quantile(sorted, 0.99))}`;

async function sessions(addr: string, n: number, version: number): Promise<BenchConn[]> {
  return await Promise.all(
    Array.from({ length: n }, () => BenchConn.session(addr, "bench", undefined, version)),
  );
}

async function closeAll(conns: BenchConn[]): Promise<void> {
  for (const c of conns) c.close();
  await Promise.all(conns.map((c) => c.done));
}

/** Runs the scenarios of `selected` among 9, 10 and 11. */
export async function kindScenarios(kit: KindsBenchKit, selected: Set<string>): Promise<void> {
  if (selected.has("9")) await semaphore(kit);
  if (selected.has("10")) await readMostly(kit);
  if (selected.has("11")) await watchers(kit);
}

// ---- 9. semaphore ------------------------------------------------------------------------------

interface Grant {
  token: number;
  slot: number;
  acquiredAt: number;
  releasedAt: number;
}

async function semaphore(kit: KindsBenchKit): Promise<void> {
  const n = 64;
  const limit = 8;
  await kit.withServer(async (addr) => {
    const conns = await sessions(addr, n, 2);
    const perClient = new Array(n).fill(0);
    const grants: Grant[] = [];
    const { elapsedMs } = await kit.timedLoops(n, async (i, measuring, stop) => {
      while (!stop()) {
        const a = await conns[i].acquireWith("sem/8", { limit, waitMs: WAIT_FOREVER });
        if (a.type !== "acquired") throw new Error(`acquire failed: ${JSON.stringify(a)}`);
        const acquiredAt = performance.now();
        const m = measuring();
        await conns[i].release("sem/8", a.token);
        if (!m) continue;
        perClient[i]++;
        grants.push({
          token: a.token,
          slot: a.slot ?? 0,
          acquiredAt,
          releasedAt: performance.now(),
        });
      }
    });
    await closeAll(conns);
    const s = `9 semaphore of ${limit}, ${n} clients`;
    kit.row({
      scenario: s,
      metric: "grants/s",
      value: Math.round((grants.length / elapsedMs) * 1000),
      unit: "/s",
    });
    kit.row({
      scenario: s,
      metric: "fairness (most / fewest grants of a client)",
      value: round(Math.max(...perClient) / Math.max(1, Math.min(...perClient)), 2),
      unit: "",
    });
    const h = handoffs(grants);
    kit.row({
      scenario: s,
      metric: "hand-off p50 / p99 (a slot's RELEASED → its next ACQUIRED)",
      value: pq(h.sorted),
      unit: `ms (${h.negative} of ${h.sorted.length} read before the RELEASED, counted 0)`,
    });
  });
}

/** Per slot, in token order: the next grant's ACQUIRED read − the previous one's RELEASED read. */
function handoffs(grants: Grant[]): { sorted: Float64Array; negative: number } {
  const bySlot = new Map<number, Grant[]>();
  for (const g of grants) {
    const list = bySlot.get(g.slot) ?? [];
    list.push(g);
    bySlot.set(g.slot, list);
  }
  const out: number[] = [];
  let negative = 0;
  for (const list of bySlot.values()) {
    list.sort((a, b) => a.token - b.token);
    for (let k = 1; k < list.length; k++) {
      const d = list[k].acquiredAt - list[k - 1].releasedAt;
      if (d < 0) negative++;
      out.push(Math.max(0, d));
    }
  }
  return { sorted: sortedCopy(out), negative };
}

// ---- 10. read-mostly shared lock ---------------------------------------------------------------

async function readMostly(kit: KindsBenchKit): Promise<void> {
  const n = 16;
  const readerShare = 0.9;
  const holdMs = 1;
  await kit.withServer(async (addr) => {
    const conns = await sessions(addr, n, 2);
    const waits = { shared: [] as number[], exclusive: [] as number[] };
    const { elapsedMs } = await kit.timedLoops(n, async (i, measuring, stop) => {
      while (!stop()) {
        const mode = Math.random() < readerShare ? "shared" : "exclusive";
        const t0 = performance.now();
        const a = await conns[i].acquireWith("rw/reports", { mode, waitMs: WAIT_FOREVER });
        if (a.type !== "acquired") throw new Error(`acquire failed: ${JSON.stringify(a)}`);
        if (measuring()) waits[mode].push(performance.now() - t0);
        await sleep(holdMs);
        await conns[i].release("rw/reports", a.token);
      }
    });
    await closeAll(conns);
    const s = `10 shared lock, ${n} clients, 90 % readers, hold ${holdMs} ms`;
    const grants = waits.shared.length + waits.exclusive.length;
    kit.row({
      scenario: s,
      metric: "grants/s (readers + writers)",
      value: `${Math.round((grants / elapsedMs) * 1000)} (${
        Math.round((waits.shared.length / elapsedMs) * 1000)
      } + ${Math.round((waits.exclusive.length / elapsedMs) * 1000)})`,
      unit: "/s",
    });
    kit.row({
      scenario: s,
      metric: "writer wait p50 / p99 (ACQUIRE → ACQUIRED)",
      value: pq(sortedCopy(waits.exclusive)),
      unit: "ms",
    });
    kit.row({
      scenario: s,
      metric: "reader wait p50 / p99",
      value: pq(sortedCopy(waits.shared)),
      unit: "ms",
    });
  });
}

// ---- 11. hand-offs with 1,000 watchers ---------------------------------------------------------

const WATCHERS = 1_000;
/** Watchers whose sightings give the event latency. */
const SAMPLED_WATCHERS = 100;
const ROUNDS = 3;

interface WatchWorker {
  readonly pid: number;
  next(): Promise<Record<string, number>>;
  send(line: string): Promise<void>;
  close(): Promise<void>;
}

function startWatchWorker(kit: KindsBenchKit, addr: string, pattern: string): WatchWorker {
  const args = [
    "run",
    "-A",
    `${kit.root}bench/watch_worker.ts`,
    addr,
    String(WATCHERS),
    pattern,
    String(SAMPLED_WATCHERS),
  ];
  const command = `deno ${args.join(" ")}`;
  if (!kit.commands.includes(command)) kit.commands.push(command);
  const child = new Deno.Command(Deno.execPath(), {
    args,
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const writer = child.stdin.getWriter();
  let rest = "";
  const lines: string[] = [];
  return {
    pid: child.pid,
    async next() {
      for (;;) {
        if (lines.length > 0) return JSON.parse(lines.shift()!);
        const { value, done } = await reader.read();
        if (done) throw new Error("the watch worker exited early");
        rest += value;
        const parts = rest.split("\n");
        rest = parts.pop()!;
        lines.push(...parts.filter((l) => l.trim() !== ""));
      }
    },
    async send(line) {
      await writer.write(new TextEncoder().encode(line + "\n"));
    },
    async close() {
      await writer.close().catch(() => {});
      const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
      await child.status;
      clearTimeout(timer);
      reader.releaseLock();
      await child.stdout.cancel().catch(() => {});
    },
  };
}

interface Handoffs {
  perS: number;
  acquiredAt: Map<number, number>;
  /** CPU seconds per second of the phase (warm-up included): the server's, the watchers'. */
  serverCpu: number;
  watchersCpu: number;
}

/** One phase of 16 clients handing `name` over as fast as it goes: hand-offs/s, ACQUIRED reads. */
async function handoffPhase(
  kit: KindsBenchKit,
  conns: BenchConn[],
  name: string,
  pids: { server: number; watchers: number },
): Promise<Handoffs> {
  const acquiredAt = new Map<number, number>();
  const cpu0 = [cpuSeconds(pids.server), cpuSeconds(pids.watchers)];
  const t0 = performance.now();
  const { elapsedMs } = await kit.timedLoops(conns.length, async (i, measuring, stop) => {
    while (!stop()) {
      const a = await conns[i].acquire(name, 0, WAIT_FOREVER);
      if (a.type !== "acquired") throw new Error(`acquire failed: ${JSON.stringify(a)}`);
      if (measuring()) acquiredAt.set(a.token, performance.timeOrigin + performance.now());
      await conns[i].release(name, a.token);
    }
  });
  const s = (performance.now() - t0) / 1000;
  return {
    perS: (acquiredAt.size / elapsedMs) * 1000,
    acquiredAt,
    serverCpu: (cpuSeconds(pids.server) - cpu0[0]) / s,
    watchersCpu: (cpuSeconds(pids.watchers) - cpu0[1]) / s,
  };
}

async function watchers(kit: KindsBenchKit): Promise<void> {
  await kit.withServer(async (addr, proc) => {
    if (proc === null) {
      kit.notes.push("Scenario 11: skipped with -addr (needs the server's pid for CPU and RSS)");
      return;
    }
    const name = "w/leader";
    const worker = startWatchWorker(kit, addr, name);
    const holders = await sessions(addr, 16, 1);
    const file = await Deno.makeTempFile({ prefix: "lockd-bench-acquired-" });
    try {
      await worker.next(); // the watchers' sessions are open
      const pids = { server: proc.pid, watchers: worker.pid };
      const without: Handoffs[] = [];
      const withW: Handoffs[] = [];
      const latencies: Record<string, number>[] = [];
      let rssPerWatch = NaN;
      for (let r = 0; r < ROUNDS; r++) {
        without.push(await handoffPhase(kit, holders, name, pids));
        await sleep(300);
        const before = rssBytes(proc.pid);
        await worker.send("watch");
        const watching = await worker.next();
        if (watching.refused > 0) throw new Error(`${watching.refused} WATCHes refused`);
        await sleep(1_000);
        if (r === 0) rssPerWatch = (rssBytes(proc.pid) - before) / WATCHERS;
        const phase = await handoffPhase(kit, holders, name, pids);
        withW.push(phase);
        await Deno.writeTextFile(file, JSON.stringify(Object.fromEntries(phase.acquiredAt)));
        await worker.send(`latency ${file}`);
        latencies.push(await worker.next());
        await worker.send("unwatch");
        await worker.next();
      }
      const s = `11 one lock, 16 clients, ${WATCHERS.toLocaleString("en")} watchers`;
      const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
      kit.row({
        scenario: s,
        metric: `hand-offs/s without / with watchers (${ROUNDS} rounds, alternating)`,
        value: `${without.map((h) => Math.round(h.perS)).join(", ")} / ${
          withW.map((h) => Math.round(h.perS)).join(", ")
        }`,
        unit: "/s",
      });
      kit.row({
        scenario: s,
        metric: "CPU without / with watchers: server, watchers' process",
        value: `${without.map((h) => round(h.serverCpu, 2)).join(", ")} / ${
          withW.map((h) => `${round(h.serverCpu, 2)}, ${round(h.watchersCpu, 2)}`).join("; ")
        }`,
        unit: "cores",
      });
      // Medians: one phase of a loaded machine can be off by half.
      const ratio = median(withW.map((h) => h.perS)) / median(without.map((h) => h.perS));
      kit.row({
        scenario: s,
        metric: "with / without watchers (medians)",
        value: round(ratio, 3),
        unit: "",
        target: "≥ 0.8",
        met: ratio >= 0.8,
      });
      kit.row({
        scenario: s,
        metric: "event latency p50 / p99 (holder reads ACQUIRED → watcher reads LOCK_STATE)",
        value: latencies.map((l) => `${round(l.p50)} / ${round(l.p99)}`).join(", "),
        unit: `ms (${SAMPLED_WATCHERS} watchers sampled, ${
          sum(latencies.map((l) => l.samples))
        } sightings)`,
      });
      kit.row({
        scenario: s,
        metric: "server RSS per watch",
        value: round(rssPerWatch / 1024, 2),
        unit: "KiB",
      });
      kit.notes.push(
        `Scenario 11: the watchers run in a process of their own (bench/watch_worker.ts), each a ` +
          `version-2 session watching the one lock; a negative event latency is a watcher that ` +
          `read the grant before its holder read ACQUIRED (events are sent as the server decides).`,
      );
    } finally {
      await closeAll(holders);
      await worker.send("quit").catch(() => {});
      await worker.close();
      await Deno.remove(file).catch(() => {});
    }
  });
}
