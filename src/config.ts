import {
  AUDIT_WRITE_TIMEOUT_MS_DEFAULT,
  CLAIMS_PER_SESSION_MAX,
  FRAME_BYTES_MAX,
  HANDSHAKE_TIMEOUT_MS,
  HTTP_CONNECTIONS_MAX_DEFAULT,
  HTTP_HEADER_TIMEOUT_MS_DEFAULT,
  HTTP_IDLE_TIMEOUT_MS_DEFAULT,
  IO_TIMEOUT_MS_DEFAULT,
  LEASE_MS_DEFAULT,
  LEASE_MS_MAX_DEFAULT,
  SESSIONS_MAX,
  SHUTDOWN_GRACE_MS_DEFAULT,
  TLS_HANDSHAKE_RATE_PER_S_DEFAULT,
  WAITERS_PER_LOCK_MAX,
} from "./limits.ts";
import type { LogFormat, LogLevel } from "./log/diagnostic.ts";

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
  /** Metrics and health probes; off when null. */
  opsListen: string | null;
  /** Keeps the fencing-token high-water mark; null = clock-derived floor. */
  dataDir: string | null;
  ioTimeoutMs: number;
  leaseDefaultMs: number;
  leaseMaxMs: number;
  handshakeTimeoutMs: number;
  shutdownGraceMs: number;
  sessionsMax: number;
  claimsPerSessionMax: number;
  waitersPerLockMax: number;
  frameBytesMax: number;
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
  /** "-" = standard output, else a file appended to. */
  auditLog: string;
  /** An audit write pending longer counts as a failed sink (grants pause). */
  auditWriteTimeoutMs: number;
  logLevel: LogLevel;
  logFormat: LogFormat;
}

export const DEFAULT_CONFIG: Readonly<ServerConfig> = {
  listen: "127.0.0.1:7400",
  adminListen: null,
  adminTokenFile: null,
  adminAllowedHosts: [],
  opsListen: null,
  dataDir: null,
  ioTimeoutMs: IO_TIMEOUT_MS_DEFAULT,
  leaseDefaultMs: LEASE_MS_DEFAULT,
  leaseMaxMs: LEASE_MS_MAX_DEFAULT,
  handshakeTimeoutMs: HANDSHAKE_TIMEOUT_MS,
  shutdownGraceMs: SHUTDOWN_GRACE_MS_DEFAULT,
  sessionsMax: SESSIONS_MAX,
  claimsPerSessionMax: CLAIMS_PER_SESSION_MAX,
  waitersPerLockMax: WAITERS_PER_LOCK_MAX,
  frameBytesMax: FRAME_BYTES_MAX,
  httpHeaderTimeoutMs: HTTP_HEADER_TIMEOUT_MS_DEFAULT,
  httpIdleTimeoutMs: HTTP_IDLE_TIMEOUT_MS_DEFAULT,
  httpConnectionsMax: HTTP_CONNECTIONS_MAX_DEFAULT,
  tlsCert: null,
  tlsKey: null,
  tlsClientCa: null,
  tlsHandshakeRatePerS: TLS_HANDSHAKE_RATE_PER_S_DEFAULT,
  aclFile: null,
  auditLog: "-",
  auditWriteTimeoutMs: AUDIT_WRITE_TIMEOUT_MS_DEFAULT,
  logLevel: "info",
  logFormat: "text",
};
