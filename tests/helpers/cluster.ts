/**
 * Cluster-mode servers for tests: N in-process lockd servers on one real etcd, each with its
 * own in-memory audit sink, and helpers to find the one that serves.
 */

import assert from "node:assert/strict";
import type { ServerConfig } from "../../src/config.ts";
import { startServer } from "../../src/server/start.ts";
import { MemorySink } from "./memory_sink.ts";
import type { TestServer } from "./start_server.ts";
import { waitFor } from "./etcd.ts";

export interface ClusterServers extends AsyncDisposable {
  readonly nodes: TestServer[];
  /** The node that serves now, or undefined. */
  serving(): TestServer | undefined;
  /** Waits until exactly one node serves and returns it. */
  waitServing(timeoutMs?: number): Promise<TestServer>;
}

/** Starts `count` lockd servers in cluster mode on `etcd` (TTL 2 s unless overridden). */
export async function startClusterServers(
  etcd: readonly string[],
  count = 3,
  config: Partial<ServerConfig> = {},
  cluster = "test",
): Promise<ClusterServers> {
  const nodes: TestServer[] = [];
  for (let i = 0; i < count; i++) {
    const audit = new MemorySink();
    const server = await startServer({
      listen: "127.0.0.1:0",
      adminListen: "127.0.0.1:0",
      opsListen: "127.0.0.1:0",
      shutdownGraceMs: 0,
      clusterEtcd: etcd,
      cluster,
      clusterNode: `n${i + 1}`,
      ...config,
    }, { auditSink: audit });
    nodes.push({
      server,
      audit,
      addr: server.addr,
      [Symbol.asyncDispose]: () => server.shutdown(),
    });
  }
  const serving = () => nodes.find((n) => n.server.context.cluster?.serving);
  return {
    nodes,
    serving,
    async waitServing(timeoutMs = 10_000) {
      await waitFor(
        "one serving node",
        () => nodes.filter((n) => n.server.context.cluster?.serving).length === 1,
        timeoutMs,
      );
      return serving()!;
    },
    async [Symbol.asyncDispose]() {
      await Promise.all(nodes.map((n) => n.server.shutdown()));
    },
  };
}

/**
 * Every term has exactly one `leader_elected` record across all nodes' audit logs (issue 19.7:
 * the campaign's answer and the watch could both report one win).
 */
export function assertOneElectionRecordPerTerm(servers: ClusterServers): void {
  const terms: number[] = [];
  for (const node of servers.nodes) {
    for (const record of node.audit.records()) {
      if (record.event === "leader_elected") terms.push(record.term as number);
    }
  }
  assert.ok(terms.length > 0, "no leader_elected record");
  assert.deepEqual([...terms].sort((a, b) => a - b), [...new Set(terms)].sort((a, b) => a - b));
}
