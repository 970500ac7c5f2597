import {
  CLAIMS_MAX_DEFAULT,
  CLAIMS_PER_SESSION_MAX_DEFAULT,
  DEADLINES_PER_TICK_MAX,
  IO_TIMEOUT_MS_DEFAULT,
  LEASE_MS_DEFAULT,
  LEASE_MS_MAX_DEFAULT,
  LEASE_MS_MIN,
  SESSIONS_MAX_DEFAULT,
  WAITERS_PER_LOCK_MAX_DEFAULT,
} from "../limits.ts";
import { DeadlineHeap, type DeadlineNode } from "./deadline_heap.ts";
import { lockNameProblem } from "./lock_name.ts";
import type { TokenSource } from "./tokens.ts";
import {
  type CloseCause,
  END_REASON_OF_CLOSE,
  type EndReason,
  type EngineEvent,
  type EngineStats,
  type GrantBlock,
  type HolderView,
  type Instant,
  type LockView,
  type Peer,
  type Rejection,
  type WaitEndCause,
  type WaiterView,
} from "./types.ts";

/**
 * The lock engine: owners, FIFO queues, leases, fencing tokens and session
 * deadlines. It does no I/O and reads no clock: every operation that depends
 * on time takes the caller's one reading of it (an {@link Instant}). Every
 * operation returns the events it caused, in order; the service carries them
 * out (audit records, frames, connection closes).
 *
 * Claim states and their only transitions:
 *   queued → owned     (head of the queue when the owner leaves, or a free lock)
 *   queued → gone      (wait timeout, cancel, session closed, kicked)
 *   owned  → gone      (release, lease expiry, session closed, force-release)
 */
export interface EngineOptions {
  tokens: TokenSource;
  ioTimeoutMs?: number;
  leaseDefaultMs?: number;
  leaseMaxMs?: number;
  sessionsMax?: number;
  claimsPerSessionMax?: number;
  waitersPerLockMax?: number;
  /** Claims (owned or queued) stored at once, server-wide. */
  claimsMax?: number;
}

type ClaimState = "queued" | "owned" | "gone";

interface Session extends DeadlineNode {
  readonly kind: "io";
  readonly peer: Peer;
  readonly claims: Map<string, Claim>;
  lastSeenMs: number;
  open: boolean;
}

interface Claim {
  readonly session: Session;
  readonly lock: LockState;
  readonly requestId: number;
  readonly leaseMs: number;
  state: ClaimState;
  // queue links (while queued)
  prev: Claim | null;
  next: Claim | null;
  queuedAtMs: number;
  queuedAtWallMs: number;
  // ownership (while owned)
  token: number;
  sinceMs: number;
  sinceWallMs: number;
  leaseExpiresAtMs: number;
  readonly leaseNode: ClaimDeadline;
  readonly waitNode: ClaimDeadline;
}

interface ClaimDeadline extends DeadlineNode {
  readonly kind: "lease" | "wait";
  readonly claim: Claim;
}

type Deadline = Session | ClaimDeadline;

interface LockState {
  readonly name: string;
  owner: Claim | null;
  head: Claim | null;
  tail: Claim | null;
  queueLength: number;
}

/**
 * The engine as readers see it (admin API, metrics, tests): nothing here changes state.
 * Every change goes through the LockService.
 */
export type LockEngineView = Pick<
  LockEngine,
  | "listLocks"
  | "getLock"
  | "holderOf"
  | "queueLengthOf"
  | "oldestQueuedAtMs"
  | "findWaiter"
  | "lockCount"
  | "pageLocks"
  | "viewVersion"
  | "sessionIds"
  | "ownedLeaseMaxMs"
  | "lastToken"
  | "stats"
  | "grantBlock"
  | "isBlocked"
  | "blockDetail"
  | "nextDeadlineMs"
  | "assertInvariants"
  | "ioTimeoutMs"
  | "leaseDefaultMs"
  | "leaseMaxMs"
>;

export class LockEngine {
  readonly #tokens: TokenSource;
  readonly ioTimeoutMs: number;
  readonly leaseDefaultMs: number;
  readonly leaseMaxMs: number;
  readonly #sessionsMax: number;
  readonly #claimsPerSessionMax: number;
  readonly #waitersPerLockMax: number;
  readonly #claimsMax: number;

  readonly #locks = new Map<string, LockState>();
  readonly #sessions = new Map<number, Session>();
  readonly #sessionsByAddr = new Map<string, Session>();
  readonly #deadlines = new DeadlineHeap<Deadline>();
  /** Locks with waiters but no owner (grants blocked, see GrantBlock). */
  readonly #ownerless = new Set<LockState>();
  /** Why grants are blocked; none while empty. */
  readonly #blocks = new Set<GrantBlock>();
  /** The last token-store error while `token_store_unavailable` holds. */
  #tokenFailure = "";
  #nextSessionId = 1;
  /** Grows whenever an owner or a queue changes (see viewVersion). */
  #viewVersion = 0;

  readonly stats: EngineStats = {
    sessionsOpen: 0,
    locksHeld: 0,
    waiters: 0,
    acquiresTotal: 0,
    handoffsTotal: 0,
    heartbeatsTotal: 0,
    releasesTotal: { graceful: 0, expired: 0, io_timeout: 0, force: 0, failover: 0 },
    waitSecondsSum: 0,
    waitSecondsCount: 0,
    holdSecondsSum: 0,
    holdSecondsCount: 0,
  };

  constructor(options: EngineOptions) {
    this.#tokens = options.tokens;
    this.ioTimeoutMs = options.ioTimeoutMs ?? IO_TIMEOUT_MS_DEFAULT;
    this.leaseMaxMs = options.leaseMaxMs ?? LEASE_MS_MAX_DEFAULT;
    this.leaseDefaultMs = Math.min(options.leaseDefaultMs ?? LEASE_MS_DEFAULT, this.leaseMaxMs);
    this.#sessionsMax = options.sessionsMax ?? SESSIONS_MAX_DEFAULT;
    this.#claimsPerSessionMax = options.claimsPerSessionMax ?? CLAIMS_PER_SESSION_MAX_DEFAULT;
    this.#waitersPerLockMax = options.waitersPerLockMax ?? WAITERS_PER_LOCK_MAX_DEFAULT;
    this.#claimsMax = options.claimsMax ?? CLAIMS_MAX_DEFAULT;
  }

  // ---- sessions -----------------------------------------------------------

  /** Registers a session; null when the session limit is reached. */
  openSession(now: Instant, identity: string, remoteAddr: string, clientName = ""): Peer | null {
    if (this.#sessions.size >= this.#sessionsMax) return null;
    const peer: Peer = { sessionId: this.#nextSessionId++, identity, remoteAddr, clientName };
    const session: Session = {
      kind: "io",
      peer,
      claims: new Map(),
      lastSeenMs: now.monoMs,
      open: true,
      atMs: 0,
      heapIndex: -1,
    };
    this.#sessions.set(peer.sessionId, session);
    this.#sessionsByAddr.set(remoteAddr, session);
    this.#deadlines.update(session, session.lastSeenMs + this.ioTimeoutMs);
    this.stats.sessionsOpen++;
    return peer;
  }

  /** Records that a session sent something; its I/O deadline moves (lazily, see tick). */
  touch(nowMs: number, sessionId: number): void {
    const session = this.#sessions.get(sessionId);
    if (session) session.lastSeenMs = nowMs;
  }

  /** Ends a session at the adapter's request: its ownerships end and its waits leave their queues. */
  closeSession(now: Instant, sessionId: number, cause: CloseCause): EngineEvent[] {
    const events: EngineEvent[] = [];
    const session = this.#sessions.get(sessionId);
    if (session) this.#closeSession(now, session, cause, "", events);
    return events;
  }

  // ---- requests -----------------------------------------------------------

  /**
   * ACQUIRE: grant at once when free, else queue (or fail at once when
   * `waitMs` is 0). `leaseMs` 0 means the default; `waitMs` null means forever.
   */
  acquire(
    now: Instant,
    sessionId: number,
    requestId: number,
    name: string,
    leaseMs: number,
    waitMs: number | null,
  ): EngineEvent[] {
    const events: EngineEvent[] = [];
    const session = this.#requireSession(sessionId);
    const problem = lockNameProblem(name);
    if (problem !== null) {
      return this.#reject(session, requestId, name, { reason: "invalid_argument", problem });
    }
    const existing = session.claims.get(name);
    if (existing !== undefined) {
      return this.#reject(session, requestId, name, {
        reason: "duplicate_claim",
        owned: existing.state === "owned",
      });
    }
    const block = this.grantBlock;
    if (block !== null) {
      return this.#reject(session, requestId, name, {
        reason: "grants_blocked",
        block,
        detail: this.blockDetail(block),
      });
    }
    if (session.claims.size >= this.#claimsPerSessionMax) {
      return this.#reject(session, requestId, name, {
        reason: "limit_exceeded",
        limit: "claims_per_session",
        max: this.#claimsPerSessionMax,
      });
    }
    let lock = this.#locks.get(name);
    const free = lock === undefined || (lock.owner === null && lock.queueLength === 0);
    if (!free && waitMs === 0) {
      events.push({
        type: "wait_ended",
        peer: session.peer,
        requestId,
        releaseRequestId: 0,
        name,
        cause: "timeout",
        waitedMs: 0,
      });
      return events;
    }
    if (!free && lock!.queueLength >= this.#waitersPerLockMax) {
      return this.#reject(session, requestId, name, {
        reason: "limit_exceeded",
        limit: "waiters_per_lock",
        max: this.#waitersPerLockMax,
      });
    }
    // Checked last, where a claim would be stored (a try-lock of a held lock stores none).
    // Every stored claim is an owner or a waiter: memory stays within the documented budget.
    if (this.stats.locksHeld + this.stats.waiters >= this.#claimsMax) {
      return this.#reject(session, requestId, name, {
        reason: "limit_exceeded",
        limit: "claims",
        max: this.#claimsMax,
      });
    }
    if (lock === undefined) {
      lock = { name, owner: null, head: null, tail: null, queueLength: 0 };
      this.#locks.set(name, lock);
    }
    const claim = this.#newClaim(session, lock, requestId, this.#clampLease(leaseMs), now);
    session.claims.set(name, claim);
    this.#enqueue(claim);
    if (free) {
      this.#grantHead(now, lock, events, false);
      if (claim.state === "queued") {
        // The token reservation failed (grants are blocked now): leave nothing behind.
        this.#leaveQueue(claim);
        claim.state = "gone";
        session.claims.delete(name);
        this.#dropIfIdle(lock);
        return this.#reject(session, requestId, name, {
          reason: "grants_blocked",
          block: "token_store_unavailable",
          detail: this.blockDetail("token_store_unavailable"),
        });
      }
      return events;
    }
    if (waitMs !== null) {
      this.#deadlines.update(claim.waitNode, now.monoMs + waitMs);
    }
    events.push({
      type: "queued",
      peer: session.peer,
      requestId,
      name,
      position: lock.queueLength,
    });
    return events;
  }

  /** RELEASE: ends an ownership with its token, or cancels a queued claim (token 0). */
  release(
    now: Instant,
    sessionId: number,
    requestId: number,
    name: string,
    token: number,
  ): EngineEvent[] {
    const events: EngineEvent[] = [];
    const session = this.#requireSession(sessionId);
    const claim = session.claims.get(name);
    if (claim !== undefined && claim.state === "owned" && claim.token === token) {
      this.#endOwnership(now, claim, "graceful", requestId, events);
      return events;
    }
    if (claim !== undefined && claim.state === "queued" && token === 0) {
      this.#endWait(now, claim, "cancelled", requestId, events);
      return events;
    }
    return this.#reject(session, requestId, name, {
      reason: "not_owner",
      claim: claim === undefined ? "none" : claim.state === "queued" ? "queued" : "owned",
      token,
    });
  }

  /** HEARTBEAT: renews every ownership of the session; returns how many. */
  heartbeat(nowMs: number, sessionId: number): number {
    const session = this.#requireSession(sessionId);
    session.lastSeenMs = nowMs;
    let renewed = 0;
    for (const claim of session.claims.values()) {
      if (claim.state !== "owned") continue;
      // The heap node is re-keyed lazily when it comes due (see tick).
      claim.leaseExpiresAtMs = nowMs + claim.leaseMs;
      renewed++;
    }
    this.stats.heartbeatsTotal++;
    return renewed;
  }

  // ---- operator actions ---------------------------------------------------

  /**
   * Force-release: the owner's session is closed (ERROR 0x02 first), all its
   * ownerships end with reason force, and the head waiter is granted at once.
   */
  forceRelease(
    now: Instant,
    name: string,
  ): { status: "ok" | "not_found" | "no_owner"; events: EngineEvent[] } {
    const events: EngineEvent[] = [];
    const lock = this.#locks.get(name);
    if (lock === undefined) return { status: "not_found", events };
    if (lock.owner === null) return { status: "no_owner", events };
    this.#closeSession(now, lock.owner.session, "admin", name, events);
    return { status: "ok", events };
  }

  /** Removes the waiter with exactly this remote address; its session is closed like a force-release. */
  kickWaiter(
    now: Instant,
    name: string,
    remoteAddr: string,
  ): { status: "ok" | "not_found"; events: EngineEvent[] } {
    const events: EngineEvent[] = [];
    const lock = this.#locks.get(name);
    const claim = this.#sessionsByAddr.get(remoteAddr)?.claims.get(name);
    if (lock === undefined || claim === undefined || claim.state !== "queued") {
      return { status: "not_found", events };
    }
    this.#endWait(now, claim, "kicked", 0, events);
    this.#closeSession(now, claim.session, "admin", name, events);
    return { status: "ok", events };
  }

  // ---- grant blocks ---------------------------------------------------------

  /**
   * Blocks grants for a reason the shell sees (the audit log failed, shutdown began):
   * ACQUIRE is refused with it and hand-offs wait until every block is lifted.
   */
  blockGrants(block: "audit_unavailable" | "shutting_down" | "not_leader"): void {
    this.#blocks.add(block);
  }

  /** Lifts a block; when none is left, every queue left without an owner is granted. */
  unblockGrants(
    now: Instant,
    block: "audit_unavailable" | "shutting_down" | "not_leader",
  ): EngineEvent[] {
    const events: EngineEvent[] = [];
    this.#blocks.delete(block);
    if (this.#blocks.size === 0) this.#grantOwnerless(now, events);
    return events;
  }

  /**
   * Tries the token store again after a failed reservation (the shell calls it with
   * back-off). On success the block is lifted and waiting queues are granted.
   */
  retryTokenStore(now: Instant): EngineEvent[] {
    const events: EngineEvent[] = [];
    if (!this.#blocks.has("token_store_unavailable")) return events;
    try {
      this.#tokens.prepare();
    } catch (error) {
      this.#tokenFailure = errorText(error);
      return events;
    }
    this.#blocks.delete("token_store_unavailable");
    this.#tokenFailure = "";
    if (this.#blocks.size === 0) this.#grantOwnerless(now, events);
    return events;
  }

  /** The block that refuses ACQUIRE now (the most fundamental first), or null when granting. */
  get grantBlock(): GrantBlock | null {
    if (this.#blocks.size === 0) return null;
    for (const block of GRANT_BLOCK_ORDER) if (this.#blocks.has(block)) return block;
    return null;
  }

  /** Whether `block` holds now (several can at once). */
  isBlocked(block: GrantBlock): boolean {
    return this.#blocks.has(block);
  }

  // ---- time ---------------------------------------------------------------

  /** The earliest pending deadline (monotonic ms), or undefined. The adapter arms one timer for it. */
  nextDeadlineMs(): number | undefined {
    return this.#deadlines.peek()?.atMs;
  }

  /** Handles every deadline due at `now`: lease expiries, wait timeouts, I/O timeouts. */
  tick(now: Instant): EngineEvent[] {
    const events: EngineEvent[] = [];
    const nowMs = now.monoMs;
    for (let handled = 0; handled < DEADLINES_PER_TICK_MAX; handled++) {
      const node = this.#deadlines.peek();
      if (node === undefined || node.atMs > nowMs) break;
      if (node.kind === "io") {
        const dueMs = node.lastSeenMs + this.ioTimeoutMs;
        if (dueMs > nowMs) this.#deadlines.update(node, dueMs);
        else this.#closeSession(now, node, "io_timeout", "", events);
      } else if (node.kind === "lease") {
        const claim = node.claim;
        if (claim.leaseExpiresAtMs > nowMs) this.#deadlines.update(node, claim.leaseExpiresAtMs);
        else this.#endOwnership(now, claim, "expired", 0, events);
      } else {
        this.#endWait(now, node.claim, "timeout", 0, events);
      }
    }
    return events;
  }

  // ---- introspection ------------------------------------------------------

  /** Locks with an owner or waiters, sorted by name, optionally filtered. */
  listLocks(
    filter?: { prefix?: string; matches?: (name: string) => boolean },
    waitersMax = Infinity,
  ): LockView[] {
    const prefix = filter?.prefix ?? "";
    const names: string[] = [];
    for (const name of this.#locks.keys()) {
      if (prefix !== "" && !name.startsWith(prefix)) continue;
      if (filter?.matches && !filter.matches(name)) continue;
      names.push(name);
    }
    names.sort(compareNames);
    return names.map((name) => this.#view(this.#locks.get(name)!, waitersMax));
  }

  /** One lock with its full queue, or undefined when idle or unknown. */
  getLock(name: string, waitersMax = Infinity): LockView | undefined {
    const lock = this.#locks.get(name);
    return lock === undefined ? undefined : this.#view(lock, waitersMax);
  }

  /**
   * The owner of a lock in O(1): a HolderView, null for a queue without an owner,
   * undefined when the lock is idle or unknown.
   */
  holderOf(name: string): HolderView | null | undefined {
    const lock = this.#locks.get(name);
    if (lock === undefined) return undefined;
    return lock.owner === null ? null : holderView(lock.owner);
  }

  /** How many claims wait for a lock (0 when idle or unknown). */
  queueLengthOf(name: string): number {
    return this.#locks.get(name)?.queueLength ?? 0;
  }

  /**
   * When the longest-waiting current waiter was queued (monotonic ms), or null when nobody
   * waits. A queue's head is its oldest claim, so this is one pass over the stored locks, and
   * none while nobody waits (the console's history asks once a second).
   */
  oldestQueuedAtMs(): number | null {
    if (this.stats.waiters === 0) return null;
    let oldestMs = Infinity;
    for (const lock of this.#locks.values()) {
      const head = lock.head;
      if (head !== null && head.queuedAtMs < oldestMs) oldestMs = head.queuedAtMs;
    }
    return oldestMs === Infinity ? null : oldestMs;
  }

  /** The waiter with exactly this remote address in a lock's queue, in O(1). */
  findWaiter(name: string, remoteAddr: string): WaiterView | undefined {
    const claim = this.#sessionsByAddr.get(remoteAddr)?.claims.get(name);
    return claim !== undefined && claim.state === "queued" ? waiterView(claim) : undefined;
  }

  /**
   * One page of the locks `listLocks` would list, ordered by `sort` (ties by name, ascending),
   * and how many match in all. Only the page's views are built, so a page of 50 out of 20,000
   * locks costs one pass, one sort and 50 views.
   */
  pageLocks(query: LockPageQuery): { total: number; locks: LockView[] } {
    const prefix = query.prefix ?? "";
    const selected: LockState[] = [];
    for (const lock of this.#locks.values()) {
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
    return { total: selected.length, locks: page.map((lock) => this.#view(lock, waitersMax)) };
  }

  /**
   * A number that grows whenever a lock gets or loses an owner or a waiter: readers that show
   * locks (the console's event stream) compare it to tell whether anything changed.
   */
  get viewVersion(): number {
    return this.#viewVersion;
  }

  /** How many locks have an owner or waiters (idle locks are not stored). */
  get lockCount(): number {
    return this.#locks.size;
  }

  /** Peers of all open sessions (for shutdown). */
  sessionIds(): number[] {
    return [...this.#sessions.keys()];
  }

  /**
   * The longest lease among the locks a session owns (0 when it owns none): how far a
   * HEARTBEAT_ACK to it promises ownership (cluster mode checks it against the leader's lease).
   */
  ownedLeaseMaxMs(sessionId: number): number {
    let longest = 0;
    for (const claim of this.#sessions.get(sessionId)?.claims.values() ?? []) {
      if (claim.state === "owned" && claim.leaseMs > longest) longest = claim.leaseMs;
    }
    return longest;
  }

  /** The largest token issued so far. */
  get lastToken(): number {
    return this.#tokens.lastIssued;
  }

  /**
   * Checks the engine's invariants; throws on a breach. Tests call it after
   * every step; it is O(state) so production code does not.
   */
  assertInvariants(): void {
    let held = 0;
    let waiting = 0;
    for (const [name, lock] of this.#locks) {
      assert(lock.name === name, "lock stored under its own name");
      assert(lock.owner !== null || lock.queueLength > 0, `idle lock "${name}" is stored`);
      if (lock.owner !== null) {
        held++;
        assert(lock.owner.state === "owned", "owner claim is owned");
        assert(lock.owner.session.claims.get(name) === lock.owner, "owner claim is in its session");
      }
      let count = 0;
      let previous: Claim | null = null;
      for (let claim = lock.head; claim !== null; claim = claim.next) {
        assert(claim.state === "queued", "queued claim is queued");
        assert(claim.prev === previous, "queue links are consistent");
        assert(claim.session.claims.get(name) === claim, "waiter is in its session");
        previous = claim;
        count++;
      }
      assert(lock.tail === previous, "queue tail is the last claim");
      assert(count === lock.queueLength, "queue length is exact");
      waiting += count;
    }
    assert(held === this.stats.locksHeld, "locks_held gauge is exact");
    assert(waiting === this.stats.waiters, "waiters gauge is exact");
    assert(this.#sessions.size === this.stats.sessionsOpen, "sessions gauge is exact");
    for (const session of this.#sessions.values()) {
      for (const [name, claim] of session.claims) {
        assert(claim.state !== "gone", "a session keeps no ended claims");
        assert(this.#locks.get(name) === claim.lock, "a claim's lock is stored");
      }
    }
  }

  // ---- internals ----------------------------------------------------------

  #requireSession(sessionId: number): Session {
    const session = this.#sessions.get(sessionId);
    if (session === undefined) throw new Error(`Unknown session ${sessionId}`);
    return session;
  }

  #reject(
    session: Session,
    requestId: number,
    name: string,
    rejection: Rejection,
  ): EngineEvent[] {
    return [{ type: "rejected", peer: session.peer, requestId, name, rejection }];
  }

  /** What is known of a block's cause (the token store's last error), or "". */
  blockDetail(block: GrantBlock): string {
    return block === "token_store_unavailable" ? this.#tokenFailure : "";
  }

  #clampLease(leaseMs: number): number {
    if (leaseMs === 0) return this.leaseDefaultMs;
    return Math.min(this.leaseMaxMs, Math.max(LEASE_MS_MIN, leaseMs));
  }

  #newClaim(
    session: Session,
    lock: LockState,
    requestId: number,
    leaseMs: number,
    now: Instant,
  ): Claim {
    const claim = {
      session,
      lock,
      requestId,
      leaseMs,
      state: "queued" as ClaimState,
      prev: null,
      next: null,
      queuedAtMs: now.monoMs,
      queuedAtWallMs: now.wallMs,
      token: 0,
      sinceMs: 0,
      sinceWallMs: 0,
      leaseExpiresAtMs: 0,
    } as Omit<Claim, "leaseNode" | "waitNode"> as Claim;
    (claim as { leaseNode: ClaimDeadline }).leaseNode = {
      kind: "lease",
      claim,
      atMs: 0,
      heapIndex: -1,
    };
    (claim as { waitNode: ClaimDeadline }).waitNode = {
      kind: "wait",
      claim,
      atMs: 0,
      heapIndex: -1,
    };
    return claim;
  }

  #enqueue(claim: Claim): void {
    const lock = claim.lock;
    claim.prev = lock.tail;
    claim.next = null;
    if (lock.tail === null) lock.head = claim;
    else lock.tail.next = claim;
    lock.tail = claim;
    lock.queueLength++;
    this.stats.waiters++;
    this.#viewVersion++;
  }

  /** Unlinks a queued claim (O(1)); the rest of the queue keeps its order. */
  #leaveQueue(claim: Claim): void {
    const lock = claim.lock;
    if (claim.prev === null) lock.head = claim.next;
    else claim.prev.next = claim.next;
    if (claim.next === null) lock.tail = claim.prev;
    else claim.next.prev = claim.prev;
    claim.prev = null;
    claim.next = null;
    lock.queueLength--;
    this.stats.waiters--;
    this.#viewVersion++;
    this.#deadlines.remove(claim.waitNode);
  }

  /**
   * Grants the head of the queue when the lock has no owner. `handoff` is false only for the
   * grant of a free lock to the claim that just asked for it.
   */
  #grantHead(now: Instant, lock: LockState, events: EngineEvent[], handoff = true): void {
    const claim = lock.head;
    if (lock.owner !== null || claim === null) return;
    if (this.#blocks.size > 0) {
      this.#ownerless.add(lock);
      return;
    }
    let token: number;
    try {
      token = this.#tokens.next();
    } catch (error) {
      // Nothing is granted until the store works again: the shell retries with back-off.
      this.#blocks.add("token_store_unavailable");
      this.#tokenFailure = errorText(error);
      this.#ownerless.add(lock);
      return;
    }
    this.#ownerless.delete(lock);
    this.#leaveQueue(claim);
    claim.state = "owned";
    claim.token = token;
    claim.sinceMs = now.monoMs;
    claim.sinceWallMs = now.wallMs;
    claim.leaseExpiresAtMs = now.monoMs + claim.leaseMs;
    lock.owner = claim;
    this.#deadlines.update(claim.leaseNode, claim.leaseExpiresAtMs);
    const waitedMs = now.monoMs - claim.queuedAtMs;
    this.stats.locksHeld++;
    this.stats.acquiresTotal++;
    if (handoff) this.stats.handoffsTotal++;
    this.stats.waitSecondsSum += waitedMs / 1000;
    this.stats.waitSecondsCount++;
    events.push({
      type: "granted",
      peer: claim.session.peer,
      requestId: claim.requestId,
      name: lock.name,
      token,
      leaseMs: claim.leaseMs,
      waitedMs,
      sinceWallMs: claim.sinceWallMs,
    });
  }

  #grantOwnerless(now: Instant, events: EngineEvent[]): void {
    for (const lock of [...this.#ownerless]) {
      this.#ownerless.delete(lock);
      this.#grantHead(now, lock, events);
    }
  }

  #endOwnership(
    now: Instant,
    claim: Claim,
    reason: EndReason,
    releaseRequestId: number,
    events: EngineEvent[],
  ): void {
    const lock = claim.lock;
    assert(lock.owner === claim && claim.state === "owned", "only the owner's claim ends");
    const heldMs = now.monoMs - claim.sinceMs;
    claim.state = "gone";
    lock.owner = null;
    claim.session.claims.delete(lock.name);
    this.#deadlines.remove(claim.leaseNode);
    this.stats.locksHeld--;
    this.#viewVersion++;
    this.stats.releasesTotal[reason]++;
    this.stats.holdSecondsSum += heldMs / 1000;
    this.stats.holdSecondsCount++;
    events.push({
      type: "ended",
      peer: claim.session.peer,
      acquireRequestId: claim.requestId,
      releaseRequestId,
      name: lock.name,
      token: claim.token,
      reason,
      heldMs,
    });
    this.#grantHead(now, lock, events);
    this.#dropIfIdle(lock);
  }

  #endWait(
    now: Instant,
    claim: Claim,
    cause: WaitEndCause,
    releaseRequestId: number,
    events: EngineEvent[],
  ): void {
    assert(claim.state === "queued", "only a queued claim stops waiting");
    const lock = claim.lock;
    const wasHead = lock.head === claim;
    this.#leaveQueue(claim);
    claim.state = "gone";
    claim.session.claims.delete(lock.name);
    events.push({
      type: "wait_ended",
      peer: claim.session.peer,
      requestId: claim.requestId,
      releaseRequestId,
      name: lock.name,
      cause,
      waitedMs: now.monoMs - claim.queuedAtMs,
    });
    // A head leaving an ownerless queue lets the next one be tried.
    if (wasHead && lock.owner === null) this.#grantHead(now, lock, events);
    if (lock.head === null) this.#ownerless.delete(lock);
    this.#dropIfIdle(lock);
  }

  #closeSession(
    now: Instant,
    session: Session,
    cause: CloseCause,
    name: string,
    events: EngineEvent[],
  ): void {
    if (!session.open) return;
    session.open = false;
    // Waits leave first, so a closing session never receives a grant it cannot use.
    for (const claim of [...session.claims.values()]) {
      if (claim.state === "queued") this.#endWait(now, claim, "session_closed", 0, events);
    }
    const reason = END_REASON_OF_CLOSE[cause];
    for (const claim of [...session.claims.values()]) {
      if (claim.state === "owned") this.#endOwnership(now, claim, reason, 0, events);
    }
    this.#sessions.delete(session.peer.sessionId);
    if (this.#sessionsByAddr.get(session.peer.remoteAddr) === session) {
      this.#sessionsByAddr.delete(session.peer.remoteAddr);
    }
    this.#deadlines.remove(session);
    this.stats.sessionsOpen--;
    events.push({ type: "session_closed", peer: session.peer, cause, name });
  }

  #dropIfIdle(lock: LockState): void {
    if (lock.owner === null && lock.queueLength === 0 && this.#locks.get(lock.name) === lock) {
      this.#locks.delete(lock.name);
      this.#ownerless.delete(lock);
    }
  }

  /** A lock's view with the first `waitersMax` waiters of its queue (a long queue costs that). */
  #view(lock: LockState, waitersMax = Infinity): LockView {
    const waiters: WaiterView[] = [];
    for (let claim = lock.head; claim !== null && waiters.length < waitersMax; claim = claim.next) {
      waiters.push(waiterView(claim));
    }
    return {
      name: lock.name,
      holder: lock.owner === null ? null : holderView(lock.owner),
      waiters,
      queueLength: lock.queueLength,
    };
  }
}

function holderView(owner: Claim): HolderView {
  return {
    identity: owner.session.peer.identity,
    remoteAddr: owner.session.peer.remoteAddr,
    sessionId: owner.session.peer.sessionId,
    clientName: owner.session.peer.clientName,
    sinceWallMs: owner.sinceWallMs,
    sinceMs: owner.sinceMs,
    leaseMs: owner.leaseMs,
    token: owner.token,
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
  };
}

/** Grant blocks in the order ACQUIRE names them: the most fundamental cause first. */
const GRANT_BLOCK_ORDER: readonly GrantBlock[] = [
  "shutting_down",
  "not_leader",
  "audit_unavailable",
  "token_store_unavailable",
];

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

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
 * Numeric sort keys (null: by name). Held for: an earlier start is longer held; a lock without
 * an owner has held for nothing, below every held one.
 */
const SORT_KEYS: Readonly<Record<LockSort, ((lock: LockState) => number) | null>> = {
  name: null,
  held_for: (lock) => lock.owner === null ? -Infinity : -lock.owner.sinceMs,
  waiters: (lock) => lock.queueLength,
};

function compareNames(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function assert(condition: boolean, what: string): asserts condition {
  if (!condition) throw new Error(`lockd invariant broken: ${what}`);
}
