/**
 * The ownership side of cluster mode, milestone 2 (design §1, §3.1, §3.2; docs/cluster.md): the
 * records in etcd (ownership_records.ts), the cluster's ticket key (ticket_key.ts), and a new
 * leader's takeover and reclaim window (reclaim_window.ts). `ClusterNode` owns one and passes the
 * service's `OwnershipGate` calls to it.
 *
 * - **Takeover** (`takeover`, before the term serves): reads `own/` (H, the floors), `terms`,
 *   `handover` and the ticket key, writes `terms` = `{served: τ′, closed: false, before: τ}`
 *   under the term's guard, and starts the records for the term. The window ends at
 *   `serving + max(grace, horizon)`: the grace (`-cluster-reclaim-grace`), or the last term's
 *   longest published promise counted from this election, whichever is later.
 * - **Serving** (`serve`): every lock of H is reserved until the window ends or its holder
 *   reclaims it; every other lock is grantable at once (W1: no ownership of it was delivered
 *   without a record).
 * - **Window end**: at its time, or early once every session of a planned hand-over's list has
 *   resumed (never before the last term's horizon): the remaining reservations are lifted, idle
 *   locks' records start to linger, and `terms.closed` is written.
 * - **Planned hand-over** (`prepareHandover`): pending records committed, idle ones deleted, and
 *   the list of sessions with claims written for the next leader.
 *
 * While the window is open, the horizon this term publishes covers it (`inheritedHorizonMs`): a
 * successor elected before the window closed then keeps the last term's unreclaimed locks
 * reserved as long as this term would have.
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import { CLUSTER_HELLO_HOLD_MS_MAX, CLUSTER_RETRY_MS } from "../limits.ts";
import { log } from "../log/diagnostic.ts";
import { randomTicketKey, Tickets } from "../security/tickets.ts";
import type { ClusterVoidReason, ReclaimClaim } from "../service/leadership_gate.ts";
import type { LockEngineView } from "../core/lock_queries.ts";
import type { LockService } from "../service/lock_service.ts";
import type { Etcd, KeyValue } from "./etcd.ts";
import { type LoadedRecords, OwnershipRecords, type RecordStats } from "./ownership_records.ts";
import {
  formatHandover,
  formatTerms,
  type HandoverRecord,
  parseHandover,
  parseTerms,
  ReclaimWindow,
  takeoverTerms,
  type TermsRecord,
} from "./reclaim_window.ts";
import { loadTicketKey } from "./ticket_key.ts";

const logger = log("cluster");

export interface ClusterOwnershipOptions {
  readonly etcd: Etcd;
  readonly scheduler: Scheduler;
  readonly cluster: string;
  readonly ttlMs: number;
  /** A new leader's shortest window (`-cluster-reclaim-grace`). */
  readonly graceMs: number;
  /** W3's linger (`-cluster-record-linger`). */
  readonly lingerMs: number;
  /** The term this node leads now (0: none): answers of an earlier term are ignored. */
  readonly term: () => number;
  /** A write found another term's leader key: the node must step down. */
  readonly onDeposed: (current: KeyValue | undefined) => void;
  /** The lock service (attached after construction). */
  readonly service: () => LockService | null;
  /**
   * The window closed: the horizon to publish in its place (this term's own longest promise), or
   * null while a publication of the node is in flight (asked again later). While the write is in
   * flight `closing` is true and the node publishes nothing; `onClosed` follows it.
   */
  readonly ownHorizonMs?: () => number | null;
  readonly onClosed?: () => void;
  /** The engine's read side (attached with the service). */
  readonly locks: () => LockEngineView | null;
}

/** What a takeover read, for `serve`. */
export interface Takeover {
  readonly term: number;
  /** `terms` as it was before this term (whose tickets this term takes). */
  readonly terms: TermsRecord;
  readonly loaded: LoadedRecords;
  readonly handover: HandoverRecord | null;
  /** The last term's promises may run until this instant (monotonic ms; 0: none published). */
  readonly horizonUntilMs: number;
  /**
   * A leader that kept no records (of before milestone 2: a rolling upgrade) served after the last
   * one that did: no lock may be granted until its promises ran out, as before milestone 2
   * (`horizonUntilMs`, or 0 when that is not the case).
   */
  readonly holdAllUntilMs: number;
  readonly loadMs: number;
}

/** Takeover figures for `/metrics` and `/api/info`. */
export interface TakeoverStats {
  /** Sum and count of the record loads (`lockd_cluster_takeover_seconds{phase="load"}`). */
  loadSecondsSum: number;
  loadCount: number;
  /** Sum and count of windows, serving to their end (`{phase="window"}`). */
  windowSecondsSum: number;
  windowCount: number;
}

export class ClusterOwnership {
  readonly records: OwnershipRecords;
  readonly takeoverStats: TakeoverStats = {
    loadSecondsSum: 0,
    loadCount: 0,
    windowSecondsSum: 0,
    windowCount: 0,
  };
  /** WELCOME's `reclaimWindowMs`: silence detection + a HELLO's hold + the grace. */
  readonly reclaimWindowMs: number;
  readonly #o: ClusterOwnershipOptions;
  readonly #keys: { terms: string; handover: string; leader: string };
  #tickets: Tickets;
  #window: ReclaimWindow | null = null;
  #servingAtMs = 0;
  #horizonUntilMs = 0;
  #windowTimer: Timer | null = null;
  #closeTimer: Timer | null = null;
  /** Readers' tokens whose floor waits for the older readers to go (see `#readerFloor`). */
  readonly #deferredFloors = new Map<string, number>();
  #closing = false;

  constructor(options: ClusterOwnershipOptions) {
    this.#o = options;
    this.#keys = {
      terms: `${options.cluster}/terms`,
      handover: `${options.cluster}/handover`,
      leader: `${options.cluster}/leader`,
    };
    // Until the first takeover reads the cluster's key: never shown to a client.
    this.#tickets = new Tickets(randomTicketKey(), options.cluster);
    const helloHoldMs = Math.min(CLUSTER_HELLO_HOLD_MS_MAX, options.ttlMs * 1.5);
    this.reclaimWindowMs = Math.ceil(1.5 * options.ttlMs + helloHoldMs + options.graceMs);
    this.records = new OwnershipRecords({
      etcd: options.etcd,
      scheduler: options.scheduler,
      cluster: options.cluster,
      requestTimeoutMs: options.ttlMs / 2,
      lingerMs: options.lingerMs,
      // A reserved lock keeps its record: its holder may still reclaim it.
      isIdle: (name) => {
        const locks = options.locks();
        if (locks === null || !locks.isIdle(name) || locks.isReserved(name)) return false;
        // A lock-delay still running keeps the record (its end is in it for a next leader).
        return (locks.getLock(name, 0)?.delayedUntilMs ?? 0) !== 0 ? "later" : true;
      },
      onDeposed: options.onDeposed,
      onRetry: (error) =>
        logger.warn("ownership records not written yet; retrying", { error: String(error) }),
    });
  }

  get tickets(): Tickets {
    return this.#tickets;
  }

  get recordStats(): RecordStats {
    return this.records.stats;
  }

  /** The open window of the term served, or null. */
  get window(): ReclaimWindow | null {
    const window = this.#window;
    return window !== null && window.open(this.#o.scheduler.monotonicMs()) ? window : null;
  }

  /** Locks reserved for reclaims now. */
  reservedLocks(): number {
    const window = this.window;
    const locks = this.#o.locks();
    if (window === null || locks === null) return 0;
    let count = 0;
    for (const name of window.held) if (locks.isReserved(name)) count++;
    return count;
  }

  // ---- the takeover ------------------------------------------------------------------

  /**
   * Reads what a new leader of `term` needs from etcd and writes `terms`; rejects when etcd
   * fails (the caller retries), resolves null when the term ended meanwhile or the node was
   * deposed (`onDeposed` was called).
   */
  async takeover(term: number, electedAtMs: number, marginMs: number): Promise<Takeover | null> {
    const { etcd, scheduler } = this.#o;
    const timeoutMs = this.#o.ttlMs / 2;
    const startMs = scheduler.monotonicMs();
    const [loaded, terms, handover, key, horizon] = await Promise.all([
      this.records.load(),
      etcd.get(this.#keys.terms, { timeoutMs }),
      etcd.get(this.#keys.handover, { timeoutMs }),
      loadTicketKey(etcd, this.#o.cluster, { timeoutMs }),
      etcd.get(`${this.#o.cluster}/horizon`, { timeoutMs }),
    ]);
    const loadMs = scheduler.monotonicMs() - startMs;
    if (this.#o.term() !== term) return null;
    const read = parseTerms(terms.kv?.value);
    const result = await etcd.txn(
      [{ key: this.#keys.leader, target: "create", revision: term }],
      [{ type: "put", key: this.#keys.terms, value: formatTerms(takeoverTerms(term, read)) }],
      [{ type: "get", key: this.#keys.leader }],
      { timeoutMs },
    );
    if (this.#o.term() !== term) return null;
    if (!result.succeeded) {
      this.#o.onDeposed(result.gets[0]);
      return null;
    }
    // A retried takeover whose first write landed reads its own term: it knows less of the
    // term before, so it takes only the served term's claims.
    const prior = read.served < term ? read : { served: read.before, closed: true, before: 0 };
    const previous = parseHorizonLease(horizon.kv?.value);
    const horizonUntilMs = previous !== null && previous.term < term && previous.leaseMs > 0
      ? electedAtMs + previous.leaseMs - marginMs
      : 0;
    this.#tickets = new Tickets(key, this.#o.cluster);
    key.fill(0);
    this.records.begin(term, loaded);
    this.takeoverStats.loadSecondsSum += loadMs / 1000;
    this.takeoverStats.loadCount++;
    if (loaded.invalid.length > 0) {
      logger.warn("ownership records that are not valid were read; their locks stay reserved", {
        term,
        keys: loaded.invalid.slice(0, 10).join(","),
        count: loaded.invalid.length,
      });
    }
    // A horizon of a term after the last one that wrote `terms` comes from a leader that wrote no
    // records either: every lock it granted is unknown here.
    const recordless = previous !== null && previous.term > read.served && read.served < term;
    return {
      term,
      terms: prior,
      loaded,
      handover: parseHandover(handover.kv?.value),
      horizonUntilMs,
      holdAllUntilMs: recordless ? horizonUntilMs : 0,
      loadMs,
    };
  }

  /**
   * The term serves from now: the locks of H are reserved until the window ends (the grace
   * from now, or the last term's horizon, whichever is later).
   */
  serve(takeover: Takeover): void {
    const nowMs = this.#o.scheduler.monotonicMs();
    // The first term of a cluster takes no tickets: its window lasts only the horizon (if any).
    const graceMs = takeover.terms.served === 0 ? 0 : this.#o.graceMs;
    const endsAtMs = Math.max(nowMs + graceMs, takeover.horizonUntilMs);
    const window = new ReclaimWindow({
      term: takeover.term,
      terms: takeover.terms,
      loaded: takeover.loaded,
      endsAtMs,
      handover: takeover.handover,
    });
    this.#window = window;
    this.#servingAtMs = nowMs;
    this.#horizonUntilMs = takeover.horizonUntilMs;
    const delays = delaysRunning(takeover.loaded, this.#o.scheduler);
    const reserved = this.#o.service()?.reserveForReclaims(window.held, endsAtMs, delays) ?? 0;
    logger.info("reclaim window open", {
      term: takeover.term,
      reserved_locks: reserved,
      window_ms: Math.round(endsAtMs - nowMs),
      records_load_ms: Math.round(takeover.loadMs),
      handover_sessions: window.awaitedCount,
    });
    this.#windowTimer = this.#o.scheduler.setTimer(() => {
      this.#windowTimer = null;
      this.#endWindow(takeover.term, "time");
    }, endsAtMs - nowMs);
    if (window.handoverDone) this.#endWindow(takeover.term, "handover");
  }

  /**
   * Extra horizon this term must publish while its window is open and locks of the last term
   * are still reserved for reclaims (ms; 0 otherwise).
   */
  inheritedHorizonMs(marginMs: number): number {
    const window = this.#window;
    if (window === null || window.closed || this.reservedLocks() === 0) return 0;
    return Math.max(0, Math.ceil(window.endsAtMs - this.#o.scheduler.monotonicMs() + marginMs));
  }

  #endWindow(term: number, why: "time" | "handover"): void {
    const window = this.#window;
    if (window === null || window.term !== term || window.closed || this.#o.term() !== term) {
      return;
    }
    const nowMs = this.#o.scheduler.monotonicMs();
    if (why === "handover" && nowMs < this.#horizonUntilMs) {
      // Promises of the last term may still run: the window ends with them, not before.
      this.#windowTimer?.cancel();
      this.#windowTimer = this.#o.scheduler.setTimer(() => {
        this.#windowTimer = null;
        this.#endWindow(term, "time");
      }, this.#horizonUntilMs - nowMs);
      return;
    }
    window.close();
    this.#windowTimer?.cancel();
    this.#windowTimer = null;
    this.takeoverStats.windowSecondsSum += (nowMs - this.#servingAtMs) / 1000;
    this.takeoverStats.windowCount++;
    logger.info("reclaim window closed", {
      term,
      why,
      window_ms: Math.round(nowMs - this.#servingAtMs),
    });
    this.#o.service()?.endReservations([...window.held]);
    this.#writeClosed(term, window);
  }

  /** A write of the window's end is in flight: the node publishes no horizon meanwhile. */
  get closing(): boolean {
    return this.#closing;
  }

  /**
   * `terms.closed = true` (best effort: the records' terms keep reclaims safe without it), and
   * the horizon back to this term's own: the last term's promises have run out, so the next
   * leader need not wait for them. Retried until it lands or the term ends.
   */
  #writeClosed(term: number, window: ReclaimWindow): void {
    const retry = () => {
      if (this.#o.term() !== term) return;
      this.#closeTimer = this.#o.scheduler.setTimer(() => {
        this.#closeTimer = null;
        if (this.#o.term() === term) this.#writeClosed(term, window);
      }, CLUSTER_RETRY_MS);
    };
    const horizonMs = this.#o.ownHorizonMs === undefined ? 0 : this.#o.ownHorizonMs();
    if (horizonMs === null) {
      retry();
      return;
    }
    const value = formatTerms({ served: term, closed: true, before: window.terms.served });
    const horizon = JSON.stringify({ term, lease_ms: horizonMs });
    this.#closing = true;
    this.#o.etcd.txn(
      [{ key: this.#keys.leader, target: "create", revision: term }],
      [
        { type: "put", key: this.#keys.terms, value },
        { type: "put", key: `${this.#o.cluster}/horizon`, value: horizon },
      ],
      [],
      { timeoutMs: this.#o.ttlMs / 2 },
    ).then(
      () => {
        this.#closing = false;
        this.#o.onClosed?.();
      },
      () => {
        this.#closing = false;
        this.#o.onClosed?.();
        retry();
      },
    );
  }

  // ---- OwnershipGate ---------------------------------------------------------------------

  reclaimWindowLeftMs(prevTerm: number): number {
    const window = this.#window;
    if (window === null || window.term !== this.#o.term()) return 0;
    return window.leftMs(prevTerm, this.#o.scheduler.monotonicMs());
  }

  reclaimCheck(claim: ReclaimClaim): ClusterVoidReason | null {
    const window = this.#window;
    if (window === null || window.term !== this.#o.term()) return "window";
    return window.check(claim, this.#o.scheduler.monotonicMs());
  }

  beforeDeliver(name: string, restored: boolean): Promise<void> | null {
    if (!restored) this.#window?.granted(name);
    return this.records.beforeDeliver(name, restored);
  }

  ended(
    name: string,
    token: number,
    graceful: boolean,
    slot: number,
    shared: boolean,
    delayedUntilMs: number,
  ): void {
    this.#window?.ended(name, token, slot, shared);
    const { scheduler } = this.#o;
    // Wall-clock for the next leader (another process: its monotonic clock means nothing here).
    const delayUntilWallMs = delayedUntilMs === 0
      ? 0
      : Math.ceil(scheduler.wallMs() + delayedUntilMs - scheduler.monotonicMs());
    const floor = this.#readerFloor(name, token, graceful, shared);
    const noFloor = floor === null && (graceful || shared);
    this.records.ended(name, floor ?? token, noFloor, slot, delayUntilWallMs);
  }

  /**
   * W2 for readers, who share slot 0: a floor at a reader's token would void every older reader
   * still holding the lock at the next leader. So a reader that ended badly while an older one
   * still holds raises the floor only below the oldest holder now, and its own token waits until
   * no older reader holds (before any writer's ACQUIRED: a writer is granted only then, and its
   * grant waits for the commit, W1). Until then it could come back beside them as a reader at a
   * next leader: harmless, no writer was granted meanwhile. Returns the floor to raise to now,
   * or null when this end is handled as any other.
   */
  #readerFloor(name: string, token: number, graceful: boolean, shared: boolean): number | null {
    const deferred = this.#deferredFloors.get(name);
    if (deferred === undefined && (!shared || graceful)) return null;
    let oldest = Infinity;
    for (const owner of this.#o.locks()?.holdersOf(name) ?? []) {
      oldest = Math.min(oldest, owner.token);
    }
    let floor = graceful ? 0 : token;
    let waiting = deferred ?? 0;
    if (shared && !graceful && oldest < token) {
      waiting = Math.max(waiting, token);
      floor = oldest - 1;
    }
    if (waiting !== 0 && oldest > waiting) {
      floor = Math.max(floor, waiting);
      waiting = 0;
    }
    if (waiting === 0) this.#deferredFloors.delete(name);
    else this.#deferredFloors.set(name, waiting);
    // 0: nothing to raise (a graceful end, or a reader's whose floor waits: null, as graceful).
    return floor === 0 ? null : floor;
  }

  idle(name: string): void {
    this.records.idle(name);
  }

  busy(name: string): void {
    this.records.busy(name);
  }

  reclaimsDone(prevTerm: number, prevSessionId: number): void {
    const window = this.#window;
    if (window !== null && window.resumed(prevTerm, prevSessionId)) {
      this.#endWindow(window.term, "handover");
    }
  }

  // ---- planned hand-over and the end of a term -------------------------------------------

  /**
   * Before a planned hand-over (grants stopped): pending records committed, idle ones deleted,
   * and `handover` = the sessions with claims written under the term's guard, within
   * `timeoutMs`. Failing is harmless: the next leader's window then runs its full length.
   */
  async prepareHandover(term: number, sessions: readonly number[], timeoutMs: number) {
    const { etcd, scheduler } = this.#o;
    let timer: Timer | null = null;
    const timeout = new Promise<void>((resolve) => {
      timer = scheduler.setTimer(resolve, timeoutMs);
    });
    try {
      await Promise.race([
        (async () => {
          await this.records.flushForHandover();
          await etcd.txn(
            [{ key: this.#keys.leader, target: "create", revision: term }],
            [{ type: "put", key: this.#keys.handover, value: formatHandover({ term, sessions }) }],
            [],
            { timeoutMs },
          );
        })(),
        timeout,
      ]);
    } catch (error) {
      logger.warn("hand-over list not written; the next leader waits its whole window", {
        error: String(error),
      });
    } finally {
      (timer as Timer | null)?.cancel();
    }
  }

  /** The term ended (stepped down, deposed, handed over): no more writes, the window is gone. */
  end(): void {
    this.records.end();
    this.#deferredFloors.clear();
    this.#window = null;
    this.#horizonUntilMs = 0;
    this.#windowTimer?.cancel();
    this.#windowTimer = null;
    this.#closeTimer?.cancel();
    this.#closeTimer = null;
    this.#closing = false;
  }
}

/**
 * The lock-delays the last term started that still run, as monotonic ends on this node (the
 * records keep their ends in wall-clock ms: nodes' clocks are assumed close, as for the audit
 * log's timestamps).
 */
function delaysRunning(loaded: LoadedRecords, scheduler: Scheduler): Map<string, number> {
  const delays = new Map<string, number>();
  const wallMs = scheduler.wallMs();
  const monoMs = scheduler.monotonicMs();
  for (const [name, record] of loaded.records) {
    const untilWallMs = record.delayUntilWallMs ?? 0;
    if (untilWallMs > wallMs) delays.set(name, monoMs + untilWallMs - wallMs);
  }
  return delays;
}

/** The `<cluster>/horizon` value (written by cluster_node.ts), or null. */
function parseHorizonLease(text: string | undefined): { term: number; leaseMs: number } | null {
  if (text === undefined) return null;
  try {
    const value = JSON.parse(text);
    if (Number.isSafeInteger(value.term) && Number.isSafeInteger(value.lease_ms)) {
      return { term: value.term, leaseMs: value.lease_ms };
    }
  } catch {
    // not ours
  }
  return null;
}
