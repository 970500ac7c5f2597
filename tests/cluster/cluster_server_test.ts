/**
 * lockd servers in cluster mode on a real 3-member etcd: who takes clients (HELLO, /readyz,
 * the admin API), what clients see at a step-down and at a planned hand-over, and what the
 * audit log says. In-process servers, real time (TTL 2 s).
 */

import assert from "node:assert/strict";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { PROTOCOL_VERSION } from "../../src/wire/messages.ts";
import { http } from "../admin/admin_helpers.ts";
import { assertOneElectionRecordPerTerm, startEtcdCluster } from "../helpers/cluster_fixture.ts";
import { etcdClient, skipWithoutEtcd, waitFor } from "../helpers/etcd.ts";
import { RawClient } from "../helpers/raw_client.ts";

const options = { ignore: skipWithoutEtcd, sanitizeOps: true, sanitizeResources: true };

async function hello(addr: string) {
  await using raw = await RawClient.connect(addr);
  await raw.send({ type: "hello", version: PROTOCOL_VERSION, clientName: "t" });
  return await raw.next(6_000);
}

Deno.test({
  name:
    "cluster: one node serves; standbys answer HELLO with NOT_LEADER naming it; /readyz and the admin API follow",
  ...options,
  fn: async () => {
    await using servers = await startEtcdCluster();
    const { leader, standbys } = await servers.waitLeaderKnown();

    const welcome = await hello(leader.addr);
    assert.equal(welcome?.type, "welcome");
    for (const standby of standbys) {
      const answer = await hello(standby.addr);
      assert.equal(answer?.type, "error");
      assert.ok(answer?.type === "error");
      assert.equal(answer.code, WIRE_CODES.NOT_LEADER.code);
      assert.equal(answer.name, leader.addr);
      assert.match(answer.message, /not the leader/);
    }

    const ready = await http(leader.server.opsAddr!, "GET", "/readyz");
    assert.equal(ready.status, 200);
    for (const standby of standbys) {
      const probe = await http(standby.server.opsAddr!, "GET", "/readyz");
      assert.equal(probe.status, 503);
      assert.match(probe.text, /not the leader/);
      assert.equal((await http(standby.server.opsAddr!, "GET", "/healthz")).status, 200);
    }

    // The admin API: a standby answers /api/info itself and redirects lock views to the leader.
    const info = await http(standbys[0].server.adminAddr!, "GET", "/api/info");
    assert.equal(info.status, 200);
    const cluster = JSON.parse(info.text).cluster;
    assert.equal(cluster.role, "standby");
    assert.equal(cluster.serving, false);
    assert.equal(cluster.leader.advertise, leader.addr);
    assert.equal(cluster.leader.admin, leader.server.adminAddr);
    assert.equal(cluster.etcd.length, 3);
    assert.ok(cluster.etcd.every((e: { healthy: boolean }) => e.healthy));
    const redirect = await fetch(`http://${standbys[0].server.adminAddr}/api/locks?match=a*`, {
      redirect: "manual",
    });
    await redirect.body?.cancel();
    assert.equal(redirect.status, 307);
    assert.equal(
      redirect.headers.get("location"),
      `http://${leader.server.adminAddr}/api/locks?match=a*`,
    );
    const leaderInfo = JSON.parse((await http(leader.server.adminAddr!, "GET", "/api/info")).text);
    assert.equal(leaderInfo.cluster.role, "leader");
    assert.ok(leaderInfo.cluster.term > 0);
    assert.ok(leaderInfo.cluster.safe_until_ms > 0);
    assert.ok(leaderInfo.cluster.token_high_water > 0);
  },
});

Deno.test({
  name:
    "cluster: a step-down closes every session with NOT_LEADER; ownerships end as failover, audited with the term",
  ...options,
  fn: async () => {
    await using servers = await startEtcdCluster();
    const leader = await servers.waitServing();
    const term = leader.server.context.cluster!.term;
    await using holder = await RawClient.session(leader.addr);
    await holder.send({ type: "acquire", requestId: 1, name: "a", leaseMs: 500, waitMs: 0 });
    const granted = await holder.next();
    assert.equal(granted?.type, "acquired");
    // An operator deletes the leader key: the leader steps down (key_lost).
    const client = etcdClient(servers.etcd.clientUrls);
    try {
      await client.txn([], [{ type: "delete", key: "test/leader" }], []);
    } finally {
      client.close();
    }
    const messages = await holder.drainUntilClosed();
    const last = messages.at(-1);
    assert.ok(last?.type === "error", JSON.stringify(messages));
    assert.equal(last.code, WIRE_CODES.NOT_LEADER.code);
    assert.match(last.message, /stepped down: key lost/);
    const records = leader.audit.records();
    const release = records.find((r) => r.event === "release" && r.lock === "a");
    assert.equal(release?.reason, "failover");
    assert.equal(release?.term, term);
    const acquire = records.find((r) => r.event === "acquire" && r.lock === "a");
    assert.equal(acquire?.term, term);
    assert.ok(records.some((r) => r.event === "leader_elected" && r.term === term));
    assert.ok(
      records.some((r) => r.event === "stepped_down" && r.term === term && r.reason === "key_lost"),
    );
    await servers.waitServing();
    assertOneElectionRecordPerTerm(servers);
  },
});

Deno.test({
  name:
    "cluster: shutting the leader down hands over: its sessions get NOT_LEADER and a standby serves within a second",
  ...options,
  fn: async () => {
    await using servers = await startEtcdCluster();
    const leader = await servers.waitServing();
    await using session = await RawClient.session(leader.addr);
    const startMs = performance.now();
    const stopping = leader.server.shutdown();
    const messages = await session.drainUntilClosed();
    const last = messages.at(-1);
    assert.ok(last?.type === "error");
    assert.equal(last.code, WIRE_CODES.NOT_LEADER.code);
    const next = await waitFor(
      "a standby to serve",
      () => servers.nodes.some((n) => n !== leader && n.server.context.cluster?.serving),
      2_000,
    );
    assert.ok(performance.now() - startMs < 1_000, `hand-over took ${next.toFixed(0)} ms`);
    await stopping;
    assertOneElectionRecordPerTerm(servers);
  },
});

Deno.test({
  name:
    "cluster: a HELLO at a standby while the leader is dead is held, then answered by the new leader",
  ...options,
  fn: async () => {
    await using servers = await startEtcdCluster();
    const { leader, standbys } = await servers.waitLeaderKnown();
    // The leader dies unannounced: its listener and etcd traffic stop, its lease runs out.
    leader.server.context.cluster!.close();
    await leader.server.shutdown();
    const startMs = performance.now();
    const answers = await Promise.all(standbys.map((n) => hello(n.addr)));
    const tookMs = performance.now() - startMs;
    const next = servers.serving();
    assert.ok(next !== undefined && next !== leader);
    for (const [i, answer] of answers.entries()) {
      if (standbys[i] === next) {
        assert.equal(answer?.type, "welcome");
      } else {
        assert.ok(answer?.type === "error");
        assert.equal(answer.code, WIRE_CODES.NOT_LEADER.code);
        assert.equal(answer.name, next.addr);
      }
    }
    assert.ok(tookMs < 3_500, `held ${tookMs.toFixed(0)} ms`);
    assertOneElectionRecordPerTerm(servers);
  },
});

Deno.test({
  name:
    "cluster: a node reaches an etcd that requires TLS client certificates through the -cluster-etcd-* flags",
  ...options,
  fn: async () => {
    const fixtures = new URL("../fixtures/", import.meta.url).pathname;
    await using servers = await startEtcdCluster({
      etcd: {
        members: 1,
        tls: {
          certFile: `${fixtures}etcd/etcd-server.pem`,
          keyFile: `${fixtures}etcd/etcd-server-key.pem`,
          caFile: `${fixtures}tls/ca.pem`,
          clientCertFile: `${fixtures}tls/client-cn.pem`,
          clientKeyFile: `${fixtures}tls/client-cn-key.pem`,
        },
      },
      nodes: 1,
      config: {
        clusterEtcdCa: `${fixtures}tls/ca.pem`,
        clusterEtcdCert: `${fixtures}tls/client-cn.pem`,
        clusterEtcdKey: `${fixtures}tls/client-cn-key.pem`,
      },
    });
    const etcd = servers.etcd;
    assert.ok(etcd.clientUrls[0].startsWith("https://"));
    const leader = await servers.waitServing();
    const info = JSON.parse((await http(leader.server.adminAddr!, "GET", "/api/info")).text);
    assert.equal(info.cluster.etcd[0].healthy, true);
    await using session = await RawClient.session(leader.addr);
    await session.send({ type: "acquire", requestId: 1, name: "t", leaseMs: 500, waitMs: 0 });
    assert.equal((await session.next())?.type, "acquired");
    // Without a client certificate etcd refuses the connection: the node never leads.
    const refused = await servers.startNodes(
      1,
      { clusterEtcdCa: `${fixtures}tls/ca.pem` },
      "other",
    );
    await new Promise((r) => setTimeout(r, 1_500));
    assert.equal(refused.nodes[0].server.context.cluster?.role, "starting");
  },
});
