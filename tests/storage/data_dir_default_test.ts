/**
 * Issue 9.10: durable fencing tokens are the default. `-data-dir` defaults to `lockd-data/` in
 * the working directory where the server starts (as etcd's `default.etcd`), so a server started
 * without flags (`deno task start`) survives a wall clock stepped back; running without durable
 * tokens needs `-data-dir ""`, which warns at start-up and writes nothing (it used to put the
 * `tokens` and `lock` files into the working directory).
 */

import assert from "node:assert/strict";
import { spawnLockd } from "../../bench/lockd_proc.ts";
import { connect } from "../../mod.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { DATA_DIR_DEFAULT, DEFAULT_CONFIG } from "../../src/config.ts";
import { startServer } from "../../src/server/start.ts";
import { TOKEN_FILE_NAME } from "../../src/storage/token_store.ts";
import { MemorySink } from "../helpers/memory_sink.ts";
import { captureDiagnosticLog } from "../log/capture.ts";

const NOT_DURABLE = /fencing tokens are not durable \(-data-dir ""\)/;

/** Runs `lockd serve` in `cwd` until it has started, then stops it; returns its standard error. */
async function serveIn(cwd: string, flags: string[]): Promise<string> {
  await using server = await spawnLockd({
    cwd,
    dataDir: null, // lockd's own default unless flags give one
    flags: ["-shutdown-grace", "0s", "-audit-log", "/dev/null", ...flags],
    startTimeoutMs: 20_000,
  });
  const status = await server.stop("SIGTERM", 20_000);
  const log = server.log();
  assert.equal(status.code, 0, log);
  return log;
}

async function entries(dir: string): Promise<string[]> {
  const names: string[] = [];
  for await (const entry of Deno.readDir(dir)) names.push(entry.name);
  return names.sort();
}

Deno.test("the default -data-dir is lockd-data/ in the working directory", () => {
  assert.equal(DEFAULT_CONFIG.dataDir, DATA_DIR_DEFAULT);
  assert.equal(DATA_DIR_DEFAULT, "lockd-data");
});

Deno.test('lockd serve without -data-dir keeps its tokens in lockd-data/ where it starts; with -data-dir "" it warns and writes nothing', async () => {
  const cwd = await Deno.makeTempDir({ prefix: "lockd-cwd-" });
  try {
    const durable = await serveIn(cwd, []);
    assert.deepEqual(await entries(cwd), [DATA_DIR_DEFAULT]);
    assert.deepEqual(await entries(`${cwd}/${DATA_DIR_DEFAULT}`), ["lock", TOKEN_FILE_NAME]);
    assert.doesNotMatch(durable, NOT_DURABLE);

    await Deno.remove(`${cwd}/${DATA_DIR_DEFAULT}`, { recursive: true });
    const none = await serveIn(cwd, ["-data-dir", ""]);
    assert.deepEqual(await entries(cwd), [], "no tokens or lock file in the working directory");
    const warning = none.split("\n").find((line) => NOT_DURABLE.test(line));
    assert.ok(warning, none);
    assert.match(warning, / WARN /);
  } finally {
    await Deno.remove(cwd, { recursive: true });
  }
});

Deno.test("a 10 s wall-clock step back between two runs on the default data dir: tokens keep growing", async () => {
  const cwd = await Deno.makeTempDir({ prefix: "lockd-cwd-" });
  const before = Deno.cwd();
  // The default is relative to the working directory where the server starts.
  Deno.chdir(cwd);
  try {
    const wallMs = Date.UTC(2026, 5, 1);
    const run = async (scheduler: ManualScheduler): Promise<number[]> => {
      const server = await startServer(
        { listen: "127.0.0.1:0", shutdownGraceMs: 0 },
        { scheduler, auditSink: new MemorySink() },
      );
      try {
        await using client = await connect({ addr: server.addr, reconnect: false });
        const tokens: number[] = [];
        for (let i = 0; i < 3; i++) {
          const lock = await client.acquire(`jobs/${i}`);
          tokens.push(lock.token);
          await lock.release();
        }
        return tokens;
      } finally {
        await server.shutdown();
      }
    };
    const first = await run(new ManualScheduler(wallMs));
    // The wall clock steps back 10 s (NTP, a VM restored): the clock floor is lower than before.
    const second = await run(new ManualScheduler(wallMs - 10_000));
    assert.ok(
      Math.min(...second) > Math.max(...first),
      `after the step back: ${second} must be above ${first}`,
    );
    assert.deepEqual(await entries(cwd), [DATA_DIR_DEFAULT]);
  } finally {
    Deno.chdir(before);
    await Deno.remove(cwd, { recursive: true });
  }
});

Deno.test('startServer with dataDir "" is no data dir: no files in the working directory, and a warning', async () => {
  using log = captureDiagnosticLog("warn", "json");
  const cwd = await Deno.makeTempDir({ prefix: "lockd-cwd-" });
  const before = Deno.cwd();
  Deno.chdir(cwd);
  try {
    const server = await startServer(
      { listen: "127.0.0.1:0", shutdownGraceMs: 0, dataDir: "" },
      { auditSink: new MemorySink() },
    );
    await server.shutdown();
    assert.deepEqual(await entries(cwd), []);
    assert.ok(log.records().some((r) => NOT_DURABLE.test(String(r.message))));
  } finally {
    Deno.chdir(before);
    await Deno.remove(cwd, { recursive: true });
  }
});
