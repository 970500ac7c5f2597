/**
 * Ownership records of cluster mode, milestone 2 (design §1 "class records", §3.1): etcd holds,
 * for every lock that may be held, `<cluster>/own/<name>` = `{"t": term, "f": floor}`. The new
 * leader of a fail-over reads them (`load`) to learn which locks may still be held and below
 * which token an old ownership is void; it never needs to know who holds.
 *
 * Write rules of the leader of term τ, all through one group-committed transaction in flight at a
 * time, guarded by `create_revision(<cluster>/leader) == τ` (a deposed leader's writes fail):
 * - **W1** (`beforeDeliver`): an ACQUIRED leaves only once the lock's record is committed, with
 *   `t = τ` for a fresh grant. `null` (no promise, no await) when it already is and no floor is
 *   pending: the path of every grant on a lock in use.
 * - **W2** (`ended`): an ownership that ended badly (expired, io_timeout, force, a v2 session
 *   gone without GOODBYE) raises the floor, `f := max(f, token)`; every later ACQUIRED of the
 *   lock waits for that commit.
 * - **W3** (`idle`): a record of a lock idle (no owner, no waiter) for `lingerMs` is deleted;
 *   a grant meanwhile cancels the delete, or re-puts after it when it is already in flight.
 * Graceful releases, their hand-offs, enqueues, cancels and heartbeats write nothing.
 *
 * Per lock the mirror keeps what etcd holds (the last committed write or the load) and the
 * operation of the transaction in flight and of the one queued after it; its state is derived:
 *
 *     absent ──put──▶ putting ──commit──▶ present ──delete──▶ deleting ──commit──▶ absent
 *        ▲              │ ▲                 │ ▲                  │
 *        │              │ └──floor raise────┘ └────── a grant re-puts ┘
 *
 * Operations on one key coalesce (put + put: the larger floors; put + delete: delete; delete +
 * put: put); a transaction carries at most `CLUSTER_RECORD_TXN_OPS_MAX` operations, larger sets
 * queue as several. A failed compare means another term leads: `onDeposed`, and every waiting
 * grant is refused. An unanswered transaction has an unknown outcome and is sent again as it
 * was: a put under the term guard and a delete are idempotent, and the one after it waits.
 *
 * Slots: a floor is kept per slot (`f` is a number for one slot, an array for several), so the
 * semaphores of a later milestone can void the ownerships of one slot. Exclusive locks use slot 0
 * and are written as `{"t": τ, "f": n}`.
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import { lockNameProblem } from "../core/lock_name.ts";
import {
  CLUSTER_RECORD_SWEEP_MAX,
  CLUSTER_RECORD_TXN_OPS_MAX,
  CLUSTER_RECORDS_PAGE_KEYS,
  CLUSTER_RETRY_MS,
  TOKEN_MAX,
} from "../limits.ts";
import { type Etcd, EtcdError, type KeyValue, type TxnOp } from "./etcd.ts";
import { clusterKeys } from "./leadership.ts";
import {
  floorAt,
  formatOwnershipRecord,
  isToken,
  maxFloors,
  NO_FLOORS,
  type OwnershipRecord,
  parseOwnershipRecord,
} from "./ownership_record.ts";

export type { OwnershipRecord } from "./ownership_record.ts";

/**
 * The mirror's view of one lock's record: `absent` (no key), `present` (committed, nothing
 * pending), `putting` (a put is queued or in flight), `deleting` (a delete is).
 */
export type RecordState = "absent" | "present" | "putting" | "deleting";

/** What `load` read at takeover. */
export interface LoadedRecords {
  /** H: every lock that may be held, with its floor (the largest of its slots' floors). */
  readonly floors: Map<string, number>;
  /** The valid records as read (term and per-slot floors), for the reclaim rule. */
  readonly records: Map<string, OwnershipRecord>;
  /**
   * Keys under `own/` that are not valid records: a bad lock name (ignored) or a value that does
   * not parse (the lock is in `floors` with floor `TOKEN_MAX`: reserved, and no reclaim of it is
   * kept this term).
   */
  readonly invalid: readonly string[];
  /** The etcd revision every page was read at. */
  readonly revision: number;
  readonly pages: number;
  readonly tookMs: number;
}

/** Counters and gauges for the records metrics (design §3.7). */
export interface RecordStats {
  /** Records that exist in etcd as far as this node knows (`lockd_cluster_records`). */
  readonly records: number;
  /** Committed operations by kind (`lockd_cluster_record_commits_total{kind}`). */
  readonly commits: { readonly held: number; readonly floor: number; readonly delete: number };
  /** Transactions committed: time from first send to commit (`..._record_commit_seconds`). */
  readonly commitSecondsSum: number;
  readonly commitSecondsCount: number;
  /** Operations per committed transaction (`lockd_cluster_record_batch_ops`). */
  readonly batchOpsSum: number;
  readonly batchOpsCount: number;
  /** Grants whose ACQUIRED waits for a commit (`lockd_cluster_grants_waiting_commit`). */
  readonly grantsWaitingCommit: number;
}

export interface OwnershipRecordsOptions {
  readonly etcd: Etcd;
  readonly scheduler: Scheduler;
  readonly cluster: string;
  /** Bound of one transaction or page read. */
  readonly requestTimeoutMs: number;
  /** W3: how long a lock stays idle before its record is deleted (`-cluster-record-linger`). */
  readonly lingerMs: number;
  /**
   * Whether the lock has no owner and no waiter now (asked by the engine before a delete);
   * `later`: idle, but a lock-delay still runs (its record stays: asked again after a linger).
   */
  readonly isIdle: (name: string) => boolean | "later";
  /** A transaction found another term's leader key (or none): the node must step down. */
  readonly onDeposed: (current: KeyValue | undefined) => void;
  /** A transaction failed and will be sent again (for the diagnostic log). */
  readonly onRetry?: (error: unknown) => void;
  /** Delay before sending an unanswered transaction again (`CLUSTER_RETRY_MS`). */
  readonly retryMs?: number;
  /** Operations per transaction (`CLUSTER_RECORD_TXN_OPS_MAX`; smaller in tests). */
  readonly txnOpsMax?: number;
  /** Keys per page of `load` (`CLUSTER_RECORDS_PAGE_KEYS`). */
  readonly pageKeys?: number;
}

/** Why a waiting grant was refused: the term ended (deposed, stepped down) before its commit. */
export class RecordsNotCommitted extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RecordsNotCommitted";
  }
}

type Op =
  | {
    readonly type: "put";
    readonly floors: readonly number[];
    readonly kind: "held" | "floor";
    /** A lock-delay's end (wall ms, 0: none), kept with the floor (W2). */
    readonly delayUntilWallMs: number;
  }
  | { readonly type: "delete" };

interface Batch {
  readonly ops: Map<string, Op>;
  readonly done: PromiseWithResolvers<void>;
  /** Grants waiting for this batch (the gauge drops by this much when it settles). */
  waiting: number;
  /** When it was first sent (monotonic ms), -1 while queued. */
  sentAtMs: number;
}

interface Entry {
  /** What etcd holds as far as this node knows; null: no key. */
  committed: OwnershipRecord | null;
  /** The operation of the transaction in flight, if it carries one for this lock. */
  inflight: Op | null;
  /** The operation queued for a later transaction, and the batch that carries it. */
  queued: Op | null;
  queuedIn: Batch | null;
}

/** W1's put: a record for this term, floors as they are, no lock-delay. */
const HELD_PUT = { type: "put", floors: NO_FLOORS, kind: "held", delayUntilWallMs: 0 } as const;

export class OwnershipRecords {
  readonly #etcd: Etcd;
  readonly #scheduler: Scheduler;
  readonly #prefix: string;
  readonly #leaderKey: string;
  readonly #timeoutMs: number;
  readonly #lingerMs: number;
  readonly #isIdle: OwnershipRecordsOptions["isIdle"];
  readonly #onDeposed: OwnershipRecordsOptions["onDeposed"];
  readonly #onRetry: OwnershipRecordsOptions["onRetry"];
  readonly #retryMs: number;
  readonly #txnOpsMax: number;
  readonly #pageKeys: number;

  #term = 0;
  /** Bumped by begin() and end(): answers of an earlier term are ignored. */
  #epoch = 0;
  readonly #entries = new Map<string, Entry>();
  #inflight: Batch | null = null;
  readonly #queued: Batch[] = [];
  /** Idle locks and since when (monotonic ms); insertion order is deadline order. */
  readonly #idle = new Map<string, number>();
  #sweepTimer: Timer | null = null;
  #retryTimer: Timer | null = null;
  #pumpScheduled = false;

  #records = 0;
  #waiting = 0;
  readonly #commits = { held: 0, floor: 0, delete: 0 };
  #commitSecondsSum = 0;
  #commitSecondsCount = 0;
  #batchOpsSum = 0;
  #batchOpsCount = 0;

  constructor(options: OwnershipRecordsOptions) {
    const txnOpsMax = options.txnOpsMax ?? CLUSTER_RECORD_TXN_OPS_MAX;
    if (!Number.isSafeInteger(txnOpsMax) || txnOpsMax < 1) {
      throw new RangeError(`Invalid transaction size ${txnOpsMax}`);
    }
    if (!(options.lingerMs >= 0)) throw new RangeError(`Invalid linger ${options.lingerMs} ms`);
    this.#etcd = options.etcd;
    this.#scheduler = options.scheduler;
    this.#prefix = `${options.cluster}/own/`;
    this.#leaderKey = clusterKeys(options.cluster).leader;
    this.#timeoutMs = options.requestTimeoutMs;
    this.#lingerMs = options.lingerMs;
    this.#isIdle = options.isIdle;
    this.#onDeposed = options.onDeposed;
    this.#onRetry = options.onRetry;
    this.#retryMs = options.retryMs ?? CLUSTER_RETRY_MS;
    this.#txnOpsMax = txnOpsMax;
    this.#pageKeys = options.pageKeys ?? CLUSTER_RECORDS_PAGE_KEYS;
  }

  /** The key prefix of the records, `<cluster>/own/`. */
  get prefix(): string {
    return this.#prefix;
  }

  /** The term records are written for, 0 between terms. */
  get term(): number {
    return this.#term;
  }

  get stats(): RecordStats {
    return {
      records: this.#records,
      commits: { ...this.#commits },
      commitSecondsSum: this.#commitSecondsSum,
      commitSecondsCount: this.#commitSecondsCount,
      batchOpsSum: this.#batchOpsSum,
      batchOpsCount: this.#batchOpsCount,
      grantsWaitingCommit: this.#waiting,
    };
  }

  /** The mirror's state of one lock's record. */
  state(name: string): RecordState {
    const e = this.#entries.get(name);
    const op = e?.queued ?? e?.inflight ?? null;
    if (op !== null) return op.type === "put" ? "putting" : "deleting";
    return e?.committed ? "present" : "absent";
  }

  /** The committed floor of a lock's slot (0 without a record). */
  floor(name: string, slot = 0): number {
    const committed = this.#entries.get(name)?.committed;
    return committed ? floorAt(committed.floors, slot) : 0;
  }

  /**
   * Reads every record under `<cluster>/own/`, in pages of `pageKeys` at the revision of the
   * first page (one snapshot). Starts over when that revision is compacted meanwhile (3 times at
   * most); rejects with the `EtcdError` of a failed read (the caller retries the takeover).
   */
  async load(): Promise<LoadedRecords> {
    for (let attempt = 1;; attempt++) {
      try {
        return await this.#loadOnce();
      } catch (error) {
        if (!(error instanceof EtcdError && error.kind === "compacted" && attempt < 3)) throw error;
      }
    }
  }

  async #loadOnce(): Promise<LoadedRecords> {
    const startMs = this.#scheduler.monotonicMs();
    const floors = new Map<string, number>();
    const records = new Map<string, OwnershipRecord>();
    const invalid: string[] = [];
    let revision = 0;
    let fromKey = this.#prefix;
    let pages = 0;
    for (;;) {
      const page = await this.#etcd.range(this.#prefix, {
        limit: this.#pageKeys,
        revision,
        fromKey,
        timeoutMs: this.#timeoutMs,
      });
      pages++;
      if (revision === 0) revision = page.revision;
      for (const kv of page.kvs) {
        const name = kv.key.slice(this.#prefix.length);
        if (!kv.key.startsWith(this.#prefix) || lockNameProblem(name) !== null) {
          invalid.push(kv.key);
          continue;
        }
        const record = parseOwnershipRecord(kv.value);
        if (record === null) {
          invalid.push(kv.key);
          floors.set(name, TOKEN_MAX);
          continue;
        }
        records.set(name, record);
        floors.set(name, Math.max(...record.floors));
      }
      const last = page.kvs.at(-1);
      if (!page.more || last === undefined) break;
      fromKey = `${last.key}\0`;
    }
    return {
      floors,
      records,
      invalid,
      revision,
      pages,
      tookMs: this.#scheduler.monotonicMs() - startMs,
    };
  }

  /**
   * Starts writing for `term` with the mirror of what `load` read. A record that did not parse
   * counts as present with term 0 and floor 0: the first fresh grant rewrites it, and no reclaim
   * of it is kept this term (`LoadedRecords.invalid`), so a floor of 0 voids nothing that matters.
   */
  begin(term: number, loaded: LoadedRecords): void {
    if (!Number.isSafeInteger(term) || term < 1) throw new RangeError(`Invalid term ${term}`);
    this.end();
    this.#term = term;
    for (const name of loaded.floors.keys()) {
      const committed = loaded.records.get(name) ?? { term: 0, floors: NO_FLOORS };
      this.#entries.set(name, { committed, inflight: null, queued: null, queuedIn: null });
    }
    this.#records = this.#entries.size;
  }

  /**
   * Stops writing (the node stepped down or was deposed): grants waiting for a commit are
   * refused with `RecordsNotCommitted`, the mirror is dropped. Idempotent.
   */
  end(): void {
    this.#epoch++;
    const ended = this.#term;
    this.#term = 0;
    this.#sweepTimer?.cancel();
    this.#sweepTimer = null;
    this.#retryTimer?.cancel();
    this.#retryTimer = null;
    const batches = this.#inflight === null ? [...this.#queued] : [this.#inflight, ...this.#queued];
    this.#inflight = null;
    this.#queued.length = 0;
    for (const batch of batches) {
      batch.done.reject(
        new RecordsNotCommitted(`Term ${ended} ended before its records committed`),
      );
    }
    this.#entries.clear();
    this.#idle.clear();
    this.#records = 0;
    this.#waiting = 0;
  }

  /**
   * W1 and W2 for one grant of `name`, before its ACQUIRED leaves: `null` when the record is
   * committed for this term (or, for a `restored` ownership kept by a reclaim, for any term)
   * with no write pending; otherwise a promise that resolves once the batch that makes it so
   * committed, or rejects with `RecordsNotCommitted` when the term ends first. A grant also ends
   * the lock's linger.
   */
  beforeDeliver(name: string, restored = false): Promise<void> | null {
    this.#idle.delete(name);
    const e = this.#entries.get(name);
    if (
      e !== undefined && e.queued === null && e.inflight === null && e.committed !== null &&
      (restored || e.committed.term === this.#term) && this.#term !== 0
    ) {
      return null;
    }
    if (this.#term === 0) {
      return Promise.reject(new RecordsNotCommitted(`Cannot deliver "${name}": no term`));
    }
    const batch = this.#batchFor(name, e, restored);
    if (batch === null) return null;
    batch.waiting++;
    this.#waiting++;
    return batch.done.promise;
  }

  /** The batch after whose commit a grant of `name` may be delivered (null: at once). */
  #batchFor(name: string, e: Entry | undefined, restored: boolean): Batch | null {
    if (e === undefined) {
      return this.#enqueue(name, this.#entry(name), HELD_PUT);
    }
    if (e.queued?.type === "put") return e.queuedIn;
    if (e.queued?.type === "delete") {
      // Not sent yet: the grant cancels it.
      this.#unqueue(name, e);
      if (e.inflight === null && e.committed !== null) {
        if (restored || e.committed.term === this.#term) return null;
      }
    }
    if (e.inflight?.type === "put") return this.#inflight;
    // No record, another term's, or a delete in flight: (re-)put under W1.
    return this.#enqueue(name, e, { ...HELD_PUT, floors: this.#baseFloors(e) });
  }

  /**
   * W2: an ownership of `name` with `token` ended. A non-graceful end raises the floor of its
   * slot to the token in the next batch (unless a floor at least as high is committed or
   * pending), with the end of the lock-delay it started (`delayUntilWallMs`, 0: none), so a new
   * leader holds the lock back as long; graceful ends write nothing. A lock without a record
   * (never delivered) needs none.
   */
  ended(name: string, token: number, graceful: boolean, slot = 0, delayUntilWallMs = 0): void {
    if (graceful || this.#term === 0) return;
    if (!isToken(token) || token === 0) throw new RangeError(`Invalid token ${token}`);
    if (!Number.isSafeInteger(slot) || slot < 0) throw new RangeError(`Invalid slot ${slot}`);
    const e = this.#entries.get(name);
    if (e === undefined) return;
    const queued = e.queued?.type === "put" ? e.queued : null;
    const base = this.#baseFloors(e);
    const delay = Math.max(delayUntilWallMs, queued?.delayUntilWallMs ?? 0);
    if (
      token <= Math.max(floorAt(base, slot), floorAt(queued?.floors ?? NO_FLOORS, slot)) &&
      delay <= this.#baseDelay(e)
    ) return;
    if (e.committed === null && e.inflight?.type !== "put" && queued === null) return;
    const floors = maxFloors(base, queued?.floors ?? NO_FLOORS).slice();
    while (floors.length <= slot) floors.push(0);
    floors[slot] = Math.max(floors[slot], token);
    this.#enqueue(name, e, { type: "put", floors, kind: "floor", delayUntilWallMs: delay });
  }

  /**
   * W3: `name` has no owner and no waiter now. Its record is deleted after `lingerMs`, if the
   * engine still says so (`isIdle`) then; a grant meanwhile (`beforeDeliver`) or `busy` cancels.
   */
  idle(name: string): void {
    if (this.#term === 0 || !this.#entries.has(name)) return;
    this.#idle.delete(name);
    this.#idle.set(name, this.#scheduler.monotonicMs());
    if (this.#sweepTimer === null) this.#armSweep();
  }

  /** `name` is in use again: no delete for it (a delete already in flight still lands). */
  busy(name: string): void {
    this.#idle.delete(name);
    const e = this.#entries.get(name);
    if (e?.queued?.type === "delete") {
      this.#unqueue(name, e);
      this.#forgetIfGone(name, e);
    }
  }

  /**
   * Before a planned hand-over (the node grants nothing more): the records of every idle lock
   * are deleted without linger, and the promise resolves once everything queued has committed.
   * Rejects with `RecordsNotCommitted` when the term ends first.
   */
  async flushForHandover(): Promise<void> {
    if (this.#term === 0) throw new RecordsNotCommitted("Cannot flush the records: no term");
    this.#idle.clear();
    this.#sweepTimer?.cancel();
    this.#sweepTimer = null;
    for (const name of [...this.#entries.keys()]) {
      if (this.#isIdle(name) === true) this.#delete(name);
    }
    for (;;) {
      const last = this.#queued.at(-1) ?? this.#inflight;
      if (last === null) return;
      await last.done.promise;
    }
  }

  // ---- internals ---------------------------------------------------------------------------

  #entry(name: string): Entry {
    const e: Entry = { committed: null, inflight: null, queued: null, queuedIn: null };
    this.#entries.set(name, e);
    return e;
  }

  /** The floors etcd will hold once the transaction in flight committed. */
  #baseFloors(e: Entry): readonly number[] {
    const committed = e.committed?.floors ?? NO_FLOORS;
    return e.inflight?.type === "put" ? maxFloors(committed, e.inflight.floors) : committed;
  }

  /** The lock-delay end etcd will hold once the transaction in flight committed (0: none). */
  #baseDelay(e: Entry): number {
    const committed = e.committed?.delayUntilWallMs ?? 0;
    return e.inflight?.type === "put"
      ? Math.max(committed, e.inflight.delayUntilWallMs)
      : committed;
  }

  /** Queues `op` for `name`, coalesced with the operation already queued for it. */
  #enqueue(name: string, e: Entry, op: Op): Batch {
    let batch = e.queuedIn;
    if (batch === null) {
      batch = this.#queued.at(-1) ?? null;
      if (batch === null || batch.ops.size >= this.#txnOpsMax) {
        batch = { ops: new Map(), done: Promise.withResolvers(), waiting: 0, sentAtMs: -1 };
        // Nobody may wait for a batch of floors and deletes: its failure is not unhandled.
        batch.done.promise.catch(() => {});
        this.#queued.push(batch);
      }
    }
    const before = e.queued;
    let merged = op;
    if (op.type === "put" && before?.type === "put") {
      merged = {
        type: "put",
        floors: maxFloors(before.floors, op.floors),
        kind: before.kind === "floor" || op.kind === "floor" ? "floor" : "held",
        delayUntilWallMs: Math.max(before.delayUntilWallMs, op.delayUntilWallMs),
      };
    }
    batch.ops.set(name, merged);
    e.queued = merged;
    e.queuedIn = batch;
    this.#schedulePump();
    return batch;
  }

  /** Takes `name`'s queued operation out of its batch (the entry stays: see #forgetIfGone). */
  #unqueue(name: string, e: Entry): void {
    e.queuedIn?.ops.delete(name);
    e.queued = null;
    e.queuedIn = null;
  }

  /** Queues the delete of `name`'s record (no linger); the lock is idle. */
  #delete(name: string): void {
    const e = this.#entries.get(name);
    if (e === undefined || e.queued?.type === "delete") return;
    const exists = e.inflight === null ? e.committed !== null : e.inflight.type === "put";
    if (exists) {
      this.#enqueue(name, e, { type: "delete" });
      return;
    }
    // Nothing in etcd once the transaction in flight lands: a queued put has no grant to serve.
    if (e.queued !== null) this.#unqueue(name, e);
    this.#forgetIfGone(name, e);
  }

  /** Drops the entry of a lock with no record and nothing pending. */
  #forgetIfGone(name: string, e: Entry): void {
    if (e.committed === null && e.inflight === null && e.queued === null) {
      this.#entries.delete(name);
      this.#idle.delete(name);
    }
  }

  #armSweep(): void {
    const first = this.#idle.values().next();
    if (first.done) return;
    const inMs = first.value + this.#lingerMs - this.#scheduler.monotonicMs();
    this.#sweepTimer = this.#scheduler.setTimer(() => {
      this.#sweepTimer = null;
      this.#sweep();
    }, inMs);
  }

  /** Deletes the records of locks idle for the linger, `CLUSTER_RECORD_SWEEP_MAX` per run. */
  #sweep(): void {
    const nowMs = this.#scheduler.monotonicMs();
    let examined = 0;
    const later: string[] = [];
    for (const [name, sinceMs] of this.#idle) {
      if (sinceMs + this.#lingerMs > nowMs || examined >= CLUSTER_RECORD_SWEEP_MAX) break;
      examined++;
      this.#idle.delete(name);
      const idle = this.#isIdle(name);
      if (idle === "later") later.push(name);
      else if (idle) this.#delete(name);
    }
    // Asked again after a linger, but not sooner than a retry (a linger of 0 must not spin).
    const againMs = nowMs + Math.max(0, this.#retryMs - this.#lingerMs);
    for (const name of later) this.#idle.set(name, againMs);
    this.#armSweep();
  }

  /**
   * Sends at the end of the current step (a microtask), not at once: the operations of one
   * engine step (an expiry's floor and the hand-off grant after it, a burst of cold grants) then
   * go out together.
   */
  #schedulePump(): void {
    if (this.#pumpScheduled || this.#inflight !== null) return;
    this.#pumpScheduled = true;
    queueMicrotask(() => {
      this.#pumpScheduled = false;
      this.#pump();
    });
  }

  /** Sends the next batch unless one is in flight. */
  #pump(): void {
    while (this.#inflight === null && this.#term !== 0) {
      const batch = this.#queued.shift();
      if (batch === undefined) return;
      if (batch.ops.size === 0) {
        this.#waiting -= batch.waiting;
        batch.done.resolve();
        continue;
      }
      for (const [name, op] of batch.ops) {
        const e = this.#entries.get(name)!;
        e.inflight = op;
        if (e.queuedIn === batch) {
          e.queued = null;
          e.queuedIn = null;
        }
      }
      this.#inflight = batch;
      batch.sentAtMs = this.#scheduler.monotonicMs();
      this.#send(batch);
    }
  }

  #send(batch: Batch): void {
    const term = this.#term;
    const epoch = this.#epoch;
    const ops: TxnOp[] = [];
    for (const [name, op] of batch.ops) {
      const key = this.#prefix + name;
      ops.push(
        op.type === "put"
          ? { type: "put", key, value: formatOwnershipRecord({ term, ...op }) }
          : { type: "delete", key },
      );
    }
    this.#etcd.txn(
      [{ key: this.#leaderKey, target: "create", revision: term }],
      ops,
      [{ type: "get", key: this.#leaderKey }],
      { timeoutMs: this.#timeoutMs },
    ).then(
      (result) => {
        if (epoch !== this.#epoch) return;
        if (!result.succeeded) {
          this.end();
          this.#onDeposed(result.gets[0]);
          return;
        }
        this.#committed(batch, term);
      },
      (error) => {
        if (epoch !== this.#epoch) return;
        // Unknown outcome (or refused): the same operations again, after the retry delay.
        this.#onRetry?.(error);
        this.#retryTimer = this.#scheduler.setTimer(() => {
          this.#retryTimer = null;
          if (epoch === this.#epoch) this.#send(batch);
        }, this.#retryMs);
      },
    );
  }

  #committed(batch: Batch, term: number): void {
    for (const [name, op] of batch.ops) {
      const e = this.#entries.get(name)!;
      e.inflight = null;
      if (op.type === "put") {
        if (e.committed === null) this.#records++;
        e.committed = { term, floors: op.floors, delayUntilWallMs: op.delayUntilWallMs };
        this.#commits[op.kind]++;
      } else {
        if (e.committed !== null) this.#records--;
        e.committed = null;
        this.#commits.delete++;
        this.#forgetIfGone(name, e);
      }
    }
    this.#commitSecondsSum += (this.#scheduler.monotonicMs() - batch.sentAtMs) / 1000;
    this.#commitSecondsCount++;
    this.#batchOpsSum += batch.ops.size;
    this.#batchOpsCount++;
    this.#inflight = null;
    this.#waiting -= batch.waiting;
    batch.done.resolve();
    this.#pump();
  }
}
