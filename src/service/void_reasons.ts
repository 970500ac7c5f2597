/**
 * Why a RECLAIM's claim is not carried over (protocol version 2): one list for the wire errors,
 * the audit records, the service's counters and the metrics' label values.
 *
 * @module
 */

/**
 * Why a RECLAIM's claim was not carried over: the label values of
 * `lockd_cluster_reclaim_void_total{reason}` and the `reason` of the `reclaim_void` audit record.
 * - `ticket`: the ticket is not one this cluster issued for exactly this claim, session and
 *   identity (forged, another identity, another session, changed fields) — rule (i);
 * - `term`: the claim's term is not one whose claims this leader takes — rule (ii);
 * - `window`: the reclaim window is closed (or, same term, the session that held the claim is
 *   gone) — rule (iii);
 * - `floor`: the lock is not in H (nothing of it may be held) or the token is at or below its
 *   floor (the ownership ended badly on the old leader; same term: the session no longer holds
 *   it) — rule (iv);
 * - `regranted`: the lock has an owner in this term the claim cannot join — rule (v);
 * - `acl`: the ACL no longer allows the identity — rule (vi);
 * - `limit`: a server limit (claims per session, claims) refused the restore.
 */
export type ReclaimVoidReason =
  | "window"
  | "floor"
  | "regranted"
  | "ticket"
  | "acl"
  | "limit"
  | "term";

/** Every void reason, in the order of the metric's label list (metrics present them all). */
export const RECLAIM_VOID_REASONS: readonly ReclaimVoidReason[] = [
  "window",
  "floor",
  "regranted",
  "ticket",
  "acl",
  "limit",
  "term",
];
