/**
 * The checks of the cluster chaos soak (bench/soak_cluster.ts) over every node's audit log:
 * owners of a lock never overlap in time across terms (reclaimed ownerships counted as going on),
 * and no reclaim is kept at or below a floor.
 *
 * @module
 */

/** Where a check reports. */
export interface Sink {
  readonly breach: (what: string) => void;
  readonly count: (what: string, n?: number) => void;
  readonly counts: Record<string, number>;
}

export interface AuditLine {
  ts: string;
  event: string;
  lock: string;
  token: number | null;
  term?: number;
  reason?: string;
  node?: string;
  claim?: string;
}

/** An audit record with where it was written and its wall time in ms. */
export interface Written {
  readonly record: AuditLine;
  readonly node: string;
  readonly wallMs: number;
}

/**
 * Milestone 2: no reclaim is kept with a token at or below a floor, i.e. at or below the token
 * of an ownership of the same lock that ended badly (expired, io_timeout, force) before it.
 */
export function checkReclaimFloors(written: Written[], sink: Sink): void {
  const { breach, counts } = sink;
  const floors = new Map<string, { token: number; wallMs: number }[]>();
  for (const { record, wallMs } of written) {
    if (
      record.event === "release" && record.token !== null &&
      (record.reason === "expired" || record.reason === "io_timeout" || record.reason === "force")
    ) {
      const list = floors.get(record.lock) ?? [];
      list.push({ token: record.token, wallMs });
      floors.set(record.lock, list);
    }
  }
  let reclaims = 0;
  for (const { record, node, wallMs } of written) {
    if (record.event !== "reclaim" || record.token === null) continue;
    reclaims++;
    const below = (floors.get(record.lock) ?? []).find((f) =>
      f.token >= record.token! && f.wallMs < wallMs
    );
    if (below !== undefined) {
      breach(
        `${node} kept a reclaim of ${record.lock} with token ${record.token} (term ${record.term}) ` +
          `at or below the floor ${below.token} of an ownership that ended badly`,
      );
    }
  }
  counts.reclaims_kept = reclaims;
}

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
export function checkOwnersByTime(written: Written[], sink: Sink): void {
  const { breach, counts, count } = sink;
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
  // One segment per term an ownership lived in: its acquire, then each reclaim of its token by a
  // later leader (milestone 2) starts a segment; a release ends the token's current one.
  const ownerships = new Map<
    string,
    { token: number; lock: string; node: string; term: number; from: number; to: number }
  >();
  const current = new Map<number, string>();
  for (const { record, node, wallMs } of written) {
    const term = record.term ?? 0;
    const decision = record.event === "acquire" || record.event === "force_release" ||
      record.event === "kick_waiter" || record.event === "release" && record.reason !== "failover";
    if (decision && wallMs > endOf(term)) {
      breach(
        `${node} wrote ${record.event} of ${record.lock} (token ${record.token}, term ${term}) ` +
          `${wallMs - endOf(term)} ms after a later term was elected`,
      );
      count("decided_after_term");
    }
    if (record.token === null) continue;
    if (record.event === "acquire" || record.event === "reclaim") {
      // A reclaim continues the ownership from here (a same-term move: from this instant).
      const before = ownerships.get(current.get(record.token) ?? "");
      if (before !== undefined) before.to = Math.min(before.to, wallMs);
      const key = `${record.token}@${term}@${wallMs}`;
      const token = record.token;
      ownerships.set(key, { token, lock: record.lock, node, term, from: wallMs, to: Infinity });
      current.set(record.token, key);
    } else if (record.event === "release") {
      const owned = ownerships.get(current.get(record.token) ?? "");
      if (owned !== undefined) owned.to = Math.min(owned.to, wallMs);
    }
  }
  const byLock = new Map<
    string,
    { token: number; node: string; term: number; from: number; to: number }[]
  >();
  for (const owned of ownerships.values()) {
    const end = endOf(owned.term);
    const to = owned.from <= end ? Math.min(owned.to, end) : owned.to;
    const list = byLock.get(owned.lock) ?? [];
    list.push({ token: owned.token, node: owned.node, term: owned.term, from: owned.from, to });
    byLock.set(owned.lock, list);
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
  counts.ownerships_checked_by_time = checked;
}
