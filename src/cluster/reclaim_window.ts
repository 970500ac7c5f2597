/**
 * The reclaim window of a new leader (cluster milestone 2, design §1 "Takeover" and "Reclaim
 * rule", docs/cluster.md "The window"): what the takeover read from etcd, and the cluster's part
 * of the reclaim rule decided on it. Pure: no etcd, no timers; `ClusterNode` feeds it.
 *
 * - `<cluster>/terms` = `{"served": τ, "closed": bool, "before": τ₋₁}`: the last term that took
 *   over, whether its window closed, and the term it took over from. Each leader writes it at
 *   takeover (`closed: false`) and at the end of its window (`closed: true`).
 * - H: the locks whose record was read at takeover, with their floors and the term that last
 *   wrote each record. Locks ∉ H are grantable at once; locks ∈ H are reserved until reclaimed or
 *   until the window ends.
 * - `<cluster>/handover` = `{"term": τ, "sessions": [...]}`: written by a leader that handed
 *   over on purpose; the window ends early once every listed session has resumed here.
 *
 * @module
 */

import type { ClusterVoidReason, ReclaimClaim } from "../service/leadership_gate.ts";
import type { LoadedRecords, OwnershipRecord } from "./ownership_records.ts";

/** `<cluster>/terms`: which terms' tickets a new leader takes. */
export interface TermsRecord {
  /** The last term that took over (0: none yet). */
  readonly served: number;
  /** Whether that term's window closed (then only its own tickets count). */
  readonly closed: boolean;
  /** The term it took over from (0: none). */
  readonly before: number;
}

/** `<cluster>/handover`: the sessions a leader that handed over on purpose had with claims. */
export interface HandoverRecord {
  readonly term: number;
  readonly sessions: readonly number[];
}

/** Most session ids a hand-over list keeps (a longer list just ends the window by its time). */
const HANDOVER_SESSIONS_MAX = 100_000;

const NO_TERMS: TermsRecord = { served: 0, closed: true, before: 0 };

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

/** Parses `<cluster>/terms` (from etcd: never trusted); an absent or bad value is "none". */
export function parseTerms(text: string | undefined): TermsRecord {
  if (text === undefined || text.length > 1_000) return NO_TERMS;
  try {
    const json = JSON.parse(text);
    if (
      typeof json === "object" && json !== null && isCount(json.served) &&
      typeof json.closed === "boolean" && isCount(json.before) && json.before < json.served
    ) {
      return { served: json.served, closed: json.closed, before: json.before };
    }
  } catch {
    // not ours: none
  }
  return NO_TERMS;
}

export function formatTerms(terms: TermsRecord): string {
  return JSON.stringify({ served: terms.served, closed: terms.closed, before: terms.before });
}

/** Parses `<cluster>/handover`; null when absent or not one. */
export function parseHandover(text: string | undefined): HandoverRecord | null {
  if (text === undefined || text.length > 24 * HANDOVER_SESSIONS_MAX) return null;
  try {
    const json = JSON.parse(text);
    if (
      typeof json === "object" && json !== null && isCount(json.term) && json.term > 0 &&
      Array.isArray(json.sessions) && json.sessions.length <= HANDOVER_SESSIONS_MAX &&
      json.sessions.every(isCount)
    ) {
      return { term: json.term, sessions: json.sessions };
    }
  } catch {
    // not ours
  }
  return null;
}

export function formatHandover(handover: HandoverRecord): string {
  return JSON.stringify({ term: handover.term, sessions: handover.sessions });
}

/**
 * What the takeover writes into `<cluster>/terms` for `term`, given what it read: `before` is
 * the term served before it. A takeover retried after its write landed finds its own term and
 * keeps the record as it is.
 */
export function takeoverTerms(term: number, read: TermsRecord): TermsRecord {
  if (read.served >= term) return read;
  return { served: term, closed: false, before: read.served };
}

export interface ReclaimWindowOptions {
  /** This leader's term τ′. */
  readonly term: number;
  /** `<cluster>/terms` as read at takeover (before this term wrote it). */
  readonly terms: TermsRecord;
  readonly loaded: Pick<LoadedRecords, "floors" | "records">;
  /** When the window ends (monotonic ms). */
  readonly endsAtMs: number;
  /** Sessions of a planned hand-over of the served term whose RESUME ends the window early. */
  readonly handover: HandoverRecord | null;
}

/** A lock's void-below marks in a window: one per slot, and one for every slot. */
interface LockFloors {
  readonly slots: number[];
  /** A mark for every slot (a record that did not parse: `TOKEN_MAX`), else 0. */
  readonly all: number;
}

function floorOf(floors: LockFloors, slot: number): number {
  return Math.max(floors.all, floors.slots[slot] ?? 0);
}

/** The reclaim window of one term: open from takeover until `endsAtMs` or an early end. */
export class ReclaimWindow {
  readonly term: number;
  readonly terms: TermsRecord;
  #endsAtMs: number;
  #closed = false;
  /** H with each lock's void-below marks (the loaded floors, raised by ends in this term). */
  readonly #floors: Map<string, LockFloors>;
  readonly #records: ReadonlyMap<string, OwnershipRecord>;
  /** Locks granted afresh in this term: no reclaim of an earlier term is kept on them (v). */
  readonly #regranted = new Set<string>();
  /** Listed sessions of a planned hand-over that have not resumed yet (null: no list). */
  readonly #awaited: Set<number> | null;
  readonly #handoverTerm: number;

  constructor(options: ReclaimWindowOptions) {
    this.term = options.term;
    this.terms = options.terms;
    this.#endsAtMs = options.endsAtMs;
    this.#records = options.loaded.records;
    this.#floors = new Map();
    for (const [name, floor] of options.loaded.floors) {
      const record = this.#records.get(name);
      // A record that did not parse voids every slot (its floor is TOKEN_MAX).
      this.#floors.set(
        name,
        record === undefined ? { slots: [], all: floor } : { slots: [...record.floors], all: 0 },
      );
    }
    const handover = options.handover;
    if (handover !== null && handover.term === options.terms.served && handover.term > 0) {
      this.#awaited = new Set(handover.sessions);
      this.#handoverTerm = handover.term;
    } else {
      this.#awaited = null;
      this.#handoverTerm = 0;
    }
  }

  /** The locks of H (reserved at takeover). */
  get held(): IterableIterator<string> {
    return this.#floors.keys();
  }

  get size(): number {
    return this.#floors.size;
  }

  get endsAtMs(): number {
    return this.#endsAtMs;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Listed sessions of a planned hand-over that have not resumed yet. */
  get awaitedCount(): number {
    return this.#awaited?.size ?? 0;
  }

  /** Whether a planned hand-over's sessions have all resumed (an empty list: at once). */
  get handoverDone(): boolean {
    return this.#awaited !== null && this.#awaited.size === 0;
  }

  /** Whether the window is open at `nowMs`. */
  open(nowMs: number): boolean {
    return !this.#closed && nowMs < this.#endsAtMs;
  }

  /** Closes the window (its time passed, or a planned hand-over's sessions all resumed). */
  close(): void {
    this.#closed = true;
  }

  /** Whether claims of `prevTerm` may be reclaimed here by rule (ii) (the lock aside). */
  takesTerm(prevTerm: number): boolean {
    const { served, closed, before } = this.terms;
    return prevTerm > 0 && (prevTerm === served || (!closed && prevTerm === before));
  }

  /** RESUMED's `windowLeftMs` for claims of `prevTerm` (0: none can be reclaimed). */
  leftMs(prevTerm: number, nowMs: number): number {
    if (!this.open(nowMs) || !this.takesTerm(prevTerm)) return 0;
    return Math.max(1, this.#endsAtMs - nowMs);
  }

  /** The cluster parts (ii)–(v) of the reclaim rule for a claim of an earlier term. */
  check(claim: ReclaimClaim, nowMs: number): ClusterVoidReason | null {
    if (!this.takesTerm(claim.term)) return "term";
    const record = this.#records.get(claim.name);
    // A claim of the term before the served one: only on locks that term did not write since.
    if (claim.term !== this.terms.served && record !== undefined && record.term > claim.term) {
      return "term";
    }
    if (!this.open(nowMs)) return "window";
    if (claim.kind === "queued") return null;
    // Per slot: a semaphore slot whose holder ended badly voids that slot's stale holder only,
    // not the holders of the other slots (whose tokens may well be below it).
    const floors = this.#floors.get(claim.name);
    if (floors === undefined || claim.token <= floorOf(floors, claim.slot)) return "floor";
    if (this.#regranted.has(claim.name)) return "regranted";
    return null;
  }

  /** A fresh grant of `name` in this term: earlier terms' owned claims on it are void. */
  granted(name: string): void {
    if (!this.#closed) this.#regranted.add(name);
  }

  /**
   * An ownership of `name` with `token` (in `slot`) ended here: reclaims of that slot at or below
   * it are void. Not for a shared ownership: readers hold the lock together, so the end of one
   * says nothing of an older reader still to reclaim (one that ended badly on the old leader is
   * under that leader's floor already, W2; an exclusive reclaim beside a reader is void anyway).
   */
  ended(name: string, token: number, slot: number, shared: boolean): void {
    const floors = this.#floors.get(name);
    if (floors === undefined || shared) return;
    while (floors.slots.length <= slot) floors.slots.push(0);
    if (token > floors.slots[slot]) floors.slots[slot] = token;
  }

  /** A session that RESUMEd from `prevTerm` is done reclaiming; true when that ends the window. */
  resumed(prevTerm: number, prevSessionId: number): boolean {
    if (this.#awaited === null || prevTerm !== this.#handoverTerm) return false;
    return this.#awaited.delete(prevSessionId) && this.#awaited.size === 0;
  }
}
