/**
 * Client side of the many-sessions and deep-queue scenarios, run in its own
 * process (10,000+ sockets, raised descriptor limit) so that the benchmark's
 * own process stays small. Talks to bench/main.ts with JSON lines:
 * stdout = reports, stdin = commands ("drain", "quit").
 *
 *   deno run -A bench/sessions_worker.ts hold  ADDR COUNT LEASE_MS HEARTBEAT_MS
 *   deno run -A bench/sessions_worker.ts queue ADDR COUNT LOCK_NAME
 *   deno run -A bench/sessions_worker.ts open  ADDR COUNT [HEARTBEAT_MS]  (bare connections: the
 *     floor's; with HEARTBEAT_MS, each sends a HEARTBEAT frame that often, as `hold` does)
 */

import { BenchConn } from "./bench_client.ts";

const [mode, addr, countText, arg4, arg5] = Deno.args;
const count = Number(countText);
const encoder = new TextEncoder();
const report = (obj: unknown) => Deno.stdout.writeSync(encoder.encode(JSON.stringify(obj) + "\n"));

const conns: BenchConn[] = [];
const OPEN_BATCH = 200;

async function openSessions(): Promise<void> {
  for (let i = 0; i < count; i += OPEN_BATCH) {
    const batch = [];
    for (let j = i; j < Math.min(count, i + OPEN_BATCH); j++) {
      batch.push(BenchConn.session(addr, "w"));
    }
    conns.push(...(await Promise.all(batch)));
  }
}

/** A HEARTBEAT from every connection every `heartbeatMs`, spread evenly as independent clients. */
function heartbeats(heartbeatMs: number): ReturnType<typeof setInterval> {
  let next = 0;
  const perTick = Math.max(1, Math.ceil(conns.length / (heartbeatMs / 50)));
  return setInterval(() => {
    for (let k = 0; k < perTick; k++) {
      conns[next].heartbeat().catch(() => {});
      next = (next + 1) % conns.length;
    }
  }, 50);
}

async function commands(): Promise<string[]> {
  const lines: string[] = [];
  const decoder = new TextDecoderStream();
  let rest = "";
  for await (const chunk of Deno.stdin.readable.pipeThrough(decoder)) {
    rest += chunk;
    const parts = rest.split("\n");
    rest = parts.pop()!;
    lines.push(...parts);
    if (parts.includes("quit") || parts.includes("drain")) return lines;
  }
  return lines;
}

if (mode === "open") {
  const t0 = performance.now();
  for (let i = 0; i < count; i += OPEN_BATCH) {
    const batch = [];
    for (let j = i; j < Math.min(count, i + OPEN_BATCH); j++) batch.push(BenchConn.connect(addr));
    conns.push(...(await Promise.all(batch)));
  }
  report({ ready: true, sessions: conns.length, openMs: performance.now() - t0 });
  const timer = arg4 === undefined ? undefined : heartbeats(Number(arg4));
  await commands();
  clearInterval(timer);
} else if (mode === "hold") {
  const leaseMs = Number(arg4);
  const heartbeatMs = Number(arg5);
  const t0 = performance.now();
  await openSessions();
  await Promise.all(conns.map((c, i) => c.acquire(`s/${i}`, leaseMs, 0)));
  report({ ready: true, sessions: conns.length, openMs: performance.now() - t0 });
  const timer = heartbeats(heartbeatMs);
  await commands();
  clearInterval(timer);
} else if (mode === "queue") {
  const name = arg4;
  let queued = 0;
  let firstQueuedAt = 0;
  let allQueued: () => void = () => {};
  const allQueuedP = new Promise<void>((r) => (allQueued = r));
  await openSessions();
  const t0 = performance.now();
  let acquired = 0;
  let drainStart = 0;
  let drainDone: () => void = () => {};
  const drainDoneP = new Promise<void>((r) => (drainDone = r));
  for (const c of conns) {
    c.onQueued = () => {
      if (queued === 0) firstQueuedAt = performance.now();
      if (++queued === conns.length) allQueued();
    };
    c.acquire(name, 0, 0xffff_ffff).then(async (reply) => {
      if (reply.type !== "acquired") return;
      if (drainStart === 0) drainStart = performance.now();
      await c.release(name, reply.token).catch(() => {});
      if (++acquired === conns.length - 1) drainDone(); // one waiter is removed from the middle
    }, () => {});
  }
  await allQueuedP;
  const enqueueMs = performance.now() - t0;
  report({
    queued,
    enqueueMs,
    firstQueuedAfterMs: firstQueuedAt - t0,
    middleAddr: conns[Math.floor(conns.length / 2)].localAddr,
    addrs1000: conns[500].localAddr,
  });
  const cmds = await commands();
  if (cmds.includes("drain")) {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      drainDoneP,
      new Promise<void>((r) => (timer = setTimeout(r, 60_000))),
    ]);
    clearTimeout(timer);
    report({ drained: acquired, drainMs: performance.now() - drainStart });
    await commands();
  }
}
for (const c of conns) c.close();
await Promise.allSettled(conns.map((c) => c.done));
Deno.exit(0);
