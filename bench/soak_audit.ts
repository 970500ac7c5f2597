/**
 * The cluster soak's check of owners by wall time across every node's audit log
 * (`bench/soak_cluster.ts`; issue 19.3, extended for milestone 2's reclaims).
 *
 * @module
 */

import type { WrittenRecord } from "./soak_m2.ts";

/**
 * Owners by wall time, across every node's audit log (issue 19.3). A term ends for certain when
 * the next one is elected (the old leader stopped deciding before its lease could run out, and
 * etcd elects a new leader only after that): its ownerships end no later than that moment, even
 * when the old node writes their `failover` release later (a frozen leader writes it when it
 * wakes and steps down) or never (SIGKILL). Breaches:
 * - a term with more than one `leader_elected` record;
 * - a decision of a term (an `acquire`, a `release` other than `failover`, `force_release`,
 *   `kick_waiter`) written after the next term was elected: a node that could not prove its
 *   leadership decided something;
 * - two ownerships of one lock whose times overlap: [acquire, release] (cut at the next
 *   election for an ownership granted within its term) of one token and another token's.
 */
export function checkOwnersByTime(
  written: WrittenRecord[],
  { breach, count }: { breach(what: string): void; count(what: string, n?: number): number },
): number {
  const elected = new Map<number, number>();
  for (const { record, wallMs } of written) {
    if (record.event !== "leader_elected" || record.term === undefined) continue;
    if (elected.has(record.term)) breach(`term ${record.term}: leader_elected written twice`);
    elected.set(record.term, Math.min(wallMs, elected.get(record.term) ?? Infinity));
  }
  const terms = [...elected.keys()].sort((a, b) => a - b);
  /** When a term certainly ended: the earliest election of a later term (Infinity: none). */
  const endOf = (term: number): number => {
    let end = Infinity;
    for (const later of terms) if (later > term) end = Math.min(end, elected.get(later)!);
    return end;
  };
  /** Per token, the records about its ownership, to be walked in term order. */
  const events = new Map<number, WrittenRecord[]>();
  for (const w of written) {
    const { record, node, wallMs } = w;
    const term = record.term ?? 0;
    const decision = record.event === "acquire" || record.event === "force_release" ||
      record.event === "kick_waiter" || record.event === "reclaim" ||
      record.event === "release" && record.reason !== "failover";
    if (decision && wallMs > endOf(term)) {
      breach(
        `${node} wrote ${record.event} of ${record.lock} (token ${record.token}, term ${term}) ` +
          `${wallMs - endOf(term)} ms after a later term was elected`,
      );
      count("decided_after_term");
    }
    if (record.token === null) continue;
    if (record.event !== "acquire" && record.event !== "release" && record.event !== "reclaim") {
      continue;
    }
    if (record.event === "reclaim" && record.claim !== "owned") continue;
    const list = events.get(record.token) ?? [];
    list.push(w);
    events.set(record.token, list);
  }
  // An ownership runs from its `acquire` to its release; a `failover` release (or none: a
  // killed leader) followed by a kept `reclaim` in a later term continues it (milestone 2: the
  // client held it all along), while a reclaim after any other end starts a new one. Each is
  // cut at the election after the last term that had it (if it began within that term).
  type Owned = {
    token: number;
    lock: string;
    node: string;
    term: number;
    from: number;
    segmentFrom: number;
    to: number;
    closed: boolean;
  };
  const byLock = new Map<string, Owned[]>();
  for (const [token, list] of events) {
    list.sort((a, b) => (a.record.term ?? 0) - (b.record.term ?? 0) || a.index - b.index);
    let current: Owned | null = null;
    const owned: Owned[] = [];
    for (const { record, node, wallMs } of list) {
      const term = record.term ?? 0;
      if (record.event === "acquire" || (record.event === "reclaim" && current?.closed !== false)) {
        current = {
          token,
          lock: record.lock,
          node,
          term,
          from: wallMs,
          segmentFrom: wallMs,
          to: Infinity,
          closed: false,
        };
        owned.push(current);
        if (record.event === "reclaim") count("reclaims_after_an_end");
      } else if (record.event === "reclaim" && current !== null) {
        count("ownerships_carried_over");
        current.term = term;
        current.node = node;
        current.segmentFrom = wallMs;
        current.to = Infinity;
      } else if (record.event === "release" && current !== null) {
        current.to = Math.min(current.to, wallMs);
        if (record.reason !== "failover") current.closed = true;
      }
    }
    for (const o of owned) {
      const end = endOf(o.term);
      if (o.segmentFrom <= end) o.to = Math.min(o.to, end);
      const forLock = byLock.get(o.lock) ?? [];
      forLock.push(o);
      byLock.set(o.lock, forLock);
    }
  }
  let checked = 0;
  for (const [lock, list] of byLock) {
    list.sort((a, b) => a.from - b.from || a.token - b.token);
    let latest: (typeof list)[number] | null = null;
    for (const owned of list) {
      checked++;
      if (latest !== null && owned.from < latest.to) {
        breach(
          `${lock}: token ${owned.token} (${owned.node}, term ${owned.term}) granted ` +
            `${latest.to === Infinity ? "while" : `${latest.to - owned.from} ms before`} token ` +
            `${latest.token} (${latest.node}, term ${latest.term}) ended`,
        );
      }
      if (latest === null || owned.to > latest.to) latest = owned;
    }
  }
  return checked;
}
