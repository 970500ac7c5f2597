/**
 * The JSON shapes of the admin API (docs/operations.md, "Endpoints"), built
 * from the engine's views. Field order is part of the contract: the spec's
 * fields first, exactly as the spec has them, then lockd's additions
 * (`client_name`, `session`, `held_for_ms`, `waiting_for_ms`).
 *
 * @module
 */

import { rfc3339 } from "../clock.ts";
import type { LockView } from "../core/types.ts";

/** Lock object. */
export interface LockJson {
  name: string;
  holder: HolderJson | null;
  waiters: WaiterJson[];
  /** With `?waiters_limit=`: how many wait in all (`waiters` holds at most the limit). */
  waiters_total?: number;
}

export interface HolderJson {
  identity: string;
  remote_addr: string;
  since: string;
  lease_ms: number;
  token: number;
  /** The client name from HELLO (`""` when the client sent none). */
  client_name: string;
  /** Session id, as in the audit log's `session`. */
  session: number;
  /** Milliseconds since the ownership began (monotonic clock). */
  held_for_ms: number;
}

export interface WaiterJson {
  identity: string;
  remote_addr: string;
  queued_at: string;
  client_name: string;
  session: number;
  /** Milliseconds since the claim entered the queue (monotonic clock). */
  waiting_for_ms: number;
}

/** Info object. */
export interface InfoJson {
  version: string;
  uptime_ms: number;
  config: {
    listen: string;
    ops_listen: string;
    tls: boolean;
    mtls: boolean;
    acl_file: string;
    audit_log: string;
    io_timeout_ms: number;
  };
  locks: number;
  sessions: number;
  /** Cluster mode only. */
  cluster?: ClusterInfoJson;
}

/** The `cluster` object of GET /api/info (cluster mode). */
export interface ClusterInfoJson {
  name: string;
  node: string;
  advertise: string;
  /** leader (serving), paused (leads, must not act), standby, starting (no etcd lease yet). */
  role: string;
  /** Whether this node grants and acknowledges now. */
  serving: boolean;
  /** The term this node leads (create revision of the leader key), 0 when it does not. */
  term: number;
  leader: { node: string; advertise: string; admin: string | null; term: number } | null;
  /** Milliseconds until the node's etcd lease may run out (negative: past), null without one. */
  safe_until_ms: number | null;
  ttl_ms: number;
  /** The fencing-token mark reserved in etcd by this term (0 when not leading). */
  token_high_water: number;
  /** Longest lease this term promised past its own etcd lease (published in etcd). */
  lease_horizon_ms: number;
  etcd: { endpoint: string; healthy: boolean; took_ms: number; error?: string }[];
}

/** A Lock object; durations are measured up to `nowMs` (monotonic). */
export function lockJson(view: LockView, nowMs: number, withTotal = false): LockJson {
  const holder = view.holder;
  const json: LockJson = {
    name: view.name,
    holder: holder === null ? null : {
      identity: holder.identity,
      remote_addr: holder.remoteAddr,
      since: rfc3339(holder.sinceWallMs),
      lease_ms: holder.leaseMs,
      token: holder.token,
      client_name: holder.clientName,
      session: holder.sessionId,
      held_for_ms: Math.max(0, Math.round(nowMs - holder.sinceMs)),
    },
    waiters: view.waiters.map((waiter) => ({
      identity: waiter.identity,
      remote_addr: waiter.remoteAddr,
      queued_at: rfc3339(waiter.queuedAtWallMs),
      client_name: waiter.clientName,
      session: waiter.sessionId,
      waiting_for_ms: Math.max(0, Math.round(nowMs - waiter.queuedAtMs)),
    })),
  };
  // Asked for with ?waiters_limit=: `waiters` may then be the head of the queue only.
  if (withTotal) json.waiters_total = view.queueLength;
  return json;
}

/** The state of a lock that is not stored (no owner, no queue). */
export function idleLockJson(name: string): LockJson {
  return { name, holder: null, waiters: [] };
}
