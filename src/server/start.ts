/**
 * `startServer(config, deps)`: the composition root. It builds the parts in order (inputs,
 * records, engine and service, connections, protocol listener, HTTP servers, cluster campaign)
 * and hands back a handle whose `shutdown` runs the ordered shutdown of shutdown.ts.
 *
 * @module
 */

import { type Scheduler, systemScheduler } from "../clock.ts";
import type { ClusterNode } from "../cluster/cluster_node.ts";
import { type ServerConfig, validateConfig, withDefaults } from "../config.ts";
import { LockEngine } from "../core/engine.ts";
import type { TokenSource } from "../core/tokens.ts";
import { PARTIAL_FRAME_BYTES_TOTAL_MAX } from "../limits.ts";
import type { AuditLog } from "../log/audit.ts";
import { log } from "../log/diagnostic.ts";
import { ServerCounters } from "../counters.ts";
import type { Session } from "../protocol/session.ts";
import { LockService } from "../service/lock_service.ts";
import { StallWatchdog } from "../service/stall_watchdog.ts";
import { VERSION } from "../version.ts";
import { campaign } from "./cluster_start.ts";
import { ConnectionRegistry } from "./connection_registry.ts";
import type { ServerDeps } from "./deps.ts";
import { type HttpServers, startHttpServers } from "./http_start.ts";
import { listenProtocol, type ProtocolParts } from "./protocol_start.ts";
import { openRecords, type Records } from "./records.ts";
import { serializedReloads } from "./reloads.ts";
import { Shutdown, stopTimers } from "./shutdown.ts";
import { listenError } from "./start_errors.ts";
import { readStartInputs, type StartInputs } from "./start_inputs.ts";
import type { ServerView } from "./view.ts";

const logger = log("server");

/** What tests and the CLI see of a running server: the view, and the parts behind it. */
export interface ServerContext extends ServerView {
  readonly service: LockService;
  readonly audit: AuditLog;
  readonly cluster: ClusterNode | null;
  /** Every live protocol connection, in its handshake or open. */
  readonly connections: ReadonlySet<Session>;
}

/** A running server. `await using` shuts it down. */
export interface ServerHandle extends AsyncDisposable {
  readonly addr: string;
  readonly adminAddr: string | null;
  readonly opsAddr: string | null;
  readonly context: ServerContext;
  /** The ordered shutdown (see docs/operations.md); idempotent. */
  shutdown(): Promise<void>;
  /**
   * SIGHUP: reloads the ACL and lock rules files (and TLS certificates); a broken file keeps the
   * old ones.
   */
  reload(): Promise<void>;
}

/** Starts every listener the configuration asks for. Port 0 works everywhere. */
export async function startServer(
  overrides: Partial<ServerConfig> = {},
  deps: ServerDeps = {},
): Promise<ServerHandle> {
  const config = resolveConfig(overrides);
  const scheduler = deps.scheduler ?? systemScheduler;
  // Bad addresses and unusable files fail before anything listens.
  const inputs = await readStartInputs(config, deps.readFile);
  const records = await openRecords(config, deps, scheduler, inputs.tlsMaterial !== null);
  const parts = buildParts(config, deps, scheduler, inputs, records);
  const { listener, tls } = await listenProtocol(parts, inputs.listenAt, inputs.tlsMaterial)
    .catch(async (error) => {
      // E.g. the port is taken: nothing listens yet, stop the timers and the sink.
      stopTimers(parts);
      await parts.audit.close();
      parts.dataDirLock?.release();
      throw listenError(error, "-listen", config.listen);
    });
  const http: HttpServers = { admin: null, ops: null };
  const shutdown = new Shutdown({ ...parts, listener, http });
  const context = serverContext(parts, listener.addr, shutdown);
  logger.info("protocol listener started", {
    listen: listener.addr,
    tls: tls !== null,
    mtls: tls?.mtls ?? false,
  });
  try {
    startHttpServers(config, inputs, context, parts.service, http);
  } catch (error) {
    // Undo what started, without a grace window, quietly.
    await shutdown.abort();
    throw error;
  }
  const { cluster, service } = parts;
  // Campaign only once the advertised addresses accept connections.
  if (cluster !== null) campaign(cluster, config, listener.addr, http.admin?.addr ?? null);
  return {
    addr: listener.addr,
    adminAddr: http.admin?.addr ?? null,
    opsAddr: http.ops?.addr ?? null,
    context,
    shutdown: () => shutdown.run(config.shutdownGraceMs),
    reload: serializedReloads({ config, tls, service, readFile: deps.readFile }),
    [Symbol.asyncDispose]: () => shutdown.run(config.shutdownGraceMs),
  };
}

/** The server's parts behind its listeners, built in order. */
interface Parts extends ProtocolParts, Records {}

/** The engine on the records' tokens, the service over it, the connections' registry. */
function buildParts(
  config: ServerConfig,
  deps: ServerDeps,
  scheduler: Scheduler,
  { acl, lockRules }: Pick<StartInputs, "acl" | "lockRules">,
  records: Records,
): Parts {
  const { audit, cluster } = records;
  const engine = newEngine(config, records.tokens);
  const counters = new ServerCounters();
  const gate = cluster !== null ? { gate: cluster } : {};
  const frameBytesMax = config.frameBytesMax;
  const service = new LockService({
    ...{ engine, audit, scheduler, counters, acl, lockRules, frameBytesMax },
    ...gate,
  });
  cluster?.attach(service, engine.view);
  // The audit log retries by itself; the service pauses grants while it cannot write.
  audit.onHealthChange = (failure) => service.auditHealthChanged(failure);
  const watchdog = new StallWatchdog(scheduler, engine.ioTimeoutMs);
  const connections = new ConnectionRegistry({
    scheduler,
    counters,
    handshakesMax: config.handshakesMax,
    partialFrameBytesMax: deps.partialFrameBytesMax ?? PARTIAL_FRAME_BYTES_TOTAL_MAX,
  });
  return { ...records, config, scheduler, counters, engine, service, watchdog, connections };
}

/** The handle's context; `live` and `ready` are read when asked. */
function serverContext(parts: Parts, listenAddr: string, shutdown: Shutdown): ServerContext {
  const { scheduler, engine, cluster } = parts;
  return {
    config: parts.config,
    engine: engine.view,
    service: parts.service,
    counters: parts.counters,
    audit: parts.audit,
    scheduler,
    version: VERSION,
    startedAtWallMs: scheduler.wallMs(),
    startedAtMonoMs: scheduler.monotonicMs(),
    listenAddr,
    connections: parts.connections.all,
    get live() {
      return shutdown.live;
    },
    get ready() {
      return shutdown.live && engine.grantBlock === null && (cluster === null || cluster.serving);
    },
    cluster,
    reclaims: parts.service.reclaimStats,
  };
}

/** The configuration with its defaults, checked. */
function resolveConfig(overrides: Partial<ServerConfig>): ServerConfig {
  const config: ServerConfig = withDefaults(overrides);
  // "" is no directory (as the flag `-data-dir ""`), not the working directory.
  if (config.dataDir === "") config.dataDir = null;
  validateConfig(config);
  return config;
}

function newEngine(config: ServerConfig, tokens: TokenSource): LockEngine {
  return new LockEngine({
    tokens,
    ioTimeoutMs: config.ioTimeoutMs,
    leaseDefaultMs: config.leaseDefaultMs,
    leaseMaxMs: config.leaseMaxMs,
    sessionsMax: config.sessionsMax,
    claimsPerSessionMax: config.claimsPerSessionMax,
    waitersPerLockMax: config.waitersPerLockMax,
    claimsMax: config.claimsMax,
    valueBytesMax: config.lockValueBytesMax,
  });
}
