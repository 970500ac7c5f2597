/**
 * What a start opens that outlives a connection: the data-dir lock, the audit log, the fencing
 * tokens' source and, in cluster mode, the node whose tokens come from etcd. A failure undoes
 * what was opened before it.
 *
 * @module
 */

import type { ClusterNode } from "../cluster/cluster_node.ts";
import type { Scheduler } from "../clock.ts";
import type { ServerConfig } from "../config.ts";
import type { TokenSource } from "../core/tokens.ts";
import { AuditLog, type AuditSink, openAuditSink } from "../log/audit.ts";
import { log } from "../log/diagnostic.ts";
import { lockDataDir, openTokenIssuer } from "../storage/token_store.ts";
import { startClusterNode } from "./cluster_start.ts";
import type { ServerDeps } from "./deps.ts";
import { pathError } from "./start_errors.ts";

const logger = log("server");

/** Held until shutdown ends: one server per data dir. */
export interface DataDirLock {
  release(): void;
}

export interface Records {
  readonly dataDirLock: DataDirLock | null;
  readonly audit: AuditLog;
  /** Cluster mode only. */
  readonly cluster: ClusterNode | null;
  readonly tokens: TokenSource;
}

/** Opens the records in order: data-dir lock, audit log, cluster node, token source. */
export async function openRecords(
  config: ServerConfig,
  deps: ServerDeps,
  scheduler: Scheduler,
  protocolTls: boolean,
): Promise<Records> {
  // One server per data dir: a second one would issue the same tokens. Held until shutdown ends.
  // Cluster mode keeps the mark in etcd: a -data-dir (the systemd unit and the image give one)
  // is not used then.
  const clusterMode = config.clusterEtcd.length > 0;
  const dataDirLock = deps.tokens === undefined && config.dataDir !== null && !clusterMode
    ? lockDataDir(config.dataDir)
    : null;
  const audit = openAudit(config, deps.auditSink, scheduler, dataDirLock);
  const cluster = clusterMode
    ? await startClusterNode(config, scheduler, audit, protocolTls, deps.etcd)
    : null;
  let tokens: TokenSource;
  try {
    tokens = deps.tokens ?? cluster?.tokens ?? openTokenIssuer(config.dataDir, scheduler.wallMs());
  } catch (error) {
    dataDirLock?.release();
    await audit.close();
    throw error;
  }
  noteTokenDurability(config, deps.tokens !== undefined, cluster !== null);
  return { dataDirLock, audit, cluster, tokens };
}

/** The audit log on `givenSink` or on the sink `-audit-log` names. */
function openAudit(
  config: ServerConfig,
  givenSink: AuditSink | undefined,
  scheduler: Scheduler,
  dataDirLock: DataDirLock | null,
): AuditLog {
  let sink;
  try {
    sink = givenSink ?? openAuditSink(config.auditLog);
  } catch (error) {
    dataDirLock?.release();
    throw pathError(
      error,
      "-audit-log",
      config.auditLog,
      "the audit log",
      "Create its directory and let lockd write there (systemd: LogsDirectory=), or give " +
        "-audit-log - for standard output.",
    );
  }
  if (givenSink === undefined) {
    // Which way records are written (docs/operations.md, "Audit log", "How writes work").
    logger.info("audit log opened", {
      audit_log: config.auditLog,
      writes: sink.writeSync === undefined ? "asynchronous" : "synchronous",
    });
  }
  return new AuditLog(sink, { scheduler, writeTimeoutMs: config.auditWriteTimeoutMs });
}

/** Says where the fencing tokens' mark lives when that is not `-data-dir`. */
function noteTokenDurability(config: ServerConfig, givenTokens: boolean, clusterMode: boolean) {
  if (clusterMode && config.dataDir !== null) {
    logger.info("-data-dir is not used in cluster mode: the fencing-token mark lives in etcd", {
      data_dir: config.dataDir,
    });
  }
  if (!givenTokens && !clusterMode && config.dataDir === null) {
    logger.warn(
      'fencing tokens are not durable (-data-dir ""): after a restart they rest on the wall ' +
        "clock alone, and a clock stepped back can issue tokens lower than before; give " +
        "-data-dir a directory",
    );
  }
}
