/**
 * Descriptor exhaustion and connection floods against the HTTP listeners
 * (issue 9 items 5 and 6), on a real `lockd serve` under a low `ulimit -n`:
 * nothing may end the process or stop a listener; failed accepts are counted
 * per listener and in total; once descriptors are free again, every listener
 * answers new connections.
 */

import assert from "node:assert/strict";
import { BenchConn } from "../../bench/bench_client.ts";
import { type LockdProc, spawnLockd } from "../../bench/lockd_proc.ts";

async function scrape(opsAddr: string): Promise<string> {
  const response = await fetch(`http://${opsAddr}/metrics`, { signal: AbortSignal.timeout(2_000) });
  return await response.text();
}

function sample(text: string, name: string, labels = ""): number {
  const prefix = labels === "" ? `${name} ` : `${name}{${labels}} `;
  const line = text.split("\n").find((l) => l.startsWith(prefix));
  return line === undefined ? NaN : Number(line.slice(prefix.length));
}

async function alive(proc: LockdProc): Promise<boolean> {
  const exited = await Promise.race([
    proc.child.status.then(() => true),
    new Promise<false>((resolve) => setTimeout(() => resolve(false), 50)),
  ]);
  return !exited;
}

/** Opens up to `n` TCP connections to `addr` (fewer when the backlog refuses more). */
async function flood(addr: string, n: number): Promise<Deno.TcpConn[]> {
  const i = addr.lastIndexOf(":");
  const conns: Deno.TcpConn[] = [];
  for (let k = 0; k < n; k++) {
    try {
      conns.push(
        await Deno.connect({ hostname: addr.slice(0, i), port: Number(addr.slice(i + 1)) }),
      );
    } catch {
      break;
    }
  }
  return conns;
}

/** GET on a fresh connection; the status, or null when no answer came in time. */
async function probe(addr: string, path: string, timeoutMs = 1_000): Promise<number | null> {
  try {
    const response = await fetch(`http://${addr}${path}`, {
      signal: AbortSignal.timeout(timeoutMs),
    });
    await response.body?.cancel();
    return response.status;
  } catch {
    return null;
  }
}

async function until<T>(what: string, timeoutMs: number, fn: () => Promise<T | null>): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value !== null) return value;
    if (performance.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

Deno.test("with the protocol port's descriptors exhausted, probes and scrapes on new connections do not kill lockd; the ops listener recovers", async () => {
  await using proc = await spawnLockd({
    fdLimit: 64,
    http: true,
    flags: ["-audit-log", "/dev/null"],
  });
  const conns = await flood(proc.addr, 120);
  try {
    await new Promise((r) => setTimeout(r, 300));
    // Each of these waits in the ops listener's backlog while its accept fails.
    for (let i = 0; i < 5; i++) {
      await probe(proc.opsAddr!, i % 2 === 0 ? "/healthz" : "/metrics", 300);
      await probe(proc.adminAddr!, "/api/info", 300);
    }
    assert.ok(await alive(proc), "lockd exited while accepts failed");
  } finally {
    for (const c of conns) c.close();
  }
  assert.equal(
    await until("/healthz on a new connection", 10_000, () => probe(proc.opsAddr!, "/healthz")),
    200,
  );
  assert.equal(
    await until("/api/info on a new connection", 10_000, () => probe(proc.adminAddr!, "/api/info")),
    200,
  );
  const text = await scrape(proc.opsAddr!);
  const total = sample(text, "lockd_accept_errors_total");
  const protocol = sample(text, "lockd_listener_accept_errors_total", 'listener="protocol"');
  const ops = sample(text, "lockd_listener_accept_errors_total", 'listener="ops"');
  const admin = sample(text, "lockd_listener_accept_errors_total", 'listener="admin"');
  assert.ok(protocol > 0, `protocol accept errors ${protocol}`);
  assert.ok(ops > 0, `ops accept errors ${ops}`);
  assert.equal(total, protocol + ops + admin, "the unlabelled total counts every listener");
  assert.ok(await alive(proc));
});

Deno.test("150 idle connections to the admin port and 150 to the ops port under ulimit -n 128: lockd lives, the guard closes them, both listeners serve again", async () => {
  await using proc = await spawnLockd({
    fdLimit: 128,
    http: true,
    flags: ["-audit-log", "/dev/null", "-http-header-timeout", "1s"],
  });
  const session = await BenchConn.session(proc.addr, "before");
  const conns = [...await flood(proc.adminAddr!, 150), ...await flood(proc.opsAddr!, 150)];
  try {
    await new Promise((r) => setTimeout(r, 500));
    assert.ok(await alive(proc), "lockd exited under the flood");
    // The guard closes connections that send nothing after the header timeout.
    let closed = 0;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const giveUp = new Promise<"open">((r) => timer = setTimeout(() => r("open"), 8_000));
    await Promise.all(conns.map(async (c) => {
      const n = await Promise.race([c.read(new Uint8Array(16)).catch(() => null), giveUp]);
      if (n === null) closed++;
    }));
    clearTimeout(timer);
    assert.ok(closed > 0, "no idle connection was closed by the server");
  } finally {
    for (const c of conns) {
      try {
        c.close();
      } catch {
        // Closed by the server.
      }
    }
  }
  assert.equal(await until("/healthz", 10_000, () => probe(proc.opsAddr!, "/healthz")), 200);
  assert.equal(await until("/api/info", 10_000, () => probe(proc.adminAddr!, "/api/info")), 200);
  const text = await scrape(proc.opsAddr!);
  const dropped = sample(
    text,
    "lockd_http_connections_dropped_total",
    'listener="admin",reason="header_timeout"',
  ) +
    sample(text, "lockd_http_connections_dropped_total", 'listener="ops",reason="header_timeout"');
  assert.ok(dropped > 0, `header-timeout drops ${dropped}`);
  // The session opened before the flood still works.
  const a = await session.acquire("http/flood", 5_000, 0);
  assert.equal(a.type, "acquired");
  session.close();
  await session.done;
  assert.ok(await alive(proc));
});

Deno.test("the internal HTTP server that dies on EMFILE is started again and serves", async () => {
  // A script that leaves exactly one descriptor free, so the guard's connection to the internal
  // server takes it and the internal server's accept fails: Deno.serve stops for good.
  const script = new URL("./fixtures/backend_restart.ts", import.meta.url).pathname;
  const child = new Deno.Command("sh", {
    args: ["-c", 'ulimit -n 64; exec "$0" run -A "$1"', Deno.execPath(), script],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
  const output = await child.output();
  clearTimeout(timer);
  const stdout = new TextDecoder().decode(output.stdout);
  assert.equal(output.code, 0, `${stdout}\n${new TextDecoder().decode(output.stderr)}`);
  const result = JSON.parse(stdout.trim().split("\n").pop()!);
  // The request that took the last descriptor gets 503 (the guard could not connect) or no
  // answer at all (the internal server died with its connection pending); never a crash.
  assert.ok([503, null].includes(result.duringStatus), `status ${result.duringStatus}`);
  assert.equal(result.afterStatus, 200, "served again after the restart");
  assert.ok(result.restarts >= 1, `restarts ${result.restarts}`);
});
