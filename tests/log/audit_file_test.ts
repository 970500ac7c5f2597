/**
 * The audit log on real files: a file left with a torn last record by a crash, a device that
 * refuses every write (/dev/full), and a small tmpfs that fills up mid-record (root only).
 * Every line of the file must stay one whole JSON record, and an outage must show in the
 * metrics and in the diagnostic log, down to the records lost at exit.
 */

import assert from "node:assert/strict";
import { BenchConn, type Reply } from "../../bench/bench_client.ts";
import { connect } from "../../mod.ts";
import { AUDIT_CLOSE_TIMEOUT_MS } from "../../src/limits.ts";
import { repairTornAuditFile } from "../../src/log/torn_audit_file.ts";
import { startServer } from "../../src/server/start.ts";
import { eventually } from "../helpers/start_server.ts";
import { captureDiagnosticLog } from "./capture.ts";

async function withTempDir(run: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "lockd-audit-" });
  try {
    await run(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** Every line parses as JSON and the file ends with a newline. */
function wholeRecords(text: string): Record<string, unknown>[] {
  assert.ok(text === "" || text.endsWith("\n"), "the file ends with a whole line");
  return text.split("\n").slice(0, -1).map((line, i) => {
    try {
      return JSON.parse(line);
    } catch {
      throw new assert.AssertionError({ message: `line ${i + 1} is not one record: ${line}` });
    }
  });
}

function assertOwnershipsComplete(records: Record<string, unknown>[]): void {
  const byToken = new Map<unknown, unknown[]>();
  for (const r of records) {
    if (r.event === "acquire" || r.event === "release") {
      byToken.set(r.token, [...byToken.get(r.token) ?? [], r.event]);
    }
  }
  for (const [token, events] of byToken) {
    assert.deepEqual(events, ["acquire", "release"], `token ${token}`);
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

function metricValue(exposition: string, sample: string): number {
  const line = exposition.split("\n").find((l) => l.startsWith(`${sample} `));
  return line === undefined ? NaN : Number(line.slice(sample.length + 1));
}

// ---- a torn last record at start-up -----------------------------------------------------

Deno.test("a file that ends in a torn record (a crash mid-write) is cut back to its last whole line before the next record", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/audit.jsonl`;
    const earlier = '{"ts":"2026-01-01T00:00:00.000Z","event":"acl_deny"}\n';
    await Deno.writeTextFile(path, earlier + '{"ts":"2026-01-01T00:00:01.000Z","event":"acq');
    using captured = captureDiagnosticLog("info", "json");
    const server = await startServer({
      listen: "127.0.0.1:0",
      shutdownGraceMs: 0,
      dataDir: null,
      auditLog: path,
    });
    try {
      await using client = await connect({ addr: server.addr, reconnect: false });
      await (await client.acquire("after/crash")).release();
    } finally {
      await server.shutdown();
    }
    const records = wholeRecords(await Deno.readTextFile(path));
    assert.deepEqual(records.map((r) => r.event), ["acl_deny", "acquire", "release"]);
    const warning = captured.records().find((r) => String(r.message).includes("torn record"));
    assert.ok(warning, "the cut is logged");
    assert.equal(warning.fragment_bytes, 45);
    assert.equal(warning.fragment, '{"ts":"2026-01-01T00:00:01.000Z","event":"acq');
  });
});

Deno.test("repairTornAuditFile: whole files stay as they are; a fragment of any length is cut at the last newline", async () => {
  await withTempDir(async (dir) => {
    using _ = captureDiagnosticLog("error", "json");
    const path = `${dir}/audit.jsonl`;
    const cases: [string, string, string][] = [
      ["missing", "", ""],
      ["empty", "", ""],
      ["whole lines", '{"a":1}\n{"b":2}\n', '{"a":1}\n{"b":2}\n'],
      ["only a fragment", '{"a":', ""],
      ["a fragment longer than one read", `{"a":1}\n{"b":"${"x".repeat(200_000)}`, '{"a":1}\n'],
    ];
    for (const [what, before, after] of cases) {
      await Deno.remove(path).catch(() => {});
      if (what !== "missing") await Deno.writeTextFile(path, before);
      const repair = repairTornAuditFile(path);
      assert.equal(repair.fragmentBytes, before.length - after.length, what);
      assert.equal(repair.action, before === after ? "none" : "truncated", what);
      if (what !== "missing") assert.equal(await Deno.readTextFile(path), after, what);
    }
    // Not a regular file: left alone.
    assert.deepEqual(repairTornAuditFile("/dev/null"), { fragmentBytes: 0, action: "none" });
  });
});

// ---- a device that refuses every write ----------------------------------------------------

Deno.test("audit log on /dev/full: the failure and the backlog show in /metrics, and records still pending at exit are logged and counted", async () => {
  using captured = captureDiagnosticLog("info", "json");
  const server = await startServer({
    listen: "127.0.0.1:0",
    opsListen: "127.0.0.1:0",
    shutdownGraceMs: 0,
    dataDir: null,
    auditLog: "/dev/full",
  });
  let lost = 0;
  try {
    await using client = await connect({ addr: server.addr, reconnect: false });
    const pending = client.acquire("to/dev/full").then(() => "granted", () => "refused");
    await eventually(() => !server.context.ready, "not ready");
    const ops = `http://${server.opsAddr}`;
    const readyz = await fetch(`${ops}/readyz`);
    assert.equal(readyz.status, 503);
    assert.equal(await readyz.text(), "audit log unavailable");
    const metrics = await (await fetch(`${ops}/metrics`)).text();
    assert.ok(metricValue(metrics, "lockd_audit_write_failures_total") >= 1, metrics);
    assert.equal(metricValue(metrics, "lockd_audit_backlog_records"), 1, "the grant's record");
    assert.equal(metricValue(metrics, 'lockd_audit_records_lost_total{cause="exit"}'), 0);
    const shutdownAt = performance.now();
    await server.shutdown();
    const shutdownMs = performance.now() - shutdownAt;
    assert.ok(shutdownMs < AUDIT_CLOSE_TIMEOUT_MS + 3_000, `shutdown took ${shutdownMs} ms`);
    // The grant's record was never written, so its ACQUIRED was never sent.
    assert.equal(await pending, "refused");
    lost = server.context.audit.lostRecords.exit;
  } finally {
    await server.shutdown();
  }
  // The grant and its ending at shutdown: both pending when the log closed.
  assert.equal(lost, 2);
  const line = captured.records().find((r) =>
    String(r.message).includes("audit log closed with records not written")
  );
  assert.ok(line, "an error line names the loss");
  assert.equal(line.level, "ERROR");
  assert.equal(line.lost_records, 2);
  assert.match(String(line.error), /No space left on device/);
});

// ---- a small tmpfs that fills up (root only) ---------------------------------------------

async function run(command: string, ...args: string[]): Promise<{ ok: boolean; text: string }> {
  try {
    const out = await new Deno.Command(command, { args, stdout: "piped", stderr: "piped" })
      .output();
    const decoder = new TextDecoder();
    return { ok: out.success, text: decoder.decode(out.stdout) + decoder.decode(out.stderr) };
  } catch (error) {
    return { ok: false, text: String(error) };
  }
}

/** Why a tmpfs cannot be mounted here, or null when it can. */
async function whyNoTmpfs(): Promise<string | null> {
  if (Deno.build.os !== "linux") return "needs Linux";
  if (Deno.uid() !== 0) return "needs root to mount a tmpfs (.ci/run runs it as root)";
  const dir = await Deno.makeTempDir({ prefix: "lockd-tmpfs-probe-" });
  try {
    const mounted = await run("mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", dir);
    if (!mounted.ok) return `mount -t tmpfs failed: ${mounted.text.trim()}`;
    await run("umount", dir);
    return null;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const noTmpfs = await whyNoTmpfs();
if (noTmpfs !== null) {
  console.warn(`audit_file_test: skipping the tmpfs ENOSPC test: ${noTmpfs}`);
}

Deno.test({
  name:
    `a tmpfs that fills up mid-record: grants pause, and once there is space the torn record is finished, so every line is one whole record${
      noTmpfs === null ? "" : ` (skipped: ${noTmpfs})`
    }`,
  ignore: noTmpfs !== null,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "lockd-tmpfs-" });
    const mounted = await run("mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", dir);
    assert.ok(mounted.ok, mounted.text);
    try {
      const path = `${dir}/audit.jsonl`;
      const server = await startServer({
        listen: "127.0.0.1:0",
        shutdownGraceMs: 0,
        dataDir: null,
        auditLog: path,
      });
      const conn = await BenchConn.session(server.addr);
      const name = `tmpfs/${"n".repeat(100)}`;
      try {
        /** The reply, or null once it is held back by the failed audit sink. */
        const replyUnlessStuck = async (request: Promise<Reply>): Promise<Reply | null> => {
          const deadline = performance.now() + 20_000;
          while (performance.now() < deadline) {
            const reply = await within(request, 500);
            if (reply !== "timeout") return reply;
            if (!server.context.audit.healthy) return null;
          }
          throw new Error("a reply neither came nor was held back by a failed audit sink");
        };
        // Cycles until a reply is held back: the disk is full.
        let stuck: Promise<Reply> | null = null;
        for (let i = 0; i < 2_000 && stuck === null; i++) {
          const acquired = conn.acquire(name, 0, 0);
          const reply = await replyUnlessStuck(acquired);
          if (reply === null) stuck = acquired;
          else if (reply.type !== "acquired") throw new Error(JSON.stringify(reply));
          else {
            const released = conn.release(name, reply.token);
            if (await replyUnlessStuck(released) === null) stuck = released;
          }
        }
        assert.ok(stuck !== null, "the tmpfs never filled");
        assert.equal(server.context.audit.healthy, false);
        assert.match(server.context.audit.failure ?? "", /No space left on device/);
        assert.ok((await Deno.stat(path)).size >= 15 * 1024, "the file fills the tmpfs");

        // Space comes back: the retry finishes the torn record, and everything after it.
        const grown = await run("mount", "-o", "remount,size=1m", dir);
        assert.ok(grown.ok, grown.text);
        assert.ok(await within(stuck, 5_000) !== "timeout", "the held-back reply came");
        await eventually(() => server.context.audit.healthy, "healthy again");
        for (let i = 0; i < 10; i++) {
          const reply = await conn.acquire(name, 0, 0);
          assert.equal(reply.type, "acquired");
          if (reply.type === "acquired") await conn.release(name, reply.token);
        }
      } finally {
        conn.close();
        await conn.done;
        await server.shutdown();
      }
      const records = wholeRecords(await Deno.readTextFile(path));
      assert.ok(records.length > 50, `${records.length} records`);
      assertOwnershipsComplete(records);
    } finally {
      await run("umount", dir);
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    `an append-only audit file (chattr +a) that ends in a torn record gets a newline instead of a cut${
      noTmpfs === null ? "" : ` (skipped: ${noTmpfs})`
    }`,
  ignore: noTmpfs !== null,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "lockd-tmpfs-" });
    const mounted = await run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir);
    assert.ok(mounted.ok, mounted.text);
    const path = `${dir}/audit.jsonl`;
    try {
      await Deno.writeTextFile(path, '{"a":1}\n{"b":');
      const appendOnly = await run("chattr", "+a", path);
      if (!appendOnly.ok) {
        console.warn(`skipping the append-only case: chattr +a failed: ${appendOnly.text.trim()}`);
        return;
      }
      using captured = captureDiagnosticLog("warn", "json");
      assert.deepEqual(repairTornAuditFile(path), { fragmentBytes: 5, action: "newline" });
      assert.equal(await Deno.readTextFile(path), '{"a":1}\n{"b":\n');
      const warning = captured.records().find((r) => String(r.message).includes("torn record"));
      assert.match(String(warning?.error), /not permitted|denied/i);
    } finally {
      await run("chattr", "-a", path);
      await run("umount", dir);
      await Deno.remove(dir, { recursive: true });
    }
  },
});
