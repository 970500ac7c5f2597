/**
 * The JSON shapes of the admin API (docs/operations.md, "Endpoints"), built
 * from the engine's views. Field order is part of the contract.
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
}

export interface HolderJson {
  identity: string;
  remote_addr: string;
  since: string;
  lease_ms: number;
  token: number;
}

export interface WaiterJson {
  identity: string;
  remote_addr: string;
  queued_at: string;
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
}

export function lockJson(view: LockView): LockJson {
  const holder = view.holder;
  return {
    name: view.name,
    holder: holder === null ? null : {
      identity: holder.identity,
      remote_addr: holder.remoteAddr,
      since: rfc3339(holder.sinceWallMs),
      lease_ms: holder.leaseMs,
      token: holder.token,
    },
    waiters: view.waiters.map((waiter) => ({
      identity: waiter.identity,
      remote_addr: waiter.remoteAddr,
      queued_at: rfc3339(waiter.queuedAtWallMs),
    })),
  };
}

/** The state of a lock that is not stored (no owner, no queue). */
export function idleLockJson(name: string): LockJson {
  return { name, holder: null, waiters: [] };
}
