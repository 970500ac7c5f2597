/**
 * Descriptor exhaustion: the server runs under `ulimit -n 64`; connections
 * past the limit make accept fail. The failures are counted
 * (lockd_accept_errors_total), the acceptor backs off instead of spinning
 * (little CPU while it fails), a session opened before keeps working, and
 * accepting resumes once descriptors are free again.
 */

import assert from "node:assert/strict";
import { BenchConn } from "../../bench/bench_client.ts";
import { cpuSeconds, spawnLockd } from "../../bench/lockd_proc.ts";

const FD_LIMIT = 64;
const FLOOD = 120;

async function metric(opsAddr: string, name: string): Promise<number> {
  const text = await (await fetch(`http://${opsAddr}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
  return line === undefined ? NaN : Number(line.split(" ").pop());
}

Deno.test("under a low descriptor limit, accept errors are counted, the acceptor backs off, and service resumes", async () => {
  await using proc = await spawnLockd({
    fdLimit: FD_LIMIT,
    http: true,
    flags: ["-audit-log", "/dev/null"],
  });
  const existing = await BenchConn.session(proc.addr, "existing");
  // A probe connection to the ops server opened before the flood (as a monitoring agent's
  // keep-alive connection would be): /healthz must keep answering on it.
  const [opsHost, opsPort] = proc.opsAddr!.split(":");
  const probe = await Deno.connect({ hostname: opsHost, port: Number(opsPort) });
  const healthz = async () => {
    await probe.write(new TextEncoder().encode("GET /healthz HTTP/1.1\r\nHost: lockd\r\n\r\n"));
    const buffer = new Uint8Array(1024);
    const n = await probe.read(buffer);
    return new TextDecoder().decode(buffer.subarray(0, n ?? 0));
  };
  assert.match(await healthz(), /^HTTP\/1\.1 200[^]*\r\n\r\nok$/);
  const flood: Deno.TcpConn[] = [];
  try {
    const [hostname, port] = proc.addr.split(":");
    for (let i = 0; i < FLOOD; i++) {
      // The kernel completes the handshake from the listen backlog even when
      // accept() fails, so connect succeeds (or, with a full backlog, is refused).
      try {
        flood.push(await Deno.connect({ hostname, port: Number(port) }));
      } catch {
        break;
      }
    }
    // Let the acceptor hit EMFILE, then measure its CPU while it keeps failing.
    await new Promise((r) => setTimeout(r, 300));
    const cpu0 = cpuSeconds(proc.pid);
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, 2_000));
    const cpuShare = (cpuSeconds(proc.pid) - cpu0) / ((performance.now() - t0) / 1000);
    assert.ok(
      cpuShare < 0.3,
      `server used ${(cpuShare * 100).toFixed(0)}% of a core while failing`,
    );

    // Health probes keep answering while accepts fail.
    assert.match(await healthz(), /^HTTP\/1\.1 200[^]*\r\n\r\nok$/);

    // The session opened before the flood still works.
    const a = await existing.acquire("fd/existing", 5_000, 0);
    assert.equal(a.type, "acquired");
    if (a.type === "acquired") {
      assert.equal((await existing.release("fd/existing", a.token)).type, "released");
    }
  } finally {
    for (const c of flood) c.close();
    probe.close();
  }

  // Descriptors free again: a new session is accepted and served.
  let fresh: BenchConn | null = null;
  const deadline = performance.now() + 5_000;
  while (fresh === null && performance.now() < deadline) {
    try {
      fresh = await BenchConn.session(proc.addr, "fresh");
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  assert.ok(fresh !== null, "no new session accepted after descriptors were freed");
  const b = await fresh.acquire("fd/fresh", 5_000, 0);
  assert.equal(b.type, "acquired");
  fresh.close();
  await fresh.done;

  assert.ok(proc.opsAddr !== null, "ops server address not reported");
  const errors = await metric(proc.opsAddr, "lockd_accept_errors_total");
  assert.ok(errors > 0, `lockd_accept_errors_total is ${errors}`);
  existing.close();
  await existing.done;
});
