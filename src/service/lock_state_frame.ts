/**
 * LOCK_STATE frames (protocol version 2, issue 23): the state of one lock as QUERY answers it and
 * WATCH reports it, read from the engine's view at the moment the frame is built, and which
 * engine events are changes a watcher hears of.
 *
 * @module
 */

import type { LockEngineView } from "../core/lock_queries.ts";
import type { EngineEvent, HolderView } from "../core/types.ts";
import type { LockEndReason, LockEvent, LockState, LockStateHolder } from "../wire/messages.ts";

const encoder = new TextEncoder();
const U32_MAX = 0xffff_ffff;

/** Bytes of a LOCK_STATE without its holders (type, fixed fields, the name, the holder count). */
function baseBytes(nameBytes: number): number {
  return 1 + 4 + 1 + 1 + 1 + 4 + 4 + 4 + 2 + nameBytes + 2;
}

function holderBytes(holder: LockStateHolder): number {
  return 8 + 4 + 4 + 1 + 4 + 2 + encoder.encode(holder.identity).length + 2 +
    encoder.encode(holder.clientName).length + 2 + holder.value.length;
}

function holderOf(view: HolderView, nowMs: number): LockStateHolder {
  return {
    token: view.token,
    heldMs: Math.min(U32_MAX, Math.max(0, Math.round(nowMs - view.sinceMs))),
    leaseMs: view.leaseMs,
    mode: view.mode,
    slot: view.slot,
    identity: view.identity,
    clientName: view.clientName,
    value: view.value ?? new Uint8Array(0),
  };
}

/**
 * The LOCK_STATE of lock `name` now. A lock without owners and waiters is kind `none` (limit 0);
 * `holders` lists the oldest owners, as many as fit in a frame of `frameBytesMax` bytes (`owners`
 * counts them all).
 */
export function lockStateOf(
  view: LockEngineView,
  name: string,
  nowMs: number,
  frameBytesMax: number,
  requestId: number,
  event: LockEvent,
  reason: LockEndReason,
): LockState {
  const lock = view.getLock(name, 0);
  const state: LockState = {
    type: "lock_state",
    requestId,
    event,
    reason,
    kind: "none",
    limit: 0,
    queueLength: lock?.queueLength ?? 0,
    owners: 0,
    name,
    holders: [],
  };
  if (lock === undefined || (lock.holders.length === 0 && lock.queueLength === 0)) return state;
  state.kind = lock.kind;
  state.limit = lock.limit;
  state.owners = lock.holders.length;
  let bytes = baseBytes(encoder.encode(name).length);
  for (const view of lock.holders) {
    const holder = holderOf(view, nowMs);
    bytes += holderBytes(holder);
    if (bytes > frameBytesMax) break;
    state.holders.push(holder);
  }
  return state;
}

/** Rough bytes of a LOCK_STATE frame, for batching (exact enough: names and values dominate). */
export function lockStateBytes(state: LockState): number {
  let bytes = baseBytes(state.name.length * 3);
  for (const holder of state.holders) {
    bytes += 40 + holder.identity.length + holder.clientName.length + holder.value.length;
  }
  return bytes;
}

/** A change of one lock that its watchers hear of. */
export interface LockChange {
  readonly name: string;
  readonly event: LockEvent;
  readonly reason: LockEndReason;
}

/**
 * The change an engine event makes to its lock, or null (refusals and session ends change no
 * lock by themselves; their ownerships' ends are events of their own). A downgrade is reported
 * as `granted` (the owner's grant is now shared; readers granted beside it follow as their own
 * `granted`); a claim moved to another session of its client as `granted` or `queue`.
 */
export function lockChangeOf(event: EngineEvent): LockChange | null {
  switch (event.type) {
    case "granted":
      return { name: event.name, event: "granted", reason: "none" };
    case "ended":
      return { name: event.name, event: "ended", reason: event.reason };
    case "value_changed":
      return { name: event.name, event: "value", reason: "none" };
    case "queued":
    case "wait_ended":
      return { name: event.name, event: "queue", reason: "none" };
    case "mode_changed":
      return event.changed ? { name: event.name, event: "granted", reason: "none" } : null;
    case "claim_moved":
      return {
        name: event.name,
        event: event.state === "owned" ? "granted" : "queue",
        reason: "none",
      };
    case "rejected":
    case "session_closed":
      return null;
  }
}
