/**
 * The read side of the engine: views of locks, holders and waiters, lists, pages and O(1)
 * lookups, for the admin API, the console, metrics, the service's operator commands and
 * tests. It reads the engine's state (`EngineState`) and changes nothing; every change goes
 * through the LockService.
 *
 * @module
 */

import type { Claim, EngineState, LockState } from "./lock_state.ts";
import type {
  EngineStats,
  GrantBlock,
  HolderView,
  LockView,
  Peer,
  SessionClaimView,
  WaiterView,
} from "./types.ts";

/** What `pageLocks` can sort by. */
export type LockSort = "name" | "held_for" | "waiters";

/** A `pageLocks` query: the `listLocks` filter plus order and window. */
export interface LockPageQuery {
  readonly prefix?: string;
  readonly matches?: (name: string) => boolean;
  readonly sort: LockSort;
  readonly descending: boolean;
  readonly offset: number;
  readonly limit: number;
  /** Waiters in each view, from the head of the queue (all by default). */
  readonly waitersMax?: number;
}

/**
 * The engine's own read-only members, passed through so readers need one object. Declared
 * here rather than picked from `LockEngine`, whose module makes this one: an import back would
 * close a cycle (`tests/tidy_test.ts`); the compiler checks the engine fits it where it passes
 * itself.
 */
interface EngineReadout {
  readonly stats: EngineStats;
  readonly viewVersion: number;
  readonly grantBlock: GrantBlock | null;
  isBlocked(block: GrantBlock): boolean;
  blockDetail(block: GrantBlock): string;
  nextDeadlineMs(): number | undefined;
  assertInvariants(): void;
  readonly lastToken: number;
  readonly orderTerm: number;
  readonly ioTimeoutMs: number;
  readonly leaseDefaultMs: number;
  readonly leaseMaxMs: number;
  readonly valueBytesMax: number;
}

/**
 * The engine as readers see it (admin API, metrics, tests): nothing here changes state.
 * Every change goes through the LockService.
 */
export type LockEngineView = LockQueries;

export class LockQueries {
  readonly #state: EngineState;
  readonly #engine: EngineReadout;

  constructor(state: EngineState, engine: EngineReadout) {
    this.#state = state;
    this.#engine = engine;
  }

  // ---- locks ------------------------------------------------------------------

  /** Stored locks (with an owner or waiters, or held by a lock-delay or reservation), by name. */
  listLocks(
    filter?: { prefix?: string; matches?: (name: string) => boolean },
    waitersMax = Infinity,
  ): LockView[] {
    const prefix = filter?.prefix ?? "";
    const names: string[] = [];
    for (const name of this.#state.locks.keys()) {
      if (prefix !== "" && !name.startsWith(prefix)) continue;
      if (filter?.matches && !filter.matches(name)) continue;
      names.push(name);
    }
    names.sort(compareNames);
    return names.map((name) => lockView(this.#state.locks.get(name)!, waitersMax));
  }

  /** One lock with its owners and queue, or undefined when idle or unknown. */
  getLock(name: string, waitersMax = Infinity): LockView | undefined {
    const lock = this.#state.locks.get(name);
    return lock === undefined ? undefined : lockView(lock, waitersMax);
  }

  /**
   * One page of the locks `listLocks` would list, ordered by `sort` (ties by name, ascending),
   * and how many match in all. Only the page's views are built, so a page of 50 out of 20,000
   * locks costs one pass, one sort and 50 views.
   */
  pageLocks(query: LockPageQuery): { total: number; locks: LockView[] } {
    const prefix = query.prefix ?? "";
    const selected: LockState[] = [];
    for (const lock of this.#state.locks.values()) {
      if (prefix !== "" && !lock.name.startsWith(prefix)) continue;
      if (query.matches && !query.matches(lock.name)) continue;
      selected.push(lock);
    }
    const direction = query.descending ? -1 : 1;
    const key = SORT_KEYS[query.sort];
    selected.sort((a, b) =>
      (key === null ? compareNames(a.name, b.name) : key(a) - key(b)) * direction ||
      compareNames(a.name, b.name)
    );
    const page = selected.slice(query.offset, query.offset + query.limit);
    const waitersMax = query.waitersMax ?? Infinity;
    return { total: selected.length, locks: page.map((lock) => lockView(lock, waitersMax)) };
  }

  /**
   * The oldest owner of a lock (lowest token) in O(1): a HolderView, null for a stored lock
   * without an owner, undefined when the lock is idle or unknown.
   */
  holderOf(name: string): HolderView | null | undefined {
    const lock = this.#state.locks.get(name);
    if (lock === undefined) return undefined;
    return lock.ownersHead === null ? null : holderView(lock.ownersHead);
  }

  /** Every owner of a lock, oldest first (empty when idle, unknown or ownerless). */
  holdersOf(name: string): HolderView[] {
    const holders: HolderView[] = [];
    const lock = this.#state.locks.get(name);
    for (let owner = lock?.ownersHead ?? null; owner !== null; owner = owner.next) {
      holders.push(holderView(owner));
    }
    return holders;
  }

  /** Whether a lock has no owner and no waiter (true when it is not stored), in O(1). */
  isIdle(name: string): boolean {
    const lock = this.#state.locks.get(name);
    return lock === undefined || (lock.ownerCount === 0 && lock.queueLength === 0);
  }

  /** Whether a lock is reserved for reclaims now (cluster mode, after a fail-over). */
  isReserved(name: string): boolean {
    return (this.#state.locks.get(name)?.holds?.reservedUntilMs ?? 0) !== 0;
  }

  /** How many claims wait for a lock (0 when idle or unknown). */
  queueLengthOf(name: string): number {
    return this.#state.locks.get(name)?.queueLength ?? 0;
  }

  /**
   * When the longest-waiting current waiter was queued (monotonic ms), or null when nobody
   * waits. A queue's head is its oldest claim, so this is one pass over the stored locks, and
   * none while nobody waits (the console's history asks once a second).
   */
  oldestQueuedAtMs(): number | null {
    if (this.#engine.stats.waiters === 0) return null;
    let oldestMs = Infinity;
    for (const lock of this.#state.locks.values()) {
      const head = lock.head;
      if (head !== null && head.queuedAtMs < oldestMs) oldestMs = head.queuedAtMs;
    }
    return oldestMs === Infinity ? null : oldestMs;
  }

  /** The waiter with exactly this remote address in a lock's queue, in O(1). */
  findWaiter(name: string, remoteAddr: string): WaiterView | undefined {
    const claim = this.#state.sessionsByAddr.get(remoteAddr)?.claims.get(name);
    return claim !== undefined && claim.state === "queued" ? waiterView(claim) : undefined;
  }

  /** How many locks are stored (with an owner or waiters, or held by a delay or reservation). */
  get lockCount(): number {
    return this.#state.locks.size;
  }

  // ---- sessions ---------------------------------------------------------------

  /** Ids of all open sessions (for shutdown). */
  sessionIds(): number[] {
    return [...this.#state.sessions.keys()];
  }

  /** Who an open session is (undefined: no such session). */
  sessionPeer(sessionId: number): Peer | undefined {
    return this.#state.sessions.get(sessionId)?.peer;
  }

  /**
   * An orphaned session (`SessionLink`): when its last lease ends (monotonic ms). Undefined for
   * a connected session or none.
   */
  orphanLeaseEndMs(sessionId: number): number | undefined {
    const session = this.#state.sessions.get(sessionId);
    if (session?.link !== "orphaned") return undefined;
    let endMs = 0;
    for (const claim of session.claims.values()) endMs = Math.max(endMs, claim.leaseExpiresAtMs);
    return endMs;
  }

  /** How many claims (owned or queued) a session has (0 for no such session). */
  claimCountOf(sessionId: number): number {
    return this.#state.sessions.get(sessionId)?.claims.size ?? 0;
  }

  /** Every claim of a session, in the order it made them (empty for no such session). */
  sessionClaims(sessionId: number): SessionClaimView[] {
    const claims = this.#state.sessions.get(sessionId)?.claims.values() ?? [];
    return [...claims].map(sessionClaimView);
  }

  /** The claim a session has on lock `name`, or undefined; a queued one's position costs O(it). */
  sessionClaim(sessionId: number, name: string): SessionClaimView | undefined {
    const claim = this.#state.sessions.get(sessionId)?.claims.get(name);
    return claim === undefined ? undefined : sessionClaimView(claim);
  }

  /**
   * The longest lease among the locks a session owns (0 when it owns none): how far a
   * HEARTBEAT_ACK to it promises ownership (cluster mode checks it against the leader's lease).
   */
  ownedLeaseMaxMs(sessionId: number): number {
    let longest = 0;
    for (const claim of this.#state.sessions.get(sessionId)?.claims.values() ?? []) {
      if (claim.state === "owned" && claim.leaseMs > longest) longest = claim.leaseMs;
    }
    return longest;
  }

  // ---- the engine's own readings ---------------------------------------------

  get stats(): EngineStats {
    return this.#engine.stats;
  }

  /** See the engine's viewVersion. */
  get viewVersion(): number {
    return this.#engine.viewVersion;
  }

  get grantBlock(): GrantBlock | null {
    return this.#engine.grantBlock;
  }

  isBlocked(block: GrantBlock): boolean {
    return this.#engine.isBlocked(block);
  }

  blockDetail(block: GrantBlock): string {
    return this.#engine.blockDetail(block);
  }

  nextDeadlineMs(): number | undefined {
    return this.#engine.nextDeadlineMs();
  }

  assertInvariants(): void {
    this.#engine.assertInvariants();
  }

  get lastToken(): number {
    return this.#engine.lastToken;
  }

  get orderTerm(): number {
    return this.#engine.orderTerm;
  }

  get ioTimeoutMs(): number {
    return this.#engine.ioTimeoutMs;
  }

  get leaseDefaultMs(): number {
    return this.#engine.leaseDefaultMs;
  }

  get leaseMaxMs(): number {
    return this.#engine.leaseMaxMs;
  }

  get valueBytesMax(): number {
    return this.#engine.valueBytesMax;
  }
}

/** A lock's view with the first `waitersMax` waiters of its queue (a long queue costs that). */
function lockView(lock: LockState, waitersMax: number): LockView {
  const holders: HolderView[] = [];
  for (let owner = lock.ownersHead; owner !== null; owner = owner.next) {
    holders.push(holderView(owner));
  }
  const waiters: WaiterView[] = [];
  for (let claim = lock.head; claim !== null && waiters.length < waitersMax; claim = claim.next) {
    waiters.push(waiterView(claim));
  }
  return {
    name: lock.name,
    kind: lock.kind,
    limit: lock.limit,
    holder: holders.length === 0 ? null : holders[0],
    holders,
    waiters,
    queueLength: lock.queueLength,
    writeGeneration: lock.writeGeneration,
    delayedUntilMs: lock.holds?.delayedUntilMs ?? 0,
    reservedUntilMs: lock.holds?.reservedUntilMs ?? 0,
  };
}

function holderView(owner: Claim): HolderView {
  return {
    identity: owner.session.peer.identity,
    remoteAddr: owner.session.peer.remoteAddr,
    sessionId: owner.session.peer.sessionId,
    clientName: owner.session.peer.clientName,
    connected: owner.session.link === "connected",
    sinceWallMs: owner.sinceWallMs,
    sinceMs: owner.sinceMs,
    leaseMs: owner.leaseMs,
    token: owner.token,
    requestId: owner.requestId,
    mode: owner.mode,
    slot: owner.slot,
    writeGeneration: owner.writeGeneration,
    value: owner.value,
  };
}

function sessionClaimView(claim: Claim): SessionClaimView {
  const owned = claim.state === "owned";
  let position = 0;
  if (!owned) { for (let at: Claim | null = claim; at !== null; at = at.prev) position++; }
  return {
    name: claim.lock.name,
    state: owned ? "owned" : "queued",
    requestId: claim.requestId,
    token: owned ? claim.token : 0,
    leaseMs: claim.leaseMs,
    mode: claim.mode,
    limit: claim.lock.limit,
    slot: owned ? claim.slot : 0,
    writeGeneration: owned ? claim.writeGeneration : 0,
    orderTerm: claim.orderTerm,
    orderSeq: claim.orderSeq,
    position,
  };
}

function waiterView(claim: Claim): WaiterView {
  return {
    identity: claim.session.peer.identity,
    remoteAddr: claim.session.peer.remoteAddr,
    sessionId: claim.session.peer.sessionId,
    clientName: claim.session.peer.clientName,
    queuedAtWallMs: claim.queuedAtWallMs,
    queuedAtMs: claim.queuedAtMs,
    requestId: claim.requestId,
    mode: claim.mode,
    orderTerm: claim.orderTerm,
    orderSeq: claim.orderSeq,
  };
}

/**
 * Numeric sort keys (null: by name). Held for: an earlier start is longer held (the oldest
 * owner's); a lock without an owner has held for nothing, below every held one.
 */
const SORT_KEYS: Readonly<Record<LockSort, ((lock: LockState) => number) | null>> = {
  name: null,
  held_for: (lock) => lock.ownersHead === null ? -Infinity : -lock.ownersHead.sinceMs,
  waiters: (lock) => lock.queueLength,
};

function compareNames(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
