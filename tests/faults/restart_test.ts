/**
 * Restart: SIGKILL a `lockd serve -data-dir D` subprocess under load, start
 * it again on the same directory: every token issued after the restart is
 * larger than every token any client saw before it.
 */

import assert from "node:assert/strict";
import { BenchConn } from "../../bench/bench_client.ts";
import { spawnLockd } from "../../bench/lockd_proc.ts";

const CLIENTS = 8;

async function load(addr: string, ms: number): Promise<number[]> {
  const tokens: number[] = [];
  const conns = await Promise.all(Array.from({ length: CLIENTS }, () => BenchConn.session(addr)));
  const until = performance.now() + ms;
  await Promise.all(conns.map(async (c, i) => {
    try {
      for (let k = 0; k < 100_000 && performance.now() < until; k++) {
        const a = await c.acquire(`r/${i % 3}`, 5_000, 2_000);
        if (a.type !== "acquired") continue;
        tokens.push(a.token);
        await c.release(`r/${i % 3}`, a.token);
      }
    } catch {
      // the server was killed under us
    }
  }));
  for (const c of conns) c.close();
  await Promise.all(conns.map((c) => c.done));
  return tokens;
}

Deno.test("tokens issued after a SIGKILL restart on the same data dir exceed every earlier token", async () => {
  const dataDir = await Deno.makeTempDir({ prefix: "lockd-restart-" });
  try {
    let before: number[] = [];
    for (let round = 0; round < 2; round++) {
      const proc = await spawnLockd({
        flags: ["-data-dir", dataDir, "-audit-log", "/dev/null"],
      });
      try {
        // Kill while clients are mid-loop.
        const loading = load(proc.addr, 3_000);
        await new Promise((r) => setTimeout(r, 700));
        await proc.stop("SIGKILL");
        const seen = await loading;
        assert.ok(seen.length > 0, `round ${round}: no tokens issued`);
        if (before.length > 0) {
          const oldMax = Math.max(...before);
          const newMin = Math.min(...seen);
          assert.ok(newMin > oldMax, `token ${newMin} after restart ≤ ${oldMax} before it`);
        }
        before = before.concat(seen);
      } finally {
        await proc.stop("SIGKILL");
      }
    }
  } finally {
    await Deno.remove(dataDir, { recursive: true });
  }
});
