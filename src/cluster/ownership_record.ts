/**
 * One ownership record of cluster mode, milestone 2, as etcd stores it under
 * `<cluster>/own/<name>` (design §1 "Records"; the batcher that writes them is
 * ownership_records.ts): `{"t": τ, "f": floor}`, the floor per slot once a lock has several
 * (`"f": [f0, f1, …]`), and `"d"`: the wall-clock ms a lock-delay of the lock runs until
 * (issue 22: kept with the floor by W2, so a new leader honours it), absent when none runs.
 *
 * @module
 */

import { CLUSTER_RECORD_VALUE_BYTES_MAX, TOKEN_MAX } from "../limits.ts";

/** A record as stored: the term that last wrote it, the floor of each slot, a lock-delay's end. */
export interface OwnershipRecord {
  readonly term: number;
  /** Tokens at or below `floors[slot]` are void for that slot; one entry (slot 0) for most locks. */
  readonly floors: readonly number[];
  /** Wall-clock ms until which the lock grants nothing (a lock-delay; 0 or absent: none). */
  readonly delayUntilWallMs?: number;
}

export const NO_FLOORS: readonly number[] = [0];

/** Parses a stored record; null when `text` is not one (it comes from etcd: never trusted). */
export function parseOwnershipRecord(text: string): OwnershipRecord | null {
  if (text.length > CLUSTER_RECORD_VALUE_BYTES_MAX) return null;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) return null;
  // Fields other than "t", "f" and "d" are ignored: a later version may add some.
  const { t, f, d } = json as Record<string, unknown>;
  if (!isToken(t) || t === 0) return null;
  if (d !== undefined && !isToken(d)) return null;
  const delay = d === undefined || d === 0 ? {} : { delayUntilWallMs: d };
  if (isToken(f)) return { term: t, floors: [f], ...delay };
  if (!Array.isArray(f) || f.length === 0 || !f.every(isToken)) return null;
  return { term: t, floors: f, ...delay };
}

/** The stored form: `{"t":τ,"f":n}` for one slot, `{"t":τ,"f":[n0,n1,…]}` for several; `"d"`. */
export function formatOwnershipRecord(record: OwnershipRecord): string {
  const f = record.floors.length === 1 ? record.floors[0] : record.floors;
  const d = record.delayUntilWallMs ?? 0;
  return JSON.stringify(d > 0 ? { t: record.term, f, d } : { t: record.term, f });
}

export function isToken(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0 &&
    value <= TOKEN_MAX;
}

export function maxFloors(a: readonly number[], b: readonly number[]): readonly number[] {
  if (a === b) return a;
  const out = a.length >= b.length ? [...a] : [...b];
  const other = a.length >= b.length ? b : a;
  for (let i = 0; i < other.length; i++) out[i] = Math.max(out[i], other[i]);
  return out;
}

export function floorAt(floors: readonly number[], slot: number): number {
  return floors[slot] ?? 0;
}
