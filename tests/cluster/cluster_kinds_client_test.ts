/**
 * Lock kinds, values and watches across a leader SIGKILL (issue 22 item 7, issue 23 items 3 and
 * 7; docs/cluster.md "Lock kinds, values and watches across a fail-over"): real etcd, lockd as
 * child processes, the TypeScript client of mod.ts.
 *
 * - a semaphore of 3 with 3 holders and a waiter: every holder keeps its token, slot and value
 *   (one set with setValue just before the kill), no `lost` event; the waiter keeps its place
 *   and takes the slot a holder lets go of;
 * - a shared lock with 2 readers and a queued writer: the readers keep their tokens, mode and
 *   write generation, the writer is granted after both readers let go, with a larger token;
 * - an observer re-watches at the new leader and sees its snapshot (WATCH sent again), with the
 *   holders' tokens and the value set before the fail-over; a query at the new leader shows it.
 */

import assert from "node:assert/strict";
import { EtcdCluster } from "../../bench/etcd_proc.ts";
import { type LockdProc, spawnLockd } from "../../bench/lockd_proc.ts";
import { type Client, connect, type Lock, type LockInfo, type LockLostError } from "../../mod.ts";
import { skipWithoutEtcd, waitFor } from "../helpers/etcd.ts";

const options = { ignore: skipWithoutEtcd, sanitizeOps: true, sanitizeResources: true };
const text = new TextDecoder();

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

async function twoNodes(etcd: EtcdCluster): Promise<{ leader: LockdProc; standby: LockdProc }> {
  const base = ["-cluster-etcd", etcd.clientUrls.join(","), "-cluster", "kinds"];
  const leader = await spawnLockd({ flags: [...base, "-cluster-node", "a"], http: true });
  try {
    await waitFor("node a serves", () => serving(leader), 15_000);
    const standby = await spawnLockd({ flags: [...base, "-cluster-node", "b"], http: true });
    await waitFor("the standby knows the leader", async () => {
      const cluster = (await info(standby))?.cluster as { leader?: unknown } | undefined;
      return cluster?.leader !== undefined && cluster.leader !== null;
    }, 15_000);
    return { leader, standby };
  } catch (error) {
    await leader.stop("SIGKILL");
    throw error;
  }
}

/** Records every `lost` reason of `lock`. */
function lostOf(lock: Lock, into: string[]): void {
  lock.lost.addEventListener(
    "abort",
    () => into.push(`${lock.name}@${lock.token}: ${(lock.lost.reason as LockLostError).reason}`),
  );
}

const tokens = (state: LockInfo | undefined) => state?.holders.map((h) => h.token) ?? [];

Deno.test({
  name:
    "cluster kinds: a semaphore of 3 with a waiter, a shared lock with 2 readers and a queued writer, values and an observer survive a leader SIGKILL",
  ...options,
  fn: async () => {
    await using etcd = await EtcdCluster.start({ members: 1 });
    const { leader, standby } = await twoNodes(etcd);
    const clients: Client[] = [];
    const open = async () => {
      const client = await connect({ addrs: [leader.addr, standby.addr] });
      clients.push(client);
      return client;
    };
    const abort = new AbortController();
    try {
      const leaseMs = 10_000;
      // The semaphore: three holders with values, then a waiter.
      const sem: Lock[] = [];
      for (const v of ["a", "b", "c"]) {
        sem.push(await (await open()).acquire("k/sem", { limit: 3, leaseMs, value: v }));
      }
      assert.deepEqual(sem.map((l) => l.slot), [0, 1, 2]);
      let semWaiterLock: Lock | null = null;
      const semWaiter = (await open()).acquire("k/sem", { limit: 3, leaseMs }).then((l) =>
        semWaiterLock = l
      );
      semWaiter.catch(() => {}); // a failure below closes the clients
      // The shared lock: a writer's generation, two readers, then a queued writer.
      // (a lock forgets its generation once idle: the readers queue behind the writer).
      const writer0 = await (await open()).acquire("k/doc", { leaseMs });
      const generation = writer0.token;
      const reading1 = (await open()).acquire("k/doc", { mode: "shared", leaseMs, value: "r1" });
      const reading2 = (await open()).acquire("k/doc", { mode: "shared", leaseMs, value: "r2" });
      await new Promise((resolve) => setTimeout(resolve, 200));
      await writer0.release();
      const readers = [await reading1, await reading2];
      assert.deepEqual(readers.map((r) => r.writeGeneration), [generation, generation]);
      let writerLock: Lock | null = null;
      const writer = (await open()).acquire("k/doc", { leaseMs }).then((l) => writerLock = l);
      writer.catch(() => {});
      // An observer of both locks, keeping the latest state of each.
      const observer = await open();
      const observation = observer.observe("k/*", { signal: abort.signal });
      const latest = new Map<string, LockInfo>();
      /** States read since the fail-over (set at the kill). */
      const since = { after: null as Map<string, LockInfo> | null };
      const reading = (async () => {
        for await (const state of observation) {
          latest.set(state.name, state);
          since.after?.set(state.name, state);
        }
      })();
      await waitFor("the observer's snapshot", () => latest.size === 2, 10_000);
      // A value set just before the fail-over.
      await sem[0].setValue("a2");
      await waitFor(
        "the observer saw the new value",
        () => text.decode(latest.get("k/sem")?.holders[0]?.value) === "a2",
        10_000,
      );
      const lost: string[] = [];
      for (const lock of [...sem, ...readers]) lostOf(lock, lost);
      const before = {
        sem: sem.map((l) => [l.token, l.slot, text.decode(l.value)]),
        readers: readers.map((r) => [r.token, r.mode, r.writeGeneration, text.decode(r.value)]),
      };

      const seen = since.after = new Map<string, LockInfo>();
      await leader.stop("SIGKILL"); // no hand-over

      await waitFor(
        "the observer re-watched at the new leader and sees every holder and waiter again",
        () =>
          observation.watching && observation.watchesSent === 2 &&
          tokens(seen.get("k/sem")).join() === sem.map((l) => l.token).join() &&
          tokens(seen.get("k/doc")).join() === readers.map((r) => r.token).join() &&
          seen.get("k/sem")?.queueLength === 1 && seen.get("k/doc")?.queueLength === 1,
        20_000,
      );
      const semState = seen.get("k/sem")!;
      assert.deepEqual(
        [semState.kind, semState.limit, semState.queueLength],
        ["semaphore", 3, 1],
      );
      assert.deepEqual(
        semState.holders.map((h) => [h.token, h.slot, text.decode(h.value)]),
        [[sem[0].token, 0, "a2"], [sem[1].token, 1, "b"], [sem[2].token, 2, "c"]],
      );
      const docState = seen.get("k/doc")!;
      assert.deepEqual([docState.kind, docState.queueLength], ["shared", 1]);
      assert.deepEqual(docState.holders.map((h) => h.mode), ["shared", "shared"]);
      const queried = await observer.query("k/sem");
      assert.equal(text.decode(queried.holder?.value), "a2");

      // The handles did not change: same tokens, slots, modes, generations and values.
      assert.deepEqual({
        sem: sem.map((l) => [l.token, l.slot, text.decode(l.value)]),
        readers: readers.map((r) => [r.token, r.mode, r.writeGeneration, text.decode(r.value)]),
      }, { ...before, sem: before.sem.map((s, i) => i === 0 ? [s[0], s[1], "a2"] : s) });
      assert.deepEqual([...sem, ...readers].map((l) => l.state), Array(5).fill("held"));
      assert.deepEqual(lost, []);
      assert.equal(semWaiterLock, null, "the semaphore's waiter still waits");
      assert.equal(writerLock, null, "the writer still waits");

      // The waiters keep their places: a holder's slot goes to the semaphore's waiter, the
      // readers' lock to the writer.
      await sem[1].release();
      const granted = await semWaiter;
      assert.equal(granted.slot, 1);
      assert.ok(granted.token > sem[2].token);
      for (const reader of readers) await reader.release();
      const wrote = await writer;
      assert.ok(wrote.token > readers[1].token);
      await Promise.all([granted.release(), wrote.release(), sem[0].release(), sem[2].release()]);
      abort.abort();
      await reading;
    } finally {
      abort.abort();
      await Promise.all(clients.map((c) => c.close()));
      await Promise.all([leader.stop("SIGKILL"), standby.stop("SIGKILL")]);
    }
  },
});
