/**
 * An `OwnershipGate` for service tests, on the rules of design §1 in miniature: `FakeRecords`
 * stands for what etcd keeps across terms (H: the locks with a record, their floors and the term
 * that wrote them), and each `FakeGate` is one leader's term over it. W1 and W2 writes wait for
 * `commit()` (or fail with `fail()`), so a test decides when a batch lands; every call is logged.
 */

import type { Tickets } from "../../src/security/tickets.ts";
import type {
  ClusterVoidReason,
  OwnershipGate,
  ReclaimClaim,
} from "../../src/service/leadership_gate.ts";

/** What etcd holds across terms: a record per lock that may be held. */
export class FakeRecords {
  /** Lock → its record: the term that wrote it and its floor. */
  readonly own = new Map<string, { term: number; floor: number }>();
}

export interface FakeGateOptions {
  readonly term: number;
  readonly records: FakeRecords;
  readonly tickets: Tickets;
  /** The term before this one whose claims it takes (rule (ii)); default term − 1. */
  readonly previousTerm?: number;
  readonly reclaimWindowMs?: number;
}

export class FakeGate implements OwnershipGate {
  readonly term: number;
  readonly reclaimWindowMs: number;
  readonly tickets: Tickets;
  readonly records: FakeRecords;
  previousTerm: number;
  /** Rule (iii): whether the reclaim window is open. */
  windowOpen = true;
  /** Every call, in order, as text: `ended L 42 graceful`, `beforeDeliver L`, `idle L`, … */
  readonly calls: string[] = [];
  /** The batch waiting for `commit()`: locks to put, floors to raise. */
  #puts = new Set<string>();
  #floors = new Map<string, number>();
  #batch: PromiseWithResolvers<void> | null = null;

  constructor(options: FakeGateOptions) {
    this.term = options.term;
    this.records = options.records;
    this.tickets = options.tickets;
    this.previousTerm = options.previousTerm ?? options.term - 1;
    this.reclaimWindowMs = options.reclaimWindowMs ?? 9_000;
  }

  /** Whether a write waits for `commit()`. */
  get pending(): boolean {
    return this.#batch !== null;
  }

  reclaimWindowLeftMs(prevTerm: number): number {
    return this.windowOpen && prevTerm === this.previousTerm ? 5_000 : 0;
  }

  reclaimCheck(claim: ReclaimClaim): ClusterVoidReason | null {
    this.calls.push(`reclaimCheck ${claim.kind} ${claim.name} ${claim.term}`);
    if (claim.term !== this.previousTerm) return "term";
    if (!this.windowOpen) return "window";
    if (claim.kind === "queued") return null;
    const record = this.records.own.get(claim.name);
    return record === undefined || claim.token <= record.floor ? "floor" : null;
  }

  /** W1/W2: null when the lock's record is committed (for this term, or any when restored). */
  beforeDeliver(name: string, restored: boolean): Promise<void> | null {
    this.calls.push(`beforeDeliver ${name}${restored ? " restored" : ""}`);
    const record = this.records.own.get(name);
    const committed = record !== undefined && (restored || record.term === this.term);
    if (committed && !this.#floors.has(name) && !this.#puts.has(name)) return null;
    this.#puts.add(name);
    this.#batch ??= Promise.withResolvers<void>();
    return this.#batch.promise;
  }

  /** W2: a non-graceful end raises the floor in the next batch. */
  ended(name: string, token: number, graceful: boolean, slot: number): void {
    this.calls.push(`ended ${name} ${token} ${graceful ? "graceful" : "non-graceful"} ${slot}`);
    if (graceful || !this.records.own.has(name) && !this.#puts.has(name)) return;
    this.#floors.set(name, Math.max(this.#floors.get(name) ?? 0, token));
    this.#batch ??= Promise.withResolvers<void>();
  }

  idle(name: string): void {
    this.calls.push(`idle ${name}`);
  }

  busy(name: string): void {
    this.calls.push(`busy ${name}`);
  }

  reclaimsDone(prevTerm: number, prevSessionId: number): void {
    this.calls.push(`reclaimsDone ${prevTerm} ${prevSessionId}`);
  }

  /** The waiting batch lands: records put for this term, floors raised; its grants go out. */
  commit(): void {
    for (const name of this.#puts) {
      const floor = this.records.own.get(name)?.floor ?? 0;
      this.records.own.set(name, { term: this.term, floor });
    }
    for (const [name, floor] of this.#floors) {
      const record = this.records.own.get(name) ?? { term: this.term, floor: 0 };
      this.records.own.set(name, { term: record.term, floor: Math.max(record.floor, floor) });
    }
    this.#puts.clear();
    this.#floors.clear();
    const batch = this.#batch;
    this.#batch = null;
    batch?.resolve();
  }

  /** The waiting batch never lands (the term ended): its grants are dropped. */
  fail(): void {
    this.#puts.clear();
    this.#floors.clear();
    const batch = this.#batch;
    this.#batch = null;
    batch?.reject(new Error("the term ended before its records committed"));
  }
}
