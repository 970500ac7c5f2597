/**
 * Cluster milestone 2 end to end (real etcd, lockd as child processes, a raw version-2 client):
 * a holder keeps its lock and its token across a leader SIGKILL by RESUME and RECLAIM at the new
 * leader; a waiter keeps its place; a lock nobody may hold is granted at once by the new leader
 * (no record, no wait for the window); tokens never go back, per lock or globally.
 */

import assert from "node:assert/strict";
import { EtcdCluster } from "../../bench/etcd_proc.ts";
import { type LockdProc, spawnLockd } from "../../bench/lockd_proc.ts";
import type { Acquired, Message, Queued } from "../../src/wire/messages.ts";
import { WAIT_FOREVER } from "../../src/wire/messages.ts";
import { skipWithoutEtcd, waitFor } from "../helpers/etcd.ts";
import { RawClient } from "../helpers/raw_client.ts";

const options = { ignore: skipWithoutEtcd, sanitizeOps: true, sanitizeResources: true };

async function info(node: LockdProc): Promise<Record<string, unknown> | null> {
  try {
    const response = await fetch(`http://${node.adminAddr}/api/info`);
    return await response.json();
  } catch {
    return null;
  }
}

async function servingNode(nodes: LockdProc[]): Promise<LockdProc | undefined> {
  for (const node of nodes) {
    const cluster = (await info(node))?.cluster as { serving?: boolean } | undefined;
    if (cluster?.serving) return node;
  }
  return undefined;
}

/** A version-2 session at `addr`, retried while the node refuses (NOT_LEADER) or is gone. */
async function sessionAt(addr: string, timeoutMs = 15_000): Promise<RawClient> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    let client: RawClient | null = null;
    try {
      client = await RawClient.connect(addr);
      await client.send({ type: "hello", version: 2, clientName: "e2e" });
      const welcome = await client.next(timeoutMs);
      if (welcome?.type === "welcome") {
        client.welcome = welcome;
        client.version = welcome.version;
        return client;
      }
    } catch {
      // refused or reset: try again
    }
    await client?.[Symbol.asyncDispose]();
    if (performance.now() > deadline) throw new Error(`no WELCOME from ${addr}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function expectType<T extends Message["type"]>(
  message: Message | null,
  type: T,
): Extract<Message, { type: T }> {
  assert.ok(message?.type === type, `expected ${type}, got ${JSON.stringify(message)}`);
  return message as Extract<Message, { type: T }>;
}

function acquire(requestId: number, name: string, leaseMs: number, waitMs: number) {
  return {
    type: "acquire" as const,
    requestId,
    name,
    leaseMs,
    waitMs,
    mode: "exclusive" as const,
    limit: 0,
    value: new Uint8Array(0),
  };
}

Deno.test({
  name:
    "cluster m2: a holder keeps its lock and token across a leader SIGKILL, a waiter its place; a lock with no record is granted at once; tokens never go back",
  ...options,
  fn: async () => {
    await using etcd = await EtcdCluster.start({ members: 1 });
    const flags = ["-cluster-etcd", etcd.clientUrls.join(","), "-cluster", "e2e"];
    const nodes: LockdProc[] = [];
    try {
      nodes.push(await spawnLockd({ flags: [...flags, "-cluster-node", "a"], http: true }));
      await waitFor("node a serves", async () => (await servingNode(nodes)) !== undefined, 15_000);
      nodes.push(await spawnLockd({ flags: [...flags, "-cluster-node", "b"], http: true }));
      const leader = (await servingNode(nodes))!;
      const standby = nodes.find((n) => n !== leader)!;

      await using holder = await sessionAt(leader.addr);
      await using waiter = await sessionAt(leader.addr);
      const term = holder.welcome!.term!;
      assert.ok(term > 0 && holder.welcome!.reclaimWindowMs! > 0, JSON.stringify(holder.welcome));
      await holder.send(acquire(1, "e2e/rider", 10_000, 0));
      const held = expectType(await holder.next(), "acquired") as Acquired;
      await waiter.send(acquire(1, "e2e/rider", 10_000, WAIT_FOREVER));
      const queued = expectType(await waiter.next(), "queued") as Queued;

      await leader.stop("SIGKILL");
      const killedAtMs = performance.now();

      // The holder and the waiter carry their claims over to the new leader.
      await using holder2 = await sessionAt(standby.addr);
      const servedAfterMs = performance.now() - killedAtMs;
      assert.ok(holder2.welcome!.term! > term, "a new term");
      await holder2.send(
        {
          type: "resume",
          requestId: 1,
          prevTerm: term,
          prevSessionId: holder.welcome!.sessionId,
          claims: 1,
        },
        {
          type: "reclaim",
          requestId: 2,
          kind: "owned",
          token: held.token,
          orderTerm: 0,
          orderSeq: 0,
          leaseMs: 10_000,
          waitMs: 0,
          ticket: held.ticket!,
          mode: "exclusive",
          limit: held.limit ?? 1,
          slot: held.slot ?? 0,
          name: "e2e/rider",
          value: new Uint8Array(0),
        },
      );
      const resumed = expectType(await holder2.next(), "resumed");
      assert.equal(resumed.outcome, "reclaim");
      assert.ok(resumed.windowLeftMs > 0);
      const kept = expectType(await holder2.next(), "acquired");
      assert.equal(kept.token, held.token, "the same token");
      const confirmedAfterMs = performance.now() - killedAtMs;

      await using waiter2 = await sessionAt(standby.addr);
      await waiter2.send(
        {
          type: "resume",
          requestId: 1,
          prevTerm: term,
          prevSessionId: waiter.welcome!.sessionId,
          claims: 1,
        },
        {
          type: "reclaim",
          requestId: 2,
          kind: "queued",
          token: 0,
          orderTerm: queued.orderTerm!,
          orderSeq: queued.orderSeq!,
          leaseMs: 10_000,
          waitMs: WAIT_FOREVER,
          ticket: queued.ticket!,
          mode: "exclusive",
          limit: 0,
          slot: 0,
          name: "e2e/rider",
          value: new Uint8Array(0),
        },
      );
      assert.equal(expectType(await waiter2.next(), "resumed").outcome, "reclaim");
      const requeued = expectType(await waiter2.next(), "queued");
      assert.deepEqual([requeued.orderTerm, requeued.orderSeq], [
        queued.orderTerm,
        queued.orderSeq,
      ]);

      // A new client: a lock nobody held is granted at once, inside the window; the rider's is not.
      await using other = await sessionAt(standby.addr);
      const askedAtMs = performance.now();
      await other.send(acquire(1, "e2e/free", 1_000, 0));
      const free = expectType(await other.next(), "acquired");
      const grantMs = performance.now() - askedAtMs;
      assert.ok(grantMs < 1_000, `granted ${grantMs.toFixed(0)} ms after asking`);
      assert.ok(free.token > held.token, "tokens never go back globally");
      await other.send(acquire(2, "e2e/rider", 1_000, 0));
      expectType(await other.next(), "error");

      // The holder lets go: the reclaimed waiter gets the lock, with a larger token.
      await holder2.send({ type: "release", requestId: 3, name: "e2e/rider", token: held.token });
      expectType(await holder2.next(), "released");
      const next = expectType(await waiter2.next(), "acquired");
      assert.ok(next.token > held.token, "tokens never go back per lock");
      console.log(
        `new leader serving after ${servedAfterMs.toFixed(0)} ms; holder confirmed after ` +
          `${confirmedAfterMs.toFixed(0)} ms; a free lock granted in ${grantMs.toFixed(0)} ms`,
      );
    } finally {
      await Promise.all(nodes.map((n) => n.stop("SIGTERM", 5_000)));
    }
  },
});

Deno.test({
  name:
    "cluster m2: a planned hand-over (SIGTERM of the leader) keeps a 2 s lease's lock and token; the new leader's window ends as soon as the listed session resumed",
  ...options,
  fn: async () => {
    await using etcd = await EtcdCluster.start({ members: 1 });
    const flags = ["-cluster-etcd", etcd.clientUrls.join(","), "-cluster", "e2e"];
    const nodes: LockdProc[] = [];
    try {
      nodes.push(await spawnLockd({ flags: [...flags, "-cluster-node", "a"], http: true }));
      await waitFor("node a serves", async () => (await servingNode(nodes)) !== undefined, 15_000);
      nodes.push(await spawnLockd({ flags: [...flags, "-cluster-node", "b"], http: true }));
      const leader = (await servingNode(nodes))!;
      const standby = nodes.find((n) => n !== leader)!;
      await waitFor("the standby knows the leader", async () => {
        const cluster = (await info(standby))?.cluster as { leader?: unknown } | undefined;
        return cluster?.leader !== null && cluster?.leader !== undefined;
      });

      await using holder = await sessionAt(leader.addr);
      const term = holder.welcome!.term!;
      await holder.send(acquire(1, "e2e/handover", 2_000, 0));
      const held = expectType(await holder.next(), "acquired") as Acquired;
      const confirmedAtMs = performance.now();

      const stopping = leader.stop("SIGTERM", 10_000);
      // The old leader closes the session with NOT_LEADER: the client goes to the other node.
      const closing = await holder.next();
      assert.equal(closing?.type, "error", JSON.stringify(closing));
      const stoppedAtMs = performance.now();
      await using holder2 = await sessionAt(standby.addr);
      await holder2.send(
        {
          type: "resume",
          requestId: 1,
          prevTerm: term,
          prevSessionId: holder.welcome!.sessionId,
          claims: 1,
        },
        {
          type: "reclaim",
          requestId: 2,
          kind: "owned",
          token: held.token,
          orderTerm: 0,
          orderSeq: 0,
          leaseMs: 2_000,
          waitMs: 0,
          ticket: held.ticket!,
          mode: "exclusive",
          limit: held.limit ?? 1,
          slot: held.slot ?? 0,
          name: "e2e/handover",
          value: new Uint8Array(0),
        },
      );
      assert.equal(expectType(await holder2.next(), "resumed").outcome, "reclaim");
      const kept = expectType(await holder2.next(), "acquired");
      assert.equal(kept.token, held.token);
      const keptAtMs = performance.now();
      assert.ok(
        keptAtMs - confirmedAtMs < 2_000,
        `kept ${(keptAtMs - confirmedAtMs).toFixed(0)} ms after the last confirmation`,
      );
      await waitFor("the window closed early", async () => {
        const cluster = (await info(standby))?.cluster as { window_ends_in_ms?: unknown };
        return cluster?.window_ends_in_ms === null;
      }, 2_000);
      assert.equal((await stopping).code, 0);
      console.log(
        `holder confirmed at the new leader ${(keptAtMs - stoppedAtMs).toFixed(0)} ms after ` +
          `its NOT_LEADER`,
      );
    } finally {
      await Promise.all(nodes.map((n) => n.stop("SIGTERM", 5_000)));
    }
  },
});
