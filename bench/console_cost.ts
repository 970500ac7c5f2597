/**
 * What the operator console costs the server at 20,000 locks (issue 15): a real `lockd serve`
 * with 20,000 held locks (and queues), then the requests a console makes, timed from here and
 * charged in server CPU time (from /proc), against what polling the whole table would cost.
 * With Chromium present (`/usr/bin/chromium`), also the time from an acquire to the new lock on
 * the page.
 *
 *   deno run -A bench/console_cost.ts [-locks 20000] [-rounds 40]
 *
 * Prints one JSON document. The figures are noisy on a shared machine: compare them within a run.
 */

import { connect, type Lock } from "../mod.ts";
import { parseFlags } from "../src/cli/flags.ts";
import { cpuSeconds, rssBytes, spawnLockd } from "./lockd_proc.ts";

const { values } = parseFlags(Deno.args, [
  { name: "locks", kind: "int", help: "locks to hold" },
  { name: "rounds", kind: "int", help: "requests per measured kind" },
]);
const LOCKS = (values.get("locks") as number | undefined) ?? 20_000;
const ROUNDS = (values.get("rounds") as number | undefined) ?? 40;
const LOCKS_PER_CLIENT = 1_000;
const WAITERS = 2_000;

const server = await spawnLockd({ http: true });
const admin = `http://${server.adminAddr}`;
const clients: Awaited<ReturnType<typeof connect>>[] = [];
const held: Lock[] = [];
try {
  // 20,000 locks in 20 sessions; 2,000 of them with a waiter each (2 more sessions).
  const holders = Math.ceil(LOCKS / LOCKS_PER_CLIENT);
  const loadStartedMs = performance.now();
  await Promise.all(Array.from({ length: holders }, async (_, c) => {
    const client = await connect({ addr: server.addr, clientName: `holder-${c}` });
    clients.push(client);
    const count = Math.min(LOCKS_PER_CLIENT, LOCKS - c * LOCKS_PER_CLIENT);
    const locks = await Promise.all(
      Array.from(
        { length: count },
        (_, i) => client.acquire(`load/c${c}/lock${i}`, { leaseMs: 300_000 }),
      ),
    );
    held.push(...locks);
  }));
  for (let w = 0; w < WAITERS / LOCKS_PER_CLIENT; w++) {
    const client = await connect({ addr: server.addr, clientName: `waiter-${w}` });
    clients.push(client);
    for (let i = 0; i < LOCKS_PER_CLIENT; i++) {
      client.acquire(`load/c${w}/lock${i}`, { leaseMs: 300_000 }).catch(() => {});
    }
  }
  const info = await (await fetch(`${admin}/api/info`)).json();
  while ((await (await fetch(`${admin}/api/info`)).json()).locks < LOCKS) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const loadedMs = performance.now() - loadStartedMs;
  await new Promise((resolve) => setTimeout(resolve, 1_000)); // let the acquires' replies settle

  /** Runs `path` `ROUNDS` times one after another; latency, bytes and server CPU per request. */
  const measure = async (path: string) => {
    const cpuBefore = cpuSeconds(server.pid);
    const startedMs = performance.now();
    let bytes = 0;
    const latencies: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const t0 = performance.now();
      const body = await (await fetch(`${admin}${path}`)).arrayBuffer();
      latencies.push(performance.now() - t0);
      bytes = body.byteLength;
    }
    const wallMs = performance.now() - startedMs;
    const cpuMs = (cpuSeconds(server.pid) - cpuBefore) * 1_000;
    latencies.sort((a, b) => a - b);
    return {
      path,
      bytes,
      median_ms: round(latencies[Math.floor(ROUNDS / 2)]),
      p90_ms: round(latencies[Math.floor(ROUNDS * 0.9)]),
      server_cpu_ms_per_request: round(cpuMs / ROUNDS),
      wall_ms: round(wallMs),
    };
  };

  // The server's CPU with nobody asking (heartbeats of 22 sessions), to subtract by eye.
  const idleCpuBefore = cpuSeconds(server.pid);
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  const idleCpuMsPerS = round((cpuSeconds(server.pid) - idleCpuBefore) * 1_000 / 2);

  const requests = [];
  for (
    const path of [
      "/api/info",
      "/api/locks?sort=name&offset=0&limit=50",
      "/api/locks?sort=-held_for&offset=0&limit=50",
      "/api/locks?sort=-waiters&offset=0&limit=50",
      "/api/locks?sort=name&offset=19950&limit=50",
      `/api/locks?match=${encodeURIComponent("load/c7/**")}&sort=-held_for&limit=50`,
      `/api/locks/${encodeURIComponent("load/c1/lock1")}`,
      "/api/history",
      "/api/locks",
    ]
  ) {
    requests.push(await measure(path));
  }

  // An event stream open while nothing changes, then while locks change all the time.
  const stream = await fetch(`${admin}/api/events`);
  const reader = stream.body!.getReader();
  let streamBytes = 0;
  const reading = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      streamBytes += value.byteLength;
    }
  })();
  const quietCpuBefore = cpuSeconds(server.pid);
  const quietBytesBefore = streamBytes;
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  const quiet = {
    server_cpu_ms_per_s: round((cpuSeconds(server.pid) - quietCpuBefore) * 1_000 / 3),
    stream_bytes_per_s: round((streamBytes - quietBytesBefore) / 3),
  };
  const churner = await connect({ addr: server.addr, clientName: "churn" });
  clients.push(churner);
  /** Server CPU while one client acquires and releases a lock as fast as it can, for 3 s. */
  const churnCost = async () => {
    let churning = true;
    let churns = 0;
    const churn = (async () => {
      while (churning) {
        await (await churner.acquire("churn/x")).release();
        churns++;
      }
    })();
    const cpuBefore = cpuSeconds(server.pid);
    const bytesBefore = streamBytes;
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    const cost = {
      acquires_per_s: round(churns / 3),
      server_cpu_ms_per_s: round((cpuSeconds(server.pid) - cpuBefore) * 1_000 / 3),
      stream_bytes_per_s: round((streamBytes - bytesBefore) / 3),
    };
    churning = false;
    await churn;
    return cost;
  };
  const busy = await churnCost();
  await reader.cancel();
  await reading.catch(() => {});

  const browser = await browserLatency(server.adminAddr!, server.addr, churnCost);
  console.log(JSON.stringify(
    {
      locks: info.locks === undefined ? LOCKS : LOCKS,
      waiters: WAITERS,
      sessions: clients.length,
      load_ms: round(loadedMs),
      server_rss_mib: round(rssBytes(server.pid) / 2 ** 20),
      idle_server_cpu_ms_per_s: idleCpuMsPerS,
      requests,
      event_stream_quiet: quiet,
      event_stream_while_locks_change: busy,
      browser,
    },
    null,
    2,
  ));
} finally {
  for (const client of clients) await client.close().catch(() => {});
  await server.stop("SIGKILL");
}

function round(value: number): number {
  return Math.round(value * 100) / 100;
}

/** Time from an acquire until the console shows the lock, in Chromium (null without it). */
async function browserLatency(
  adminAddr: string,
  addr: string,
  churnCost: () => Promise<Record<string, number>>,
) {
  try {
    await Deno.stat("/usr/bin/chromium");
  } catch {
    return null;
  }
  const { chromium } = await import("playwright-core");
  const profile = await Deno.makeTempDir();
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  const client = await connect({ addr, clientName: "browser-probe" });
  try {
    const page = context.pages()[0] ?? await context.newPage();
    const loadStartedMs = performance.now();
    await page.goto(`http://${adminAddr}/`);
    await page.locator('#connection[data-state="live"]').waitFor();
    await page.locator("#locks-body tr").first().waitFor();
    const pageLoadMs = performance.now() - loadStartedMs;
    // Sort by held-for ascending (shortest first) puts a new lock on the first page.
    await page.getByRole("button", { name: "Held for" }).click(); // descending
    await page.getByRole("button", { name: "Held for" }).click(); // ascending
    await page.locator('th[data-sort="held_for"][aria-sort="ascending"]').waitFor();
    const shows: number[] = [];
    for (let i = 0; i < 5; i++) {
      const name = `probe/${i}`;
      const startedMs = performance.now();
      const lock = await client.acquire(name);
      await page.locator(`button[aria-label="Show lock ${name}"]`).waitFor();
      shows.push(round(performance.now() - startedMs));
      await lock.release();
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
    // The same churn with the console open (it refreshes its page after every change it hears of).
    const withConsole = await churnCost();
    return {
      page_load_ms: round(pageLoadMs),
      acquire_to_shown_ms: shows,
      churn_with_console_open: withConsole,
    };
  } finally {
    await client.close();
    await context.close();
    await Deno.remove(profile, { recursive: true });
  }
}
