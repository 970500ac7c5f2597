/**
 * Watchers of the chaos soak (bench/soak.ts; issue 23): version-2 sessions that WATCH the soak's
 * locks (globs and single names) beside the holders. Every LOCK_STATE is checked as it arrives: no
 * token of a lock goes backwards (a holder token the watcher has not seen is above every token it
 * saw on that lock), the state keeps the kinds' rules (a semaphore's owners in distinct slots
 * within its limit, never an exclusive owner beside another on a shared lock), and a value that
 * names a token (`t=N`, the soak's holders publish it with SET_VALUE) names its holder's. After
 * quiet, every watcher's last state of every lock must equal the server's (QUERY).
 */

import type { LockState } from "../src/wire/messages.ts";
import { BenchConn } from "./bench_client.ts";
import type { SoakContext } from "./soak_kinds.ts";

/** What each watcher session watches: a glob of every soak lock, or single names. */
const WATCHER_PATTERNS: readonly (readonly string[])[] = [
  ["soak/*"],
  ["soak/*"],
  ["soak/0", "soak/sem-0", "soak/rw-0", "soak/rw-1"],
];

const decoder = new TextDecoder();
const HEARTBEAT_MS = 250;

/** The parts of a LOCK_STATE that must agree with the server's after quiet. */
function stateText(s: LockState | undefined): string {
  if (s === undefined || s.kind === "none") return "none";
  const holders = s.holders.map((h) =>
    `${h.token}/${h.mode}/${h.slot}/${h.clientName}/${decoder.decode(h.value)}`
  );
  return `${s.kind} limit=${s.limit} queue=${s.queueLength} owners=${s.owners} [${holders}]`;
}

/** One watcher identity; it reconnects and watches again after each server restart. */
class Watcher {
  readonly name: string;
  readonly #patterns: readonly string[];
  readonly #ctx: SoakContext;
  /** Last state per lock of the current connection's watches. */
  readonly last = new Map<string, LockState>();
  /** Highest token ever seen per lock, and the tokens of the last state (across reconnects). */
  readonly #highest = new Map<string, number>();
  readonly #current = new Map<string, Set<number>>();
  conn: BenchConn | null = null;
  #heartbeat: ReturnType<typeof setInterval> | undefined;
  #stopping = false;
  /** Settles when the watches of the current connection are open. */
  ready: Promise<void> = Promise.resolve();
  states = 0;

  constructor(ctx: SoakContext, name: string, patterns: readonly string[]) {
    this.#ctx = ctx;
    this.name = name;
    this.#patterns = patterns;
  }

  /** Connects and opens its watches (the snapshots replace whatever the last run left). */
  async start(): Promise<void> {
    this.#stopping = false;
    this.ready = this.#open();
    await this.ready;
  }

  async #open(): Promise<void> {
    this.last.clear();
    const conn = await BenchConn.session(this.#ctx.addr(), this.name, undefined, 2);
    this.conn = conn;
    // A session that sends nothing is closed by the I/O timeout, watches or not.
    this.#heartbeat = setInterval(() => conn.heartbeat().catch(() => {}), HEARTBEAT_MS);
    conn.done.then(() => this.#lost(conn));
    for (const pattern of this.#patterns) {
      const { reply } = conn.watch(pattern, { onState: (s) => this.#heard(s) });
      const r = await reply;
      if (r.type !== "watching") {
        this.#ctx.breach(`watcher ${this.name}: WATCH ${pattern} answered ${JSON.stringify(r)}`);
      }
    }
  }

  /**
   * The server closed the connection while the run goes on (its I/O timeout, when this machine
   * starves the soak of CPU): watch again, as a client does after a reconnect; the fresh
   * snapshots replace the last states, and tokens must still never go backwards.
   */
  #lost(conn: BenchConn): void {
    clearInterval(this.#heartbeat);
    if (this.#stopping || this.conn !== conn) return;
    this.#ctx.fault("watcher_reconnected");
    this.ready = (async () => {
      while (!this.#stopping) {
        try {
          return await this.#open();
        } catch {
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    })();
  }

  /** Whether one of its patterns matches `name` (every soak lock is `soak/` and one more part). */
  covers(name: string): boolean {
    return this.#patterns.some((p) => p === name || p === "soak/*");
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    await this.ready.catch(() => {});
    clearInterval(this.#heartbeat);
    await this.conn?.goodbye();
    await this.conn?.done;
    this.conn = null;
  }

  #heard(s: LockState): void {
    this.states++;
    this.last.set(s.name, s);
    const what = `watcher ${this.name} (${s.event} of ${s.name})`;
    const highest = this.#highest.get(s.name) ?? 0;
    const before = this.#current.get(s.name) ?? new Set<number>();
    const now = new Set<number>();
    for (const h of s.holders) {
      now.add(h.token);
      if (!before.has(h.token) && h.token <= highest) {
        this.#ctx.breach(`${what}: token ${h.token} appeared after token ${highest}`);
      }
      const value = decoder.decode(h.value);
      if (value.startsWith("t=") && Number(value.slice(2)) !== h.token) {
        this.#ctx.breach(`${what}: holder ${h.token} shows the value "${value}"`);
      }
    }
    this.#current.set(s.name, now);
    this.#highest.set(s.name, Math.max(highest, ...now));
    if (s.holders.length !== s.owners) {
      this.#ctx.breach(`${what}: ${s.holders.length} holders listed of ${s.owners}`);
    }
    if (s.kind === "semaphore") {
      const slots = new Set(s.holders.map((h) => h.slot));
      if (slots.size !== s.holders.length || s.owners > s.limit) {
        this.#ctx.breach(`${what}: ${s.owners} owners in slots ${[...slots]} of ${s.limit}`);
      }
    } else if (s.owners > 1 && s.holders.some((h) => h.mode === "exclusive")) {
      this.#ctx.breach(`${what}: an exclusive owner beside another (${stateText(s)})`);
    }
  }
}

/** The soak's watchers, started with each server run. */
export class Watchers {
  readonly #ctx: SoakContext;
  readonly #all: Watcher[];
  compared = 0;

  constructor(ctx: SoakContext) {
    this.#ctx = ctx;
    this.#all = WATCHER_PATTERNS.map((p, i) => new Watcher(ctx, `soak-watcher-${i}`, p));
  }

  /** Sessions the watchers keep open. */
  get sessions(): number {
    return this.#all.length;
  }

  get states(): number {
    return this.#all.reduce((n, w) => n + w.states, 0);
  }

  async start(): Promise<void> {
    await Promise.all(this.#all.map((w) => w.start()));
  }

  async stop(): Promise<void> {
    await Promise.all(this.#all.map((w) => w.stop()));
  }

  /**
   * After quiet (the clients gone, the server's locks settled): each watcher's last state of each
   * lock it watches equals QUERY's answer. A lock a glob watcher never heard of must not exist.
   */
  async compareWithServer(locks: readonly string[]): Promise<void> {
    const q = await BenchConn.session(this.#ctx.addr(), "soak-query", undefined, 2);
    try {
      const server = new Map<string, LockState>();
      const names = new Set(locks);
      for (const w of this.#all) for (const name of w.last.keys()) names.add(name);
      for (const name of names) {
        const r = await q.query(name);
        if (r.type !== "lock_state") throw new Error(`QUERY ${name}: ${JSON.stringify(r)}`);
        server.set(name, r);
      }
      for (const w of this.#all) {
        await w.ready.catch(() => {});
        if (w.conn === null || w.conn.closed) {
          const why = w.conn?.unsolicited.map((m) => JSON.stringify(m)).join(", ");
          this.#ctx.breach(`watcher ${w.name} lost its connection before quiet (${why})`);
          continue;
        }
        for (const name of names) {
          if (!w.covers(name)) continue;
          this.compared++;
          const mine = stateText(w.last.get(name));
          const theirs = stateText(server.get(name));
          if (mine !== theirs) {
            this.#ctx.breach(
              `watcher ${w.name}: last state of ${name} is ${mine}, the server's ${theirs}`,
            );
          }
        }
      }
    } finally {
      await q.goodbye();
      await q.done;
    }
  }
}
