/**
 * A standard error that nobody reads: `lockd serve -log-level debug` (a line per frame) whose
 * stderr pipe this test stops reading once the server has started. The diagnostic log used to
 * write standard error synchronously, so a full pipe froze the whole server (as the audit log on
 * standard output did before issue 9.7). Now lines wait in a bounded buffer, the excess is
 * dropped and counted (`lockd_log_lines_dropped_total`), the server keeps serving, and once the
 * pipe is read again one line says how many were dropped; the process still exits promptly.
 */

import assert from "node:assert/strict";
import { BenchConn } from "../../bench/bench_client.ts";
import { type LockdProc, spawnLockd } from "../../bench/lockd_proc.ts";
import { connect } from "../../mod.ts";

const LEASE_MS = 1_000;

async function get(url: string, timeoutMs = 2_000): Promise<{ status: number; body: string }> {
  const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  return { status: response.status, body: await response.text() };
}

function metricValue(exposition: string, sample: string): number {
  const line = exposition.split("\n").find((l) => l.startsWith(`${sample} `));
  return line === undefined ? NaN : Number(line.slice(sample.length + 1));
}

/** `lockd serve -log-level debug` whose standard error is read only until it has started. */
function spawnServer(): Promise<LockdProc> {
  return spawnLockd({
    flags: [
      "-ops-listen",
      "127.0.0.1:0",
      "-log-level",
      "debug",
      "-log-format",
      "json",
      "-audit-log",
      "/dev/null",
      "-shutdown-grace",
      "0s",
    ],
    stderrAfterStart: "handed-over",
  });
}

/** Acquire/release cycles (four debug lines each) until the server reports dropped lines. */
async function fillUntilDropped(fill: BenchConn, ops: string): Promise<number> {
  // 64 KiB of pipe and 1 MiB of buffer fill after some 1,100 cycles. Every 100 cycles the
  // server must still answer a scrape.
  for (let cycle = 0; cycle < 20_000; cycle++) {
    const reply = await fill.acquire(`stderr/fill/${cycle % 7}`, 0, 0);
    assert.equal(reply.type, "acquired", JSON.stringify(reply));
    if (reply.type === "acquired") await fill.release(`stderr/fill/${cycle % 7}`, reply.token);
    if (cycle % 100 === 99) {
      const metrics = await get(`${ops}/metrics`).catch((error) => {
        throw new Error(`no scrape after ${cycle + 1} cycles: the server froze (${error})`);
      });
      const dropped = metricValue(metrics.body, "lockd_log_lines_dropped_total");
      if (dropped > 0) return dropped;
    }
  }
  throw new Error("no line was dropped: the pipe never filled?");
}

Deno.test("a standard error nobody reads never freezes the server: lines are dropped and counted, and reported once it is read again", async () => {
  // Read until the server has started, then stop reading: the pipe fills up.
  await using server = await spawnServer();
  const killer = setTimeout(() => server.child.kill("SIGKILL"), 60_000);
  const reader = server.stderrReader!;
  const { addr } = server;
  const ops = `http://${server.opsAddr}`;
  let text = "";
  let filler: BenchConn | null = null;
  try {
    await using holder = await connect({ addr, reconnect: false });
    const held = await holder.acquire("stderr/held", { leaseMs: LEASE_MS });
    const fill = await BenchConn.session(addr, "filler");
    filler = fill;
    await fillUntilDropped(fill, ops);

    // Still serving while standard error is stuck: probes, and a holder through three leases.
    const healthStartedMs = performance.now();
    assert.equal((await get(`${ops}/healthz`)).status, 200);
    assert.ok(performance.now() - healthStartedMs < 1_000);
    await new Promise((resolve) => setTimeout(resolve, 3 * LEASE_MS));
    assert.equal(held.lost.aborted, false, "the heartbeating holder lost its lock");

    // Read again: the lines that fit come out whole, then one line says how many were dropped.
    text = "";
    const deadline = performance.now() + 10_000;
    while (!text.includes("diagnostic log lines were dropped")) {
      if (performance.now() > deadline) throw new Error("no line about the dropped lines");
      const { value, done } = await reader.read();
      if (done) throw new Error("standard error ended");
      text += value;
      // One more frame, so the server writes again once the pipe drains.
      if (!text.includes("diagnostic log lines were dropped")) {
        const poke = await fill.acquire("stderr/poke", 0, 0);
        if (poke.type === "acquired") await fill.release("stderr/poke", poke.token);
      }
    }
    // Every whole line parses (the first may be the end of a line read before the stall).
    const records = text.split("\n").slice(1, -1).map((line) => JSON.parse(line));
    const notices = records.filter((record) =>
      record.message === "diagnostic log lines were dropped: standard error was not read"
    );
    assert.ok(notices.length >= 1);
    for (const notice of notices) assert.equal(notice.level, "WARN");
    const noticed = notices.reduce((sum, notice) => sum + notice.dropped_lines, 0);
    const counted = metricValue(
      (await get(`${ops}/metrics`)).body,
      "lockd_log_lines_dropped_total",
    );
    assert.ok(noticed >= 1 && noticed <= counted, `noticed ${noticed}, counted ${counted}`);
    await held.release();
  } finally {
    filler?.close();
    await filler?.done;
    // A server frozen on standard error (the code before the fix) never handles SIGTERM.
    const stopping = server.stop("SIGTERM", 10_000);
    // Whatever is left is read to the end: the process must exit within a bound.
    const rest = (async () => {
      for (;;) {
        const { done } = await reader.read();
        if (done) return;
      }
    })();
    const status = await stopping;
    await rest;
    clearTimeout(killer);
    assert.equal(status.code, 0, `exit status ${status.code} (signal ${status.signal})`);
  }
});

Deno.test("with a standard error nobody reads, SIGTERM still ends the process: the buffered lines get a bounded time", async () => {
  await using server = await spawnServer();
  const { child } = server;
  const killer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  const ops = `http://${server.opsAddr}`;
  try {
    const addr = server.addr;
    const fill = await BenchConn.session(addr, "filler");
    await fillUntilDropped(fill, ops);
    fill.close();
    await fill.done;
    // Nobody reads standard error any more; the shutdown story and the buffer wait at exit for
    // at most DIAGNOSTIC_LOG_FLUSH_MS.
    const stoppingMs = performance.now();
    child.kill("SIGTERM");
    let bound: ReturnType<typeof setTimeout> | undefined;
    const exited = await Promise.race([
      child.status,
      new Promise<null>((resolve) => bound = setTimeout(() => resolve(null), 10_000)),
    ]);
    clearTimeout(bound);
    assert.ok(exited !== null, "the process did not exit within 10 s of SIGTERM");
    assert.equal(exited.code, 0);
    assert.ok(performance.now() - stoppingMs < 10_000);
  } finally {
    clearTimeout(killer);
  }
});
