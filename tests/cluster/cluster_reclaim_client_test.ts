/**
 * The TypeScript client across cluster fail-overs (real etcd, lockd as child processes, the
 * client of mod.ts; the Python client's tests/test_cluster.py has the same cases): a rider keeps
 * its lock and its token across a leader SIGKILL (carried over with RESUME and RECLAIM, no `lost`
 * event); a client started half a second after a leader SIGKILL gets its lock, never an error (its
 * first connect goes round the nodes until its bound while the successor is elected); at a
 * planned hand-over the holder keeps its lock and the waiter its place.
 */

import assert from "node:assert/strict";
import { EtcdCluster } from "../../bench/etcd_proc.ts";
import { type LockdProc, spawnLockd } from "../../bench/lockd_proc.ts";
import { connect, type LockLostError } from "../../mod.ts";
import { skipWithoutEtcd, waitFor } from "../helpers/etcd.ts";

const options = { ignore: skipWithoutEtcd, sanitizeOps: true, sanitizeResources: true };

async function info(node: LockdProc): Promise<Record<string, unknown> | null> {
  try {
    const response = await fetch(`http://${node.adminAddr}/api/info`);
    return await response.json();
  } catch {
    return null;
  }
}

async function serving(node: LockdProc): Promise<boolean> {
  const cluster = (await info(node))?.cluster as { serving?: boolean } | undefined;
  return cluster?.serving === true;
}

/** The holder of `name` as `node`'s admin API shows it (null: none, or no answer). */
async function holder(node: LockdProc, name: string): Promise<{ token?: number } | null> {
  try {
    const response = await fetch(`http://${node.adminAddr}/api/locks/${encodeURIComponent(name)}`);
    if (!response.ok) {
      await response.body?.cancel();
      return null;
    }
    return (await response.json()).holder ?? null;
  } catch {
    return null;
  }
}

/**
 * A leader and a standby on a one-member etcd (`flags` more): the first node starts alone, so
 * it leads; the second stands by once it knows the leader.
 */
async function twoNodes(
  etcd: EtcdCluster,
  flags: readonly string[] = [],
): Promise<{ leader: LockdProc; standby: LockdProc; nodes: LockdProc[] }> {
  const base = ["-cluster-etcd", etcd.clientUrls.join(","), "-cluster", "ts", ...flags];
  const nodes: LockdProc[] = [];
  nodes.push(await spawnLockd({ flags: [...base, "-cluster-node", "a"], http: true }));
  await waitFor("node a serves", () => serving(nodes[0]), 15_000);
  nodes.push(await spawnLockd({ flags: [...base, "-cluster-node", "b"], http: true }));
  await waitFor("the standby knows the leader", async () => {
    const cluster = (await info(nodes[1]))?.cluster as { leader?: unknown } | undefined;
    return cluster?.leader !== undefined && cluster.leader !== null;
  }, 15_000);
  return { leader: nodes[0], standby: nodes[1], nodes };
}

async function stopAll(nodes: LockdProc[]): Promise<void> {
  await Promise.all(nodes.map((node) => node.stop("SIGKILL")));
}

Deno.test({
  name:
    "cluster client: a rider (lease 10 s) keeps its lock and its token across a leader SIGKILL, no lost event",
  ...options,
  fn: async () => {
    await using etcd = await EtcdCluster.start({ members: 1 });
    const { leader, standby, nodes } = await twoNodes(etcd);
    try {
      await using client = await connect({ addrs: [leader.addr, standby.addr] });
      assert.equal(client.protocolVersion, 2);
      const lock = await client.acquire("ts/rider", { leaseMs: 10_000 });
      const lost: string[] = [];
      lock.lost.addEventListener(
        "abort",
        () => lost.push((lock.lost.reason as LockLostError).reason),
      );
      await leader.stop("SIGKILL"); // no hand-over
      await waitFor(
        "the lock carried over to the new leader",
        async () => (await holder(standby, "ts/rider"))?.token === lock.token,
        15_000,
      );
      assert.deepEqual([lock.state, lost], ["held", []]);
      await lock.release();
      assert.equal(lock.state, "released");
    } finally {
      await stopAll(nodes);
    }
  },
});

Deno.test({
  name:
    "cluster client: a client started 0.5 s after a leader SIGKILL gets its lock, never an error (TTL 6 s: longer than a standby holds a HELLO)",
  ...options,
  fn: async () => {
    await using etcd = await EtcdCluster.start({ members: 1 });
    const { leader, standby, nodes } = await twoNodes(etcd, ["-cluster-ttl", "6s"]);
    try {
      await leader.stop("SIGKILL"); // the successor waits out the TTL
      await new Promise((resolve) => setTimeout(resolve, 500));
      const startedMs = performance.now();
      // The killed node refuses, the standby holds the HELLO, then answers NOT_LEADER naming no
      // leader: the first connect goes on over the list until its bound (10 s with several).
      await using client = await connect({ addrs: [leader.addr, standby.addr] });
      const lock = await client.acquire("ts/new-client", { leaseMs: 2_000, waitMs: 10_000 });
      assert.ok(lock.token > 2 ** 32, String(lock.token));
      assert.ok(performance.now() - startedMs < 10_000);
      assert.equal((await holder(standby, "ts/new-client"))?.token, lock.token);
      await lock.release();
    } finally {
      await stopAll(nodes);
    }
  },
});

Deno.test({
  name:
    "cluster client: at a planned hand-over (SIGTERM) the holder keeps its lock and token, the waiter its place",
  ...options,
  fn: async () => {
    await using etcd = await EtcdCluster.start({ members: 1 });
    const { leader, standby, nodes } = await twoNodes(etcd);
    try {
      const addrs = [leader.addr, standby.addr];
      await using holderClient = await connect({ addrs });
      await using waiter = await connect({ addrs });
      const lock = await holderClient.acquire("ts/handover", { leaseMs: 2_000 });
      const lost: string[] = [];
      lock.lost.addEventListener(
        "abort",
        () => lost.push((lock.lost.reason as LockLostError).reason),
      );
      let granted = false;
      const waiting = waiter.acquire("ts/handover", { leaseMs: 2_000 }).finally(() =>
        granted = true
      );
      await new Promise((resolve) => setTimeout(resolve, 200));
      await leader.stop("SIGTERM"); // a planned hand-over
      await waitFor(
        "the lock carried over to the new leader",
        async () => (await holder(standby, "ts/handover"))?.token === lock.token,
        15_000,
      );
      assert.deepEqual([lock.state, lost, granted], ["held", [], false]);
      await lock.release();
      const next = await waiting;
      assert.ok(next.token > lock.token);
      await next.release();
    } finally {
      await stopAll(nodes);
    }
  },
});
