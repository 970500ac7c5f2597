/**
 * An audit reader that stops reading: `lockd serve` with the default `-audit-log -`, its
 * standard output a pipe this test does not read. Once the pipe is full (64 KiB of audit lines)
 * the server must keep serving: probes answer at once, /readyz says 503, heartbeats keep a
 * holder's lease, new ACQUIREs get AUDIT_UNAVAILABLE (0x0c). When the reader resumes,
 * everything recovers and every audit line is one whole record.
 */

import assert from "node:assert/strict";
import { BenchConn, type Reply } from "../../bench/bench_client.ts";
import { spawnLockd } from "../../bench/lockd_proc.ts";
import { connect } from "../../mod.ts";

const WRITE_TIMEOUT_MS = 300;
const LEASE_MS = 1_000;
/** A long name makes each record ~400 bytes, so the pipe fills after ~100 grants. */
const FILL_NAME = `stall/fill/${"x".repeat(300)}`;

/** GET with a bound; the answer and how long it took. */
async function get(
  url: string,
  timeoutMs = 1_000,
): Promise<{ status: number; body: string; ms: number }> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  const startedMs = performance.now();
  try {
    const response = await fetch(url, { signal: abort.signal });
    const body = await response.text();
    return { status: response.status, body, ms: performance.now() - startedMs };
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves with the promise's value, or "timeout" after `ms` (the promise keeps running). */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | "timeout"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<"timeout">((resolve) => timer = setTimeout(() => resolve("timeout"), ms)),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

async function until(check: () => Promise<boolean>, what: string, timeoutMs = 5_000) {
  const deadline = performance.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (performance.now() > deadline) throw new Error(`Timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function metricValue(exposition: string, sample: string): number {
  const line = exposition.split("\n").find((l) => l.startsWith(`${sample} `));
  return line === undefined ? NaN : Number(line.slice(sample.length + 1));
}

Deno.test("a stdout reader that stops never freezes the server: probes answer, heartbeats hold leases, grants pause with 0x0c, and all recovers whole", async () => {
  await using proc = await spawnLockd({
    http: true,
    stdout: "piped",
    flags: ["-audit-write-timeout", `${WRITE_TIMEOUT_MS}ms`, "-shutdown-grace", "0s"],
  });
  const ops = `http://${proc.opsAddr}`;
  let audit = "";
  let reading: Promise<void> | null = null;
  const filler = await BenchConn.session(proc.addr, "filler");
  const late = await BenchConn.session(proc.addr, "late");
  try {
    await using holder = await connect({ addr: proc.addr, reconnect: false });
    const held = await holder.acquire("stall/held", { leaseMs: LEASE_MS });

    /** The reply, or null once it is held back by a stuck audit write (/readyz says so). */
    const replyUnlessStuck = async (request: Promise<Reply>): Promise<Reply | null> => {
      const deadline = performance.now() + 20_000;
      while (performance.now() < deadline) {
        const reply = await within(request, 500);
        if (reply !== "timeout") return reply;
        // A slow machine, or a full pipe: only the second turns /readyz to 503.
        const readyz = await get(`${ops}/readyz`).catch((error) => {
          throw new Error(`the server does not answer /readyz while a reply waits: ${error}`);
        });
        if (readyz.status === 503) return null;
      }
      throw new Error("a reply neither came nor was held back by a failed audit sink");
    };

    // Grants and releases until a reply is held back: the pipe is full and a write is stuck.
    let stuck: Promise<Reply> | null = null;
    for (let i = 0; i < 5_000 && stuck === null; i++) {
      const acquired = filler.acquire(FILL_NAME, 0, 0);
      const reply = await replyUnlessStuck(acquired);
      if (reply === null) {
        stuck = acquired;
        break;
      }
      if (reply.type !== "acquired") throw new Error(`unexpected ${JSON.stringify(reply)}`);
      const released = filler.release(FILL_NAME, reply.token);
      if (await replyUnlessStuck(released) === null) stuck = released;
    }
    assert.ok(stuck !== null, "the audit pipe never filled");

    // The write timeout passed: a failed sink, grants paused; the server still answers.
    const readyz = await get(`${ops}/readyz`);
    assert.equal(readyz.body, "audit log unavailable");
    for (let i = 0; i < 5; i++) {
      const healthz = await get(`${ops}/healthz`);
      assert.equal(healthz.status, 200);
      assert.ok(healthz.ms < 500, `/healthz took ${healthz.ms.toFixed(0)} ms`);
    }
    const refused = await within(late.acquire("stall/new", 0, 0), 2_000);
    assert.ok(refused !== "timeout", "ACQUIRE got no answer");
    assert.equal(refused.type, "error");
    assert.equal(refused.type === "error" && refused.code, 0x0c);
    const metrics = (await get(`${ops}/metrics`)).body;
    assert.ok(metricValue(metrics, "lockd_audit_backlog_records") >= 1, "backlog gauge");
    assert.ok(metricValue(metrics, "lockd_audit_write_failures_total") >= 1, "failure counter");

    // Three leases long, the holder's heartbeats keep its lock.
    await new Promise((resolve) => setTimeout(resolve, 3 * LEASE_MS));
    assert.equal(held.lost.aborted, false, "the heartbeating holder lost its lock");
    assert.equal((await get(`${ops}/healthz`)).status, 200);

    // The reader resumes: the stuck reply arrives, grants resume, everything is written.
    reading = (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of proc.child.stdout) audit += decoder.decode(chunk, { stream: true });
    })();
    const resumed = await within(stuck, 5_000);
    assert.ok(resumed !== "timeout", "the reply held back by the stuck write never came");
    await until(async () => (await get(`${ops}/readyz`)).status === 200, "/readyz 200 again");
    const granted = await within(late.acquire("stall/new", 0, 0), 2_000);
    assert.ok(granted !== "timeout" && granted.type === "acquired", JSON.stringify(granted));
    assert.equal(held.lost.aborted, false);
    await held.release();
  } finally {
    filler.close();
    late.close();
    await Promise.all([filler.done, late.done]);
    // A server frozen on its audit write never handles SIGTERM (the code before the fix).
    if (await within(proc.stop("SIGTERM"), 10_000) === "timeout") {
      proc.child.kill("SIGKILL");
      await proc.stop();
    }
    if (reading === null) await proc.child.stdout.cancel();
    else await reading;
  }

  // Every line is one whole record; the holder's ownership ended graceful, not expired.
  assert.ok(audit.endsWith("\n"), "the audit output ends with a whole line");
  const records = audit.slice(0, -1).split("\n").map((line) => JSON.parse(line));
  assert.ok(records.length > 100, `${records.length} records`);
  const held = records.filter((r) => r.lock === "stall/held").map((r) => [r.event, r.reason]);
  assert.deepEqual(held, [["acquire", undefined], ["release", "graceful"]]);
  assert.deepEqual(records.filter((r) => r.reason === "expired"), []);
});
