import type { Scheduler } from "../clock.ts";
import type { Etcd } from "../cluster/etcd.ts";
import type { TokenSource } from "../core/tokens.ts";
import type { AuditSink } from "../log/audit.ts";

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
  /** Reads the ACL and lock rules files at start-up and on reload (tests make a read slow). */
  readFile?: (path: string) => Promise<Uint8Array>;
  /** The ration of bytes for frames larger than any valid request (tests use a small one). */
  partialFrameBytesMax?: number;
  /** Cluster mode: etcd instead of the JSON gateway client of `-cluster-etcd` (an in-memory one). */
  etcd?: Etcd;
}
