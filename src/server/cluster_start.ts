/**
 * Cluster mode (`-cluster-etcd`): the etcd client and this node's leadership, made before the
 * engine (its tokens come from etcd), and the campaign, begun once the listeners are bound.
 *
 * @module
 */

import { ClusterNode } from "../cluster/cluster_node.ts";
import type { Etcd } from "../cluster/etcd.ts";
import { EtcdHttpClient } from "../cluster/etcd_http.ts";
import { leaderProbe } from "../cluster/leader_probe.ts";
import type { Scheduler } from "../clock.ts";
import { isWildcard, type ServerConfig } from "../config.ts";
import { parseHostPort } from "../host_port.ts";
import type { AuditLog } from "../log/audit.ts";
import { log } from "../log/diagnostic.ts";

const logger = log("server");

/** The etcd client (TLS files read now) and this node's leadership, not campaigning yet. */
export async function startClusterNode(
  config: ServerConfig,
  scheduler: Scheduler,
  audit: AuditLog,
  protocolTls: boolean,
  givenEtcd: Etcd | undefined,
): Promise<ClusterNode> {
  const read = (path: string | null) => path === null ? undefined : Deno.readTextFile(path);
  const [caCert, cert, key] = await Promise.all([
    read(config.clusterEtcdCa),
    read(config.clusterEtcdCert),
    read(config.clusterEtcdKey),
  ]);
  let node: ClusterNode | null = null;
  const etcd = givenEtcd ?? new EtcdHttpClient({
    endpoints: config.clusterEtcd,
    tls: { caCert, cert, key },
    requestTimeoutMs: config.clusterTtlMs / 2,
    observe: (op, seconds, ok) => node?.recordEtcd(op, seconds, ok),
    scheduler,
  });
  // The addresses are known once the listeners are bound (campaign() sets them).
  const advertise = config.advertise ?? config.listen;
  node = new ClusterNode({
    etcd,
    scheduler,
    cluster: config.cluster!,
    node: { name: config.clusterNode ?? advertise, advertise, admin: config.advertiseAdmin },
    ttlMs: config.clusterTtlMs,
    audit,
    probe: leaderProbe(protocolTls, scheduler),
    reclaimGraceMs: config.clusterReclaimGraceMs,
    recordLingerMs: config.clusterRecordLingerMs,
  });
  return node;
}

/**
 * Campaigns for leadership, only once the advertised addresses accept connections: the
 * protocol listener's (`listenAddr`) and the admin API's (`adminAddr`, null when off).
 */
export function campaign(
  cluster: ClusterNode,
  config: ServerConfig,
  listenAddr: string,
  adminAddr: string | null,
): void {
  const advertise = config.advertise ?? listenAddr;
  cluster.start({
    name: config.clusterNode ?? advertise,
    advertise,
    admin: config.advertiseAdmin ??
      (adminAddr !== null && config.adminListen !== null &&
          !isWildcard(parseHostPort(config.adminListen).hostname)
        ? adminAddr
        : null),
  });
  logger.info("cluster mode", {
    cluster: config.cluster,
    node: cluster.node.name,
    advertise: cluster.node.advertise,
    advertise_admin: cluster.node.admin ?? "",
    etcd: config.clusterEtcd.join(","),
    ttl_ms: config.clusterTtlMs,
  });
}
