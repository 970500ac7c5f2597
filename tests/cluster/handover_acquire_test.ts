/**
 * A planned hand-over (SIGTERM) keeps the locks of a client whose ACQUIREs arrive while the
 * leader flushes its ownership records (grants blocked, sessions still open). Found by the M2
 * cluster soak: such an ACQUIRE closed the session at once as `failover`, the flush committed the
 * floors of its locks, and the new leader voided their reclaims (`reclaim_void`, reason
 * `floor`), so the client lost every lock it held. Real etcd, lockd as child processes.
 */

import assert from "node:assert/strict";
import { EtcdCluster } from "../../bench/etcd_proc.ts";
import { type LockdProc, spawnLockd } from "../../bench/lockd_proc.ts";
import { connect, type LockLostError } from "../../mod.ts";
import { skipWithoutEtcd, waitFor } from "../helpers/etcd.ts";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function serving(node: LockdProc): Promise<boolean> {
  try {
    const response = await fetch(`http://${node.opsAddr}/readyz`);
    await response.body?.cancel();
    return response.status === 200;
  } catch {
    return false;
  }
}

Deno.test({
  name:
    "cluster hand-over: ACQUIREs arriving during the leader's records flush do not cost the client its held locks",
  ignore: skipWithoutEtcd,
  sanitizeOps: true,
  sanitizeResources: true,
  fn: async () => {
    await using etcd = await EtcdCluster.start({ members: 1 });
    const base = [
      "-cluster-etcd",
      etcd.clientUrls.join(","),
      "-cluster",
      "hand",
      "-io-timeout",
      "15s",
    ];
    const nodes: LockdProc[] = [];
    try {
      nodes.push(await spawnLockd({ flags: [...base, "-cluster-node", "a"], http: true }));
      await waitFor("node a serves", () => serving(nodes[0]), 15_000);
      nodes.push(await spawnLockd({ flags: [...base, "-cluster-node", "b"], http: true }));
      await sleep(1_000); // b stands by
      await using client = await connect({ addrs: nodes.map((node) => node.addr) });
      const held = await client.acquire("held", { leaseMs: 10_000 });
      const lost: string[] = [];
      held.lost.addEventListener(
        "abort",
        () => lost.push((held.lost.reason as LockLostError).reason),
      );
      const stopping = nodes[0].stop("SIGTERM");
      // New ACQUIREs on fresh names while the leader hands over: some reach it mid-flush.
      const asks: Promise<void>[] = [];
      for (let i = 0; i < 40; i++) {
        asks.push(
          client.acquire(`new-${i}`, { leaseMs: 10_000, waitMs: 5_000 }).then(
            (lock) => lock.release(),
            () => {},
          ),
        );
        await sleep(2);
      }
      await stopping;
      await waitFor("node b serves", () => serving(nodes[1]), 15_000);
      await Promise.all(asks);
      await sleep(500); // the reclaim's answer
      assert.deepEqual([held.state, lost], ["held", []]);
      await held.release();
    } finally {
      await Promise.all(nodes.map((node) => node.stop("SIGKILL")));
    }
  },
});
