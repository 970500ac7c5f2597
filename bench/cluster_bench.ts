/**
 * Scenario 8 of `deno task bench`: cluster mode against a single node in the same run. A
 * 3-member etcd on loopback and one lockd node in cluster mode (the leader; etcd is off the hot
 * path except the token block reservations) against a single node, alternating three times
 * (single, cluster, single, ...) so drift of a busy machine hits both; the uncontended
 * (64 connections) and the contended (16 clients on one lock, hold 0) throughput of each,
 * compared by their medians.
 */

import { BenchConn } from "./bench_client.ts";
import { EtcdCluster } from "./etcd_proc.ts";
import { cpuSeconds, type LockdProc, spawnLockd } from "./lockd_proc.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Single and cluster alternate this many times; the medians are compared. */
export const ROUNDS = 3;

/** A measured phase: operations per second, and the server's CPU time per operation. */
export interface Rate {
  perS: number;
  cpuUsPerOp: number;
}

/** Acquire+release cycles per second over `c` connections, each on its own lock. */
export async function uncontendedRate(
  addr: string,
  c: number,
  phaseMs: number,
  pid: number,
): Promise<Rate> {
  const conns = await Promise.all(Array.from({ length: c }, () => BenchConn.session(addr)));
  let cycles = 0;
  let measuring = false;
  let stopped = false;
  const loops = conns.map(async (conn, i) => {
    const name = `b8u/${i}`;
    while (!stopped) {
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

export interface ClusterComparison {
  single: { uncontended: Rate[]; contended: Rate[] };
  cluster: { uncontended: Rate[]; contended: Rate[] };
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

/** Runs the comparison; `serverArgs` are the bench's usual server flags. */
export async function compareClusterMode(
  serverArgs: string[],
  phaseMs: number,
): Promise<ClusterComparison> {
  const result: ClusterComparison = {
    single: { uncontended: [], contended: [] },
    cluster: { uncontended: [], contended: [] },
    commands: [],
  };
  await using etcd = await EtcdCluster.start();
  for (let round = 0; round < ROUNDS; round++) {
    for (const mode of ["single", "cluster"] as const) {
      const extra = mode === "cluster"
        ? ["-cluster-etcd", etcd.clientUrls.join(","), "-cluster", `bench-${round}`]
        : [];
      const proc = await spawnLockd({ flags: [...serverArgs, ...extra], http: true });
      if (!result.commands.includes(proc.command)) result.commands.push(proc.command);
      try {
        if (mode === "cluster") await servingWithin(proc, 10_000);
        result[mode].uncontended.push(await uncontendedRate(proc.addr, 64, phaseMs, proc.pid));
        result[mode].contended.push(await contendedRate(proc.addr, 16, phaseMs, proc.pid));
      } finally {
        await proc.stop("SIGKILL");
      }
    }
  }
  return result;
}
