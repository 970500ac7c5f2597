/**
 * Issue 9.9: a token store that fails during a hand-off used to leave the lock stuck (the
 * waiter never got it, even after the disk recovered), force-release answered 409 blaming the
 * audit log, and /readyz stayed 200. Now the server retries with back-off until a reservation
 * succeeds, /readyz is 503 while grants are blocked for any reason, and every refusal names its
 * true cause. Start-up errors of the data dir are one line and exit 1.
 */

import assert from "node:assert/strict";
import { runLockd } from "../../bench/lockd_proc.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { TokenIssuer } from "../../src/core/tokens.ts";
import { TOKEN_RETRY_MS_MAX, TOKEN_RETRY_MS_MIN } from "../../src/limits.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { startServer } from "../../src/server/start.ts";
import { http } from "../admin/admin_helpers.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { startTestServer } from "../helpers/start_server.ts";
import { assertProblem } from "../helpers/problem.ts";

Deno.test("a token store that fails during a hand-off: /readyz 503, a 409 naming the token store, and the waiter gets the lock when a retry succeeds", async () => {
  let failing = false;
  let attempts = 0;
  const tokens = new TokenIssuer(1_000, 1, () => {
    attempts++;
    if (failing) throw new Error("No space left on device (os error 28)");
  });
  const scheduler = new ManualScheduler();
  await using t = await startTestServer(
    { opsListen: "127.0.0.1:0", adminListen: "127.0.0.1:0", ioTimeoutMs: 3_600_000 },
    { scheduler, tokens },
  );
  await using owner = await RawClient.session(t.addr);
  await using waiter = await RawClient.session(t.addr);
  await owner.send({ type: "acquire", requestId: 1, name: "x", leaseMs: 0, waitMs: 0 });
  const granted = await owner.next();
  assert.ok(granted?.type === "acquired");
  await waiter.send({ type: "acquire", requestId: 1, name: "x", leaseMs: 0, waitMs: 0xffff_ffff });
  assert.equal((await waiter.next())?.type, "queued");

  failing = true;
  await owner.send({ type: "release", requestId: 2, name: "x", token: granted.token });
  assert.deepEqual(await owner.next(), { type: "released", requestId: 2, name: "x" });
  assert.equal(t.server.context.engine.getLock("x")?.holder, null, "the hand-off failed");

  const ready = await http(t.server.opsAddr!, "GET", "/readyz");
  assert.deepEqual([ready.status, ready.text], [503, "token store unavailable"]);
  assert.equal((await http(t.server.opsAddr!, "GET", "/healthz")).status, 200);
  const forced = await http(t.server.adminAddr!, "POST", "/api/locks/x/release");
  const { detail } = await assertProblem(forced, 409, undefined, {
    detail: /no fencing token can be reserved: No space left on device/,
  });
  assert.doesNotMatch(detail, /audit/);
  await owner.send({ type: "acquire", requestId: 3, name: "y", leaseMs: 0, waitMs: 0 });
  const refused = await owner.next();
  assert.ok(refused?.type === "error");
  assert.equal(refused.code, WIRE_CODES.TOKENS_UNAVAILABLE.code);

  // Retries back off: 100 ms, 200 ms, 400 ms, ... up to 5 s, each a reservation attempt.
  const before = attempts;
  scheduler.advance(TOKEN_RETRY_MS_MIN);
  assert.equal(attempts, before + 1);
  scheduler.advance(TOKEN_RETRY_MS_MIN * 2);
  assert.equal(attempts, before + 2);
  scheduler.advance(TOKEN_RETRY_MS_MAX * 4);
  assert.ok(attempts <= before + 2 + 6, `${attempts - before} attempts: backed off`);

  failing = false;
  scheduler.advance(TOKEN_RETRY_MS_MAX);
  const handedOver = await waiter.next();
  assert.ok(handedOver?.type === "acquired", JSON.stringify(handedOver));
  assert.ok(handedOver.token > granted.token);
  assert.equal((await http(t.server.opsAddr!, "GET", "/readyz")).status, 200);
});

Deno.test("start-up: a data dir that cannot be written stops the start with one line", async () => {
  const dir = await Deno.makeTempDir();
  try {
    // Root ignores permissions; a directory where the temporary token file goes cannot be
    // opened for writing by anyone.
    await Deno.mkdir(`${dir}/tokens.tmp`);
    await assert.rejects(
      startServer({ listen: "127.0.0.1:0", dataDir: dir, auditLog: `${dir}/audit` }),
      (error: Error) => {
        assert.match(error.message, /^cannot write the token file in -data-dir ".*": /);
        assert.equal(error.message.includes("\n"), false);
        return true;
      },
    );
    const file = `${dir}/plain-file`;
    await Deno.writeTextFile(file, "");
    await assert.rejects(
      startServer({ listen: "127.0.0.1:0", dataDir: file, auditLog: `${dir}/audit` }),
      /^Error: cannot use -data-dir ".*plain-file": /,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("start-up: a second server on the same data dir is refused; the dir is free again after a shutdown", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const first = await startTestServer({ dataDir: dir });
    await assert.rejects(
      startTestServer({ dataDir: dir }),
      /is in use by another lockd server \(it holds .*\/lock\)/,
    );
    await first.server.shutdown();
    await using again = await startTestServer({ dataDir: dir });
    assert.ok(again.addr);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("start-up: an exhausted token space stops the start", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(
      `${dir}/tokens`,
      `lockd-tokens 1\nhigh_water ${Number.MAX_SAFE_INTEGER}\n`,
    );
    await assert.rejects(
      startTestServer({ dataDir: dir }),
      /fencing tokens are exhausted: the last token issued is 9007199254740991/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("start-up errors of lockd serve are one line on standard error and exit 1", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await using first = await startTestServer({ dataDir: dir });
    const output = await runLockd(["serve", "-listen", "127.0.0.1:0", "-data-dir", dir]);
    assert.equal(output.code, 1);
    const lines = output.stderr.trim().split("\n");
    const last = lines.at(-1)!;
    assert.match(last, /^lockd: -data-dir ".*" is in use by another lockd server/);
    assert.ok(first.addr);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
