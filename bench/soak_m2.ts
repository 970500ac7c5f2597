/**
 * The milestone-2 part of the cluster chaos soak (`bench/soak_cluster.ts`, issue 20): clients
 * whose locks and queue places must survive a fail-over, the measurements of how fast they are
 * confirmed on the new leader, and the breach checks of milestone 2.
 *
 * - **Riders**: every name `ride/<i>` has `perName` participants (lease 10 s, no wait bound),
 *   each on its own connection (a connection takes part in `claimsPerClient` names): one holds
 *   (2-20 s, so most holders hold across a fault), the others wait; a holder releases and queues
 *   again. So at any time about one holder and `perName - 1` waiters per name. A rider that
 *   loses its lock (any `lost`), or whose fenced write is refused while it holds, is a breach.
 * - **Short holders**: `coldClients` clients acquire random names of `short/<0..coldNames>`
 *   (lease 600 ms, `suspend: true`, wait ≤ 2 s, hold 0-1.5 s): many claims over many names, so
 *   ownership records are written and lingered out all the time; across a fail-over they are
 *   suspended, then resumed or lost (`failover`).
 *
 * Checks (each breach fails the soak):
 * - the clients' own view, per lock: a delivered token not above every earlier delivered token
 *   of its lock; two valid holders at once, where a holding lasts from its grant to its release
 *   or loss (a reclaimed holding is one holding; a suspended one that resumes too; one lost
 *   after a suspension ended when it was suspended, at its local deadline);
 * - in the audit logs: a kept owned reclaim whose lock had no ownership record, or a floor at or
 *   above its token, in etcd at the revision its term began (read back at the end, etcd keeps
 *   its history in the soak); FIFO inversion among reclaimed waiters: two waiters of a name in
 *   the leader's queue right before a fault, the first reclaimed (kept, carrying that very
 *   claim) before the second was granted, and the second granted first;
 *
 * @module
 */

import { type Client, LockdError, type LockLostError } from "../mod.ts";
import { connectWith } from "../src/client/client.ts";
import type { LockHandle } from "../src/client/lock_handle.ts";
import type { EtcdHttpClient } from "../src/cluster/etcd_http.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const now = () => performance.now();

export const RIDER_LEASE_MS = 10_000;
const SHORT_LEASE_MS = 600;
/** An end of a holding this long after another client's grant is a breach (see soak_cluster). */
const OVERLAP_TOLERANCE_MS = 20;

export interface M2Size {
  rideNames: number;
  perName: number;
  claimsPerClient: number;
  coldNames: number;
  coldClients: number;
}

export const M2_SIZES: Record<"ci" | "full", M2Size> = {
  ci: { rideNames: 40, perName: 3, claimsPerClient: 6, coldNames: 300, coldClients: 4 },
  full: { rideNames: 1_000, perName: 3, claimsPerClient: 10, coldNames: 3_000, coldClients: 16 },
};

/** What the M2 population needs from the soak. */
export interface SoakContext {
  breach(what: string): void;
  /** Counts; returns the new count. */
  count(what: string, n?: number): number;
  /** Every node's protocol address. */
  addrs(): string[];
  /** The fenced resource shared with the other clients. */
  write(lock: string, token: number): Promise<boolean>;
  /** The latest fault, for messages. */
  lastFault(): { kind: string; atMs: number } | undefined;
}

/** An audit record as soak_cluster reads it (with the node and its wall time). */
export interface WrittenRecord {
  readonly record: {
    event: string;
    lock: string;
    token: number | null;
    term?: number;
    client_name?: string;
    claim?: string;
    prev_term?: number;
    reason?: string;
  };
  readonly node: string;
  readonly wallMs: number;
  /** Its place in its file (files are read one after the other). */
  readonly index: number;
  readonly file: string;
}

type Kind = "ride" | "short";

interface Holding {
  readonly kind: Kind;
  readonly client: string;
  readonly token: number;
  readonly handle: LockHandle;
  readonly grantAtMs: number;
  /** When the holding ended as the client saw it (released, lost); null while it lasts. */
  endAtMs: number | null;
  /** When it was suspended (its deadline), null while it is not. */
  suspendedAtMs: number | null;
  endReason: string;
}

/** One fault's confirmation figures. */
export interface Confirmation {
  kind: string;
  holders: number;
  confirmed: number;
  /** From the fault to each surviving holder's confirmation on the new leader. */
  p50Ms: number;
  maxMs: number;
  /** Holdings that were live at the fault and lost afterwards. */
  lost: number;
  ridersAtFault: number;
  ridersLost: number;
}

/** A waiter order snapshot of the leader right before a fault. */
interface QueueSnapshot {
  readonly atMs: number;
  readonly faultIndex: number;
  /** By name: client names in queue order (only claims made before the snapshot). */
  readonly queues: Map<string, string[]>;
}

function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

export class M2Population {
  readonly #ctx: SoakContext;
  readonly #size: M2Size;
  readonly #holdings = new Map<string, Holding[]>();
  readonly #maxDelivered = new Map<string, number>();
  readonly #clients: Client[] = [];
  readonly #loops: Promise<void>[] = [];
  /** Pending acquires of ride names: `${client} ${name}` → when acquire() was called. */
  readonly #waitingSince = new Map<string, number>();
  /** Grants of ride names, `${client} ${name}` → grant times (for the queue snapshots). */
  readonly #grantTimes = new Map<string, number[]>();
  readonly snapshots: QueueSnapshot[] = [];
  readonly confirmations: Confirmation[] = [];
  #stopped = false;
  /** When the clients began to close (their claims leave the queues then). */
  #stoppedAtWallMs = Infinity;
  grants = 0;
  ridesKept = 0;

  constructor(ctx: SoakContext, size: M2Size) {
    this.#ctx = ctx;
    this.#size = size;
  }

  get size(): M2Size {
    return this.#size;
  }

  // ---- clients ---------------------------------------------------------------------------

  async #client(name: string): Promise<Client> {
    for (;;) {
      try {
        const client = await connectWith(
          { addrs: this.#ctx.addrs(), clientName: name, connectTimeoutMs: 10_000 },
          {},
        );
        this.#clients.push(client);
        return client;
      } catch {
        if (this.#stopped) throw new Error("stopped");
        await sleep(100);
      }
    }
  }

  /** Starts every client (resolves once they are connected). */
  async start(): Promise<void> {
    const { rideNames, perName, claimsPerClient, coldClients } = this.#size;
    // Claim slots (name, participant), dealt to connections so no connection takes part in a
    // name twice: slot s of participant p goes to connection ⌊(p·names + s) / claimsPerClient⌋.
    const slots: string[][] = [];
    for (let p = 0; p < perName; p++) {
      for (let n = 0; n < rideNames; n++) {
        const c = Math.floor((p * rideNames + n) / claimsPerClient);
        (slots[c] ??= []).push(`ride/${n}`);
      }
    }
    for (const [c, names] of slots.entries()) {
      const id = `m2-ride-${c}`;
      const client = await this.#client(id);
      for (const name of names) this.#loops.push(this.#rideLoop(client, id, name));
      if (c % 20 === 19) await sleep(50);
    }
    for (let c = 0; c < coldClients; c++) {
      const id = `m2-short-${c}`;
      const client = await this.#client(id);
      this.#loops.push(this.#shortLoop(client, id));
    }
    console.error(
      `m2 clients: ${rideNames} ride names × ${perName} (lease 10 s), ${coldClients} short ` +
        `holders over ${this.#size.coldNames} names`,
    );
    await sleep(3_000); // the ride names' first grants
  }

  async stop(): Promise<void> {
    if (!this.#stopped) this.#stoppedAtWallMs = Date.now();
    this.#stopped = true;
    await Promise.all(this.#clients.map((c) => c.close().catch(() => {})));
    await Promise.all(this.#loops);
  }

  async #rideLoop(client: Client, id: string, name: string): Promise<void> {
    const key = `${id} ${name}`;
    await sleep(Math.random() * 2_000);
    while (!this.#stopped) {
      this.#waitingSince.set(key, now());
      let lock: LockHandle;
      try {
        lock = await client.acquire(name, { leaseMs: RIDER_LEASE_MS }) as LockHandle;
      } catch (error) {
        this.#waitingSince.delete(key);
        if (this.#stopped) return;
        const what = error instanceof LockdError ? `ride_${error.codeName}` : "ride_error";
        if (this.#ctx.count(what) <= 3) {
          const fault = this.#ctx.lastFault();
          console.error(
            `${what}: ${id} on ${name}: ${error instanceof Error ? error.message : error}` +
              (fault === undefined
                ? ""
                : ` (${(now() - fault.atMs).toFixed(0)} ms after ${fault.kind})`),
          );
        }
        await sleep(100);
        continue;
      }
      this.#waitingSince.delete(key);
      const times = this.#grantTimes.get(key) ?? [];
      times.push(now());
      this.#grantTimes.set(key, times);
      const holding = this.#grant("ride", name, id, lock);
      if (holding === null) continue;
      if (!await this.#ctx.write(name, lock.token) && !lock.lost.aborted) {
        this.#ctx.breach(`rider ${id}: its write on ${name} (token ${lock.token}) was fenced`);
      }
      const untilMs = now() + 2_000 + Math.random() * 18_000;
      while (!this.#stopped && now() < untilMs && !lock.lost.aborted) await sleep(250);
      if (lock.lost.aborted) continue;
      if (!this.#stopped && !await this.#ctx.write(name, lock.token) && !lock.lost.aborted) {
        this.#ctx.breach(`rider ${id}: its write on ${name} (token ${lock.token}) was fenced`);
      }
      holding.endAtMs ??= now();
      holding.endReason ||= "released";
      await lock.release().catch(() => {});
      this.ridesKept++;
    }
  }

  async #shortLoop(client: Client, id: string): Promise<void> {
    while (!this.#stopped) {
      const name = `short/${Math.floor(Math.random() * this.#size.coldNames)}`;
      let lock: LockHandle;
      try {
        lock = await client.acquire(name, {
          leaseMs: SHORT_LEASE_MS,
          waitMs: 2_000,
          suspend: true,
        }) as LockHandle;
      } catch (error) {
        if (this.#stopped) return;
        this.#ctx.count(error instanceof LockdError ? `short_${error.codeName}` : "short_error");
        if (!(error instanceof LockdError)) await sleep(100);
        continue;
      }
      const holding = this.#grant("short", name, id, lock);
      if (holding === null) continue;
      if (!lock.suspended) await this.#ctx.write(name, lock.token);
      // Up to 2.5 leases: heartbeats keep it, and a fault often finds it held (suspended then).
      await sleep(Math.random() * 1_500);
      // While suspended, wait for it to be confirmed again or lost (bounded by the window).
      for (let i = 0; i < 200 && lock.suspended && !this.#stopped; i++) await sleep(50);
      if (lock.lost.aborted) continue;
      holding.endAtMs ??= now();
      holding.endReason ||= "released";
      await lock.release().catch(() => {});
    }
  }

  /** A delivered grant: checked against the lock's earlier deliveries, then tracked. */
  #grant(kind: Kind, name: string, client: string, lock: LockHandle): Holding | null {
    this.grants++;
    const atMs = now();
    const previousMax = this.#maxDelivered.get(name) ?? 0;
    if (lock.token <= previousMax) {
      this.#ctx.breach(`${name}: token ${lock.token} delivered to ${client} after ${previousMax}`);
    }
    this.#maxDelivered.set(name, Math.max(previousMax, lock.token));
    const holding: Holding = {
      kind,
      client,
      token: lock.token,
      handle: lock,
      grantAtMs: atMs,
      endAtMs: null,
      suspendedAtMs: null,
      endReason: "",
    };
    const list = this.#holdings.get(name) ?? [];
    list.push(holding);
    this.#holdings.set(name, list);
    if (lock.lost.aborted) {
      // Arrived past its local deadline: given back at once, never held.
      holding.endAtMs = atMs;
      holding.endReason = "granted_already_lost";
      this.#ctx.count(`${kind}_granted_already_lost`);
      return null;
    }
    const deadlineOr = (t: number) => Math.min(t, lock.deadlineMs);
    lock.addEventListener("suspend", () => {
      holding.suspendedAtMs = deadlineOr(now());
      this.#ctx.count(`${kind}_suspended`);
    });
    lock.addEventListener("resume", () => {
      holding.suspendedAtMs = null;
      this.#ctx.count(`${kind}_resumed`);
    });
    lock.lost.addEventListener("abort", () => {
      const reason = (lock.lost.reason as LockLostError).reason;
      const t = now();
      // Lost after a suspension: it stopped being valid when it was suspended. Lost at its
      // deadline: then.
      holding.endAtMs ??= holding.suspendedAtMs ??
        (reason === "lease_unconfirmed" ? deadlineOr(t) : t);
      holding.endReason ||= reason;
      this.#ctx.count(`${kind}_lost_${reason}`);
      if (kind === "ride" && !this.#stopped) {
        const fault = this.#ctx.lastFault();
        this.#ctx.breach(
          `rider ${client} lost ${name} (token ${lock.token}, ${reason})` +
            (fault === undefined ? "" : ` ${(t - fault.atMs).toFixed(0)} ms after ${fault.kind}`),
        );
      }
    });
    return holding;
  }

  // ---- around faults ---------------------------------------------------------------------

  /** The leader's waiter order of every ride name (GET /api/locks?match=ride/*). */
  async snapshotQueues(adminAddr: string | null, faultIndex: number): Promise<void> {
    if (adminAddr === null) return;
    const atMs = now();
    try {
      const response = await fetch(`http://${adminAddr}/api/locks?match=ride/*`, {
        signal: AbortSignal.timeout(2_000),
      });
      if (!response.ok) {
        await response.body?.cancel();
        return;
      }
      const json = await response.json() as {
        locks: { name: string; waiters: { client_name: string }[] }[];
      };
      const queues = new Map<string, string[]>();
      for (const lock of json.locks) {
        // Only claims made before the snapshot began (the same claim the fault finds).
        const order = lock.waiters.map((w) => w.client_name).filter((c) => {
          const since = this.#waitingSince.get(`${c} ${lock.name}`);
          return since !== undefined && since < atMs;
        });
        if (order.length >= 2) queues.set(lock.name, order);
      }
      this.snapshots.push({ atMs, faultIndex, queues });
    } catch {
      this.#ctx.count("queue_snapshot_failed");
    }
  }

  /**
   * Every live holding at the fault; resolves once each survivor is confirmed on a connection
   * other than the one it had at the fault (or after `timeoutMs`).
   */
  async trackConfirmations(kind: string, faultAtMs: number, timeoutMs = 20_000): Promise<void> {
    const live: { h: Holding; confirmer: unknown }[] = [];
    for (const list of this.#holdings.values()) {
      const h = list.at(-1);
      if (h !== undefined && h.endAtMs === null && h.handle.live) {
        live.push({ h, confirmer: h.handle.confirmer });
      }
    }
    const confirmedMs = new Map<Holding, number>();
    const untilMs = faultAtMs + timeoutMs;
    while (now() < untilMs) {
      let open = 0;
      for (const { h, confirmer } of live) {
        if (confirmedMs.has(h) || h.endAtMs !== null || !h.handle.live) continue;
        if (h.handle.phase === "confirmed" && h.handle.confirmer !== confirmer) {
          confirmedMs.set(h, now() - faultAtMs);
        } else open++;
      }
      if (open === 0) break;
      await sleep(20);
    }
    const times = [...confirmedMs.values()];
    const lost = live.filter(({ h }) => h.endReason !== "" && h.endReason !== "released");
    const riders = live.filter(({ h }) => h.kind === "ride");
    const unconfirmed = live.filter(({ h }) => !confirmedMs.has(h) && h.endAtMs === null);
    if (unconfirmed.length > 0) {
      this.#ctx.breach(
        `${kind}: ${unconfirmed.length} holders still not confirmed ${timeoutMs} ms after it ` +
          `(e.g. ${unconfirmed[0].h.client} token ${unconfirmed[0].h.token})`,
      );
    }
    this.confirmations.push({
      kind,
      holders: live.length,
      confirmed: times.length,
      p50Ms: percentile(times, 0.5),
      maxMs: times.length === 0 ? NaN : Math.max(...times),
      lost: lost.length,
      ridersAtFault: riders.length,
      ridersLost: riders.filter(({ h }) => lost.some((l) => l.h === h)).length,
    });
  }

  // ---- checks at the end -----------------------------------------------------------------

  /** Two valid holders at once, by the clients' own view. */
  checkHoldings(): number {
    let checked = 0;
    for (const [name, list] of this.#holdings) {
      list.sort((a, b) => a.grantAtMs - b.grantAtMs);
      let previous: Holding | null = null;
      for (const h of list) {
        checked++;
        if (h.endReason === "granted_already_lost") continue;
        if (previous !== null) {
          const endMs = previous.endAtMs ?? Infinity;
          if (endMs - h.grantAtMs > OVERLAP_TOLERANCE_MS) {
            this.#ctx.breach(
              `${name}: ${h.client} got token ${h.token} while ${previous.client} held token ` +
                `${previous.token} (${previous.kind}) for ${
                  (endMs - h.grantAtMs).toFixed(0)
                } ms more (ended: ${previous.endReason || "never"})`,
            );
          }
        }
        if (previous === null || (h.endAtMs ?? Infinity) > (previous.endAtMs ?? Infinity)) {
          previous = h;
        }
      }
    }
    return checked;
  }

  /**
   * Kept owned reclaims against the records etcd held when their term began: the lock had a
   * record and its floor was below the token.
   */
  async checkFloors(written: WrittenRecord[], etcd: EtcdHttpClient, cluster: string) {
    const byTerm = new Map<number, WrittenRecord[]>();
    for (const w of written) {
      const r = w.record;
      if (r.event !== "reclaim" || r.claim !== "owned" || r.token === null) continue;
      if (r.term === undefined || r.prev_term === undefined || r.prev_term >= r.term) continue;
      const list = byTerm.get(r.term) ?? [];
      list.push(w);
      byTerm.set(r.term, list);
    }
    let checked = 0;
    for (const [term, list] of byTerm) {
      const floors = new Map<string, number>();
      let fromKey: string | undefined;
      for (;;) {
        const page = await etcd.range(`${cluster}/own/`, {
          revision: term,
          limit: 1_000,
          fromKey,
          timeoutMs: 10_000,
        });
        for (const kv of page.kvs) {
          const value = JSON.parse(kv.value) as { f: number | number[] };
          const f = Array.isArray(value.f) ? Math.max(...value.f) : value.f;
          floors.set(kv.key.slice(`${cluster}/own/`.length), f);
        }
        if (!page.more || page.kvs.length === 0) break;
        fromKey = `${page.kvs.at(-1)!.key}\0`;
      }
      for (const { record, node } of list) {
        checked++;
        const floor = floors.get(record.lock);
        if (floor === undefined) {
          this.#ctx.breach(
            `${node} kept a reclaim of ${record.lock} (token ${record.token}) in term ${term}: ` +
              `no ownership record when the term began`,
          );
        } else if (record.token! <= floor) {
          this.#ctx.breach(
            `${node} kept a reclaim of ${record.lock} (token ${record.token}) in term ${term} ` +
              `at or below the committed floor ${floor}`,
          );
        }
      }
    }
    this.#ctx.count("reclaims_checked_against_floors", checked);
  }

  /**
   * FIFO among reclaimed waiters: for each snapshot (the leader's queue right before a fault),
   * in the term(s) after it, a waiter A ahead of B whose queued claim was reclaimed (kept)
   * before B was granted must be granted before B. Waiters granted between the snapshot and the
   * fault are left out (their claim is not the snapshot's), and so are grants after the clients
   * began to close (A may have left the queue). A's queued RECLAIM keeps the snapshot's claim
   * only if it carries it from the snapshot's term (`termBefore`) or from a term where A kept it
   * the same way: a claim the old leader granted after the fault but never delivered (W1: its
   * record not committed) comes back as a fresh ACQUIRE at the tail of the next term, and its
   * later RECLAIMs carry that new place, not the snapshot's.
   */
  checkFifo(
    written: WrittenRecord[],
    faults: { atMs: number; atWallMs: number; termBefore: number }[],
  ): {
    pairs: number;
    inversions: number;
  } {
    let pairs = 0;
    let inversions = 0;
    for (const snapshot of this.snapshots) {
      const fault = faults[snapshot.faultIndex];
      if (fault === undefined) continue;
      const next = faults[snapshot.faultIndex + 1]?.atWallMs ?? Infinity;
      // Records of the terms decided after the fault and before the next one, by node file.
      const after = written.filter((w) =>
        w.wallMs >= fault.atWallMs && w.wallMs < next && w.record.lock.startsWith("ride/")
      );
      for (const [name, order] of snapshot.queues) {
        const fresh = order.filter((c) => {
          const times = this.#grantTimes.get(`${c} ${name}`) ?? [];
          return !times.some((t) => t >= snapshot.atMs && t <= fault.atMs + 100);
        });
        // Per term (in file order): A's place counts once its queued claim was reclaimed (kept)
        // in that very term, and until a `reclaim_void` of it there (its connection broke and
        // the claim joined the tail); B granted meanwhile, before A, is an inversion.
        const byTerm = new Map<number, WrittenRecord[]>();
        for (const w of after) {
          if (w.record.lock !== name || w.record.term === undefined) continue;
          const list = byTerm.get(w.record.term) ?? [];
          list.push(w);
          byTerm.set(w.record.term, list);
        }
        // By client: the terms whose claim of `name` is still the snapshot's (0: not known).
        const carriedIn = new Map<string, Set<number>>(
          fresh.map((c) => [c, new Set([fault.termBefore])]),
        );
        const keepsSnapshotClaim = (client: string, prevTerm: number | undefined) =>
          fault.termBefore === 0 ||
          (prevTerm !== undefined && (carriedIn.get(client)?.has(prevTerm) ?? false));
        for (const term of [...byTerm.keys()].sort((a, b) => a - b)) {
          const events = byTerm.get(term)!;
          events.sort((a, b) => a.index - b.index);
          // A client that came back twice in the term (its connection broke: an orphaned
          // session's waits are dropped, silently) may have lost its place: left out.
          const comebacks = new Map<string, number>();
          for (const { record } of events) {
            if (record.event !== "reclaim" && record.event !== "reclaim_void") continue;
            const client = record.client_name ?? "";
            comebacks.set(client, (comebacks.get(client) ?? 0) + 1);
          }
          const placed = new Set<string>();
          const granted = new Set<string>();
          for (const { record, file, wallMs } of events) {
            const client = record.client_name ?? "";
            if (
              record.event === "reclaim" && record.claim === "queued" &&
              comebacks.get(client) === 1 && keepsSnapshotClaim(client, record.prev_term)
            ) placed.add(client);
            if (record.event === "reclaim_void" && record.claim === "queued") placed.delete(client);
            if (record.event !== "acquire") continue;
            // Once the clients close, a waiter ahead may have left the queue.
            const j = fresh.indexOf(client);
            if (j >= 0 && !granted.has(client) && wallMs < this.#stoppedAtWallMs) {
              for (const ahead of fresh.slice(0, j)) {
                if (!placed.has(ahead) || granted.has(ahead)) continue;
                pairs++;
                inversions++;
                this.#ctx.breach(
                  `FIFO: ${name}: ${client} granted before ${ahead} in term ${term} (${file}), ` +
                    `though ${ahead} was ahead of it before the fault and had reclaimed its place`,
                );
              }
              for (const ahead of fresh.slice(0, j)) if (granted.has(ahead)) pairs++;
            }
            granted.add(client);
          }
          // Kept through this term, not granted: the next term's RECLAIM may carry it on.
          for (const client of placed) if (!granted.has(client)) carriedIn.get(client)?.add(term);
        }
      }
    }
    return { pairs, inversions };
  }

  /**
   * Every check at the end (the audit records with their files and places): the clients' own
   * view of holders, FIFO among reclaimed waiters, kept reclaims against etcd's floors. Closes
   * `etcd`.
   */
  async finalChecks(
    placed: WrittenRecord[],
    faults: { atMs: number; atWallMs: number; termBefore: number }[],
    etcd: EtcdHttpClient,
    counts: Record<string, number>,
  ): Promise<void> {
    counts.m2_holdings_checked = this.checkHoldings();
    const fifo = this.checkFifo(placed, faults);
    counts.fifo_pairs_checked = fifo.pairs;
    counts.fifo_inversions = fifo.inversions;
    try {
      await this.checkFloors(placed, etcd, "soak");
    } finally {
      etcd.close();
    }
  }

  // ---- the report --------------------------------------------------------------------------

  reportLines(): string[] {
    const lines: string[] = [];
    const kinds = [...new Set(this.confirmations.map((c) => c.kind))];
    for (const kind of kinds) {
      const of = this.confirmations.filter((c) => c.kind === kind);
      const maxes = of.map((c) => c.maxMs).filter((t) => Number.isFinite(t));
      const holders = of.reduce((s, c) => s + c.holders, 0);
      const confirmed = of.reduce((s, c) => s + c.confirmed, 0);
      const riders = of.reduce((s, c) => s + c.ridersAtFault, 0);
      const ridersLost = of.reduce((s, c) => s + c.ridersLost, 0);
      lines.push(
        `  ${kind}: ${of.length} faults, every surviving holder confirmed on the new leader ` +
          `p50 ${fmt(percentile(maxes, 0.5))} max ${fmt(Math.max(...maxes))} ms ` +
          `(per holder p50 ${fmt(percentile(of.map((c) => c.p50Ms), 0.5))} ms; ` +
          `${confirmed}/${holders} holders confirmed; riders kept ${
            riders - ridersLost
          }/${riders})`,
      );
    }
    return lines;
  }
}

export function fmt(ms: number): string {
  return Number.isFinite(ms) ? ms.toFixed(0) : "-";
}
