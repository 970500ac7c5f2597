import { DEFAULT_CONFIG, type ServerConfig } from "../config.ts";
import { parseHostPort } from "../host_port.ts";
import { parseAllowedHosts } from "../http/host_policy.ts";
import {
  AUDIT_WRITE_TIMEOUT_MS_MAX,
  AUDIT_WRITE_TIMEOUT_MS_MIN,
  HTTP_CONNECTIONS_MAX_MAX,
  HTTP_HEADER_TIMEOUT_MS_MAX,
  HTTP_HEADER_TIMEOUT_MS_MIN,
  HTTP_IDLE_TIMEOUT_MS_MAX,
  HTTP_IDLE_TIMEOUT_MS_MIN,
  IO_TIMEOUT_MS_MIN,
  LEASE_MS_MIN,
  LOCK_NAME_BYTES_MAX,
  TLS_HANDSHAKE_RATE_PER_S_MAX,
} from "../limits.ts";
import {
  configureDiagnosticLog,
  log,
  LOG_FORMATS,
  LOG_LEVELS,
  type LogFormat,
  type LogLevel,
} from "../log/diagnostic.ts";
import { startServer } from "../server.ts";
import { FlagError, type FlagSpec, formatFlagHelp, parseFlags } from "./flags.ts";

function durationText(ms: number): string {
  return ms % 60_000 === 0 ? `${ms / 60_000}m` : ms % 1_000 === 0 ? `${ms / 1_000}s` : `${ms}ms`;
}

const D = DEFAULT_CONFIG;

/** Every flag of `lockd serve`; docs/operations.md lists the same table. */
export const SERVE_FLAGS: readonly FlagSpec[] = [
  { name: "listen", kind: "string", help: "protocol listener host:port", defaultText: D.listen },
  { name: "admin-listen", kind: "string", help: "admin HTTP API host:port (off when absent)" },
  {
    name: "admin-token-file",
    kind: "string",
    help: "file with the bearer token the admin API requires",
  },
  {
    name: "admin-allowed-hosts",
    kind: "string",
    help: "comma-separated Host names the admin API also answers (DNS-rebinding guard)",
  },
  {
    name: "ops-listen",
    kind: "string",
    help: "metrics and health HTTP host:port (off when absent)",
  },
  {
    name: "data-dir",
    kind: "string",
    help: "directory keeping the fencing-token high-water mark (tokens grow across restarts)",
  },
  {
    name: "io-timeout",
    kind: "duration",
    help: "close a session that sends nothing (or reads nothing) this long",
    defaultText: durationText(D.ioTimeoutMs),
  },
  {
    name: "default-lease",
    kind: "duration",
    help: "lease of an ACQUIRE that asks for 0",
    defaultText: durationText(D.leaseDefaultMs),
  },
  {
    name: "max-lease",
    kind: "duration",
    help: "longest lease granted; longer requests are clamped",
    defaultText: durationText(D.leaseMaxMs),
  },
  {
    name: "handshake-timeout",
    kind: "duration",
    help: "close a connection that sends no HELLO within this time",
    defaultText: durationText(D.handshakeTimeoutMs),
  },
  {
    name: "shutdown-grace",
    kind: "duration",
    help: "after SIGTERM, keep /metrics and 503 probes up this long",
    defaultText: durationText(D.shutdownGraceMs),
  },
  {
    name: "max-sessions",
    kind: "int",
    help: "open sessions at once",
    defaultText: String(D.sessionsMax),
  },
  {
    name: "max-claims-per-session",
    kind: "int",
    help: "locks one session may own or wait for",
    defaultText: String(D.claimsPerSessionMax),
  },
  {
    name: "max-waiters-per-lock",
    kind: "int",
    help: "queue length of one lock",
    defaultText: String(D.waitersPerLockMax),
  },
  {
    name: "max-frame-bytes",
    kind: "int",
    help: "largest frame a client may send",
    defaultText: String(D.frameBytesMax),
  },
  {
    name: "http-header-timeout",
    kind: "duration",
    help: "admin/ops HTTP: close a connection whose request is not complete this long after " +
      "the accept (or its first byte)",
    defaultText: durationText(D.httpHeaderTimeoutMs),
  },
  {
    name: "http-idle-timeout",
    kind: "duration",
    help: "admin/ops HTTP: close a connection with no byte in either direction this long",
    defaultText: durationText(D.httpIdleTimeoutMs),
  },
  {
    name: "max-http-connections",
    kind: "int",
    help: "admin/ops HTTP: open connections per listener",
    defaultText: String(D.httpConnectionsMax),
  },
  { name: "tls-cert", kind: "string", help: "server certificate (PEM); turns TLS on" },
  { name: "tls-key", kind: "string", help: "server private key (PEM)" },
  {
    name: "tls-client-ca",
    kind: "string",
    help: "CA (PEM) that must sign client certificates; turns mutual TLS on",
  },
  {
    name: "max-tls-handshake-rate",
    kind: "int",
    help: "TLS handshakes started per second at most (0: no limit); the rest wait their turn",
    defaultText: String(D.tlsHandshakeRatePerS),
  },
  {
    name: "acl-file",
    kind: "string",
    help: "ACL rules (see docs/operations.md); reloaded on SIGHUP",
  },
  {
    name: "audit-log",
    kind: "string",
    help: "audit log: - for standard output, or a file to append to",
    defaultText: "-",
  },
  {
    name: "audit-write-timeout",
    kind: "duration",
    help: "an audit write pending this long counts as a failed sink: grants pause",
    defaultText: durationText(D.auditWriteTimeoutMs),
  },
  {
    name: "log-level",
    kind: "string",
    help: "diagnostic log level: debug, info, warn, error",
    defaultText: D.logLevel,
  },
  {
    name: "log-format",
    kind: "string",
    help: "diagnostic log format: text, json",
    defaultText: D.logFormat,
  },
];

export const SERVE_USAGE = `Usage: lockd serve [flags]

Runs the lock server. The diagnostic log goes to standard error; standard
output carries only the audit log.

Flags:
${formatFlagHelp(SERVE_FLAGS)}`;

/** Turns `lockd serve` arguments into a validated configuration; throws FlagError. */
export function serveConfigFromArgs(args: readonly string[]): ServerConfig {
  const { values, positionals, afterDoubleDash } = parseFlags(args, SERVE_FLAGS);
  if (positionals.length > 0 || afterDoubleDash !== null) {
    throw new FlagError(`unexpected argument "${positionals[0] ?? "--"}"`);
  }
  const config: ServerConfig = { ...DEFAULT_CONFIG };
  const str = (name: string) => values.get(name) as string | undefined;
  const num = (name: string) => values.get(name) as number | undefined;
  config.listen = str("listen") ?? config.listen;
  config.adminListen = str("admin-listen") ?? null;
  config.adminTokenFile = str("admin-token-file") ?? null;
  try {
    config.adminAllowedHosts = parseAllowedHosts(str("admin-allowed-hosts") ?? "");
  } catch (error) {
    throw new FlagError(`invalid value for flag -admin-allowed-hosts: ${(error as Error).message}`);
  }
  config.opsListen = str("ops-listen") ?? null;
  config.dataDir = str("data-dir") ?? null;
  config.ioTimeoutMs = num("io-timeout") ?? config.ioTimeoutMs;
  config.leaseDefaultMs = num("default-lease") ?? config.leaseDefaultMs;
  config.leaseMaxMs = num("max-lease") ?? config.leaseMaxMs;
  config.handshakeTimeoutMs = num("handshake-timeout") ?? config.handshakeTimeoutMs;
  config.shutdownGraceMs = num("shutdown-grace") ?? config.shutdownGraceMs;
  config.sessionsMax = num("max-sessions") ?? config.sessionsMax;
  config.claimsPerSessionMax = num("max-claims-per-session") ?? config.claimsPerSessionMax;
  config.waitersPerLockMax = num("max-waiters-per-lock") ?? config.waitersPerLockMax;
  config.frameBytesMax = num("max-frame-bytes") ?? config.frameBytesMax;
  config.httpHeaderTimeoutMs = num("http-header-timeout") ?? config.httpHeaderTimeoutMs;
  config.httpIdleTimeoutMs = num("http-idle-timeout") ?? config.httpIdleTimeoutMs;
  config.httpConnectionsMax = num("max-http-connections") ?? config.httpConnectionsMax;
  config.tlsCert = str("tls-cert") ?? null;
  config.tlsKey = str("tls-key") ?? null;
  config.tlsClientCa = str("tls-client-ca") ?? null;
  config.tlsHandshakeRatePerS = num("max-tls-handshake-rate") ?? config.tlsHandshakeRatePerS;
  config.aclFile = str("acl-file") ?? null;
  config.auditLog = str("audit-log") ?? config.auditLog;
  config.auditWriteTimeoutMs = num("audit-write-timeout") ?? config.auditWriteTimeoutMs;
  const level = str("log-level") ?? config.logLevel;
  if (!LOG_LEVELS.includes(level as LogLevel)) {
    throw new FlagError(
      `invalid value "${level}" for flag -log-level: want ${LOG_LEVELS.join(", ")}`,
    );
  }
  config.logLevel = level as LogLevel;
  const format = str("log-format") ?? config.logFormat;
  if (!LOG_FORMATS.includes(format as LogFormat)) {
    throw new FlagError(
      `invalid value "${format}" for flag -log-format: want ${LOG_FORMATS.join(", ")}`,
    );
  }
  config.logFormat = format as LogFormat;
  validate(config);
  return config;
}

function checkRange(
  flag: string,
  value: number,
  min: number,
  max: number,
  show: (value: number) => string,
): void {
  if (value < min || value > max) {
    throw new FlagError(`-${flag} must be between ${show(min)} and ${show(max)}`);
  }
}

function validate(config: ServerConfig): void {
  for (
    const [flag, value] of [
      ["listen", config.listen],
      ["admin-listen", config.adminListen],
      ["ops-listen", config.opsListen],
    ] as const
  ) {
    if (value === null) continue;
    try {
      parseHostPort(value);
    } catch (error) {
      throw new FlagError(`invalid value for flag -${flag}: ${(error as Error).message}`);
    }
  }
  if (config.ioTimeoutMs < IO_TIMEOUT_MS_MIN) {
    throw new FlagError(`-io-timeout must be at least ${IO_TIMEOUT_MS_MIN}ms`);
  }
  if (config.leaseMaxMs < LEASE_MS_MIN) {
    throw new FlagError(`-max-lease must be at least ${LEASE_MS_MIN}ms`);
  }
  if (config.leaseDefaultMs < LEASE_MS_MIN || config.leaseDefaultMs > config.leaseMaxMs) {
    throw new FlagError(`-default-lease must be between ${LEASE_MS_MIN}ms and -max-lease`);
  }
  if (config.leaseMaxMs > 0xffff_fffe) throw new FlagError("-max-lease is too long");
  if (config.handshakeTimeoutMs < 1) throw new FlagError("-handshake-timeout must be positive");
  if (config.sessionsMax < 1) throw new FlagError("-max-sessions must be at least 1");
  if (config.claimsPerSessionMax < 1) {
    throw new FlagError("-max-claims-per-session must be at least 1");
  }
  if (config.waitersPerLockMax < 1) throw new FlagError("-max-waiters-per-lock must be at least 1");
  checkRange(
    "http-header-timeout",
    config.httpHeaderTimeoutMs,
    HTTP_HEADER_TIMEOUT_MS_MIN,
    HTTP_HEADER_TIMEOUT_MS_MAX,
    durationText,
  );
  checkRange(
    "http-idle-timeout",
    config.httpIdleTimeoutMs,
    HTTP_IDLE_TIMEOUT_MS_MIN,
    HTTP_IDLE_TIMEOUT_MS_MAX,
    durationText,
  );
  checkRange(
    "max-http-connections",
    config.httpConnectionsMax,
    1,
    HTTP_CONNECTIONS_MAX_MAX,
    String,
  );
  checkRange(
    "max-tls-handshake-rate",
    config.tlsHandshakeRatePerS,
    0,
    TLS_HANDSHAKE_RATE_PER_S_MAX,
    String,
  );
  const frameMin = LOCK_NAME_BYTES_MAX + 64;
  if (config.frameBytesMax < frameMin) {
    throw new FlagError(
      `-max-frame-bytes must be at least ${frameMin} (a longest lock name must fit)`,
    );
  }
  if (
    config.auditWriteTimeoutMs < AUDIT_WRITE_TIMEOUT_MS_MIN ||
    config.auditWriteTimeoutMs > AUDIT_WRITE_TIMEOUT_MS_MAX
  ) {
    throw new FlagError(
      `-audit-write-timeout must be between ${AUDIT_WRITE_TIMEOUT_MS_MIN}ms and ${
        AUDIT_WRITE_TIMEOUT_MS_MAX / 60_000
      }m`,
    );
  }
  if ((config.tlsCert === null) !== (config.tlsKey === null)) {
    throw new FlagError("-tls-cert and -tls-key go together");
  }
  if (config.tlsClientCa !== null && config.tlsCert === null) {
    throw new FlagError("-tls-client-ca needs -tls-cert and -tls-key");
  }
}

/**
 * `lockd serve`: starts the server, then waits for signals. SIGTERM/SIGINT run
 * the ordered shutdown and exit 0; a second one exits at once; SIGHUP reloads.
 * Returns the exit code.
 */
export async function serveCommand(config: ServerConfig): Promise<number> {
  configureDiagnosticLog(config.logLevel, config.logFormat);
  const logger = log("server");
  let server;
  try {
    server = await startServer(config);
  } catch (error) {
    logger.error("cannot start", { error: error instanceof Error ? error.message : String(error) });
    console.error(`lockd: ${error instanceof Error ? error.message : String(error)}`);
    return 1;
  }
  logger.info("lockd started", {
    listen: server.addr,
    admin_listen: server.adminAddr ?? "",
    ops_listen: server.opsAddr ?? "",
  });
  const stopping = Promise.withResolvers<string>();
  let signalsSeen = 0;
  const onStop = (signal: Deno.Signal) => () => {
    signalsSeen++;
    if (signalsSeen > 1) {
      logger.warn("second signal: exiting at once", { signal });
      Deno.exit(1);
    }
    stopping.resolve(signal);
  };
  const onHup = () => void server.reload();
  const handlers: [Deno.Signal, () => void][] = [
    ["SIGTERM", onStop("SIGTERM")],
    ["SIGINT", onStop("SIGINT")],
    ["SIGHUP", onHup],
  ];
  for (const [signal, handler] of handlers) Deno.addSignalListener(signal, handler);
  const signal = await stopping.promise;
  logger.info("shutdown started", { signal });
  await server.shutdown();
  for (const [name, handler] of handlers) {
    if (name !== "SIGTERM" && name !== "SIGINT") Deno.removeSignalListener(name, handler);
  }
  return 0;
}
