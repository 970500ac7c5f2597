/**
 * The JSON shapes of the admin API (docs/operations.md, "Endpoints"), built
 * from the engine's views. Field order is part of the contract: the spec's
 * fields first, exactly as the spec has them, then lockd's additions
 * (`client_name`, `session`, `held_for_ms`, `waiting_for_ms`).
 *
 * Kinds and values (issues 22, 23) only add fields, and only where they apply, so a plain
 * exclusive lock whose holder has no value has exactly the shape it had before: a shared or
 * semaphore lock adds `kind`, `limit`, `holders` (every owner, oldest first; `holder` stays the
 * oldest) and, shared, `write_generation`; its holder records add `mode`, `slot` (semaphores)
 * and `write_generation` (shared owners); a holder with a value adds `value` (the text when the
 * bytes are valid UTF-8, else null), `value_base64` (the exact bytes) and `value_bytes`; a lock
 * under a lock-delay or a reservation adds when it ends. An orphaned session's holder record
 * (issue 20) adds `connected: false`.
 *
 * @module
 */

import { rfc3339 } from "../clock.ts";
import type { HolderView, Instant, LockView } from "../core/types.ts";

/** Lock object. */
export interface LockJson {
  name: string;
  holder: HolderJson | null;
  waiters: WaiterJson[];
  /** With `?waiters_limit=`: how many wait in all (`waiters` holds at most the limit). */
  waiters_total?: number;
  /** Shared and semaphore locks: `shared` or `semaphore` (absent: an exclusive lock). */
  kind?: string;
  /** With `kind`: the semaphore's limit, 1 for a shared lock. */
  limit?: number;
  /** With `kind`: every owner, oldest (lowest token) first; `holder` is the first. */
  holders?: HolderJson[];
  /** Shared locks: the token of the lock's last exclusive grant while it has existed (0: none). */
  write_generation?: number;
  /** Under a lock-delay (after a non-graceful end): when it ends, and how long that is from now. */
  delayed_until?: string;
  delay_left_ms?: number;
  /** Cluster mode, held back for reclaims after a fail-over: when that ends, and how long. */
  reserved_until?: string;
  reservation_left_ms?: number;
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
  /**
   * Only `false`, only for an orphaned session's ownership: its version-2 connection ended
   * without GOODBYE, and the ownership waits for its client's RESUME until its lease ends.
   */
  connected?: false;
  /** Shared and semaphore locks: `exclusive` or `shared`. */
  mode?: string;
  /** Semaphores: the owner's slot, 0 to limit − 1. */
  slot?: number;
  /** Shared owners: the write generation of their grant (0: none known). */
  write_generation?: number;
  /** A holder with a value: the value as text when it is valid UTF-8, else null. */
  value?: string | null;
  /** A holder with a value: the exact bytes, base64 (RFC 4648, with padding). */
  value_base64?: string;
  /** A holder with a value: its length in bytes. */
  value_bytes?: number;
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
  /**
   * What this node does (cluster_status.ts): starting, electing, standby, taking_over, paused,
   * reclaiming, serving, stopped; `status_text` says it in the words of every status surface.
   */
  status: string;
  status_text: string;
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
  /** Ownership records in etcd as this node knows them (0 when it does not lead). */
  records: number;
  /** Locks this node keeps reserved for reclaims after a fail-over. */
  reserved_locks: number;
  /** Milliseconds until this node's reclaim window ends; null when none is open. */
  window_ends_in_ms: number | null;
  etcd: { endpoint: string; healthy: boolean; took_ms: number; error?: string }[];
}

/** A Lock object; durations are measured up to `now` (monotonic), deadlines shown in wall time. */
export function lockJson(view: LockView, now: Instant, withTotal = false): LockJson {
  const holderJson = (holder: HolderView) => holderRecord(view, holder, now.monoMs);
  const json: LockJson = {
    name: view.name,
    holder: view.holder === null ? null : holderJson(view.holder),
    waiters: view.waiters.map((waiter) => ({
      identity: waiter.identity,
      remote_addr: waiter.remoteAddr,
      queued_at: rfc3339(waiter.queuedAtWallMs),
      client_name: waiter.clientName,
      session: waiter.sessionId,
      waiting_for_ms: Math.max(0, Math.round(now.monoMs - waiter.queuedAtMs)),
    })),
  };
  // Asked for with ?waiters_limit=: `waiters` may then be the head of the queue only.
  if (withTotal) json.waiters_total = view.queueLength;
  if (view.kind !== "exclusive") {
    json.kind = view.kind;
    json.limit = view.limit;
    json.holders = view.holders.map(holderJson);
    if (view.kind === "shared") json.write_generation = view.writeGeneration;
  }
  if (view.delayedUntilMs > 0) {
    json.delayed_until = wallTimeOf(view.delayedUntilMs, now);
    json.delay_left_ms = Math.max(0, Math.round(view.delayedUntilMs - now.monoMs));
  }
  if (view.reservedUntilMs > 0) {
    json.reserved_until = wallTimeOf(view.reservedUntilMs, now);
    json.reservation_left_ms = Math.max(0, Math.round(view.reservedUntilMs - now.monoMs));
  }
  return json;
}

/** One holder record: the spec's fields, lockd's, then those of kinds and values that apply. */
function holderRecord(view: LockView, holder: HolderView, nowMs: number): HolderJson {
  const json: HolderJson = {
    identity: holder.identity,
    remote_addr: holder.remoteAddr,
    since: rfc3339(holder.sinceWallMs),
    lease_ms: holder.leaseMs,
    token: holder.token,
    client_name: holder.clientName,
    session: holder.sessionId,
    held_for_ms: Math.max(0, Math.round(nowMs - holder.sinceMs)),
  };
  if (!holder.connected) json.connected = false;
  if (view.kind !== "exclusive") {
    json.mode = holder.mode;
    if (view.kind === "semaphore") json.slot = holder.slot;
    if (holder.mode === "shared") json.write_generation = holder.writeGeneration;
  }
  if (holder.value !== null) Object.assign(json, valueJson(holder.value));
  return json;
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * A holder's value in JSON: any bytes may be a value, so the exact bytes go as base64, and the
 * text beside them when the bytes are valid UTF-8 (null otherwise: a lenient decode would show
 * U+FFFD where the holder wrote something else).
 */
export function valueJson(
  value: Uint8Array,
): { value: string | null; value_base64: string; value_bytes: number } {
  let text: string | null;
  try {
    text = strictUtf8.decode(value);
  } catch {
    text = null;
  }
  return { value: text, value_base64: base64(value), value_bytes: value.length };
}

function base64(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

/** A monotonic deadline as the wall-clock time it falls on, seen from `now`. */
function wallTimeOf(monoMs: number, now: Instant): string {
  return rfc3339(Math.round(now.wallMs + (monoMs - now.monoMs)));
}

/** The state of a lock that is not stored (no owner, no queue). */
export function idleLockJson(name: string): LockJson {
  return { name, holder: null, waiters: [] };
}
