/**
 * Cluster mode against a real 3-member etcd on loopback: the gateway client, the election, a
 * pause without a leader change when the etcd leader member is killed, a step-down when the
 * lockd leader is cut off from etcd, a planned hand-over, and a deposed leader's failed token
 * reservation. Real time (TTL 2 s): each test takes a few seconds.
 */

import assert from "node:assert/strict";
import { systemScheduler } from "../../src/clock.ts";
import { ClusterTokens, TokensNotReserved } from "../../src/cluster/cluster_tokens.ts";
import type { KeyValue } from "../../src/cluster/etcd.ts";
import {
  REAL_TTL_MS as TTL_MS,
  type RealLeadership,
  startEtcdCluster,
} from "../helpers/cluster_fixture.ts";
import { etcdClient, EtcdLink, skipWithoutEtcd, waitFor } from "../helpers/etcd.ts";

function leaders(nodes: RealLeadership[]): RealLeadership[] {
  return nodes.filter((n) => n.leadership.role === "leader" || n.leadership.role === "paused");
}

function kinds(node: RealLeadership): string[] {
  return node.events.map(({ event: e }) =>
    e.type === "stepped_down" ? `stepped_down:${e.reason}` : e.type
  );
}

const options = { ignore: skipWithoutEtcd, sanitizeOps: true, sanitizeResources: true };

Deno.test({
  name: "the gateway client does leases, guarded transactions, reads and a watch on a real etcd",
  ...options,
  fn: async () => {
    await using fixture = await startEtcdCluster({ nodes: 0 });
    const cluster = fixture.etcd;
    const etcd = etcdClient(cluster.clientUrls);
    try {
      const lease = await etcd.grantLease(2);
      assert.equal(lease.ttlS, 2);
      assert.equal(await etcd.keepAliveOnce(lease.id), 2);
      const created = await etcd.txn(
        [{ key: "k", target: "create", revision: 0 }],
        [{ type: "put", key: "k", value: "v ✓", lease: lease.id }],
        [{ type: "get", key: "k" }],
      );
      assert.equal(created.succeeded, true);
      const again = await etcd.txn(
        [{ key: "k", target: "create", revision: 0 }],
        [{ type: "put", key: "k", value: "other" }],
        [{ type: "get", key: "k" }],
      );
      assert.equal(again.succeeded, false);
      assert.equal(again.gets[0]?.value, "v ✓");
      assert.equal(again.gets[0]?.createRevision, created.revision);
      assert.equal(again.gets[0]?.lease, lease.id);
      const read = await etcd.get("k");
      assert.equal(read.kv?.createRevision, created.revision);
      assert.ok(read.revision >= created.revision);

      const controller = new AbortController();
      const seen: string[] = [];
      const watching = (async () => {
        for await (const batch of etcd.watch("k", read.revision + 1, controller.signal)) {
          for (const e of batch) seen.push(`${e.type}:${e.kv.value}`);
          if (seen.length === 2) controller.abort();
        }
      })();
      await new Promise((r) => setTimeout(r, 100));
      await etcd.txn([], [{ type: "put", key: "k", value: "w", lease: lease.id }], []);
      await etcd.revokeLease(lease.id); // deletes k with the lease
      await watching;
      assert.deepEqual(seen, ["put:w", "delete:"]);
      assert.equal(await etcd.keepAliveOnce(lease.id), 0);
      await etcd.revokeLease(lease.id); // already gone: not an error
      await assert.rejects(
        etcd.txn([], [{ type: "put", key: "x", value: "y", lease: lease.id }], []),
        (e: Error & { kind?: string }) => e.kind === "lease_not_found",
      );

      await cluster.kill(cluster.members[0].name);
      await cluster.waitHealthy(); // the others elect a raft leader if the killed one was it
      const health = await etcd.health({ timeoutMs: 500 });
      assert.deepEqual(health.map((h) => h.healthy), [false, true, true]);
    } finally {
      etcd.close();
    }
  },
});

Deno.test({
  name: "three nodes elect one leader; when it dies unannounced a standby leads within TTL + 1 s",
  ...options,
  fn: async () => {
    await using fixture = await startEtcdCluster({ nodes: 0 });
    const nodes = ["a", "b", "c"].map((n) => fixture.leadership(n));
    await waitFor("a leader", () => leaders(nodes).length === 1);
    await waitFor(
      "every standby to see it",
      () => nodes.every((n) => n.leadership.leader?.term === leaders(nodes)[0].leadership.term),
    );
    const first = leaders(nodes)[0];
    const term = first.leadership.term;
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(leaders(nodes).length, 1);
    first.leadership.close(); // like SIGKILL: nothing is said to etcd
    const killedAt = performance.now();
    const rest = nodes.filter((n) => n !== first);
    await waitFor("a new leader", () => leaders(rest).length === 1, 5_000);
    const tookMs = performance.now() - killedAt;
    const second = leaders(rest)[0];
    assert.ok(second.leadership.term > term);
    assert.ok(tookMs <= TTL_MS + 1_000, `fail-over took ${tookMs.toFixed(0)} ms`);
    await waitFor(
      "the other standby to follow",
      () => rest.every((n) => n.leadership.leader?.term === second.leadership.term),
    );
  },
});

Deno.test({
  name:
    "killing the etcd leader member pauses the lockd leader at most: no leader change, no step-down",
  ...options,
  fn: async () => {
    await using fixture = await startEtcdCluster({ nodes: 0 });
    const cluster = fixture.etcd;
    const nodes = ["a", "b", "c"].map((n) => fixture.leadership(n));
    await waitFor("a leader", () => leaders(nodes).length === 1);
    const leader = leaders(nodes)[0];
    const term = leader.leadership.term;
    for (let kill = 0; kill < 2; kill++) {
      const member = await cluster.leader();
      assert.ok(member !== null);
      await cluster.kill(member);
      await cluster.waitHealthy();
      // Whatever etcd did, the lockd leader must be serving its same term again.
      await waitFor("the leader to serve again", () => leader.leadership.serving(), 5_000);
      cluster.restart(member);
      await cluster.waitHealthy();
    }
    await new Promise((r) => setTimeout(r, TTL_MS));
    assert.equal(leader.leadership.term, term);
    assert.deepEqual(leaders(nodes), [leader]);
    for (const n of nodes) {
      assert.ok(
        !kinds(n).some((k) => k.startsWith("stepped_down")),
        `${n.name}: ${kinds(n).join()}`,
      );
    }
    const pauses = leader.events.filter(({ event }) => event.type === "resumed")
      .map(({ event }) => event.type === "resumed" ? event.pausedMs : 0);
    console.log(`pauses: ${pauses.map((ms) => ms.toFixed(0)).join(", ") || "none"} ms`);
    for (const ms of pauses) assert.ok(ms <= 3_000, `paused ${ms} ms`);
  },
});

Deno.test({
  name:
    "a leader cut off from etcd stops serving before its safeUntil, a standby takes over, the old one follows it after the cut heals",
  ...options,
  fn: async () => {
    await using fixture = await startEtcdCluster({ nodes: 0 });
    const cluster = fixture.etcd;
    await using link = EtcdLink.open(cluster.clientUrls);
    const a = fixture.leadership("a", link.urls);
    const others: RealLeadership[] = [];
    await waitFor("a to lead", () => a.leadership.role === "leader");
    others.push(fixture.leadership("b"), fixture.leadership("c"));
    await waitFor("standbys", () => others.every((n) => n.leadership.role === "standby"));
    await new Promise((r) => setTimeout(r, 300));
    const term = a.leadership.term;
    link.partition();
    const cutAt = performance.now();
    // Count every moment a claims to serve after its own safeUntil (the breach the soak checks).
    let servedLate = 0;
    let servingUntil = cutAt;
    const probe = setInterval(() => {
      const now = performance.now();
      if (a.leadership.serving(now)) {
        servingUntil = now;
        if (now >= a.leadership.safeUntilMs) servedLate++;
      }
    }, 5);
    try {
      await waitFor("a new leader", () => leaders(others).length === 1, 6_000);
      const newLeaderAt = performance.now();
      assert.ok(servingUntil < newLeaderAt, "the old leader served while the new one led");
      await waitFor(
        "a to step down",
        () => kinds(a).some((k) => k.startsWith("stepped_down")),
        6_000,
      );
    } finally {
      clearInterval(probe);
    }
    assert.equal(servedLate, 0);
    assert.ok(kinds(a).includes("paused"));
    assert.ok(kinds(a).includes("stepped_down:etcd_unreachable"), kinds(a).join());
    const newTerm = leaders(others)[0].leadership.term;
    assert.ok(newTerm > term);
    link.heal();
    await waitFor(
      "a to follow the new leader",
      () => a.leadership.role === "standby" && a.leadership.leader?.term === newTerm,
      6_000,
    );
  },
});

Deno.test({
  name: "a planned hand-over elects a standby within a second",
  ...options,
  fn: async () => {
    await using fixture = await startEtcdCluster({ nodes: 0 });
    const nodes = ["a", "b", "c"].map((n) => fixture.leadership(n));
    await waitFor("a leader", () => leaders(nodes).length === 1);
    await waitFor(
      "standbys",
      () => nodes.filter((n) => n.leadership.role === "standby").length === 2,
    );
    const first = leaders(nodes)[0];
    const startMs = performance.now();
    await first.leadership.resign();
    const rest = nodes.filter((n) => n !== first);
    await waitFor("a new leader", () => leaders(rest).length === 1, 2_000);
    const tookMs = performance.now() - startMs;
    assert.ok(tookMs <= 1_000, `hand-over took ${tookMs.toFixed(0)} ms`);
    assert.deepEqual(kinds(first).slice(-1), ["stepped_down:shutdown"]);
  },
});

Deno.test({
  name:
    "a deposed leader's token reservation fails on a real etcd; the new term starts above its mark",
  ...options,
  fn: async () => {
    await using fixture = await startEtcdCluster({ nodes: 0 });
    const a = fixture.leadership("a");
    await waitFor("a to lead", () => a.leadership.role === "leader");
    const b = fixture.leadership("b");
    const fenced: (KeyValue | undefined)[] = [];
    const tokensA = new ClusterTokens({
      etcd: a.etcd,
      scheduler: systemScheduler,
      cluster: "it",
      blockSize: 10,
      requestTimeoutMs: 1_000,
      onFenced: (kv) => fenced.push(kv),
      onReserved: () => {},
    });
    const tokensB = new ClusterTokens({
      etcd: b.etcd,
      scheduler: systemScheduler,
      cluster: "it",
      blockSize: 10,
      requestTimeoutMs: 1_000,
      onFenced: () => {},
      onReserved: () => {},
    });
    try {
      const termA = a.leadership.term;
      await tokensA.begin(termA, Date.now());
      const issuedA = [tokensA.next(), tokensA.next(), tokensA.next()];
      // a is replaced while its token issuer still believes in term A (a frozen leader).
      a.leadership.close();
      await b.etcd.txn([], [{ type: "delete", key: "it/leader" }], []);
      await waitFor("b to lead", () => b.leadership.role === "leader");
      const termB = b.leadership.term;
      await tokensB.begin(termB, Date.now() - 3_600_000); // b's clock is an hour behind
      const issuedB = tokensB.next();
      // a uses up its block: the reservation is refused and names b's key.
      for (let i = 0; i < 3; i++) tokensA.next();
      await waitFor("a's reservation to be refused", () => fenced.length === 1);
      assert.equal(fenced[0]?.createRevision, termB);
      assert.throws(() => tokensA.next(), TokensNotReserved);
      assert.ok(issuedB > Math.max(...issuedA) + 3, `${issuedB} not above a's tokens`);
    } finally {
      tokensA.end();
      tokensB.end();
    }
  },
});
