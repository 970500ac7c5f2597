/**
 * The checks of protocol version 2's kind and look frames, shared by the reply ledger and
 * looks.ts: whether an ACQUIRED grants what its claim asked for ({@link grantMisfit}), whether a
 * LOCK_STATE is consistent in itself ({@link lockStateMisfit}), and whether a WATCH's pattern
 * can name a lock ({@link patternMayMatch}). Pure functions over untrusted frames; the Python
 * client has the same rules (clients/python/lockd/_checks.py).
 *
 * @module
 */

import { LEASE_MS_MIN, TOKEN_MAX } from "../limits.ts";
import type { Acquired, LockState, LockStateHolder } from "../wire/messages.ts";

/** What a claim asked for: its mode, its limit (0: no opinion), and an owned RECLAIM's slot. */
export interface AskedKind {
  readonly mode: "exclusive" | "shared";
  readonly limit: number;
  /** An owned RECLAIM: the claim's slot, which its ACQUIRED must carry again; else null. */
  readonly slot: number | null;
}

/** A plain lock: what a version-1 claim, and a claim without options, asks for. */
export const PLAIN_KIND: AskedKind = { mode: "exclusive", limit: 1, slot: null };

/**
 * What is wrong with the kind of an ACQUIRED for what its claim asked, or null: its mode; the
 * limit asked for (any limit when the claim had no opinion; 1 for a shared grant); a slot below
 * the limit (the claim's own for an owned RECLAIM); a write generation below the token of a
 * shared grant (up to it for an owned RECLAIM: a downgraded owner's is its own token), 0 on an
 * exclusive one.
 */
export function grantMisfit(message: Acquired, asked: AskedKind): string | null {
  const { mode = "exclusive", limit = 1, slot = 0, writeGeneration = 0, token } = message;
  if (mode !== asked.mode) return `with mode ${mode}, but the claim asked for mode ${asked.mode}`;
  if (limit < 1 || (asked.limit >= 1 && limit !== asked.limit)) {
    return `with limit ${limit}, but the claim asked for limit ${asked.limit || "any"}`;
  }
  if (mode === "shared" && limit !== 1) {
    return `with limit ${limit} for a shared grant (a shared lock has limit 1)`;
  }
  if (slot >= limit || (asked.slot !== null && slot !== asked.slot)) {
    return `with slot ${slot}, outside the lock's slots 0..${limit - 1} or not the claim's slot`;
  }
  if (mode === "exclusive" && writeGeneration !== 0) {
    return `with write generation ${writeGeneration} for an exclusive grant (only shared ones carry one)`;
  }
  // An owned RECLAIM's answer may carry the token itself: a downgraded owner's generation.
  if (
    mode === "shared" &&
    (writeGeneration > token || (writeGeneration === token && asked.slot === null))
  ) {
    return `with write generation ${writeGeneration}, not below its own token ${token}`;
  }
  return null;
}

/**
 * Whether a WATCH's pattern (a name, or a glob in the ACL's language) can match `name`: the
 * literal text before its first wildcard, class or escape must start the name, and a pattern
 * without any must equal it. A full glob match is the server's; this catches a LOCK_STATE of
 * another lock.
 */
export function patternMayMatch(pattern: string, name: string): boolean {
  const cut = pattern.search(/[*?[\\]/);
  return cut < 0 ? name === pattern : name.startsWith(pattern.slice(0, cut));
}

/** The modes a holder of each kind of lock may have. */
const HOLDER_MODES: Record<string, readonly string[]> = {
  exclusive: ["exclusive"],
  shared: ["shared", "exclusive"],
  semaphore: ["exclusive"],
};

/**
 * What is inconsistent in a LOCK_STATE (docs/protocol.md, "LOCK_STATE"), or null: an event,
 * reason and kind that name something; a reason with an end only; a lock of kind none with
 * nothing in it; a limit that fits the kind; no more holder records than owners, nor owners than
 * a limit; each holder with a token and lease in bounds, a mode its lock admits, a slot below the
 * limit.
 */
export function lockStateMisfit(message: LockState, leaseMaxMs: number): string | null {
  const { event, reason, kind, limit, owners, holders } = message;
  for (const [field, value] of [["event", event], ["reason", reason], ["kind", kind]]) {
    if (typeof value === "number") return `${field} ${value} names nothing`;
  }
  if ((event === "ended") !== (reason !== "none")) {
    return `event ${event} with reason ${reason} (only an end has a reason)`;
  }
  if (kind === "none") {
    return limit || owners || message.queueLength || holders.length
      ? "kind none (no owner, no waiter), but it has a limit, owners, waiters or holders"
      : null;
  }
  if (kind === "exclusive" || kind === "shared" ? limit !== 1 : limit < 1) {
    return `kind ${kind} with limit ${limit}`;
  }
  if (holders.length > owners) return `${holders.length} holder records for ${owners} owner(s)`;
  if (kind !== "shared" && owners > limit) {
    return `${owners} owners of a ${kind} lock of limit ${limit}`;
  }
  for (const holder of holders) {
    const misfit = holderMisfit(holder, kind as string, limit, leaseMaxMs);
    if (misfit !== null) return misfit;
  }
  if (kind === "shared" && owners !== 1 && holders.some((h) => h.mode === "exclusive")) {
    return "an exclusive holder beside other owners";
  }
  return null;
}

function holderMisfit(
  holder: LockStateHolder,
  kind: string,
  limit: number,
  leaseMaxMs: number,
): string | null {
  if (!(holder.token >= 1 && holder.token <= TOKEN_MAX)) {
    return `a holder with token ${holder.token}`;
  }
  if (!(holder.leaseMs >= LEASE_MS_MIN && holder.leaseMs <= leaseMaxMs)) {
    return `a holder with a lease of ${holder.leaseMs} ms`;
  }
  if (!HOLDER_MODES[kind].includes(String(holder.mode))) {
    return `a holder in mode ${holder.mode} of a ${kind} lock`;
  }
  if (holder.slot >= limit || (kind !== "semaphore" && holder.slot !== 0)) {
    return `a holder in slot ${holder.slot} of a ${kind} lock of limit ${limit}`;
  }
  return null;
}
