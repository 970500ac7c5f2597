import { readAdminToken } from "./admin/auth.ts";
import { startAdminServer } from "./admin/server.ts";
import { type Scheduler, systemScheduler } from "./clock.ts";
import { isWildcard, type ServerConfig, validateConfig, withDefaults } from "./config.ts";
import { LockEngine, type LockEngineView } from "./core/engine.ts";
import type { TokenSource } from "./core/tokens.ts";
import { ClusterNode } from "./cluster/cluster_node.ts";
import type { Etcd } from "./cluster/etcd.ts";
import { EtcdHttpClient } from "./cluster/etcd_http.ts";
import { leaderProbe } from "./cluster/leader_probe.ts";
import { parseHostPort } from "./host_port.ts";
import { parseAllowedHosts } from "./http/host_policy.ts";
import type { HttpLimits, HttpListener } from "./http/listen.ts";
import {
  HTTP_BODY_BYTES_MAX,
  HTTP_HEAD_BYTES_MAX,
  PARTIAL_FRAME_BYTES_TOTAL_MAX,
  SESSIONS_CLOSE_MS_MAX,
  TLS_PENDING_CONNECTIONS_MAX,
} from "./limits.ts";
import { AuditLog, type AuditSink, openAuditSink } from "./log/audit.ts";
import { log } from "./log/diagnostic.ts";
import { ServerCounters } from "./ops/counters.ts";
import { startOpsServer } from "./ops/server.ts";
import { SESSION_ERRORS, SHUTTING_DOWN_ERROR } from "./protocol/codes.ts";
import type { FrameBudget } from "./protocol/frame_reader.ts";
import { listenTcp, type ProtocolListener } from "./protocol/listener.ts";
import { Session, type SessionHost } from "./protocol/session.ts";
import {
  listenTls,
  reloadCertificates,
  type TlsProtocolListener,
} from "./protocol/tls_listener.ts";
import { tcpTransport, type Transport } from "./protocol/transport.ts";
import { ALLOW_ALL, loadAclFile } from "./security/acl.ts";
import { loadServerTlsFromConfig } from "./security/tls.ts";
import { LockService } from "./service/lock_service.ts";
import { StallWatchdog } from "./service/stall_watchdog.ts";
import { lockDataDir, openTokenIssuer } from "./storage/token_store.ts";
import { listenError, pathError, StartError } from "./start_errors.ts";
import { VERSION } from "./version.ts";

const logger = log("server");

/** Things tests replace. */
export interface ServerDeps {
  /**
   * Clock and timers of the whole server: deadlines, handshake and stall timers, retries,
   * the shutdown grace window. Tests pass a ManualScheduler and move time by hand.
   */
  scheduler?: Scheduler;
  /** Audit sink instead of the one named by `config.auditLog`. */
  auditSink?: AuditSink;
  /** Token issuer instead of the one of `config.dataDir` (tests of token-store faults). */
  tokens?: TokenSource;
  /** Reads the ACL file at start-up and on reload (tests make a read slow). */
  readFile?: (path: string) => Promise<Uint8Array>;
  /** The ration of bytes for frames larger than any valid request (tests use a small one). */
  partialFrameBytesMax?: number;
  /** Cluster mode: etcd instead of the JSON gateway client of `-cluster-etcd` (an in-memory one). */
  etcd?: Etcd;
}

/** What the HTTP servers and the CLI see of a running server. */
export interface ServerContext {
  readonly config: Readonly<ServerConfig>;
  /** Read-only: every change goes through `service`. */
  readonly engine: LockEngineView;
  readonly service: LockService;
  readonly counters: ServerCounters;
  readonly audit: AuditLog;
  readonly scheduler: Scheduler;
  readonly version: string;
  readonly startedAtWallMs: number;
  /** Monotonic reading at the start (the console's history measures uptime from it). */
  readonly startedAtMonoMs: number;
  /** Bound protocol address (real port). */
  readonly listenAddr: string;
  /** Every live protocol connection, in its handshake or open. */
  readonly connections: ReadonlySet<Session>;
  /** False once shutdown began. */
  readonly live: boolean;
  /** Live and able to grant (no grant block: audit log and token store work; the serving leader in cluster mode). */
  readonly ready: boolean;
  /** Cluster mode (`-cluster-etcd`): this node's leadership, tokens and gate; null on a single node. */
  readonly cluster: ClusterNode | null;
}

/** A running server. `await using` shuts it down. */
export interface ServerHandle extends AsyncDisposable {
  readonly addr: string;
  readonly adminAddr: string | null;
  readonly opsAddr: string | null;
  readonly context: ServerContext;
  /** The ordered shutdown (see docs/operations.md); idempotent. */
  shutdown(): Promise<void>;
  /** SIGHUP: reloads the ACL file (and TLS certificates); a broken file keeps the old ones. */
  reload(): Promise<void>;
}

/** Starts every listener the configuration asks for. Port 0 works everywhere. */
export async function startServer(
  overrides: Partial<ServerConfig> = {},
  deps: ServerDeps = {},
): Promise<ServerHandle> {
  const config: ServerConfig = withDefaults(overrides);
  // "" is no directory (as the flag `-data-dir ""`), not the working directory.
  if (config.dataDir === "") config.dataDir = null;
  validateConfig(config);
  const scheduler = deps.scheduler ?? systemScheduler;
  const listenAt = parseHostPort(config.listen);
  // Bad addresses and an unusable admin token file fail before anything listens.
  const adminAt = config.adminListen === null ? null : parseHostPort(config.adminListen);
  const opsAt = config.opsListen === null ? null : parseHostPort(config.opsListen);
  const adminAllowedHosts = parseAllowedHosts(config.adminAllowedHosts.join(","));
  const adminToken = config.adminTokenFile === null
    ? null
    : await readAdminToken(config.adminTokenFile).catch((error) => {
      const reason = error.message.replace(/^Cannot (?:read|use) admin token file "[^"]*": /, "");
      throw pathError(
        reason,
        "-admin-token-file",
        config.adminTokenFile!,
        "the admin token file",
        'Create it (docs/operations.md, "Deploying with systemd", step 4), let lockd read it, ' +
          "or give -admin-token-file the right path.",
      );
    });
  const acl = config.aclFile === null
    ? ALLOW_ALL
    : await loadAclFile(config.aclFile, deps.readFile).catch((error) => {
      throw new StartError(
        `Cannot use the ACL file (-acl-file): ${error.message}. Fix the line named ` +
          `(docs/operations.md, "ACL"), or give -acl-file the right path.`,
        { cause: error },
      );
    });
  const tlsMaterial = await loadServerTlsFromConfig(config);
  // One server per data dir: a second one would issue the same tokens. Held until shutdown ends.
  // Cluster mode keeps the mark in etcd: a -data-dir (the systemd unit and the image give one)
  // is not used then.
  const clusterMode = config.clusterEtcd.length > 0;
  const dataDirLock = deps.tokens === undefined && config.dataDir !== null && !clusterMode
    ? lockDataDir(config.dataDir)
    : null;
  let auditSink;
  try {
    auditSink = deps.auditSink ?? openAuditSink(config.auditLog);
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
  if (deps.auditSink === undefined) {
    // Which way records are written (docs/operations.md, "Audit log", "How writes work").
    logger.info("audit log opened", {
      audit_log: config.auditLog,
      writes: auditSink.writeSync === undefined ? "asynchronous" : "synchronous",
    });
  }
  const audit = new AuditLog(auditSink, {
    scheduler,
    writeTimeoutMs: config.auditWriteTimeoutMs,
  });
  const cluster = config.clusterEtcd.length === 0
    ? null
    : await startClusterNode(config, scheduler, audit, tlsMaterial !== null, deps.etcd);
  let tokens: TokenSource;
  try {
    tokens = deps.tokens ?? cluster?.tokens ??
      openTokenIssuer(config.dataDir, scheduler.wallMs());
  } catch (error) {
    dataDirLock?.release();
    await audit.close();
    throw error;
  }
  if (cluster !== null && config.dataDir !== null) {
    logger.info("-data-dir is not used in cluster mode: the fencing-token mark lives in etcd", {
      data_dir: config.dataDir,
    });
  }
  if (deps.tokens === undefined && cluster === null && config.dataDir === null) {
    logger.warn(
      'fencing tokens are not durable (-data-dir ""): after a restart they rest on the wall ' +
        "clock alone, and a clock stepped back can issue tokens lower than before; give " +
        "-data-dir a directory",
    );
  }
  const engine = new LockEngine({
    tokens,
    ioTimeoutMs: config.ioTimeoutMs,
    leaseDefaultMs: config.leaseDefaultMs,
    leaseMaxMs: config.leaseMaxMs,
    sessionsMax: config.sessionsMax,
    claimsPerSessionMax: config.claimsPerSessionMax,
    waitersPerLockMax: config.waitersPerLockMax,
    claimsMax: config.claimsMax,
  });
  const counters = new ServerCounters();
  const service = new LockService({
    engine,
    audit,
    scheduler,
    counters,
    acl,
    ...(cluster !== null ? { gate: cluster } : {}),
  });
  cluster?.attach(service);

  let live = true;
  // The audit log retries by itself; the service pauses grants while it cannot write.
  audit.onHealthChange = (failure) => service.auditHealthChanged(failure);

  const watchdog = new StallWatchdog(scheduler, engine.ioTimeoutMs);
  const connections = new Set<Session>();
  /** Connections without HELLO yet, oldest first (a Set keeps insertion order). */
  const handshaking = new Set<Session>();
  let allClosed: (() => void) | undefined;
  // Frames larger than any valid request share one ration, so stalled ones cannot pin
  // -max-frame-bytes on every connection at once.
  const partialFrameBytesMax = deps.partialFrameBytesMax ?? PARTIAL_FRAME_BYTES_TOTAL_MAX;
  const frameBudget: FrameBudget = {
    take(bytes) {
      if (counters.partialFrameBytes + bytes > partialFrameBytesMax) {
        counters.limitRefusals.partial_frames++;
        return false;
      }
      counters.partialFrameBytes += bytes;
      return true;
    },
    give(bytes) {
      counters.partialFrameBytes -= bytes;
    },
  };
  const host: SessionHost = {
    service,
    scheduler,
    counters,
    watchdog,
    serverVersion: VERSION,
    frameBytesMax: config.frameBytesMax,
    handshakeTimeoutMs: config.handshakeTimeoutMs,
    ioTimeoutMs: engine.ioTimeoutMs,
    leaseDefaultMs: engine.leaseDefaultMs,
    leaseMaxMs: engine.leaseMaxMs,
    frameBudget,
    handshakeEnded(session) {
      handshaking.delete(session);
    },
    closed(session) {
      handshaking.delete(session);
      connections.delete(session);
      if (connections.size === 0) allClosed?.();
    },
  };
  const serve = (transport: Transport) => {
    const session = new Session(transport, host);
    connections.add(session);
    handshaking.add(session);
    if (handshaking.size > config.handshakesMax) {
      // A flood of connections that send no HELLO: the one that waited longest goes, so a
      // client that sends its HELLO at once still gets in.
      const oldest = handshaking.values().next().value!;
      handshaking.delete(oldest);
      counters.limitRefusals.handshakes++;
      oldest.evictFromHandshake(SESSION_ERRORS.handshakeLimit(config.handshakesMax));
    }
    session.run();
  };
  const stopTimers = () => {
    watchdog.stop();
    service.stop();
    cluster?.close();
  };
  let listener: ProtocolListener;
  let tlsListener: TlsProtocolListener | null = null;
  try {
    listener = tlsMaterial === null
      ? listenTcp(
        listenAt,
        counters,
        (conn) => serve(tcpTransport(conn, () => counters.protocolConnectionsOpen--)),
      )
      : tlsListener = await listenTls(listenAt, counters, tlsMaterial, {
        handshakeTimeoutMs: config.handshakeTimeoutMs,
        handshakesPerS: config.tlsHandshakeRatePerS,
        pendingMax: TLS_PENDING_CONNECTIONS_MAX,
        scheduler,
      }, serve);
  } catch (error) {
    // E.g. the port is taken: nothing listens yet, stop the timers and the sink.
    stopTimers();
    await audit.close();
    dataDirLock?.release();
    throw listenError(error, "-listen", config.listen);
  }

  const startedAtWallMs = scheduler.wallMs();
  const startedAtMonoMs = scheduler.monotonicMs();
  const context: ServerContext = {
    config,
    engine,
    service,
    counters,
    audit,
    scheduler,
    version: VERSION,
    startedAtWallMs,
    startedAtMonoMs,
    listenAddr: listener.addr,
    connections,
    get live() {
      return live;
    },
    get ready() {
      return live && engine.grantBlock === null && (cluster === null || cluster.serving);
    },
    cluster,
  };
  logger.info("protocol listener started", {
    listen: listener.addr,
    tls: tlsListener !== null,
    mtls: tlsListener?.mtls ?? false,
  });

  let ops: HttpListener | null = null;
  let admin: HttpListener | null = null;
  let shutdownPromise: Promise<void> | undefined;
  /** The shutdown's steps; after a failed start they are debug lines, not a shutdown story. */
  let note = (message: string, fields?: Record<string, unknown>) => logger.info(message, fields);
  /**
   * The ordered shutdown (docs/operations.md, "Shutdown sequence"): probes
   * 503 → protocol listener and sessions → admin API → ops server last, no
   * earlier than `shutdownGraceMs` after the start, so probes and scrapes see
   * the whole window.
   */
  const shutdown = (graceMs = config.shutdownGraceMs) => {
    shutdownPromise ??= (async () => {
      const graceEndsMs = scheduler.monotonicMs() + graceMs;
      live = false;
      note("shutdown: probes now answer 503");
      listener.close();
      await listener.done;
      note("shutdown: protocol listener closed; closing sessions");
      if (cluster !== null) {
        // Planned hand-over: sessions learn NOT_LEADER, then a standby is elected at once.
        await cluster.handOver();
        note("shutdown: leadership handed over");
      }
      service.beginShutdown();
      for (const session of [...connections]) session.refuseShuttingDown(SHUTTING_DOWN_ERROR);
      await sessionsClosed();
      for (const session of connections) session.transport.close();
      // Admin requests in flight finish (and write their audit records) before the log closes.
      await admin?.close();
      if (admin !== null) note("shutdown: admin API closed");
      stopTimers();
      // Writes what it can of the backlog within AUDIT_CLOSE_TIMEOUT_MS; logs and counts the rest.
      await audit.close();
      if (ops !== null) {
        const remainingMs = graceEndsMs - scheduler.monotonicMs();
        if (remainingMs > 0) {
          note("shutdown: ops server stays up for the grace window", {
            remaining_ms: Math.ceil(remainingMs),
          });
          await new Promise<void>((resolve) => scheduler.setTimer(resolve, remainingMs));
        }
        await ops.close();
      }
      dataDirLock?.release();
      note("shutdown complete");
    })();
    return shutdownPromise;
  };
  /** Resolves when every connection is closed, or after SESSIONS_CLOSE_MS_MAX. */
  const sessionsClosed = () =>
    new Promise<void>((resolve) => {
      if (connections.size === 0) return resolve();
      const timer = scheduler.setTimer(() => {
        allClosed = undefined;
        resolve();
      }, SESSIONS_CLOSE_MS_MAX);
      allClosed = () => {
        allClosed = undefined;
        timer.cancel();
        resolve();
      };
    });

  const httpLimits: HttpLimits = {
    headerTimeoutMs: config.httpHeaderTimeoutMs,
    idleTimeoutMs: config.httpIdleTimeoutMs,
    connectionsMax: config.httpConnectionsMax,
    headBytesMax: HTTP_HEAD_BYTES_MAX,
    bodyBytesMax: HTTP_BODY_BYTES_MAX,
  };
  let starting = "-ops-listen";
  try {
    if (opsAt !== null) {
      ops = startOpsServer(opsAt, context, httpLimits);
      logger.info("ops server started", { ops_listen: ops.addr });
    }
    if (adminAt !== null) {
      starting = "-admin-listen";
      admin = startAdminServer({
        at: adminAt,
        server: context,
        opsAddr: ops?.addr ?? null,
        token: adminToken,
        allowedHosts: adminAllowedHosts,
        limits: httpLimits,
        console: config.adminConsole,
      });
      logger.info("admin API started", {
        admin_listen: admin.addr,
        auth: adminToken === null ? "none" : "token",
        console: config.adminConsole,
      });
      const exposure = adminExposureWarning(adminAt.hostname, adminToken !== null);
      if (exposure !== null) logger.warn(exposure, { admin_listen: admin.addr });
    }
  } catch (error) {
    // E.g. the port is taken: undo what started, without a grace window, quietly (the start
    // failed; the operator needs the reason, not a shutdown sequence).
    note = (message, fields) => logger.debug(message, fields);
    await shutdown(0);
    throw listenError(
      error,
      starting,
      (starting === "-ops-listen" ? config.opsListen : config.adminListen) ?? "",
    );
  }
  if (cluster !== null) {
    // Campaign only once the advertised addresses accept connections.
    const advertise = config.advertise ?? listener.addr;
    cluster.start({
      name: config.clusterNode ?? advertise,
      advertise,
      admin: config.advertiseAdmin ??
        (admin !== null && config.adminListen !== null &&
            !isWildcard(parseHostPort(config.adminListen).hostname)
          ? admin.addr
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

  const reloadOnce = async () => {
    if (tlsListener === null && config.aclFile === null) {
      // Say so, or an operator who sent SIGHUP after editing a file lockd does not use waits
      // for a line that never comes.
      logger.info("SIGHUP: nothing to reload (no -acl-file and no TLS certificates)");
      return;
    }
    if (tlsListener !== null) await reloadCertificates(tlsListener, config);
    if (config.aclFile !== null) {
      try {
        service.setAcl(await loadAclFile(config.aclFile, deps.readFile));
        logger.info("ACL reloaded", { acl_file: config.aclFile, rules: service.acl.ruleCount });
      } catch (error) {
        logger.error("ACL reload failed; keeping the old rules", {
          acl_file: config.aclFile,
          error: error instanceof Error ? error.message : String(error),
        });
      }
    }
  };
  /**
   * Reloads run one at a time and the last signal wins: two overlapping reloads could finish
   * out of order (the first one's read last) and leave older files in force. A reload asked
   * for while one runs starts after it (and reads the files then); any number asked for
   * meanwhile are that one reload.
   */
  let reloadRunning: Promise<void> | null = null;
  let reloadNext: Promise<void> | null = null;
  const reload = (): Promise<void> => {
    if (reloadRunning === null) {
      reloadRunning = reloadOnce()
        .catch((error) => logger.error("reload failed", { error: String(error) }))
        .finally(() => reloadRunning = null);
      return reloadRunning;
    }
    reloadNext ??= reloadRunning.then(() => {
      reloadNext = null;
      return reload();
    });
    return reloadNext;
  };

  return {
    addr: listener.addr,
    adminAddr: admin?.addr ?? null,
    opsAddr: ops?.addr ?? null,
    context,
    shutdown: () => shutdown(),
    reload,
    [Symbol.asyncDispose]: () => shutdown(),
  };
}

/** Cluster mode: the etcd client (TLS files read now) and this node's leadership. */
async function startClusterNode(
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
  // The addresses are known once the listeners are bound (start() sets them).
  const advertise = config.advertise ?? config.listen;
  node = new ClusterNode({
    etcd,
    scheduler,
    cluster: config.cluster!,
    node: { name: config.clusterNode ?? advertise, advertise, admin: config.advertiseAdmin },
    ttlMs: config.clusterTtlMs,
    audit,
    probe: leaderProbe(protocolTls, scheduler),
  });
  return node;
}

/**
 * The start-up warning for an admin API that anyone on the network can use:
 * a non-loopback listen address and no token. Null when there is nothing to say.
 */
export function adminExposureWarning(hostname: string, hasToken: boolean): string | null {
  if (hasToken || isLoopbackHost(hostname)) return null;
  return "admin API listens on a non-loopback address without a token: anyone who can reach it " +
    "can force-release locks; add -admin-token-file, or listen on 127.0.0.1";
}

/** Whether a listen host accepts connections from this machine only. */
function isLoopbackHost(hostname: string): boolean {
  return hostname === "localhost" || hostname === "::1" || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}
