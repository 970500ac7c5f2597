/**
 * The server's configuration: its shape, its defaults, the one table that maps every
 * `lockd serve` flag onto it (with its bounds), and its validation. `src/cli/serve.ts` builds
 * the usage and parses the command line from the table; `startServer` validates any
 * configuration it is given the same way.
 *
 * @module
 */

import { durationText } from "./duration.ts";
import { parseHostPort } from "./host_port.ts";
import { parseAllowedHosts } from "./http/host_policy.ts";
import {
  AUDIT_WRITE_TIMEOUT_MS_DEFAULT,
  AUDIT_WRITE_TIMEOUT_MS_MAX,
  AUDIT_WRITE_TIMEOUT_MS_MIN,
  CLAIMS_MAX_DEFAULT,
  CLAIMS_PER_SESSION_MAX_DEFAULT,
  CLUSTER_RECLAIM_GRACE_MS_DEFAULT,
  CLUSTER_RECLAIM_GRACE_MS_MAX,
  CLUSTER_RECLAIM_GRACE_MS_MIN,
  CLUSTER_RECORD_LINGER_MS_DEFAULT,
  CLUSTER_RECORD_LINGER_MS_MAX,
  CLUSTER_RECORD_LINGER_MS_MIN,
  CLUSTER_TTL_MS_DEFAULT,
  CLUSTER_TTL_MS_MAX,
  CLUSTER_TTL_MS_MIN,
  FRAME_BYTES_MAX_DEFAULT,
  FRAME_BYTES_MAX_MAX,
  FRAME_BYTES_MAX_MIN,
  HANDSHAKE_TIMEOUT_MS_DEFAULT,
  HANDSHAKE_TIMEOUT_MS_MAX,
  HANDSHAKE_TIMEOUT_MS_MIN,
  HANDSHAKES_MAX_DEFAULT,
  HTTP_CONNECTIONS_MAX_DEFAULT,
  HTTP_CONNECTIONS_MAX_MAX,
  HTTP_HEADER_TIMEOUT_MS_DEFAULT,
  HTTP_HEADER_TIMEOUT_MS_MAX,
  HTTP_HEADER_TIMEOUT_MS_MIN,
  HTTP_IDLE_TIMEOUT_MS_DEFAULT,
  HTTP_IDLE_TIMEOUT_MS_MAX,
  HTTP_IDLE_TIMEOUT_MS_MIN,
  IO_TIMEOUT_MS_DEFAULT,
  IO_TIMEOUT_MS_MAX,
  IO_TIMEOUT_MS_MIN,
  LEASE_MS_DEFAULT,
  LEASE_MS_MAX_DEFAULT,
  LEASE_MS_MAX_MAX,
  LEASE_MS_MIN,
  LOCK_VALUE_BYTES_MAX_DEFAULT,
  LOCK_VALUE_BYTES_MAX_MAX,
  SESSIONS_MAX_DEFAULT,
  SHUTDOWN_GRACE_MS_DEFAULT,
  SHUTDOWN_GRACE_MS_MAX,
  TLS_HANDSHAKE_RATE_PER_S_DEFAULT,
  TLS_HANDSHAKE_RATE_PER_S_MAX,
  WAITERS_PER_LOCK_MAX_DEFAULT,
} from "./limits.ts";
import { LOG_FORMATS, LOG_LEVELS, type LogFormat, type LogLevel } from "./log/diagnostic.ts";

/** The effective configuration of a server; `lockd serve` flags map onto it one to one. */
export interface ServerConfig {
  /** Protocol listener, `host:port`. */
  listen: string;
  /** Admin HTTP API; off when null. */
  adminListen: string | null;
  /** File holding the bearer token the admin API requires; off when null. */
  adminTokenFile: string | null;
  /** Extra Host names (or IP literals) the admin API answers besides its own address and localhost. */
  adminAllowedHosts: readonly string[];
  /** The operator console (a web page) at `/` of the admin listener. */
  adminConsole: boolean;
  /** Metrics and health probes; off when null. */
  opsListen: string | null;
  /**
   * Keeps the fencing-token high-water mark (relative paths from the working directory);
   * null (flag `-data-dir ""`) = the clock-derived floor only, warned at start-up. No default
   * in cluster mode, where the mark lives in etcd.
   */
  dataDir: string | null;
  ioTimeoutMs: number;
  leaseDefaultMs: number;
  leaseMaxMs: number;
  handshakeTimeoutMs: number;
  shutdownGraceMs: number;
  sessionsMax: number;
  claimsPerSessionMax: number;
  waitersPerLockMax: number;
  /** Claims (owned or queued) stored at once, server-wide. */
  claimsMax: number;
  /** Connections that have not completed their HELLO, at once (the oldest is closed past it). */
  handshakesMax: number;
  frameBytesMax: number;
  /** A holder's value (protocol version 2): its longest length in bytes; 0 = values off. */
  lockValueBytesMax: number;
  /** HTTP listeners: a request must be complete this long after the accept or its first byte. */
  httpHeaderTimeoutMs: number;
  /** HTTP listeners: a connection without a byte either way this long is closed. */
  httpIdleTimeoutMs: number;
  /** HTTP listeners: open connections per listener. */
  httpConnectionsMax: number;
  tlsCert: string | null;
  tlsKey: string | null;
  tlsClientCa: string | null;
  /** TLS handshakes started per second at most; 0 = no limit. */
  tlsHandshakeRatePerS: number;
  aclFile: string | null;
  /** Lock rules (kind, limit and lock-delay per name glob; issue 22); none when null. */
  lockRulesFile: string | null;
  /** "-" = standard output, else a file appended to. */
  auditLog: string;
  /** An audit write pending longer counts as a failed sink (grants pause). */
  auditWriteTimeoutMs: number;
  logLevel: LogLevel;
  logFormat: LogFormat;
  /** Cluster mode: etcd client URLs (`http://` or `https://`); empty = single node. */
  clusterEtcd: readonly string[];
  /** Cluster name; the etcd keys of the cluster live under it (`<cluster>/leader`). */
  cluster: string | null;
  /** This node's name in the cluster; default: the advertised address. */
  clusterNode: string | null;
  /** The protocol address clients dial to reach this node (published while it leads). */
  advertise: string | null;
  /** The admin API address operators are redirected to while this node leads. */
  advertiseAdmin: string | null;
  /** TTL of the node's etcd lease: a dead leader is replaced about this long after it died. */
  clusterTtlMs: number;
  /** CA (PEM) that signed etcd's server certificates. */
  clusterEtcdCa: string | null;
  /** Client certificate (PEM) lockd presents to etcd. */
  clusterEtcdCert: string | null;
  /** Its private key (PEM). */
  clusterEtcdKey: string | null;
  /** A new leader's shortest reclaim window (milestone 2; docs/cluster.md "The window"). */
  clusterReclaimGraceMs: number;
  /** How long an idle lock's ownership record stays in etcd (W3). */
  clusterRecordLingerMs: number;
}

/**
 * Where the fencing-token high-water mark is kept unless `-data-dir` says otherwise: beside
 * where the server starts (like etcd's `default.etcd`), so tokens are durable by default. The
 * systemd unit and the Docker image give `/var/lib/lockd`.
 */
export const DATA_DIR_DEFAULT = "lockd-data";

export const DEFAULT_CONFIG: Readonly<ServerConfig> = {
  listen: "127.0.0.1:7400",
  adminListen: null,
  adminTokenFile: null,
  adminAllowedHosts: [],
  adminConsole: true,
  opsListen: null,
  dataDir: DATA_DIR_DEFAULT,
  ioTimeoutMs: IO_TIMEOUT_MS_DEFAULT,
  leaseDefaultMs: LEASE_MS_DEFAULT,
  leaseMaxMs: LEASE_MS_MAX_DEFAULT,
  handshakeTimeoutMs: HANDSHAKE_TIMEOUT_MS_DEFAULT,
  shutdownGraceMs: SHUTDOWN_GRACE_MS_DEFAULT,
  sessionsMax: SESSIONS_MAX_DEFAULT,
  claimsPerSessionMax: CLAIMS_PER_SESSION_MAX_DEFAULT,
  waitersPerLockMax: WAITERS_PER_LOCK_MAX_DEFAULT,
  claimsMax: CLAIMS_MAX_DEFAULT,
  handshakesMax: HANDSHAKES_MAX_DEFAULT,
  frameBytesMax: FRAME_BYTES_MAX_DEFAULT,
  lockValueBytesMax: LOCK_VALUE_BYTES_MAX_DEFAULT,
  httpHeaderTimeoutMs: HTTP_HEADER_TIMEOUT_MS_DEFAULT,
  httpIdleTimeoutMs: HTTP_IDLE_TIMEOUT_MS_DEFAULT,
  httpConnectionsMax: HTTP_CONNECTIONS_MAX_DEFAULT,
  tlsCert: null,
  tlsKey: null,
  tlsClientCa: null,
  tlsHandshakeRatePerS: TLS_HANDSHAKE_RATE_PER_S_DEFAULT,
  aclFile: null,
  lockRulesFile: null,
  auditLog: "-",
  auditWriteTimeoutMs: AUDIT_WRITE_TIMEOUT_MS_DEFAULT,
  logLevel: "info",
  logFormat: "text",
  clusterEtcd: [],
  cluster: null,
  clusterNode: null,
  advertise: null,
  advertiseAdmin: null,
  clusterTtlMs: CLUSTER_TTL_MS_DEFAULT,
  clusterEtcdCa: null,
  clusterEtcdCert: null,
  clusterEtcdKey: null,
  clusterReclaimGraceMs: CLUSTER_RECLAIM_GRACE_MS_DEFAULT,
  clusterRecordLingerMs: CLUSTER_RECORD_LINGER_MS_DEFAULT,
};

/** A configuration that cannot run: one line saying which flag and why (the CLI exits 2). */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/** How a flag's text is read: durations in milliseconds, whole numbers, or text. */
export type ConfigFlagKind = "string" | "duration" | "int" | "bool";

/** One `lockd serve` flag: the config field it sets, how, and its bounds. */
export interface ConfigFlag {
  /** The flag without its dash, e.g. `io-timeout`. */
  readonly flag: string;
  readonly key: keyof ServerConfig;
  readonly kind: ConfigFlagKind;
  readonly help: string;
  /** Bounds of a number (durations in ms); the default lies within them (limits_test.ts). */
  readonly min?: number;
  readonly max?: number;
  /** The only values a string may take. */
  readonly choices?: readonly string[];
  /** A `host:port` address. */
  readonly address?: true;
  /** Turns the text into the config value (lists); throws RangeError with the reason. */
  readonly parse?: (text: string) => unknown;
}

/** Every flag of `lockd serve`, in usage order; docs/operations.md lists the same table. */
export const CONFIG_FLAGS: readonly ConfigFlag[] = [
  {
    flag: "listen",
    key: "listen",
    kind: "string",
    address: true,
    help: "protocol listener host:port",
  },
  {
    flag: "admin-listen",
    key: "adminListen",
    kind: "string",
    address: true,
    help: "admin HTTP API host:port (off when absent)",
  },
  {
    flag: "admin-token-file",
    key: "adminTokenFile",
    kind: "string",
    help: "file with the bearer token the admin API requires",
  },
  {
    flag: "admin-allowed-hosts",
    key: "adminAllowedHosts",
    kind: "string",
    help: "comma-separated Host names the admin API also answers (DNS-rebinding guard)",
    parse: parseAllowedHosts,
  },
  {
    flag: "admin-console",
    key: "adminConsole",
    kind: "bool",
    help: "serve the operator console (a web page) at / of the admin listener",
  },
  {
    flag: "ops-listen",
    key: "opsListen",
    kind: "string",
    address: true,
    help: "metrics and health HTTP host:port (off when absent)",
  },
  {
    flag: "data-dir",
    key: "dataDir",
    kind: "string",
    help: 'directory keeping the fencing-token high-water mark (tokens grow across restarts); "" ' +
      "for none (warned at start-up)",
    parse: (text) => text === "" ? null : text,
  },
  {
    flag: "io-timeout",
    key: "ioTimeoutMs",
    kind: "duration",
    min: IO_TIMEOUT_MS_MIN,
    max: IO_TIMEOUT_MS_MAX,
    help: "close a session that sends nothing (or reads nothing) this long",
  },
  {
    flag: "default-lease",
    key: "leaseDefaultMs",
    kind: "duration",
    min: LEASE_MS_MIN,
    max: LEASE_MS_MAX_MAX,
    help: "lease of an ACQUIRE that asks for 0 (at most -max-lease)",
  },
  {
    flag: "max-lease",
    key: "leaseMaxMs",
    kind: "duration",
    min: LEASE_MS_MIN,
    max: LEASE_MS_MAX_MAX,
    help: "longest lease granted; longer requests are clamped",
  },
  {
    flag: "handshake-timeout",
    key: "handshakeTimeoutMs",
    kind: "duration",
    min: HANDSHAKE_TIMEOUT_MS_MIN,
    max: HANDSHAKE_TIMEOUT_MS_MAX,
    help: "close a connection that sends no HELLO within this time",
  },
  {
    flag: "shutdown-grace",
    key: "shutdownGraceMs",
    kind: "duration",
    min: 0,
    max: SHUTDOWN_GRACE_MS_MAX,
    help: "after SIGTERM, keep /metrics and 503 probes up this long",
  },
  { flag: "max-sessions", key: "sessionsMax", kind: "int", min: 1, help: "open sessions at once" },
  {
    flag: "max-claims-per-session",
    key: "claimsPerSessionMax",
    kind: "int",
    min: 1,
    help: "locks one session may own or wait for",
  },
  {
    flag: "max-waiters-per-lock",
    key: "waitersPerLockMax",
    kind: "int",
    min: 1,
    help: "queue length of one lock",
  },
  {
    flag: "max-claims",
    key: "claimsMax",
    kind: "int",
    min: 1,
    help: "locks owned or waited for at once, all sessions together (bounds memory)",
  },
  {
    flag: "max-handshakes",
    key: "handshakesMax",
    kind: "int",
    min: 1,
    help: "connections without HELLO yet at once; past it the oldest is closed",
  },
  {
    flag: "max-frame-bytes",
    key: "frameBytesMax",
    kind: "int",
    min: FRAME_BYTES_MAX_MIN,
    max: FRAME_BYTES_MAX_MAX,
    help: "largest frame a client may send (at least the largest frame the server sends)",
  },
  {
    flag: "max-lock-value-bytes",
    key: "lockValueBytesMax",
    kind: "int",
    min: 0,
    max: LOCK_VALUE_BYTES_MAX_MAX,
    help: "longest value a lock's holder may publish (protocol version 2); 0 turns values off",
  },

  {
    flag: "http-header-timeout",
    key: "httpHeaderTimeoutMs",
    kind: "duration",
    min: HTTP_HEADER_TIMEOUT_MS_MIN,
    max: HTTP_HEADER_TIMEOUT_MS_MAX,
    help: "admin/ops HTTP: close a connection whose request is not complete this long after " +
      "the accept (or its first byte)",
  },
  {
    flag: "http-idle-timeout",
    key: "httpIdleTimeoutMs",
    kind: "duration",
    min: HTTP_IDLE_TIMEOUT_MS_MIN,
    max: HTTP_IDLE_TIMEOUT_MS_MAX,
    help: "admin/ops HTTP: close a connection with no byte in either direction this long",
  },
  {
    flag: "max-http-connections",
    key: "httpConnectionsMax",
    kind: "int",
    min: 1,
    max: HTTP_CONNECTIONS_MAX_MAX,
    help: "admin/ops HTTP: open connections per listener",
  },
  {
    flag: "tls-cert",
    key: "tlsCert",
    kind: "string",
    help: "server certificate (PEM); turns TLS on",
  },
  { flag: "tls-key", key: "tlsKey", kind: "string", help: "server private key (PEM)" },
  {
    flag: "tls-client-ca",
    key: "tlsClientCa",
    kind: "string",
    help: "CA (PEM) that must sign client certificates; turns mutual TLS on",
  },
  {
    flag: "max-tls-handshake-rate",
    key: "tlsHandshakeRatePerS",
    kind: "int",
    min: 0,
    max: TLS_HANDSHAKE_RATE_PER_S_MAX,
    help: "TLS handshakes started per second at most (0: no limit); the rest wait their turn",
  },
  {
    flag: "acl-file",
    key: "aclFile",
    kind: "string",
    help: "ACL rules (see docs/operations.md); reloaded on SIGHUP",
  },
  {
    flag: "lock-rules-file",
    key: "lockRulesFile",
    kind: "string",
    help: "lock rules: kind, limit and lock-delay per name (see docs/operations.md); reloaded on " +
      "SIGHUP",
  },
  {
    flag: "audit-log",
    key: "auditLog",
    kind: "string",
    help: "audit log: - for standard output, or a file to append to",
  },
  {
    flag: "audit-write-timeout",
    key: "auditWriteTimeoutMs",
    kind: "duration",
    min: AUDIT_WRITE_TIMEOUT_MS_MIN,
    max: AUDIT_WRITE_TIMEOUT_MS_MAX,
    help: "an audit write pending this long counts as a failed sink: grants pause",
  },
  {
    flag: "log-level",
    key: "logLevel",
    kind: "string",
    choices: LOG_LEVELS,
    help: "diagnostic log level: debug, info, warn, error",
  },
  {
    flag: "log-format",
    key: "logFormat",
    kind: "string",
    choices: LOG_FORMATS,
    help: "diagnostic log format: text, json",
  },
  {
    flag: "cluster-etcd",
    key: "clusterEtcd",
    kind: "string",
    help: "cluster mode: comma-separated etcd client URLs (see docs/cluster.md)",
    parse: parseEtcdUrls,
  },
  {
    flag: "cluster",
    key: "cluster",
    kind: "string",
    help: "cluster name; its etcd keys live under it (with -cluster-etcd)",
  },
  {
    flag: "cluster-node",
    key: "clusterNode",
    kind: "string",
    help: "this node's name in the cluster (default: the -advertise address)",
  },
  {
    flag: "advertise",
    key: "advertise",
    kind: "string",
    address: true,
    help: "host:port clients dial to reach this node (with -cluster-etcd; default: the -listen " +
      "address when it names a host)",
  },
  {
    flag: "advertise-admin",
    key: "advertiseAdmin",
    kind: "string",
    address: true,
    help: "host:port of this node's admin API that other nodes redirect operators to " +
      "(default: the -admin-listen address when it names a host)",
  },
  {
    flag: "cluster-ttl",
    key: "clusterTtlMs",
    kind: "duration",
    min: CLUSTER_TTL_MS_MIN,
    max: CLUSTER_TTL_MS_MAX,
    help: "TTL of the node's etcd lease, whole seconds: a dead leader is replaced after about this",
  },
  {
    flag: "cluster-etcd-ca",
    key: "clusterEtcdCa",
    kind: "string",
    help: "CA (PEM) of etcd's server certificates (https:// etcd URLs)",
  },
  {
    flag: "cluster-etcd-cert",
    key: "clusterEtcdCert",
    kind: "string",
    help: "client certificate (PEM) presented to etcd",
  },
  {
    flag: "cluster-etcd-key",
    key: "clusterEtcdKey",
    kind: "string",
    help: "private key (PEM) of -cluster-etcd-cert",
  },
  {
    flag: "cluster-reclaim-grace",
    key: "clusterReclaimGraceMs",
    kind: "duration",
    min: CLUSTER_RECLAIM_GRACE_MS_MIN,
    max: CLUSTER_RECLAIM_GRACE_MS_MAX,
    help: "how long a new leader keeps locks the last one may have granted for their holders " +
      "to reclaim (at least)",
  },
  {
    flag: "cluster-record-linger",
    key: "clusterRecordLingerMs",
    kind: "duration",
    min: CLUSTER_RECORD_LINGER_MS_MIN,
    max: CLUSTER_RECORD_LINGER_MS_MAX,
    help: "how long an idle lock's ownership record stays in etcd before it is deleted",
  },
];

/** `-cluster-etcd`: comma-separated `http(s)://host:port` URLs. */
function parseEtcdUrls(text: string): string[] {
  const urls = text.split(",").map((u) => u.trim()).filter((u) => u !== "");
  if (urls.length === 0) throw new RangeError("no etcd URL given");
  for (const url of urls) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new RangeError(`"${url}" is not a URL (want http://host:port or https://host:port)`);
    }
    if (
      (parsed.protocol !== "http:" && parsed.protocol !== "https:") || parsed.port === "" ||
      (parsed.pathname !== "/" && parsed.pathname !== "") || parsed.search !== ""
    ) {
      throw new RangeError(`"${url}" is not an etcd client URL like http://10.0.0.1:2379`);
    }
  }
  return urls;
}

/** A cluster name becomes an etcd key prefix: printable, no spaces, no leading or trailing "/". */
const CLUSTER_NAME = /^[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)*$/;

/** A listen host that means "every interface": not an address anyone can dial. */
export function isWildcard(hostname: string): boolean {
  return hostname === "0.0.0.0" || hostname === "::" || hostname === "";
}

/** Checks the cluster-mode flags (called by validateConfig). */
function validateCluster(config: Readonly<ServerConfig>): void {
  const clusterOnly: [string, unknown][] = [
    ["cluster", config.cluster],
    ["cluster-node", config.clusterNode],
    ["advertise", config.advertise],
    ["advertise-admin", config.advertiseAdmin],
    ["cluster-etcd-ca", config.clusterEtcdCa],
    ["cluster-etcd-cert", config.clusterEtcdCert],
    ["cluster-etcd-key", config.clusterEtcdKey],
  ];
  if (config.clusterEtcd.length === 0) {
    const given = clusterOnly.find(([, value]) => value !== null);
    if (given !== undefined) throw new ConfigError(`-${given[0]} needs -cluster-etcd`);
    return;
  }
  if (config.cluster === null) throw new ConfigError("-cluster-etcd needs -cluster NAME");
  if (!CLUSTER_NAME.test(config.cluster) || config.cluster.length > 128) {
    throw new ConfigError(
      `invalid value "${config.cluster}" for flag -cluster: want letters, digits, ".", "_", "-" ` +
        `and "/" between them, at most 128 characters`,
    );
  }
  if (config.advertise === null && isWildcard(parseHostPort(config.listen).hostname)) {
    throw new ConfigError(
      "-cluster-etcd needs -advertise HOST:PORT (the address clients dial) when -listen has no " +
        "host of its own",
    );
  }
  if (config.advertise !== null) {
    const advertised = parseHostPort(config.advertise);
    if (isWildcard(advertised.hostname) || advertised.port === 0) {
      throw new ConfigError(
        `-advertise must name a host and port clients can dial, not "${config.advertise}"`,
      );
    }
  }
  if (config.clusterTtlMs % 1_000 !== 0) {
    throw new ConfigError("-cluster-ttl must be whole seconds (etcd leases count in seconds)");
  }
  if ((config.clusterEtcdCert === null) !== (config.clusterEtcdKey === null)) {
    throw new ConfigError("-cluster-etcd-cert and -cluster-etcd-key go together");
  }
  const tlsToEtcd = config.clusterEtcdCa !== null || config.clusterEtcdCert !== null;
  if (tlsToEtcd && config.clusterEtcd.some((url) => url.startsWith("http:"))) {
    throw new ConfigError("etcd TLS flags need https:// URLs in -cluster-etcd");
  }
}

/** How the usage shows a flag's default, or undefined when the flag is off by default. */
export function defaultText(row: ConfigFlag): string | undefined {
  const value = DEFAULT_CONFIG[row.key];
  if (value === null || (Array.isArray(value) && value.length === 0)) return undefined;
  return row.kind === "duration" ? durationText(value as number) : String(value);
}

/**
 * Builds a configuration from parsed flag values (by flag name; durations in ms), then
 * validates it. Flags not given keep their defaults. Throws ConfigError.
 */
export function configFromFlags(
  values: ReadonlyMap<string, string | number | boolean>,
): ServerConfig {
  const config: Record<string, unknown> = {};
  for (const row of CONFIG_FLAGS) {
    const value = values.get(row.flag);
    if (value === undefined) continue;
    if (row.parse === undefined) {
      config[row.key] = value;
      continue;
    }
    try {
      config[row.key] = row.parse(String(value));
    } catch (error) {
      throw new ConfigError(`invalid value for flag -${row.flag}: ${(error as Error).message}`);
    }
  }
  const typed = withDefaults(config as Partial<ServerConfig>);
  validateConfig(typed);
  return typed;
}

/**
 * A whole configuration: `given` over the defaults. In cluster mode (`-cluster-etcd`) the
 * fencing-token mark lives in etcd, so `-data-dir` has no default there (a value given is not
 * used).
 */
export function withDefaults(given: Partial<ServerConfig>): ServerConfig {
  const clustered = (given.clusterEtcd?.length ?? 0) > 0;
  return { ...DEFAULT_CONFIG, ...(clustered ? { dataDir: null } : {}), ...given };
}

/** Checks every bound and rule of a configuration; throws ConfigError naming the flag. */
export function validateConfig(config: Readonly<ServerConfig>): void {
  for (const row of CONFIG_FLAGS) {
    const value = config[row.key];
    if (value === null) continue;
    if (row.address) {
      try {
        parseHostPort(value as string);
      } catch (error) {
        throw new ConfigError(`invalid value for flag -${row.flag}: ${(error as Error).message}`);
      }
    }
    if (row.choices !== undefined && !row.choices.includes(value as string)) {
      throw new ConfigError(
        `invalid value "${value}" for flag -${row.flag}: want ${row.choices.join(", ")}`,
      );
    }
    if (row.kind === "string" || row.kind === "bool") continue;
    const number = value as number;
    const show = row.kind === "duration" ? durationText : String;
    const min = row.min ?? 0;
    if (!Number.isSafeInteger(number) || number < min || number > (row.max ?? Infinity)) {
      throw new ConfigError(
        row.max === undefined
          ? `-${row.flag} must be at least ${show(min)}`
          : `-${row.flag} must be between ${show(min)} and ${show(row.max)}`,
      );
    }
  }
  if (config.leaseDefaultMs > config.leaseMaxMs) {
    throw new ConfigError(`-default-lease must be between ${LEASE_MS_MIN}ms and -max-lease`);
  }
  if ((config.tlsCert === null) !== (config.tlsKey === null)) {
    throw new ConfigError("-tls-cert and -tls-key go together");
  }
  if (config.tlsClientCa !== null && config.tlsCert === null) {
    throw new ConfigError("-tls-client-ca needs -tls-cert and -tls-key");
  }
  validateCluster(config);
}
