import assert from "node:assert/strict";
import { connect } from "../../mod.ts";
import { debugEnabled, log } from "../../src/log/diagnostic.ts";
import { serverTlsConfig } from "../fixtures/tls/certs.ts";
import { startTestServer } from "../helpers/start_server.ts";
import { captureDiagnosticLog } from "./capture.ts";

const TEXT_LINE =
  /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z) (DEBUG|INFO|WARN|ERROR) ([a-z.]+) (.*)$/;

const LEVEL_CASES: [configured: "debug" | "info" | "warn" | "error", seen: string[]][] = [
  ["debug", ["d", "i", "w", "e"]],
  ["info", ["i", "w", "e"]],
  ["warn", ["w", "e"]],
  ["error", ["e"]],
];

for (const [level, seen] of LEVEL_CASES) {
  Deno.test(`diagnostic log: at level ${level} only ${seen.join(", ")} lines are written`, () => {
    using captured = captureDiagnosticLog(level, "json");
    const logger = log("test");
    logger.debug("d");
    logger.info("i");
    logger.warn("w");
    logger.error("e");
    assert.deepEqual(captured.records().map((r) => r.message), seen);
    assert.equal(debugEnabled(), level === "debug");
  });
}

Deno.test("diagnostic log, text: RFC 3339 UTC timestamp, level, part, message, then key=value fields", () => {
  using captured = captureDiagnosticLog("info", "text");
  const before = Date.now();
  log("protocol").warn("ACL denied acquire", {
    session: 7,
    remote_addr: "[::1]:5000",
    lock: "jobs/nightly",
    allowed: false,
    error: new Error("boom"),
  });
  assert.equal(captured.lines.length, 1);
  const match = TEXT_LINE.exec(captured.lines[0]);
  assert.ok(match, captured.lines[0]);
  const [, ts, level, part, rest] = match;
  assert.ok(Math.abs(Date.parse(ts) - before) < 5_000);
  assert.equal(new Date(ts).toISOString(), ts, "UTC with milliseconds");
  assert.equal(level, "WARN");
  assert.equal(part, "protocol");
  assert.equal(
    rest,
    'ACL denied acquire session=7 remote_addr="[::1]:5000" lock="jobs/nightly" allowed=false error="boom"',
  );
});

Deno.test("diagnostic log, text: a lock name with a newline or a quote cannot forge a line or a field", () => {
  using captured = captureDiagnosticLog("info", "text");
  const hostile = 'x" forged=1\n2026-01-01T00:00:00.000Z ERROR server fake line\r';
  log("protocol").info("lease expired", { lock: hostile, session: 1 });
  log("protocol").info("interpolated {lock} too", { lock: hostile });
  assert.equal(captured.lines.length, 2, captured.lines.join("\n---\n"));
  const first = captured.lines[0];
  assert.ok(!first.includes("\r"));
  const quoted = first.slice(first.indexOf("lock=") + 5, first.lastIndexOf(" session="));
  assert.equal(JSON.parse(quoted), hostile, "the value reads back exactly");
  assert.ok(!/ forged=1 /.test(first.replace(quoted, "")), "no extra field outside the quotes");
  assert.ok(captured.lines[1].includes(`interpolated ${JSON.stringify(hostile)} too`));
});

Deno.test("diagnostic log, json: one object per line with the fields flattened", () => {
  using captured = captureDiagnosticLog("debug", "json");
  log("server").info("protocol listener started", { listen: "127.0.0.1:7400", tls: true });
  log("protocol").debug("line\nbreak", { lock: 'a"b\nc', session: 3 });
  assert.equal(captured.lines.length, 2);
  const [started, debug] = captured.records();
  assert.equal(started.level, "INFO");
  assert.equal(started.logger, "lockd.server");
  assert.equal(started.message, "protocol listener started");
  assert.equal(started.listen, "127.0.0.1:7400");
  assert.equal(started.tls, true);
  assert.match(String(started["@timestamp"]), /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  assert.equal(debug.lock, 'a"b\nc');
  assert.equal(debug.message, "line\nbreak");
  assert.equal(debug.session, 3);
});

Deno.test("diagnostic log: sessions and frames are summarized at debug level, and not at all at info", async () => {
  for (const level of ["debug", "info"] as const) {
    using captured = captureDiagnosticLog(level, "json");
    await using t = await startTestServer();
    {
      await using client = await connect({ addr: t.addr, reconnect: false });
      const lock = await client.acquire("jobs/debugged");
      await lock.release();
    }
    await t.server.shutdown();
    const records = captured.records();
    const frames = records.filter((r) =>
      r.message === "frame received" || r.message === "frame sent"
    );
    if (level === "info") {
      assert.deepEqual(frames, []);
      assert.ok(!records.some((r) => r.level === "DEBUG"));
      assert.ok(records.some((r) => r.message === "protocol listener started"));
      assert.ok(records.some((r) => r.message === "shutdown complete"));
      continue;
    }
    const summary = frames.map((r) => [r.message, r.type, r.lock]);
    for (
      const expected of [
        ["frame received", "hello", ""],
        ["frame sent", "welcome", ""],
        ["frame received", "acquire", "jobs/debugged"],
        ["frame sent", "acquired", "jobs/debugged"],
        ["frame received", "release", "jobs/debugged"],
        ["frame sent", "released", "jobs/debugged"],
      ]
    ) {
      assert.ok(
        summary.some((s) => JSON.stringify(s) === JSON.stringify(expected)),
        `${expected} in ${JSON.stringify(summary)}`,
      );
    }
    const acquire = frames.find((r) => r.type === "acquire")!;
    assert.equal(typeof acquire.request_id, "number");
    assert.ok((acquire.request_id as number) > 0);
    assert.match(String(acquire.remote_addr), /^127\.0\.0\.1:\d+$/);
    assert.ok(records.some((r) => r.message === "session opened"));
    const closed = records.find((r) => r.message === "session closed");
    assert.ok(closed, "session closed line");
    assert.ok(
      ["client_closed", "SHUTTING_DOWN"].includes(String(closed.reason)),
      String(closed.reason),
    );
  }
});

Deno.test("diagnostic log: the start names the protocol listener and its TLS mode", async () => {
  using captured = captureDiagnosticLog("info", "json");
  await using t = await startTestServer(serverTlsConfig(true));
  const started = captured.records().find((r) => r.message === "protocol listener started");
  assert.equal(started?.listen, t.addr);
  assert.equal(started?.tls, true);
  assert.equal(started?.mtls, true);
});
