/**
 * The lock kinds of the chaos soak (bench/soak.ts; issue 22): version-2 clients on semaphores and
 * shared (read/write) locks, a fenced resource that keeps the last token per semaphore slot and
 * checks reader/writer exclusion and the readers' write generation, chaos on those locks
 * (force-release of one owner or of all, waiter removal), and the audit check of the kinds (per
 * slot, exclusion, write generations) after each server run.
 */

import { WIRE_CODES } from "../src/wire/codes.ts";
import type { Acquired } from "../src/wire/messages.ts";
import { BenchConn } from "./bench_client.ts";

/**
 * Locks with a lock-delay by the soak's rules file (`LOCK_RULES`): after a non-graceful end
 * (expired, io_timeout, force) nothing is granted on them for LOCK_DELAY_MS.
 */
export const DELAYED_LOCKS = ["soak/5", "soak/sem-1"];
export const LOCK_DELAY_MS = 300;
const LOCK_DELAY_SLACK_MS = LOCK_DELAY_MS / 3;
/** The server's -lock-rules-file: one semaphore fixed by a rule, two lock-delays. */
export const LOCK_RULES = [
  `semaphore soak/sem-1 3 lock-delay=${LOCK_DELAY_MS}ms`,
  `lock-delay soak/5 ${LOCK_DELAY_MS}ms`,
].join("\n") + "\n";
/** Ends that start a lock-delay. */
const NON_GRACEFUL = new Set(["expired", "io_timeout", "force"]);

/** Semaphores of the soak, each with limit SEMAPHORE_LIMIT. */
export const SEMAPHORES = ["soak/sem-0", "soak/sem-1"];
export const SEMAPHORE_LIMIT = 3;
/** Shared (read/write) locks of the soak. */
export const SHARED_LOCKS = ["soak/rw-0", "soak/rw-1"];
const READER_SHARE = 0.7;
const { DUPLICATE_CLAIM, INVALID_ARGUMENT, NOT_OWNER } = WIRE_CODES;
const DOWNGRADE_SHARE = 0.3;

/** What the soak's driver lends this module. */
export interface SoakContext {
  breach(what: string): void;
  fault(kind: string): void;
  /** Counts one operation. */
  op(): void;
  /** Expected end reasons per "run:token". */
  readonly expected: Map<string, string[]>;
  /** The current server run (1, 2, …). */
  run(): number;
  addr(): string;
  adminAddr(): string | null;
  /** Whether the server told this connection its ownership of `lock` with `token` ended (soak.ts). */
  toldEnded(conn: BenchConn, lock: string, token: number): boolean;
  /** Notes the connection of an ownership ("run:token") for the audit check. */
  owned(key: string, conn: BenchConn, lock: string): void;
  /** A write to the per-slot fenced resource (key, token): false when fenced off. */
  write(key: string, token: number): Promise<boolean>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const encoder = new TextEncoder();

/** One ownership as its client knows it. */
interface Owner {
  readonly token: number;
  mode: "exclusive" | "shared";
  readonly slot: number;
  /** Heartbeating and not targeted by the chaos or its own client. */
  healthy: boolean;
  readonly conn: BenchConn;
  /** Blanket force-releases issued on the lock when this ownership was granted. */
  readonly forcesAtGrant: number;
}

/**
 * The kinds' fenced resource and live view: owners per lock, the last exclusive grant per lock
 * (this run), and the write generation each reader was granted with (for the audit check).
 */
export class KindTracker {
  readonly #ctx: SoakContext;
  readonly owners = new Map<string, Set<Owner>>();
  /** Tokens of the exclusive grants per lock (this run), as their ACQUIREDs arrive. */
  readonly #exclusiveTokens = new Map<string, number[]>();
  /** Force-releases without a token precondition per lock (they end every owner). */
  readonly #forces = new Map<string, number>();
  /** "run:token" → the write generation its shared grant carried. */
  readonly readerGenerations = new Map<string, number>();
  readsChecked = 0;

  constructor(ctx: SoakContext) {
    this.#ctx = ctx;
  }

  /** A server restart: every ownership and the locks' write generations are gone. */
  reset(): void {
    for (const set of this.owners.values()) for (const o of set) o.healthy = false;
    this.owners.clear();
    this.#exclusiveTokens.clear();
  }

  forceIssued(lock: string): void {
    for (const o of this.owners.get(lock) ?? []) o.healthy = false;
    this.#forces.set(lock, (this.#forces.get(lock) ?? 0) + 1);
  }

  /** A random live owner of `lock`, for a force-release with its token. */
  pick(lock: string): Owner | undefined {
    const live = [...this.owners.get(lock) ?? []];
    return live[Math.floor(Math.random() * live.length)];
  }

  /**
   * A grant arrived: checks the slot, the exclusion against the owners known healthy, and a
   * reader's write generation; returns the new owner.
   */
  async granted(lock: string, a: Acquired, conn: BenchConn, semaphore: boolean): Promise<Owner> {
    const mode = a.mode === "shared" ? "shared" : "exclusive";
    const slot = a.slot ?? 0;
    if (semaphore && (a.limit !== SEMAPHORE_LIMIT || slot < 0 || slot >= SEMAPHORE_LIMIT)) {
      this.#ctx.breach(`${lock} granted slot ${slot} of limit ${a.limit} (token ${a.token})`);
    }
    if (mode === "exclusive" && !semaphore) {
      const tokens = this.#exclusiveTokens.get(lock) ?? [];
      tokens.push(a.token);
      this.#exclusiveTokens.set(lock, tokens);
    }
    const owner: Owner = {
      token: a.token,
      mode,
      slot,
      healthy: true,
      conn,
      forcesAtGrant: this.#forces.get(lock) ?? 0,
    };
    const set = this.owners.get(lock) ?? new Set<Owner>();
    this.owners.set(lock, set);
    const conflicting = [...set].filter((o) =>
      semaphore ? o.slot === slot : o.mode === "exclusive" || mode === "exclusive"
    );
    set.add(owner);
    for (const o of conflicting) {
      set.delete(o);
      if (!o.healthy || (this.#forces.get(lock) ?? 0) !== o.forcesAtGrant) continue;
      // The old owner's LEASE_EXPIRED travels on its own socket: give it a moment to arrive.
      await sleep(200);
      const what = semaphore ? `slot ${slot} of ${lock}` : `${lock} (${mode})`;
      if (o.healthy && !this.#ctx.toldEnded(o.conn, lock, o.token)) {
        this.#ctx.breach(`${what} granted (token ${a.token}) while token ${o.token} was healthy`);
      } else if (o.healthy) {
        this.#ctx.fault("heartbeating_holder_expired");
      }
    }
    if (mode === "shared") await this.#checkGeneration(lock, a);
    return owner;
  }

  async #checkGeneration(lock: string, a: Acquired): Promise<void> {
    const generation = a.writeGeneration ?? 0;
    this.readerGenerations.set(`${this.#ctx.run()}:${a.token}`, generation);
    this.readsChecked++;
    if (generation >= a.token) {
      this.#ctx.breach(`reader of ${lock} (token ${a.token}) has write generation ${generation}`);
    }
    if (generation === 0 || generation === this.#lastExclusiveBefore(lock, a.token)) return;
    // The writer's ACQUIRED may still be on its way on its own socket.
    await sleep(200);
    const last = this.#lastExclusiveBefore(lock, a.token);
    if (generation !== last) {
      this.#ctx.breach(
        `reader of ${lock} (token ${a.token}) has write generation ${generation}, ` +
          `the last exclusive grant before it is ${last ?? "none"}`,
      );
    }
  }

  /** The largest exclusive grant's token below `token` (grants after the reader's do not count). */
  #lastExclusiveBefore(lock: string, token: number): number | undefined {
    let last: number | undefined;
    for (const t of this.#exclusiveTokens.get(lock) ?? []) {
      if (t < token && (last === undefined || t > last)) last = t;
    }
    return last;
  }

  /** An exclusive owner became shared in place: its own token is now the write generation. */
  downgraded(lock: string, owner: Owner, a: Acquired): void {
    if (a.mode !== "shared" || a.token !== owner.token || a.writeGeneration !== owner.token) {
      this.#ctx.breach(`downgrade of ${lock} token ${owner.token} answered ${JSON.stringify(a)}`);
    }
    owner.mode = "shared";
  }

  ended(lock: string, owner: Owner): void {
    owner.healthy = false;
    this.owners.get(lock)?.delete(owner);
  }
}

type Ending = "clean" | "crash" | "stall" | "half_open";

function ending(): Ending {
  const r = Math.random();
  return r < 0.85 ? "clean" : r < 0.9 ? "crash" : r < 0.95 ? "stall" : "half_open";
}

/**
 * One version-2 client: semaphore slots and shared/exclusive claims on the kinds' locks, a value
 * at the grant and a SET_VALUE naming its token, writers that sometimes downgrade, and the same
 * endings as the exclusive clients (a crash is a connection that ends without GOODBYE: orphaned,
 * its ownerships end `expired`).
 */
export async function kindClientLoop(
  ctx: SoakContext,
  tracker: KindTracker,
  id: number,
  until: number,
  leaseMs: number,
  heartbeatMs: number,
): Promise<void> {
  while (performance.now() < until) {
    let conn: BenchConn;
    const myRun = ctx.run();
    try {
      conn = await BenchConn.session(ctx.addr(), `soak-kind-${id}`, undefined, 2);
    } catch {
      await sleep(100);
      continue;
    }
    let heartbeat: ReturnType<typeof setInterval> | undefined;
    let orphaned = false;
    try {
      heartbeat = setInterval(() => conn.heartbeat().catch(() => {}), heartbeatMs);
      for (let k = 0; k < 50 && performance.now() < until && !conn.closed; k++) {
        const semaphore = Math.random() < 0.5;
        const names = semaphore ? SEMAPHORES : SHARED_LOCKS;
        const lock = names[Math.floor(Math.random() * names.length)];
        const mode = !semaphore && Math.random() < READER_SHARE ? "shared" : "exclusive";
        const end = ending();
        const a = await conn.acquireWith(lock, {
          leaseMs: end === "half_open" ? 5_000 : leaseMs,
          waitMs: 3_000,
          mode,
          limit: semaphore ? SEMAPHORE_LIMIT : 0,
          value: encoder.encode(`c=${id}`),
        });
        ctx.op();
        if (
          a.type === "error" &&
          (a.code === INVALID_ARGUMENT.code || a.code === DUPLICATE_CLAIM.code)
        ) {
          // These claims agree with their lock's kind and limit, one claim per lock at a time.
          ctx.breach(`${lock} refused a ${mode} claim: ${a.message}`);
        }
        if (a.type !== "acquired") continue;
        const key = `${myRun}:${a.token}`;
        ctx.owned(key, conn, lock);
        const owner = await tracker.granted(lock, a, conn, semaphore);
        await use(ctx, conn, lock, owner.slot, a.token, semaphore);
        if (!semaphore && mode === "exclusive" && Math.random() < DOWNGRADE_SHARE) {
          const d = await conn.downgrade(lock, a.token);
          ctx.op();
          if (d.type === "acquired") tracker.downgraded(lock, owner, d);
        }
        if (end === "clean") {
          tracker.ended(lock, owner);
          ctx.expected.set(key, ["graceful"]);
          await conn.release(lock, a.token);
          ctx.op();
          continue;
        }
        tracker.ended(lock, owner);
        ctx.fault(`kinds_${end}`);
        clearInterval(heartbeat);
        if (end === "crash") {
          // No GOODBYE: the session is orphaned and keeps the ownership until its lease ends.
          ctx.expected.set(key, ["expired"]);
          orphaned = true;
          conn.close();
        } else if (end === "stall") {
          ctx.expected.set(key, ["expired"]);
          await sleep(leaseMs + 300);
          for (let w = 0; w < 40 && !ctx.toldEnded(conn, lock, a.token); w++) await sleep(50);
          if (semaphore) await ctx.write(`${lock}#${owner.slot}`, a.token);
          conn.close();
        } else {
          ctx.expected.set(key, ["io_timeout"]);
          await sleep(1_500);
          conn.close();
        }
        break;
      }
    } catch {
      // server restarted or the chaos closed us
    } finally {
      clearInterval(heartbeat);
      if (!orphaned) await conn.goodbye();
      conn.close();
      await conn.done;
    }
  }
}

/** While owning: a semaphore writes its slot; anyone may publish a value naming its token. */
async function use(
  ctx: SoakContext,
  conn: BenchConn,
  lock: string,
  slot: number,
  token: number,
  semaphore: boolean,
): Promise<void> {
  if (semaphore) {
    await ctx.write(`${lock}#${slot}`, token);
    ctx.op();
  }
  if (Math.random() < 0.5) {
    const r = await conn.setValue(lock, token, encoder.encode(`t=${token}`));
    ctx.op();
    if (r.type === "error" && r.code !== NOT_OWNER.code /* force-released meanwhile */) {
      ctx.breach(`SET_VALUE of ${lock} token ${token}: ${r.message}`);
    }
  } else {
    await sleep(Math.random() < 0.5 ? 0 : 2);
  }
}

/**
 * Chaos on the kinds' locks: a force-release of one owner (with its token) or of all owners, or the
 * removal of the first waiter.
 */
export async function kindChaos(ctx: SoakContext, tracker: KindTracker, until: number) {
  const locks = [...SEMAPHORES, ...SHARED_LOCKS];
  while (performance.now() < until) {
    await sleep(400 + Math.random() * 600);
    const admin = ctx.adminAddr();
    if (admin === null) break;
    const lock = locks[Math.floor(Math.random() * locks.length)];
    const path = `http://${admin}/api/locks/${encodeURIComponent(lock)}`;
    try {
      const r = Math.random();
      if (r < 0.4) {
        // One owner by its token, of whichever kind lock has owners now (ownerships are short).
        const owned = locks.filter((name) => tracker.pick(name) !== undefined);
        const target = owned[Math.floor(Math.random() * owned.length)];
        const o = target === undefined ? undefined : tracker.pick(target);
        if (o === undefined) continue;
        o.healthy = false;
        const res = await fetch(
          `http://${admin}/api/locks/${encodeURIComponent(target)}/release?token=${o.token}`,
          { method: "POST" },
        );
        await res.body?.cancel();
        if (res.ok) ctx.fault("kinds_force_one");
      } else if (r < 0.6) {
        tracker.forceIssued(lock);
        const res = await fetch(`${path}/release`, { method: "POST" });
        await res.body?.cancel();
        if (res.ok) ctx.fault("kinds_force_all");
      } else {
        const res = await fetch(path);
        const view = res.ok ? await res.json() : null;
        if (!res.ok) await res.body?.cancel();
        const w = view?.waiters?.[0] ?? view?.lock?.waiters?.[0];
        if (w?.remote_addr === undefined) continue;
        const del = await fetch(`${path}/waiters/${encodeURIComponent(w.remote_addr)}`, {
          method: "DELETE",
        });
        await del.body?.cancel();
        if (del.ok) ctx.fault("kinds_kick_waiter");
      }
    } catch {
      // server restarting
    }
  }
}

/**
 * The kinds in one run's audit log, in the order the server decided: never two owners of one
 * semaphore slot nor more than its limit; never an exclusive owner beside another owner of a
 * shared lock; each reader's write generation is the token of the last exclusive grant of its
 * lock, or 0 only when the lock had no owner at some moment since that grant.
 */
export function checkLockDelays(
  ctx: SoakContext,
  run: number,
  records: Record<string, unknown>[],
): { checked: number; started: number } {
  const delayedUntil = new Map<string, number>();
  let checked = 0;
  let started = 0;
  for (const rec of records) {
    const lock = String(rec.lock);
    if (!DELAYED_LOCKS.includes(lock)) continue;
    const atMs = Date.parse(String(rec.ts));
    if (rec.event === "release" && NON_GRACEFUL.has(String(rec.reason))) {
      started++;
      delayedUntil.set(lock, Math.max(delayedUntil.get(lock) ?? 0, atMs + LOCK_DELAY_MS));
    } else if (rec.event === "acquire") {
      checked++;
      // A record's `ts` is read when it is written, the delay's start when the ownership ended:
      // the process may be descheduled in between on a loaded machine (tens of ms seen here), so
      // the check allows a third of the delay. A server without the delay grants a waiter within
      // a few ms of the end, far outside that slack.
      const until = delayedUntil.get(lock) ?? 0;
      if (atMs < until - LOCK_DELAY_SLACK_MS) {
        ctx.breach(
          `run ${run}: ${lock} token ${rec.token} granted at ${rec.ts}, ${until - atMs} ms ` +
            "before the lock-delay of a non-graceful end was over",
        );
      }
    }
  }
  return { checked, started };
}

export function checkKindAudit(
  ctx: SoakContext,
  tracker: KindTracker,
  run: number,
  records: Record<string, unknown>[],
): number {
  const owners = new Map<string, Map<number, { mode: string; slot: number }>>();
  const lastExclusive = new Map<string, number>();
  const emptySince = new Set<string>();
  let checked = 0;
  for (const rec of records) {
    const lock = String(rec.lock);
    if (!SEMAPHORES.includes(lock) && !SHARED_LOCKS.includes(lock)) continue;
    const t = Number(rec.token);
    const mine = owners.get(lock) ?? new Map();
    owners.set(lock, mine);
    if (rec.event === "release") {
      mine.delete(t);
      if (mine.size === 0) emptySince.add(lock);
    } else if (rec.event === "downgrade") {
      const o = mine.get(t);
      if (o !== undefined) o.mode = "shared";
    } else if (rec.event === "acquire") {
      checked++;
      const mode = String(rec.mode ?? "exclusive");
      const slot = Number(rec.slot ?? 0);
      const others = [...mine.values()];
      if (SEMAPHORES.includes(lock)) {
        if (rec.kind !== "semaphore" || rec.limit !== SEMAPHORE_LIMIT) {
          ctx.breach(`run ${run}: ${lock} token ${t} audited as ${rec.kind} limit ${rec.limit}`);
        }
        if (others.some((o) => o.slot === slot) || others.length >= SEMAPHORE_LIMIT) {
          ctx.breach(`run ${run}: ${lock} token ${t} granted slot ${slot} beside ${others.length}`);
        }
      } else if (
        others.some((o) => o.mode === "exclusive") || (mode === "exclusive" && others.length > 0)
      ) {
        ctx.breach(`run ${run}: ${lock} token ${t} (${mode}) granted beside another owner`);
      } else if (mode === "exclusive") {
        lastExclusive.set(lock, t);
        emptySince.delete(lock);
      } else {
        const generation = tracker.readerGenerations.get(`${run}:${t}`);
        const last = lastExclusive.get(lock);
        const ok = generation === undefined || generation === last ||
          (generation === 0 && (last === undefined || emptySince.has(lock)));
        if (!ok) {
          ctx.breach(
            `run ${run}: reader of ${lock} token ${t} has write generation ${generation}, ` +
              `the audit's last exclusive grant is ${last ?? "none"}`,
          );
        }
      }
      mine.set(t, { mode, slot });
    }
  }
  return checked;
}
