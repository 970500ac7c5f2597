/**
 * Parts of the cluster chaos soak (bench/soak_cluster.ts): the fenced resource the clients write
 * to, and the observer session that watches a faulted leader's promises.
 *
 * @module
 */

import { BenchConn } from "./bench_client.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const now = () => performance.now();

/** Accepts a write only with a token ≥ the highest seen for its lock; refuses a commit overtaken. */
export class FencedResource {
  readonly #breach: (what: string) => void;
  constructor(breach: (what: string) => void) {
    this.#breach = breach;
  }
  readonly highest = new Map<string, number>();
  readonly writing = new Map<string, number>();
  accepted = 0;
  fenced = 0;
  async write(lock: string, token: number): Promise<boolean> {
    if (token < (this.highest.get(lock) ?? 0)) {
      this.fenced++;
      return false;
    }
    this.highest.set(lock, token);
    const other = this.writing.get(lock);
    if (other !== undefined && other > token) {
      this.#breach(`write of token ${token} on ${lock} accepted during ${other}`);
    }
    this.writing.set(lock, token);
    await sleep(Math.random() < 0.5 ? 0 : 2);
    if (this.writing.get(lock) !== token || this.highest.get(lock) !== token) {
      this.fenced++;
      return false;
    }
    this.writing.delete(lock);
    this.accepted++;
    return true;
  }
}

/**
 * A raw session on the leader that heartbeats and asks for a lock, and never leaves: what
 * the leader sends it, and when, shows whether it acted on stale leadership.
 */
export class Observer {
  readonly #leaseMs: number;
  /** `leaseMs`: the lease of the observer's ACQUIREs. */
  constructor(leaseMs: number) {
    this.#leaseMs = leaseMs;
  }
  /** Replies, when they came and when their request was sent. */
  readonly frames: { type: string; atMs: number; sentAtMs: number }[] = [];
  #conn: BenchConn | null = null;
  #timer: ReturnType<typeof setInterval> | undefined;
  #requests = 0;

  async open(addr: string): Promise<void> {
    this.#conn = await BenchConn.session(addr, "soak-observer");
    const conn = this.#conn;
    const sentAtMs = now();
    await conn.acquire("soak/observer", this.#leaseMs, 0).then((m) => this.#note(m.type, sentAtMs));
    this.#timer = setInterval(() => {
      const sentAtMs = now();
      conn.heartbeat().then((m) => this.#note(m.type, sentAtMs), () => {});
    }, 150);
  }

  /** A new ACQUIRE (sent now; a frozen leader reads it when it wakes). */
  ask(): void {
    const conn = this.#conn;
    if (conn === null || conn.closed) return;
    const sentAtMs = now();
    conn.acquire(`soak/observer-${++this.#requests}`, this.#leaseMs, 0)
      .then((m) => this.#note(m.type, sentAtMs), () => {});
  }

  #note(type: string, sentAtMs: number): void {
    this.frames.push({ type, atMs: now(), sentAtMs });
  }

  /**
   * Promises (ACQUIRED, HEARTBEAT_ACK) still running when they came (a client counts a lease
   * from its request's send time) that run past `untilMs`. A reply may leave well after it was
   * decided, behind an earlier reply of the session that waited for an etcd commit: what counts
   * is the promise it makes.
   */
  livePromisesPast(untilMs: number): { type: string; atMs: number; sentAtMs: number }[] {
    return this.frames.filter((f) =>
      (f.type === "acquired" || f.type === "heartbeat_ack") &&
      f.sentAtMs + this.#leaseMs > untilMs &&
      f.atMs < f.sentAtMs + this.#leaseMs
    );
  }

  /** ACQUIRED and HEARTBEAT_ACK frames received after `fromMs`. */
  promisesAfter(fromMs: number): number {
    return this.frames.filter((f) =>
      f.atMs > fromMs && (f.type === "acquired" || f.type === "heartbeat_ack")
    ).length;
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    const conn = this.#conn;
    this.#conn = null;
    if (conn !== null) {
      conn.close();
      await conn.done;
    }
  }
}

/**
 * A run with breaches keeps its directory for the post-mortem: every node's audit log is there
 * already; this writes each lockd process's diagnostic log and every breach beside them.
 */
export async function keepRunDir(
  dir: string,
  breaches: readonly string[],
  started: readonly { name: string; proc: { log(): string } }[],
): Promise<void> {
  await Deno.writeTextFile(`${dir}/breaches.txt`, breaches.join("\n") + "\n").catch(() => {});
  for (const { name, proc } of started) {
    await Deno.writeTextFile(`${dir}/${name}.log`, proc.log()).catch(() => {});
  }
  console.log(`audit and diagnostic logs kept in ${dir}`);
}
