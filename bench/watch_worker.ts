/**
 * The watchers of the watch scenario (bench/kinds_bench.ts), in a process of their own so that
 * decoding their events does not slow the holders the scenario measures. Talks to the bench with
 * JSON lines: stdout = reports, stdin = commands.
 *
 *   deno run -A bench/watch_worker.ts ADDR COUNT PATTERN SAMPLED
 *
 * Opens COUNT version-2 sessions, then answers "watch" (each session WATCHes PATTERN; reports when
 * every WATCHING is in), "unwatch", "latency FILE" (FILE: JSON {token: ms since the epoch the
 * holder read its ACQUIRED}; reports the quantiles of the delay from there to the first LOCK_STATE
 * of the SAMPLED first watchers that shows the token) and "quit".
 */

import { BenchConn, quantile } from "./bench_client.ts";

const [addr, countText, pattern, sampledText] = Deno.args;
const count = Number(countText);
const sampled = Number(sampledText);
const encoder = new TextEncoder();
const report = (obj: unknown) => Deno.stdout.writeSync(encoder.encode(JSON.stringify(obj) + "\n"));
const OPEN_BATCH = 200;
const HEARTBEAT_MS = 10_000;
const SAMPLES_MAX = 200_000;
const now = () => performance.timeOrigin + performance.now();

/** First sighting of each holder token, per sampled watcher: (token, ms since the epoch). */
class Sightings {
  tokens = new Float64Array(SAMPLES_MAX);
  at = new Float64Array(SAMPLES_MAX);
  length = 0;
  last = 0;
  add(token: number): void {
    if (token === this.last || this.length === SAMPLES_MAX) return;
    this.last = token;
    this.tokens[this.length] = token;
    this.at[this.length++] = now();
  }
}

const conns: BenchConn[] = [];
const sightings: Sightings[] = [];
const watchIds: number[] = [];
let events = 0;

const t0 = performance.now();
for (let i = 0; i < count; i += OPEN_BATCH) {
  const batch = [];
  for (let j = i; j < Math.min(count, i + OPEN_BATCH); j++) {
    batch.push(BenchConn.session(addr, `watcher-${j}`, undefined, 2));
  }
  conns.push(...(await Promise.all(batch)));
}
const heartbeat = setInterval(() => {
  for (const c of conns) c.heartbeat().catch(() => {});
}, HEARTBEAT_MS);
report({ ready: true, sessions: conns.length, openMs: performance.now() - t0 });

async function watchAll(): Promise<void> {
  const t = performance.now();
  const replies = conns.map((c, i) => {
    const mine = i < sampled ? (sightings[i] ??= new Sightings()) : null;
    const { id, reply } = c.watch(pattern, {
      onState(s) {
        events++;
        if (mine !== null && s.holders.length > 0) mine.add(s.holders[0].token);
      },
    });
    watchIds[i] = id;
    return reply;
  });
  const answers = await Promise.all(replies);
  const refused = answers.filter((r) => r.type !== "watching").length;
  report({ watching: conns.length - refused, refused, ms: performance.now() - t });
}

async function unwatchAll(): Promise<void> {
  await Promise.all(conns.map((c, i) => c.unwatch(watchIds[i])));
  report({ unwatched: conns.length, events });
}

async function latency(file: string): Promise<void> {
  const acquiredAt: Record<string, number> = JSON.parse(await Deno.readTextFile(file));
  const delays: number[] = [];
  for (const s of sightings) {
    for (let k = 0; k < s.length; k++) {
      const at = acquiredAt[String(s.tokens[k])];
      if (at !== undefined) delays.push(s.at[k] - at);
    }
    s.length = 0;
  }
  const sorted = Float64Array.from(delays).sort();
  report({
    samples: sorted.length,
    p50: quantile(sorted, 0.5),
    p99: quantile(sorted, 0.99),
    negative: delays.filter((d) => d < 0).length,
  });
}

let rest = "";
loop: for await (const chunk of Deno.stdin.readable.pipeThrough(new TextDecoderStream())) {
  rest += chunk;
  const lines = rest.split("\n");
  rest = lines.pop()!;
  for (const line of lines) {
    const [command, arg] = line.trim().split(" ");
    if (command === "watch") await watchAll();
    else if (command === "unwatch") await unwatchAll();
    else if (command === "latency") await latency(arg);
    else if (command === "quit") break loop;
  }
}
clearInterval(heartbeat);
for (const c of conns) c.close();
await Promise.allSettled(conns.map((c) => c.done));
Deno.exit(0);
