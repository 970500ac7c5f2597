/**
 * `deno task bench`: lockd load generator. Starts `main.ts serve` subprocesses
 * on port 0 (or targets `-addr HOST:PORT` for the socket scenarios), measures
 * the floor and six scenarios, prints markdown tables and writes
 * bench/results/latest.json. Flags: -addr, -duration-ms (per measured phase),
 * -out FILE.
 */

import { BenchConn, type BenchTls, quantile, sortedCopy } from "./bench_client.ts";
import { cpuSeconds, type LockdProc, rssBytes, spawnLockd } from "./lockd_proc.ts";
import { engineRemoval } from "./engine_removal.ts";
import { clusterScenarioRows } from "./cluster_bench.ts";
import { clientTls, tlsServerArgs } from "./tls_fixtures.ts";
import { etcdAvailable } from "./etcd_proc.ts";
import { kindScenarios } from "./kinds_bench.ts";
import {
  GcTrace,
  type OpCost,
  perOp,
  type PhaseCost,
  startPhase,
  TRACE_GC_FLAG,
} from "./server_cost.ts";

const ROOT = new URL("../", import.meta.url).pathname;

function flag(name: string, fallback: string): string {
  const i = Deno.args.findIndex((a) => a === `-${name}` || a === `--${name}`);
  if (i >= 0) return Deno.args[i + 1];
  const eq = Deno.args.find((a) => a.startsWith(`-${name}=`) || a.startsWith(`--${name}=`));
  return eq ? eq.slice(eq.indexOf("=") + 1) : fallback;
}
const TARGET_ADDR = flag("addr", "");
const PHASE_MS = Number(flag("duration-ms", "3000"));
/**
 * Scenario 8's M1 column: the revision of this repository whose cluster mode is milestone 1 (the
 * last commit before milestone 2 was wired); "" leaves the column out.
 */
const M1_REV = flag("m1-rev", "6c2f2e2");
const WARMUP_MS = 500;
const OUT = flag("out", `${ROOT}bench/results/latest.json`);
const FD_LIMIT = 20_000;
/** Comma-separated scenario numbers to run (e.g. `-scenarios 5,7`); all by default. */
const SCENARIOS = new Set(
  flag("scenarios", "1,2,3,4,5,6,7,8,9,10,11").split(",").map((x) => x.trim()).filter((x) =>
    x !== ""
  ),
);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const round = (x: number, digits = 3) => Number(x.toFixed(digits));
const ms = (x: number) => round(x, 3);

interface Row {
  scenario: string;
  metric: string;
  value: number | string;
  unit: string;
  target?: string;
  met?: boolean | null;
}
const rows: Row[] = [];
const notes: string[] = [];
const commands: string[] = [];
function row(r: Row): void {
  rows.push(r);
  const met = r.met === undefined ? "" : r.met === null ? "n/a" : r.met ? "yes" : "**no**";
  console.log(
    `| ${r.scenario} | ${r.metric} | ${r.value} ${r.unit} | ${r.target ?? ""} | ${met} |`,
  );
}

const SERVER_ARGS = [
  "-audit-log",
  "/dev/null",
  "-max-sessions",
  "30000",
  "-io-timeout",
  "60s",
  "-shutdown-grace",
  "0s",
];

/** The server process of a scenario, for its CPU time and (traced) allocations. */
interface Measured {
  readonly pid: number;
  readonly gc: GcTrace | null;
}

async function withServer<T>(
  fn: (addr: string, proc: LockdProc | null, measured: Measured | null) => Promise<T>,
  http = false,
  extraArgs: string[] = [],
): Promise<T> {
  if (TARGET_ADDR) return await fn(TARGET_ADDR, null, null);
  const proc = await spawnLockd({
    flags: [...SERVER_ARGS, ...extraArgs],
    http,
    permissions: ["--allow-all", TRACE_GC_FLAG],
    stdout: "piped",
  });
  const gc = new GcTrace(proc.child.stdout);
  if (!commands.includes(proc.command)) commands.push(proc.command);
  try {
    return await fn(proc.addr, proc, { pid: proc.pid, gc });
  } finally {
    await proc.stop("SIGKILL");
    await gc.done;
  }
}

/** Runs `loop` on every connection until the phase ends; returns the count done after warm-up. */
async function timedLoops(
  n: number,
  loop: (i: number, measuring: () => boolean, stop: () => boolean) => Promise<void>,
  server: Measured | null = null,
): Promise<{ elapsedMs: number; cost: PhaseCost | null }> {
  let measuring = false;
  let stopped = false;
  const loops = Array.from({ length: n }, (_, i) => loop(i, () => measuring, () => stopped));
  await sleep(WARMUP_MS);
  measuring = true;
  const phase = server === null ? null : startPhase(server.pid, server.gc);
  const t0 = performance.now();
  await sleep(PHASE_MS);
  measuring = false;
  const elapsedMs = performance.now() - t0;
  const cost = phase?.end() ?? null;
  stopped = true;
  await Promise.all(loops);
  return { elapsedMs, cost };
}

/** The echo floor's concurrencies: those of scenario 1, and scenario 2's 16 clients. */
const FLOOR_CONCURRENCY = [1, 8, 16, 64] as const;
/** The echo floor's server cost per round trip, by the number of connections driving it. */
const floorCosts = new Map<number, OpCost>();

/**
 * Rows for the server's cost of one request in a phase: CPU µs and its ratio to the echo floor's
 * round trip, and bytes allocated (when the collector's trace could tell).
 */
function costRows(
  scenario: string,
  cost: PhaseCost | null,
  requests: number,
  floorCost: OpCost | null | undefined,
  ratioMax?: number,
): void {
  if (cost === null) return;
  const op = perOp(cost, requests);
  const ratioToFloor = floorCost == null ? null : op.cpuUsPerOp / floorCost.cpuUsPerOp;
  const ratio = ratioToFloor === null ? "" : ` (${round(ratioToFloor, 2)}× floor)`;
  row({
    scenario,
    metric: "server CPU per request",
    value: `${round(op.cpuUsPerOp, 1)}${ratio}`,
    unit: "µs",
    ...(ratioMax !== undefined && ratioToFloor !== null
      ? { target: `≤ ${ratioMax}× floor`, met: ratioToFloor <= ratioMax }
      : {}),
  });
  if (op.bytesPerOp !== null) {
    const bRatio = floorCost?.bytesPerOp
      ? ` (${round(op.bytesPerOp / floorCost.bytesPerOp, 1)}× floor)`
      : "";
    row({
      scenario,
      metric: "server JS allocated per request",
      value: `${Math.round(op.bytesPerOp)}${bRatio}`,
      unit: "B",
    });
  }
}

// ---- floor ------------------------------------------------------------------

async function floor(): Promise<number> {
  const echo = await startEcho();
  let rate64 = NaN;
  try {
    for (const c of FLOOR_CONCURRENCY) {
      const conns = await Promise.all(
        Array.from({ length: c }, () => BenchConn.connect(echo.addr)),
      );
      let count = 0;
      const { elapsedMs, cost } = await timedLoops(c, async (i, measuring, stop) => {
        while (!stop()) {
          await conns[i].heartbeat();
          if (measuring()) count++;
        }
      }, echo);
      for (const k of conns) k.close();
      await Promise.all(conns.map((k) => k.done));
      const rate = (count / elapsedMs) * 1000;
      if (c === 64) rate64 = rate;
      row({
        scenario: `floor C=${c}`,
        metric: `echo round trips/s, ${c} conns`,
        value: Math.round(rate),
        unit: "/s",
      });
      if (cost !== null) floorCosts.set(c, perOp(cost, count));
      costRows(`floor C=${c}`, cost, count, null);
    }
  } finally {
    await echo.stop();
  }
  return rate64;
}

/** The floor's bare `Deno.listen` echo server, traced like lockd. */
async function startEcho(): Promise<Measured & { addr: string; stop(): Promise<void> }> {
  const echo = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", TRACE_GC_FLAG, `${ROOT}bench/echo_server.ts`],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const command = `deno run -A ${TRACE_GC_FLAG} bench/echo_server.ts`;
  if (!commands.includes(command)) commands.push(command);
  const gc = new GcTrace(echo.stdout);
  for (let waitedMs = 0; gc.otherLines.length === 0; waitedMs += 10) {
    if (waitedMs > 15_000) throw new Error("the echo server did not print its port");
    await sleep(10);
  }
  return {
    pid: echo.pid,
    gc,
    addr: `127.0.0.1:${Number(gc.otherLines[0].trim())}`,
    async stop() {
      echo.kill("SIGKILL");
      await echo.status;
      await gc.done;
    },
  };
}

// ---- 1. uncontended ----------------------------------------------------------

async function uncontended(floorRate: number): Promise<void> {
  await withServer(async (addr, _proc, server) => {
    for (const c of [1, 8, 64]) {
      const conns = await Promise.all(Array.from({ length: c }, () => BenchConn.session(addr)));
      const acq: number[] = [];
      const rel: number[] = [];
      let cycles = 0;
      const { elapsedMs, cost } = await timedLoops(c, async (i, measuring, stop) => {
        const name = `u/${c}/${i}`;
        while (!stop()) {
          const t0 = performance.now();
          const a = await conns[i].acquire(name, 0, 0);
          const t1 = performance.now();
          if (a.type !== "acquired") throw new Error(`acquire failed: ${JSON.stringify(a)}`);
          await conns[i].release(name, a.token);
          const t2 = performance.now();
          if (measuring()) {
            cycles++;
            acq.push(t1 - t0);
            rel.push(t2 - t1);
          }
        }
      }, server);
      for (const k of conns) k.close();
      await Promise.all(conns.map((k) => k.done));
      const rate = (cycles / elapsedMs) * 1000;
      const a = sortedCopy(acq), r = sortedCopy(rel);
      const target = c === 64 ? 0.25 * floorRate : undefined;
      row({
        scenario: `1 uncontended C=${c}`,
        metric: "cycles/s",
        value: Math.round(rate),
        unit: "/s",
        ...(target !== undefined
          ? { target: `≥ 0.25 × floor = ${Math.round(target)}`, met: rate >= target }
          : {}),
      });
      row({
        scenario: `1 uncontended C=${c}`,
        metric: "acquire p50 / p99",
        value: `${ms(quantile(a, 0.5))} / ${ms(quantile(a, 0.99))}`,
        unit: "ms",
      });
      row({
        scenario: `1 uncontended C=${c}`,
        metric: "release p50 / p99",
        value: `${ms(quantile(r, 0.5))} / ${ms(quantile(r, 0.99))}`,
        unit: "ms",
      });
      // A cycle is two requests: ACQUIRE and RELEASE. Issue 24's target: at 64 clients, at most
      // 1.4 times the echo floor's round trip.
      costRows(
        `1 uncontended C=${c}`,
        cost,
        cycles * 2,
        floorCosts.get(c),
        c === 64 ? 1.4 : undefined,
      );
    }
  });
}

// ---- 2. contended handoff ----------------------------------------------------

async function contended(): Promise<void> {
  await withServer(async (addr, _proc, server) => {
    for (const holdMs of [0, 1]) {
      const n = 16;
      const conns = await Promise.all(Array.from({ length: n }, () => BenchConn.session(addr)));
      const name = `c/${holdMs}`;
      const perClient = new Array(n).fill(0);
      const acqAt = new Map<number, number>(); // token → acquire returned
      const relAt = new Map<number, number>(); // token → release returned
      const tokens: number[] = [];
      let changes = 0;
      const { elapsedMs, cost } = await timedLoops(n, async (i, measuring, stop) => {
        while (!stop()) {
          const a = await conns[i].acquire(name, 0, 0xffff_ffff);
          if (a.type !== "acquired") throw new Error(`acquire failed: ${JSON.stringify(a)}`);
          const m = measuring();
          if (m) {
            acqAt.set(a.token, performance.now());
            tokens.push(a.token);
            perClient[i]++;
            changes++;
          }
          if (holdMs > 0) await sleep(holdMs);
          await conns[i].release(name, a.token);
          if (m) relAt.set(a.token, performance.now());
        }
      }, server);
      for (const k of conns) k.close();
      await Promise.all(conns.map((k) => k.done));
      tokens.sort((x, y) => x - y);
      const handoffs: number[] = [];
      let negative = 0;
      for (let k = 1; k < tokens.length; k++) {
        const prevRel = relAt.get(tokens[k - 1]);
        const nextAcq = acqAt.get(tokens[k]);
        if (prevRel === undefined || nextAcq === undefined) continue;
        const d = nextAcq - prevRel;
        if (d < 0) negative++;
        handoffs.push(Math.max(0, d));
      }
      const h = sortedCopy(handoffs);
      const rate = (changes / elapsedMs) * 1000;
      const fairness = Math.max(...perClient) / Math.max(1, Math.min(...perClient));
      const s = `2 contended hold=${holdMs}ms`;
      row({
        scenario: s,
        metric: "owner changes/s",
        value: Math.round(rate),
        unit: "/s",
        ...(holdMs === 0 ? { target: "≥ 10,000", met: rate >= 10_000 } : {}),
      });
      row({
        scenario: s,
        metric: "handoff p50 / p99",
        value: `${ms(quantile(h, 0.5))} / ${ms(quantile(h, 0.99))}`,
        unit: "ms",
        target: "p99 ≤ 1 ms",
        met: quantile(h, 0.99) <= 1,
      });
      row({
        scenario: s,
        metric: "fairness max/min acquisitions",
        value: round(fairness, 3),
        unit: `(min ${Math.min(...perClient)}, max ${Math.max(...perClient)})`,
        target: "≤ 1.05",
        met: fairness <= 1.05,
      });
      // An owner change is two requests: the new owner's ACQUIRE and its RELEASE.
      costRows(s, cost, changes * 2, floorCosts.get(n));
      if (cost !== null && changes > 0) {
        const usPerChange = perOp(cost, changes).cpuUsPerOp;
        row({
          scenario: s,
          metric: "server CPU per owner change",
          value: round(usPerChange, 1),
          unit: "µs",
          ...(holdMs === 0 ? { target: "≤ 90 µs", met: usPerChange <= 90 } : {}),
        });
      }
      if (negative > 0) {
        notes.push(
          `contended hold=${holdMs}: ${negative} of ${handoffs.length} handoffs saw the next owner's ACQUIRED processed before the previous owner's RELEASED (both in one client process); counted as 0 ms`,
        );
      }
    }
  });
}

// ---- worker helpers ----------------------------------------------------------

interface Worker {
  child: Deno.ChildProcess;
  next(): Promise<Record<string, unknown>>;
  send(line: string): Promise<void>;
  close(): Promise<void>;
}

function startWorker(args: string[]): Worker {
  const denoPath = Deno.execPath();
  const wargs = ["run", "-A", `${ROOT}bench/sessions_worker.ts`, ...args];
  commands.push(`ulimit -n ${FD_LIMIT}; deno ${wargs.join(" ")}`);
  const child = new Deno.Command("sh", {
    args: ["-c", `ulimit -n ${FD_LIMIT}; exec "$0" "$@"`, denoPath, ...wargs],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const writer = child.stdin.getWriter();
  let rest = "";
  const lines: string[] = [];
  return {
    child,
    async next() {
      for (;;) {
        if (lines.length > 0) return JSON.parse(lines.shift()!);
        const { value, done } = await reader.read();
        if (done) throw new Error("worker exited early");
        rest += value;
        const parts = rest.split("\n");
        rest = parts.pop()!;
        lines.push(...parts.filter((l) => l.trim() !== ""));
      }
    },
    async send(line: string) {
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

// ---- 3. many sessions --------------------------------------------------------

/** The same heartbeats as scenario 3's sessions: every 5 s from each connection (lease 15 s). */
const IDLE_HEARTBEAT_MS = 5_000;

/**
 * The echo floor with `n` connections open and idle but for scenario 3's heartbeats (each echoed):
 * RSS per connection, and the CPU share those heartbeats cost the bare runtime.
 */
async function floorIdle(n: number): Promise<{ bytesEach: number; cpuFrac: number }> {
  const echo = await startEcho();
  try {
    await sleep(1_000);
    const baseline = rssBytes(echo.pid);
    const w = startWorker(["open", echo.addr, String(n), String(IDLE_HEARTBEAT_MS)]);
    await w.next();
    await sleep(2_000);
    const loaded = rssBytes(echo.pid);
    const cpu0 = cpuSeconds(echo.pid);
    const t0 = performance.now();
    await sleep(5_000);
    const cpuFrac = (cpuSeconds(echo.pid) - cpu0) / ((performance.now() - t0) / 1000);
    const afterIdle = rssBytes(echo.pid);
    await w.send("quit");
    await w.close();
    return { bytesEach: (Math.max(loaded, afterIdle) - baseline) / n, cpuFrac };
  } finally {
    await echo.stop();
  }
}

async function manySessions(): Promise<void> {
  if (TARGET_ADDR) {
    notes.push("many sessions: skipped with -addr (needs the server's pid for RSS and CPU)");
    return;
  }
  const floorIdleCost = await floorIdle(10_000);
  const floorPerConnection = floorIdleCost.bytesEach;
  row({
    scenario: "floor (10k bare connections, heartbeats every 5 s)",
    metric: "echo server RSS per connection",
    value: round(floorPerConnection / 1024, 2),
    unit: "KiB",
  });
  row({
    scenario: "floor (10k bare connections, heartbeats every 5 s)",
    metric: "echo server CPU",
    value: round(floorIdleCost.cpuFrac * 100, 2),
    unit: "% of a core",
  });
  await withServer(async (addr, proc) => {
    const pid = proc!.pid;
    await sleep(1_000);
    const baseline = rssBytes(pid);
    const n = 10_000;
    const leaseMs = 3 * IDLE_HEARTBEAT_MS; // the default lease, renewed as the client library does
    const w = startWorker(["hold", addr, String(n), String(leaseMs), String(IDLE_HEARTBEAT_MS)]);
    const ready = await w.next();
    await sleep(2_000);
    const loaded = rssBytes(pid);
    const cpu0 = cpuSeconds(pid);
    const t0 = performance.now();
    await sleep(5_000);
    const cpuFrac = (cpuSeconds(pid) - cpu0) / ((performance.now() - t0) / 1000);
    const afterIdle = rssBytes(pid);
    await w.send("quit");
    await w.close();
    const perSession = (Math.max(loaded, afterIdle) - baseline) / n;
    row({
      scenario: "3 many sessions (10k, 1 lock each)",
      metric: "server RSS per session",
      value: round(perSession / 1024, 2),
      unit: `KiB (baseline ${round(baseline / 2 ** 20, 1)} MiB → ${
        round(Math.max(loaded, afterIdle) / 2 ** 20, 1)
      } MiB; open ${Math.round(Number(ready.openMs))} ms)`,
      target: "≤ 8 KiB",
      met: perSession <= 8 * 1024,
    });
    const ownShare = perSession - floorPerConnection;
    row({
      scenario: "3 many sessions (10k, 1 lock each)",
      metric: "lockd's own share per session (RSS − the floor's per connection)",
      value: `${round(ownShare / 1024, 2)} (${round(perSession / floorPerConnection, 2)}× floor)`,
      unit: "KiB",
      target: "≤ 2 KiB",
      met: ownShare <= 2 * 1024,
    });
    row({
      scenario: "3 many sessions (10k, 1 lock each)",
      metric: "idle CPU (heartbeats every 5 s)",
      value: `${round(cpuFrac * 100, 2)} (${round(cpuFrac / floorIdleCost.cpuFrac, 2)}× floor)`,
      unit: "% of a core",
      target: "≤ 5 %",
      met: cpuFrac <= 0.05,
    });
  });
}

// ---- 4. deep queue -----------------------------------------------------------

async function deepQueue(): Promise<void> {
  // 20,000 waiters need 20,000 sessions: the server's sockets plus its own
  // descriptors must stay under the hard `ulimit -n` of this machine.
  const hard = Number(
    new TextDecoder().decode(
      new Deno.Command("sh", { args: ["-c", "ulimit -Hn"], stdout: "piped" }).outputSync().stdout,
    ).trim(),
  );
  const n = Math.min(20_000, (Number.isFinite(hard) ? hard : 20_000) - 100);
  if (n < 20_000) {
    notes.push(
      `deep queue: ${n} waiters instead of 20,000 — the hard descriptor limit here is ${hard} per process (no CAP_SYS_RESOURCE), and each waiter is one socket on the server`,
    );
  }
  await withServer(async (addr, proc) => {
    const holder = await BenchConn.session(addr);
    const name = "deep";
    const a = await holder.acquire(name, 300_000, 0);
    if (a.type !== "acquired") throw new Error("holder could not acquire");
    const w = startWorker(["queue", addr, String(n), name]);
    const q = await w.next();
    const enqRate = (Number(q.queued) / Number(q.enqueueMs)) * 1000;
    row({
      scenario: `4 deep queue (${n} waiters)`,
      metric: "enqueue rate (ACQUIRE → QUEUED, all sessions open)",
      value: Math.round(enqRate),
      unit: "/s",
    });
    // Removal through the admin API when it is there.
    let removalHttpMs: number | null = null;
    if (proc?.adminAddr) {
      // Warm the HTTP connection and the handlers first: time the removal, not a cold start.
      for (let i = 0; i < 3; i++) {
        const warm = await fetch(`http://${proc.adminAddr}/api/info`);
        await warm.body?.cancel();
      }
      const t0 = performance.now();
      const res = await fetch(
        `http://${proc.adminAddr}/api/locks/${encodeURIComponent(name)}/waiters/${
          encodeURIComponent(String(q.middleAddr))
        }`,
        { method: "DELETE" },
      );
      await res.body?.cancel();
      removalHttpMs = performance.now() - t0;
      row({
        scenario: `4 deep queue (${n} waiters)`,
        metric: `admin DELETE middle waiter (HTTP ${res.status})`,
        value: ms(removalHttpMs),
        unit: "ms",
      });
    } else {
      notes.push(
        "deep queue: the admin API is not wired into the server yet, so waiter removal was timed on the engine (kickWaiter, in-process) instead of over HTTP",
      );
    }
    const eng = engineRemoval([1_000, 20_000]);
    const ratio = eng[20_000] / eng[1_000];
    row({
      scenario: "4 deep queue (engine)",
      metric: "remove middle waiter at 1,000 / 20,000 (median of 50)",
      value: `${round(eng[1_000] * 1000, 1)} / ${round(eng[20_000] * 1000, 1)}`,
      unit: "µs",
      target: "independent of length (ratio ≤ 3)",
      met: ratio <= 3,
    });
    // Drain: the holder releases; every waiter releases as soon as it is granted.
    await w.send("drain");
    await holder.release(name, a.token);
    const d = await w.next();
    const drainRate = (Number(d.drained) / Number(d.drainMs)) * 1000;
    row({
      scenario: `4 deep queue (${n} waiters)`,
      metric: `drain rate (${d.drained} handoffs)`,
      value: Math.round(drainRate),
      unit: "owner changes/s",
      target: "≈ contended rate",
    });
    await w.send("quit");
    await w.close();
    holder.close();
    await holder.done;
  }, true);
}

// ---- 5. admin and scrape under load -----------------------------------------

async function adminScrape(): Promise<void> {
  await withServer(async (addr, proc) => {
    if (!proc?.adminAddr || !proc.opsAddr) {
      notes.push(
        "admin/scrape: skipped — the server does not start the admin API / ops server yet (startServer returns adminAddr = opsAddr = null)",
      );
      row({ scenario: "5 admin/scrape", metric: "skipped", value: "-", unit: "", met: null });
      return;
    }
    const holders = await Promise.all(Array.from({ length: 20 }, () => BenchConn.session(addr)));
    await Promise.all(holders.map(async (h, i) => {
      const ps = [];
      for (let k = 0; k < 1000; k++) ps.push(h.acquire(`load/${i}/${k}`, 300_000, 0));
      await Promise.all(ps);
    }));
    const time = async (url: string, reps: number): Promise<{ p50: number; bytes: number }> => {
      const t: number[] = [];
      let bytes = 0;
      for (let k = 0; k < reps; k++) {
        const t0 = performance.now();
        const res = await fetch(url);
        bytes = (await res.arrayBuffer()).byteLength;
        t.push(performance.now() - t0);
        if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
      }
      return { p50: quantile(sortedCopy(t), 0.5), bytes };
    };
    const all = await time(`http://${proc.adminAddr}/api/locks`, 5);
    row({
      scenario: "5 admin (20,000 held)",
      metric: `GET /api/locks (${Math.round(all.bytes / 1024)} KiB), median of 5`,
      value: ms(all.p50),
      unit: "ms",
      target: "≤ 200 ms",
      met: all.p50 <= 200,
    });
    const metrics = await time(`http://${proc.opsAddr}/metrics`, 20);
    row({
      scenario: "5 admin (20,000 held)",
      metric: "GET /metrics, median of 20",
      value: ms(metrics.p50),
      unit: "ms",
      target: "≤ 10 ms",
      met: metrics.p50 <= 10,
    });
    const narrow = await time(`http://${proc.adminAddr}/api/locks?match=load/7/99*`, 20);
    row({
      scenario: "5 admin (20,000 held)",
      metric: "GET /api/locks?match=load/7/99* (11 locks), median of 20",
      value: ms(narrow.p50),
      unit: "ms",
      target: "much less than the full list",
      met: narrow.p50 < all.p50 / 5,
    });
    for (const h of holders) h.close();
    await Promise.all(holders.map((h) => h.done));
  }, true);
}

// ---- 6. lease expiry precision -----------------------------------------------

async function expiry(): Promise<void> {
  await withServer(async (addr) => {
    const n = 10_000;
    const perSession = 1_000;
    const sessions = n / perSession;
    const holders = await Promise.all(
      Array.from({ length: sessions }, () => BenchConn.session(addr)),
    );
    const waiters = await Promise.all(
      Array.from({ length: sessions }, () => BenchConn.session(addr)),
    );
    const expectedAt = new Array<number>(n);
    // Holders never heartbeat: each lease expires and the waiter is granted.
    // Leases spread over 1.5..3.5 s; expected expiry is the ACQUIRE send time
    // + lease (an upper bound on lateness: the server started the lease later).
    for (let b = 0; b < n; b += 100) {
      const ps = [];
      for (let i = b; i < b + 100; i++) {
        const leaseMs = 1_500 + ((i * 7919) % 2_000);
        const t = performance.now();
        ps.push(
          holders[Math.floor(i / perSession)].acquire(`e/${i}`, leaseMs, 0).then((a) => {
            if (a.type !== "acquired") throw new Error("expiry holder acquire failed");
            expectedAt[i] = t + a.leaseMs;
          }),
        );
      }
      await Promise.all(ps);
    }
    const lateness: number[] = [];
    await Promise.all(Array.from({ length: n }, async (_, i) => {
      const a = await waiters[Math.floor(i / perSession)].acquire(`e/${i}`, 60_000, 0xffff_ffff);
      if (a.type !== "acquired") throw new Error("expiry waiter acquire failed");
      lateness.push(performance.now() - expectedAt[i]);
    }));
    const l = sortedCopy(lateness);
    row({
      scenario: "6 expiry (10,000 live leases)",
      metric: "handover lateness p50 / p99 / max",
      value: `${ms(quantile(l, 0.5))} / ${ms(quantile(l, 0.99))} / ${ms(l[l.length - 1])}`,
      unit: "ms",
      target: "p99 ≤ 20 ms",
      met: quantile(l, 0.99) <= 20,
    });
    if (l[0] < 0) notes.push(`expiry: earliest handover ${ms(l[0])} ms before the bound`);
    for (const c of [...holders, ...waiters]) c.close();
    await Promise.all([...holders, ...waiters].map((c) => c.done));
  });
}

// ---- 7. TLS and mutual TLS ----------------------------------------------------

/** Uncontended acquire+release cycles/s at `c` connections. */
async function cyclesPerS(
  addr: string,
  c: number,
  tls?: BenchTls,
  server: Measured | null = null,
): Promise<{ perS: number; cpuUsPerCycle: number }> {
  const conns = await Promise.all(
    Array.from({ length: c }, () => BenchConn.session(addr, "bench", tls)),
  );
  let cycles = 0;
  const { elapsedMs, cost } = await timedLoops(c, async (i, measuring, stop) => {
    const name = `t/${c}/${i}`;
    while (!stop()) {
      const a = await conns[i].acquire(name, 0, 0);
      if (a.type !== "acquired") throw new Error(`acquire failed: ${JSON.stringify(a)}`);
      await conns[i].release(name, a.token);
      if (measuring()) cycles++;
    }
  }, server);
  for (const k of conns) k.close();
  await Promise.all(conns.map((k) => k.done));
  return {
    perS: (cycles / elapsedMs) * 1000,
    cpuUsPerCycle: cost === null ? NaN : perOp(cost, cycles).cpuUsPerOp,
  };
}

/** Runs bench/tls_flood.ts `full` in `workers` processes against `addr`; sessions opened per second and server CPU per session. */
async function fullHandshakes(
  addr: string,
  proc: LockdProc,
  workers: number,
): Promise<{ perS: number; cpuMsEach: number; failed: number }> {
  const durationMs = PHASE_MS + WARMUP_MS;
  commands.push(`deno run -A bench/tls_flood.ts ${addr} full 0 ${durationMs} 16  (×${workers})`);
  const cpu0 = cpuSeconds(proc.pid);
  const outputs = await Promise.all(
    Array.from({ length: workers }, () =>
      new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          `${ROOT}bench/tls_flood.ts`,
          addr,
          "full",
          "0",
          String(durationMs),
          "16",
        ],
        stdout: "piped",
        stderr: "inherit",
      }).output()),
  );
  const cpu = cpuSeconds(proc.pid) - cpu0;
  let opened = 0;
  let failed = 0;
  let elapsedMs = 0;
  for (const out of outputs) {
    const r = JSON.parse(new TextDecoder().decode(out.stdout).trim());
    opened += r.succeeded;
    failed += r.failed;
    elapsedMs = Math.max(elapsedMs, r.elapsedMs);
  }
  return {
    perS: (opened / elapsedMs) * 1000,
    cpuMsEach: opened > 0 ? (cpu * 1000) / opened : NaN,
    failed,
  };
}

async function tlsScenarios(): Promise<void> {
  if (TARGET_ADDR) {
    notes.push("TLS: skipped with -addr (starts its own TLS servers)");
    return;
  }
  // Cycles over plaintext, TLS and mTLS in the same run, one server each, alternated three times
  // so that a change of machine load hits every mode alike. Each round's ratio to plaintext is
  // taken within the round (neighbouring minutes); issue 24's target is an mTLS ratio of at least
  // 0.7 in every one of the three rounds.
  const modes = [
    { name: "plaintext", args: [] as string[], tls: undefined as BenchTls | undefined },
    { name: "TLS", args: tlsServerArgs(false), tls: clientTls(false) },
    { name: "mTLS", args: tlsServerArgs(true), tls: clientTls(true) },
  ];
  const c = 64;
  const TLS_ROUNDS = 3;
  const rates = new Map<string, number[]>(modes.map((m) => [m.name, []]));
  const cpus = new Map<string, number[]>(modes.map((m) => [m.name, []]));
  for (let round = 0; round < TLS_ROUNDS; round++) {
    for (const mode of modes) {
      const r = await withServer(
        (addr, _proc, server) => cyclesPerS(addr, c, mode.tls, server),
        false,
        mode.args,
      );
      rates.get(mode.name)!.push(r.perS);
      cpus.get(mode.name)!.push(r.cpuUsPerCycle);
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const plain = rates.get("plaintext")!;
  const plainCpu = cpus.get("plaintext")!;
  for (const mode of modes) {
    const rs = rates.get(mode.name)!;
    const cs = cpus.get(mode.name)!;
    row({
      scenario: `7 TLS: uncontended C=${c}`,
      metric: `${mode.name} cycles/s (${TLS_ROUNDS} rounds)`,
      value: rs.map((r) => Math.round(r)).join(" / "),
      unit: `/s (server CPU ${cs.map((x) => round(x, 1)).join(" / ")} µs per cycle)`,
    });
    if (mode.name === "plaintext") continue;
    // On two shared cores the client's share of the CPU moves the cycles/s of a round; the
    // server's CPU per cycle does not: plaintext's over this mode's is the ratio the server alone
    // would give.
    const cpuRatios = cs.map((x, i) => plainCpu[i] / x);
    row({
      scenario: `7 TLS: uncontended C=${c}`,
      metric: `plaintext / ${mode.name} server CPU per cycle, each round (median)`,
      value: `${cpuRatios.map((r) => round(r, 2)).join(" / ")} (${round(median(cpuRatios), 2)})`,
      unit: "",
    });
    const ratios = rs.map((r, i) => r / plain[i]);
    const mtls = mode.name === "mTLS";
    row({
      scenario: `7 TLS: uncontended C=${c}`,
      metric: `${mode.name} / plaintext cycles/s, each round (median)`,
      value: `${ratios.map((r) => round(r, 2)).join(" / ")} (${round(median(ratios), 2)})`,
      unit: "",
      ...(mtls ? { target: "≥ 0.7 in every round", met: ratios.every((r) => r >= 0.7) } : {}),
    });
  }
  // New sessions per second, each a full mTLS handshake + HELLO/WELCOME on a new connection: with
  // the handshake limit off (the server's capacity) and at the default limit.
  for (const limit of ["0", "500"]) {
    await withServer(
      async (addr, proc) => {
        const r = await fullHandshakes(addr, proc!, 2);
        row({
          scenario: "7 TLS: new mTLS sessions",
          metric: `sessions opened/s, 2 client processes, -max-tls-handshake-rate ${limit}`,
          value: Math.round(r.perS),
          unit: `/s (server CPU ${round(r.cpuMsEach, 2)} ms per session; ${r.failed} failed)`,
        });
      },
      false,
      [...tlsServerArgs(true), "-max-tls-handshake-rate", limit],
    );
  }
}

// ---- run ---------------------------------------------------------------------

function machine(): Record<string, unknown> {
  const cpuinfo = Deno.readTextFileSync("/proc/cpuinfo");
  const meminfo = Deno.readTextFileSync("/proc/meminfo");
  return {
    cpuModel: cpuinfo.match(/model name\s*:\s*(.*)/)?.[1] ?? "unknown",
    cores: navigator.hardwareConcurrency,
    memoryMiB: Math.round(Number(meminfo.match(/MemTotal:\s+(\d+)/)?.[1] ?? 0) / 1024),
    os: `${Deno.build.os} ${Deno.osRelease()}`,
    deno: Deno.version.deno,
    v8: Deno.version.v8,
    typescript: Deno.version.typescript,
    fdLimitHard: FD_LIMIT,
  };
}

// ---- 8. cluster mode against a single node ---------------------------------------

async function clusterScenario(): Promise<void> {
  if (TARGET_ADDR || !etcdAvailable()) {
    row({ scenario: "8 cluster vs single", metric: "skipped (no etcd)", value: "-", unit: "" });
    return;
  }
  const r = await clusterScenarioRows(SERVER_ARGS, PHASE_MS, M1_REV, row);
  for (const c of r.commands) if (!commands.includes(c)) commands.push(c);
  notes.push(r.note);
}

const started = performance.now();
const m = machine();
console.log(
  `\nlockd benchmark — ${m.cpuModel}, ${m.cores} cores, ${m.memoryMiB} MiB, Deno ${m.deno}\n`,
);
console.log("| scenario | metric | value | target | met |");
console.log("|---|---|---|---|---|");
const floorRate = SCENARIOS.has("1") ? await floor() : NaN;
if (SCENARIOS.has("1")) await uncontended(floorRate);
if (SCENARIOS.has("2")) await contended();
if (SCENARIOS.has("3")) await manySessions();
if (SCENARIOS.has("4")) await deepQueue();
if (SCENARIOS.has("5")) await adminScrape();
if (SCENARIOS.has("6")) await expiry();
if (SCENARIOS.has("7")) await tlsScenarios();
if (SCENARIOS.has("8")) await clusterScenario();
// 9 to 11: lock kinds and watchers over protocol version 2 (bench/kinds_bench.ts).
await kindScenarios({
  root: ROOT,
  commands,
  notes,
  row,
  withServer: (fn) => withServer((addr, proc) => fn(addr, proc)),
  timedLoops: (n, loop) => timedLoops(n, loop),
}, SCENARIOS);
const totalS = (performance.now() - started) / 1000;
console.log(`\nNotes:\n${notes.map((n) => `- ${n}`).join("\n")}`);
console.log(`\nTotal ${round(totalS, 1)} s`);
const results = {
  date: new Date().toISOString(),
  machine: m,
  phaseMs: PHASE_MS,
  warmupMs: WARMUP_MS,
  commands: ["deno task bench", ...commands],
  serverArgs: SERVER_ARGS,
  floorRoundTripsPerS: Math.round(floorRate),
  rows,
  notes,
  totalSeconds: round(totalS, 1),
};
await Deno.writeTextFile(OUT, JSON.stringify(results, null, 2) + "\n");
console.log(`wrote ${OUT}`);
