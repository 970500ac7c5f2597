/**
 * A flood of bad handshakes is counted one by one but logged at most
 * TLS_FAILURE_LOG_LINES_PER_S lines a second, plus one summary line.
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { TLS_FAILURE_LOG_LINES_PER_S } from "../../src/limits.ts";
import { serverTlsConfig } from "../fixtures/tls/certs.ts";
import { captureDiagnosticLog } from "../log/capture.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

Deno.test("bad TLS handshakes are all counted, but logged at most 20 lines a second plus a summary", async () => {
  using log = captureDiagnosticLog("warn", "json");
  await using t = await startTestServer(serverTlsConfig(true));
  const [hostname, port] = [
    t.addr.slice(0, t.addr.lastIndexOf(":")),
    Number(t.addr.split(":").pop()),
  ];
  const bad = 60;
  for (let i = 0; i < bad; i++) {
    const conn = await Deno.connect({ hostname, port });
    await conn.write(new TextEncoder().encode("GET / HTTP/1.1\r\n\r\n"));
    conn.close();
  }
  const counters = t.server.context.counters;
  await eventually(() => counters.tlsHandshakeErrors === bad, `${bad} failed handshakes counted`);
  const summary = () =>
    log.records().filter((r) => r.message === "TLS handshake failures not logged one by one");
  await eventually(() => summary().length > 0, "a summary line");
  const lines = log.records().filter((r) => r.message === "TLS handshake failed");
  const summarised = summary().reduce((n, r) => n + Number(r.failures), 0);
  assert.equal(lines.length + summarised, bad, "every failure is a line or in a summary");
  assert.ok(lines.length <= 2 * TLS_FAILURE_LOG_LINES_PER_S, `${lines.length} lines`);
});

Deno.test("the TLS failure log's one-second window runs on the server's scheduler: 20 lines, then the summary when the second ends", async () => {
  using log = captureDiagnosticLog("warn", "json");
  const scheduler = new ManualScheduler();
  await using t = await startTestServer(serverTlsConfig(true), { scheduler });
  const [hostname, port] = [
    t.addr.slice(0, t.addr.lastIndexOf(":")),
    Number(t.addr.split(":").pop()),
  ];
  const bad = 30;
  for (let i = 0; i < bad; i++) {
    const conn = await Deno.connect({ hostname, port });
    await conn.write(new TextEncoder().encode("GET / HTTP/1.1\r\n\r\n"));
    conn.close();
  }
  const counters = t.server.context.counters;
  await eventually(() => counters.tlsHandshakeErrors === bad, `${bad} failed handshakes counted`);
  const lines = () => log.records().filter((r) => r.message === "TLS handshake failed");
  const summaries = () =>
    log.records().filter((r) => r.message === "TLS handshake failures not logged one by one");
  // However long the connections took in real time, they all fell in one second of the server's.
  assert.equal(lines().length, TLS_FAILURE_LOG_LINES_PER_S);
  assert.equal(summaries().length, 0);
  scheduler.advance(999);
  assert.equal(summaries().length, 0);
  scheduler.advance(1);
  assert.deepEqual(summaries().map((r) => Number(r.failures)), [bad - TLS_FAILURE_LOG_LINES_PER_S]);
});
