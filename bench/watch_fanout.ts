/**
 * Issue 23's watch row: one lock handed off as fast as it goes (one client: ACQUIRE, ACQUIRED,
 * RELEASE, RELEASED, again) with no watchers and with N watchers of that lock (default 1,000,
 * each its own version-2 session, in a separate process), alternating in one server. A round is
 * S pairs of slices (default 6 of 0.5 s each: unwatched, then watched), so both sides of a pair
 * see the same load of a shared machine; R rounds (default 3). Reports per round the hand-offs/s
 * of both sides, their ratio (target ≥ 0.8×), the server's CPU per hand-off, the events per
 * watcher and the event latency p50/p99 from the grant (the holder's receipt of ACQUIRED) to a
 * watcher's receipt of the LOCK_STATE that shows that token (every 10th watcher is sampled; a
 * coalesced grant that no watcher saw has no latency); then the medians over the rounds.
 *
 *   deno run -A bench/watch_fanout.ts [--watchers 1000] [--rounds 3] [--slices 6]
 *     [--slice-seconds 0.5] [--json]
 *
 * The watchers' process is this file with `--watchers-child ADDR N NAME`: it opens N sessions,
 * says "ready", then on each line of standard input "watch" (WATCH the lock, answer "watching"
 * once every watch is WATCHING) or "unwatch" (UNWATCH; answer one JSON line with its samples).
 *
 * @module
 */

import { FrameWriter } from "../src/wire/frame.ts";
import { FrameReader } from "../src/wire/frame_reader.ts";
import type { ClientMessage, Message } from "../src/wire/messages.ts";
import { BenchConn, quantile, sortedCopy } from "./bench_client.ts";
import { cpuSeconds, spawnLockd } from "./lockd_proc.ts";

const LOCK = "watched";
const SAMPLE_EVERY = 10;
const WARMUP_MS = 50;

const SERVER_ARGS = [
  "-audit-log",
  "/dev/null",
  "-max-sessions",
  "30000",
  "-io-timeout",
  "10m",
  "-shutdown-grace",
  "0s",
];

function wallMs(): number {
  return performance.timeOrigin + performance.now();
}

function flag(name: string, fallback: number): number {
  const i = Deno.args.indexOf(name);
  return i >= 0 ? Number(Deno.args[i + 1]) : fallback;
}

// ---- the watchers' process ---------------------------------------------------------------------

/** One watcher session: raw frames, no request bookkeeping beyond what a watch needs. */
class Watcher {
  readonly #conn: Deno.TcpConn;
  readonly #writer = new FrameWriter({ version: 2, initialBytes: 64 });
  readonly #reader = new FrameReader();
  readonly #sampled: boolean;
  watching: (() => void) | null = null;
  ended: (() => void) | null = null;
  welcomed: (() => void) | null = null;
  events = 0;
  /** [token, arrival wall ms] of the `granted` events seen (sampled watchers only). */
  readonly samples: number[] = [];

  constructor(conn: Deno.TcpConn, sampled: boolean) {
    this.#conn = conn;
    this.#sampled = sampled;
    this.#read();
  }

  async send(message: ClientMessage): Promise<void> {
    this.#writer.push(message);
    const bytes = this.#writer.take();
    let offset = 0;
    while (offset < bytes.length) offset += await this.#conn.write(bytes.subarray(offset));
  }

  async #read(): Promise<void> {
    const buf = new Uint8Array(16 * 1024);
    try {
      for (;;) {
        const n = await this.#conn.read(buf);
        if (n === null) return;
        const at = wallMs();
        this.#reader.push(buf.subarray(0, n));
        for (let m = this.#reader.next(); m !== null; m = this.#reader.next()) this.#on(m, at);
      }
    } catch {
      // closed
    }
  }

  #on(message: Message, at: number): void {
    switch (message.type) {
      case "welcome":
        this.welcomed?.();
        return;
      case "watching":
        this.watching?.();
        return;
      case "watch_ended":
        this.ended?.();
        return;
      case "lock_state":
        if (message.event === "state") return;
        this.events++;
        if (this.#sampled && message.event === "granted" && message.holders.length > 0) {
          this.samples.push(message.holders[0].token, at);
        }
        return;
      default:
        return;
    }
  }

  close(): void {
    try {
      this.#conn.close();
    } catch { /* gone */ }
  }
}

async function watchersChild(addr: string, count: number, name: string): Promise<void> {
  const [host, port] = [
    addr.slice(0, addr.lastIndexOf(":")),
    Number(addr.slice(addr.lastIndexOf(":") + 1)),
  ];
  const watchers: Watcher[] = [];
  for (let i = 0; i < count; i++) {
    const conn = await Deno.connect({ hostname: host, port });
    conn.setNoDelay(true);
    const watcher = new Watcher(conn, i % SAMPLE_EVERY === 0);
    const welcomed = new Promise<void>((resolve) => watcher.welcomed = resolve);
    await watcher.send({ type: "hello", version: 2, clientName: "watcher" });
    await welcomed;
    watchers.push(watcher);
  }
  const out = Deno.stdout.writable.getWriter();
  const say = (line: string) => out.write(new TextEncoder().encode(line + "\n"));
  await say("ready");
  let watchId = 1;
  const lines = Deno.stdin.readable.pipeThrough(new TextDecoderStream());
  let rest = "";
  for await (const chunk of lines) {
    rest += chunk;
    const parts = rest.split("\n");
    rest = parts.pop()!;
    for (const line of parts) {
      if (line === "watch") {
        watchId++;
        await Promise.all(watchers.map((w) => {
          w.events = 0;
          w.samples.length = 0;
          const p = new Promise<void>((resolve) => w.watching = resolve);
          w.send({ type: "watch", requestId: watchId, pattern: name });
          return p;
        }));
        await say("watching");
      } else if (line === "unwatch") {
        await Promise.all(watchers.map((w) => {
          const p = new Promise<void>((resolve) => w.ended = resolve);
          w.send({ type: "unwatch", requestId: watchId });
          return p;
        }));
        let events = 0;
        const samples: number[] = [];
        for (const w of watchers) {
          events += w.events;
          for (const x of w.samples) samples.push(x);
        }
        await say(JSON.stringify({ events, samples }));
      }
    }
  }
  for (const w of watchers) w.close();
}

// ---- the driver --------------------------------------------------------------------------------

/** One side of a round: its slices together. */
interface Side {
  cycles: number;
  elapsedS: number;
  cpuS: number;
}

interface Round {
  handoffsPerS: number;
  handoffsPerSWatched: number;
  ratio: number;
  cpuUsPerHandoff: number;
  cpuUsPerHandoffWatched: number;
  eventsPerWatcherPerS: number;
  latencyP50Ms: number;
  latencyP99Ms: number;
  latencySamples: number;
}

/** Hands the lock off for `seconds` (after a warm-up): cycles, and the grant time of each token. */
async function handoffs(
  conn: BenchConn,
  seconds: number,
  pid: number,
  side: Side,
  grants: Map<number, number>,
): Promise<void> {
  const cycle = async () => {
    const acquired = await conn.acquire(LOCK);
    if (acquired.type !== "acquired") {
      throw new Error(`expected ACQUIRED: ${JSON.stringify(acquired)}`);
    }
    grants.set(acquired.token, wallMs());
    const released = await conn.release(LOCK, acquired.token);
    if (released.type !== "released") {
      throw new Error(`expected RELEASED: ${JSON.stringify(released)}`);
    }
  };
  const warmEnd = performance.now() + WARMUP_MS;
  while (performance.now() < warmEnd) await cycle();
  const cpu0 = cpuSeconds(pid);
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  while (performance.now() < end) {
    await cycle();
    side.cycles++;
  }
  side.elapsedS += (performance.now() - t0) / 1000;
  side.cpuS += cpuSeconds(pid) - cpu0;
}

class LineReader {
  readonly #reader: ReadableStreamDefaultReader<string>;
  #rest = "";
  constructor(stream: ReadableStream<Uint8Array<ArrayBuffer>>) {
    this.#reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  }
  async line(): Promise<string> {
    for (;;) {
      const i = this.#rest.indexOf("\n");
      if (i >= 0) {
        const line = this.#rest.slice(0, i);
        this.#rest = this.#rest.slice(i + 1);
        return line;
      }
      const { value, done } = await this.#reader.read();
      if (done) throw new Error("the watchers' process ended");
      this.#rest += value;
    }
  }
}

async function main(): Promise<void> {
  const childAt = Deno.args.indexOf("--watchers-child");
  if (childAt >= 0) {
    const [addr, count, name] = Deno.args.slice(childAt + 1);
    await watchersChild(addr, Number(count), name);
    return;
  }
  const watchers = flag("--watchers", 1000);
  const rounds = flag("--rounds", 3);
  const slices = flag("--slices", 6);
  const sliceSeconds = flag("--slice-seconds", 0.5);
  const json = Deno.args.includes("--json");

  // WATCH_FANOUT_PROF=DIR: the server runs with --cpu-prof into DIR (written when it stops).
  const profDir = Deno.env.get("WATCH_FANOUT_PROF");
  await using server = await spawnLockd({
    flags: SERVER_ARGS,
    fdLimit: watchers + 1024,
    ...(profDir ? { permissions: ["--allow-all", "--cpu-prof", `--cpu-prof-dir=${profDir}`] } : {}),
  });
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL(import.meta.url).pathname,
      "--watchers-child",
      server.addr,
      String(watchers),
      LOCK,
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const childIn = child.stdin.getWriter();
  const childOut = new LineReader(child.stdout);
  const tell = (line: string) => childIn.write(new TextEncoder().encode(line + "\n"));
  const holder = await BenchConn.session(server.addr, "holder");
  const results: Round[] = [];
  try {
    if ((await childOut.line()) !== "ready") throw new Error("watchers not ready");
    for (let round = 0; round < rounds; round++) {
      const bare: Side = { cycles: 0, elapsedS: 0, cpuS: 0 };
      const watched: Side = { cycles: 0, elapsedS: 0, cpuS: 0 };
      let events = 0;
      const latencies: number[] = [];
      for (let slice = 0; slice < slices; slice++) {
        await handoffs(holder, sliceSeconds, server.pid, bare, new Map());
        await tell("watch");
        if ((await childOut.line()) !== "watching") throw new Error("watch failed");
        const grants = new Map<number, number>();
        await handoffs(holder, sliceSeconds, server.pid, watched, grants);
        await tell("unwatch");
        const report = JSON.parse(await childOut.line()) as { events: number; samples: number[] };
        events += report.events;
        for (let i = 0; i < report.samples.length; i += 2) {
          const granted = grants.get(report.samples[i]);
          if (granted !== undefined) latencies.push(report.samples[i + 1] - granted);
        }
      }
      const sorted = sortedCopy(latencies);
      const result: Round = {
        handoffsPerS: bare.cycles / bare.elapsedS,
        handoffsPerSWatched: watched.cycles / watched.elapsedS,
        ratio: (watched.cycles / watched.elapsedS) / (bare.cycles / bare.elapsedS),
        cpuUsPerHandoff: bare.cpuS / bare.cycles * 1e6,
        cpuUsPerHandoffWatched: watched.cpuS / watched.cycles * 1e6,
        eventsPerWatcherPerS: events / watchers / watched.elapsedS,
        latencyP50Ms: quantile(sorted, 0.5),
        latencyP99Ms: quantile(sorted, 0.99),
        latencySamples: latencies.length,
      };
      results.push(result);
      if (!json) {
        console.log(
          `round ${round + 1}: ${result.handoffsPerS.toFixed(0)} hand-offs/s without watchers, ` +
            `${result.handoffsPerSWatched.toFixed(0)} with ${watchers}: ratio ` +
            `${result.ratio.toFixed(2)}; server CPU per hand-off ` +
            `${result.cpuUsPerHandoff.toFixed(0)} / ${
              result.cpuUsPerHandoffWatched.toFixed(0)
            } µs; ` +
            `${result.eventsPerWatcherPerS.toFixed(1)} events/s per watcher, latency p50 ` +
            `${result.latencyP50Ms.toFixed(1)} ms p99 ${result.latencyP99Ms.toFixed(1)} ms ` +
            `(${result.latencySamples} samples)`,
        );
      }
    }
  } finally {
    holder.close();
    await childIn.close().catch(() => {});
    await child.status;
    await server.stop("SIGTERM", 10_000);
  }
  const median = (pick: (r: Round) => number) => quantile(sortedCopy(results.map(pick)), 0.5);
  const summary = {
    watchers,
    rounds,
    slices,
    sliceSeconds,
    ratioMedian: median((r) => r.ratio),
    handoffsPerS: median((r) => r.handoffsPerS),
    handoffsPerSWatched: median((r) => r.handoffsPerSWatched),
    cpuUsPerHandoff: median((r) => r.cpuUsPerHandoff),
    cpuUsPerHandoffWatched: median((r) => r.cpuUsPerHandoffWatched),
    eventsPerWatcherPerS: median((r) => r.eventsPerWatcherPerS),
    latencyP50Ms: median((r) => r.latencyP50Ms),
    latencyP99Ms: median((r) => r.latencyP99Ms),
    rounds_: results,
  };
  if (json) {
    console.log(JSON.stringify(summary));
    return;
  }
  console.log(
    `medians: ratio ${summary.ratioMedian.toFixed(2)} (target ≥ 0.8); ` +
      `${summary.handoffsPerS.toFixed(0)} vs ${summary.handoffsPerSWatched.toFixed(0)} ` +
      `hand-offs/s; server CPU per hand-off ${summary.cpuUsPerHandoff.toFixed(0)} / ` +
      `${summary.cpuUsPerHandoffWatched.toFixed(0)} µs; ` +
      `${summary.eventsPerWatcherPerS.toFixed(1)} events/s per watcher; latency p50 ` +
      `${summary.latencyP50Ms.toFixed(1)} ms, p99 ${summary.latencyP99Ms.toFixed(1)} ms`,
  );
}

if (import.meta.main) await main();
