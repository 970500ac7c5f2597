/**
 * Scenario 8 of `deno task bench`: cluster mode against a single node in the same run. A
 * 3-member etcd on loopback and one lockd node in cluster mode (the leader) against a single
 * node, alternating three times (single, cluster M2, cluster M1, single, ...) so drift of a busy
 * machine hits all of them; the uncontended (64 connections, each on its own name), the
 * contended (16 clients on one lock, hold 0) and the cold-name (64 connections, a new name every
 * acquire: milestone 2 commits its ownership record first) throughput of each, compared by their
 * medians. M1 is the server of an older checkout (cluster mode before milestone 2: no ownership
 * records), given as its main.ts; without one the M1 column is left out.
 */

import { BenchConn } from "./bench_client.ts";
import { EtcdCluster } from "./etcd_proc.ts";
import { cpuSeconds, type LockdProc, spawnLockd } from "./lockd_proc.ts";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Single and cluster alternate this many times; the medians are compared. */
export const ROUNDS = 3;

/** A measured phase: operations per second, and the server's CPU time per operation. */
export interface Rate {
  perS: number;
  cpuUsPerOp: number;
}

/**
 * Acquire+release cycles per second over `c` connections, each on its own lock (`cold`: a new
 * name for every acquire).
 */
export async function uncontendedRate(
  addr: string,
  c: number,
  phaseMs: number,
  pid: number,
  cold = false,
): Promise<Rate> {
  const conns = await Promise.all(Array.from({ length: c }, () => BenchConn.session(addr)));
  let cycles = 0;
  let measuring = false;
  let stopped = false;
  const loops = conns.map(async (conn, i) => {
    let n = 0;
    while (!stopped) {
      const name = cold ? `b8cold/${i}/${n++}` : `b8u/${i}`;
      const a = await conn.acquire(name, 0, 0);
      if (a.type !== "acquired") throw new Error(`acquire failed: ${JSON.stringify(a)}`);
      await conn.release(name, a.token);
      if (measuring) cycles++;
    }
  });
  await sleep(500);
  measuring = true;
  const t0 = performance.now();
  const cpu0 = cpuSeconds(pid);
  await sleep(phaseMs);
  measuring = false;
  const cpu1 = cpuSeconds(pid);
  const elapsedMs = performance.now() - t0;
  stopped = true;
  await Promise.all(loops);
  for (const k of conns) k.close();
  await Promise.all(conns.map((k) => k.done));
  return { perS: (cycles / elapsedMs) * 1000, cpuUsPerOp: ((cpu1 - cpu0) * 1e6) / cycles };
}

/** Owner changes per second of `n` clients on one lock, holding it for no time. */
export async function contendedRate(
  addr: string,
  n: number,
  phaseMs: number,
  pid: number,
): Promise<Rate> {
  const conns = await Promise.all(Array.from({ length: n }, () => BenchConn.session(addr)));
  let changes = 0;
  let measuring = false;
  let stopped = false;
  const loops = conns.map(async (conn) => {
    while (!stopped) {
      const a = await conn.acquire("b8c", 0, 0xffff_ffff);
      if (a.type !== "acquired") throw new Error(`acquire failed: ${JSON.stringify(a)}`);
      if (measuring) changes++;
      await conn.release("b8c", a.token);
    }
  });
  await sleep(500);
  measuring = true;
  const t0 = performance.now();
  const cpu0 = cpuSeconds(pid);
  await sleep(phaseMs);
  measuring = false;
  const cpu1 = cpuSeconds(pid);
  const elapsedMs = performance.now() - t0;
  stopped = true;
  await Promise.all(loops);
  for (const k of conns) k.close();
  await Promise.all(conns.map((k) => k.done));
  return { perS: (changes / elapsedMs) * 1000, cpuUsPerOp: ((cpu1 - cpu0) * 1e6) / changes };
}

export const CLUSTER_KINDS = ["uncontended", "contended", "cold"] as const;
export type ClusterKind = (typeof CLUSTER_KINDS)[number];
/** `cluster` is this checkout in cluster mode (milestone 2), `m1` the older checkout's. */
export type ClusterMode = "single" | "cluster" | "m1";

export interface ClusterComparison {
  single: Record<ClusterKind, Rate[]>;
  cluster: Record<ClusterKind, Rate[]>;
  m1: Record<ClusterKind, Rate[]>;
  commands: string[];
}

async function servingWithin(proc: LockdProc, timeoutMs: number): Promise<void> {
  const until = performance.now() + timeoutMs;
  while (performance.now() < until) {
    try {
      const response = await fetch(`http://${proc.opsAddr}/readyz`);
      await response.body?.cancel();
      if (response.status === 200) return;
    } catch {
      // not yet
    }
    await sleep(50);
  }
  throw new Error("the cluster node did not become the serving leader");
}

/**
 * Runs the comparison; `serverArgs` are the bench's usual server flags, `m1Main` the main.ts of
 * a checkout from before milestone 2 (null: no M1 column).
 */
export async function compareClusterMode(
  serverArgs: string[],
  phaseMs: number,
  m1Main: string | null = null,
): Promise<ClusterComparison> {
  const empty = () => ({ uncontended: [], contended: [], cold: [] });
  const result: ClusterComparison = {
    single: empty(),
    cluster: empty(),
    m1: empty(),
    commands: [],
  };
  const modes: ClusterMode[] = m1Main === null
    ? ["single", "cluster"]
    : ["single", "cluster", "m1"];
  await using etcd = await EtcdCluster.start();
  for (let round = 0; round < ROUNDS; round++) {
    for (const mode of modes) {
      const extra = mode === "single"
        ? []
        : ["-cluster-etcd", etcd.clientUrls.join(","), "-cluster", `bench-${mode}-${round}`];
      const main = mode === "m1" ? m1Main! : undefined;
      const proc = await spawnLockd({
        flags: [...serverArgs, ...extra],
        http: true,
        main,
        // The older checkout's deno.json (its import map) is found from its directory.
        cwd: main === undefined ? undefined : dirname(main),
      });
      if (!result.commands.includes(proc.command)) result.commands.push(proc.command);
      try {
        if (mode !== "single") await servingWithin(proc, 10_000);
        const rates = result[mode];
        rates.uncontended.push(await uncontendedRate(proc.addr, 64, phaseMs, proc.pid));
        rates.contended.push(await contendedRate(proc.addr, 16, phaseMs, proc.pid));
        rates.cold.push(await uncontendedRate(proc.addr, 64, phaseMs, proc.pid, true));
      } finally {
        await proc.stop("SIGKILL");
      }
    }
  }
  return result;
}

/**
 * The main.ts of this repository at `rev` (default: the last commit before milestone 2 was
 * wired), extracted with `git archive` into a temporary directory; null when that fails (no git,
 * a shallow clone without the commit).
 */
export async function olderCheckout(rev: string): Promise<string | null> {
  const root = dirname(dirname(fileURLToPath(import.meta.url)));
  const dir = await Deno.makeTempDir({ prefix: "lockd-m1-" });
  const archive = new Deno.Command("sh", {
    args: ["-c", 'git -C "$1" archive "$2" | tar -x -C "$3"', "sh", root, rev, dir],
    stdout: "null",
    stderr: "null",
  });
  const { success } = await archive.output().catch(() => ({ success: false }));
  if (!success) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    return null;
  }
  return join(dir, "main.ts");
}

/** A row of the bench's table (bench/main.ts). */
export interface BenchRow {
  scenario: string;
  metric: string;
  value: number | string;
  unit: string;
  target?: string;
  met?: boolean | null;
}

const round = (x: number, digits = 3) => Number(x.toFixed(digits));

/**
 * Scenario 8's rows: the comparison run (with the M1 column when the checkout at `m1Rev` can be
 * extracted), each measure, the ratios and their targets; returns the commands run and a note.
 */
export async function clusterScenarioRows(
  serverArgs: string[],
  phaseMs: number,
  m1Rev: string,
  row: (r: BenchRow) => void,
): Promise<{ commands: string[]; note: string }> {
  const m1Main = m1Rev === "" ? null : await olderCheckout(m1Rev);
  const r = await compareClusterMode(serverArgs, phaseMs, m1Main);
  if (m1Main !== null) await Deno.remove(dirname(m1Main), { recursive: true }).catch(() => {});
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const modes: ClusterMode[] = m1Main === null
    ? ["single", "cluster"]
    : ["single", "m1", "cluster"];
  const label = { single: "single", m1: "M1", cluster: "M2" } as const;
  for (const kind of CLUSTER_KINDS) {
    const what = kind === "contended" ? "16 clients owner changes/s" : "C=64 cycles/s";
    const perS = (mode: ClusterMode) => r[mode][kind].map((x) => x.perS);
    const cpu = (mode: ClusterMode) => r[mode][kind].map((x) => x.cpuUsPerOp);
    const scenario = `8 cluster vs single: ${kind === "cold" ? "cold names" : kind}`;
    for (const mode of modes) {
      row({
        scenario,
        metric: `${label[mode]} ${what} (${ROUNDS} runs)`,
        value: perS(mode).map((x) => Math.round(x)).join(" / "),
        unit: "/s",
        ...(kind === "cold" && mode === "cluster"
          ? { target: "≥ 2,000", met: median(perS(mode)) >= 2_000 }
          : {}),
      });
      row({
        scenario,
        metric: `${label[mode]} server CPU per operation`,
        value: cpu(mode).map((x) => round(x, 1)).join(" / "),
        unit: "µs",
      });
    }
    const ratio = median(perS("cluster")) / median(perS("single"));
    row({
      scenario,
      metric: "M2 / single throughput (medians)",
      value: round(ratio, 3),
      unit: "",
      ...(kind === "cold" ? {} : { target: "≥ 0.90", met: ratio >= 0.9 }),
    });
    if (m1Main === null || kind === "cold") continue;
    const toM1 = median(perS("cluster")) / median(perS("m1"));
    const cpuToM1 = median(cpu("cluster")) / median(cpu("m1"));
    row({
      scenario,
      metric: "M2 / M1 throughput (medians)",
      value: round(toM1, 3),
      unit: "",
      target: "≥ 0.85",
      met: toM1 >= 0.85,
    });
    row({
      scenario,
      metric: "M2 / M1 CPU per operation (medians)",
      value: round(cpuToM1, 3),
      unit: "",
      target: "≤ 1.15",
      met: cpuToM1 <= 1.15,
    });
  }
  const note =
    `Scenario 8 alternates single node, cluster mode M2 (this checkout) and M1 (the checkout at ` +
    `${m1Rev || "-"}, before milestone 2's ownership records) ${ROUNDS} times in the same run ` +
    "(a 3-member etcd on loopback, one lockd node in cluster mode) and compares medians; etcd " +
    "is off the hot path but for token block reservations and, in M2, one ownership-record " +
    "commit per cold name (a lock that had no record) and per non-graceful end.";
  return { commands: r.commands, note };
}
