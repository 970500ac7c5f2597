/**
 * Cluster M2 takeover figure: how long `OwnershipRecords.load()` takes to read N records from a
 * local 3-member etcd through the JSON gateway (design §3.9: 10,000 in ≤ 0.5 s, 50,000 in
 * ≤ 2.5 s), and how fast the batcher writes them (cold grants, 128 per transaction).
 *
 *     deno run --allow-all bench/records_load.ts [count ...]   # default 10000 50000
 *
 * Each count gets its own cluster prefix; every load is timed 5 times (median and best printed)
 * for each page size. Every etcd process is stopped by PID at the end.
 */

import { systemScheduler } from "../src/clock.ts";
import { EtcdHttpClient } from "../src/cluster/etcd_http.ts";
import { OwnershipRecords } from "../src/cluster/ownership_records.ts";
import { EtcdCluster } from "./etcd_proc.ts";

const counts = Deno.args.length > 0 ? Deno.args.map(Number) : [10_000, 50_000];
const PAGE_SIZES = [1_000, 2_000, 5_000];
const ROUNDS = 5;

function records(etcd: EtcdHttpClient, cluster: string, pageKeys?: number): OwnershipRecords {
  return new OwnershipRecords({
    etcd,
    scheduler: systemScheduler,
    cluster,
    requestTimeoutMs: 30_000,
    lingerMs: 0,
    pageKeys,
    isIdle: () => false,
    onDeposed: () => {
      throw new Error("deposed");
    },
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

await using cluster = await EtcdCluster.start();
const etcd = new EtcdHttpClient({
  endpoints: cluster.clientUrls,
  requestTimeoutMs: 30_000,
  scheduler: systemScheduler,
});
try {
  for (const count of counts) {
    const name = `bench${count}`;
    const leader = await etcd.txn(
      [{ key: `${name}/leader`, target: "create", revision: 0 }],
      [{ type: "put", key: `${name}/leader`, value: "{}" }],
      [],
    );
    const writer = records(etcd, name);
    writer.begin(leader.revision, await writer.load());
    const startMs = performance.now();
    await Promise.all(
      Array.from({ length: count }, (_, i) => writer.beforeDeliver(`jobs/lock-${i}`)),
    );
    const writeS = (performance.now() - startMs) / 1000;
    const stats = writer.stats;
    console.log(
      `${count} records written in ${writeS.toFixed(2)} s (${(count / writeS).toFixed(0)}/s, ` +
        `${stats.batchOpsCount} transactions, commit mean ${
          (stats.commitSecondsSum / stats.commitSecondsCount * 1000).toFixed(1)
        } ms)`,
    );
    for (const pageKeys of PAGE_SIZES) {
      const reader = records(etcd, name, pageKeys);
      const tookMs: number[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const loaded = await reader.load();
        if (loaded.floors.size !== count) throw new Error(`read ${loaded.floors.size} records`);
        tookMs.push(loaded.tookMs);
      }
      console.log(
        `  load, pages of ${pageKeys}: median ${median(tookMs).toFixed(0)} ms, best ${
          Math.min(...tookMs).toFixed(0)
        } ms`,
      );
    }
  }
} finally {
  etcd.close();
}
