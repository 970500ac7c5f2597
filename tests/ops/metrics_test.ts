import assert from "node:assert/strict";
import { connect, LockdError, type LockLostError } from "../../mod.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { AUDIT_RETRY_MS } from "../../src/limits.ts";
import {
  HTTP_DROP_REASONS,
  LIMIT_NAMES,
  TLS_HANDSHAKE_FAILURE_REASONS,
  TLS_SHED_REASONS,
} from "../../src/counters.ts";
import { PROMETHEUS_CONTENT_TYPE } from "../../src/ops/prometheus.ts";
import { CLUSTER_ONLY_WIRE_CODES, WIRE_CODES } from "../../src/wire/codes.ts";
import { http, queue } from "../admin/admin_helpers.ts";
import { assertProblem } from "../helpers/problem.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { eventually, startTestServer, type TestServer } from "../helpers/start_server.ts";

/** Scrapes /metrics; returns every sample by its printed name and labels, e.g. `lockd_releases_total{reason="force"}`. */
async function scrape(t: TestServer): Promise<Map<string, number>> {
  const answer = await http(t.server.opsAddr!, "GET", "/metrics");
  assert.equal(answer.status, 200);
  assert.equal(answer.headers.get("content-type"), PROMETHEUS_CONTENT_TYPE);
  const samples = new Map<string, number>();
  for (const line of answer.text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const space = line.lastIndexOf(" ");
    samples.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return samples;
}

/** Only the lockd_ samples, without the duration sums (checked on their own). */
function lockdCounts(samples: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, value] of samples) {
    if (!key.startsWith("lockd_") || key.endsWith("_sum")) continue;
    // Counts the test's own HTTP connections (keep-alive): checked in tests/http/.
    if (key.startsWith("lockd_http_connections_open")) continue;
    out[key] = value;
  }
  return out;
}

/** The codes a single node counts (NOT_LEADER is cluster mode's: tests/ops/spec_label_values_test.ts). */
const ERROR_CODES = Object.values(WIRE_CODES).map((info) => info.code).filter((code) =>
  !CLUSTER_ONLY_WIRE_CODES.has(code)
);

/** The expected lockd_ samples: everything 0 except what `changes` says. */
function expected(changes: Record<string, number>, version: string): Record<string, number> {
  const base: Record<string, number> = {
    "lockd_connections_active": 0,
    "lockd_sessions_orphaned": 0,
    "lockd_connections_open": 0,
    "lockd_locks_held": 0,
    "lockd_waiters": 0,
    "lockd_acquires_total": 0,
    "lockd_handoffs_total": 0,
    "lockd_acl_denials_total": 0,
    "lockd_acl_read_denials_total": 0,
    'lockd_lock_owners{kind="exclusive"}': 0,
    'lockd_lock_owners{kind="shared"}': 0,
    'lockd_lock_owners{kind="semaphore"}': 0,
    "lockd_lock_delays_total": 0,
    "lockd_lock_delays_active": 0,
    'lockd_releases_total{reason="graceful"}': 0,
    'lockd_releases_total{reason="expired"}': 0,
    'lockd_releases_total{reason="io_timeout"}': 0,
    'lockd_releases_total{reason="force"}': 0,
  };
  for (const listener of ["protocol", "admin", "ops"]) {
    base[`lockd_listener_accept_errors_total{listener="${listener}"}`] = 0;
  }
  for (const limit of LIMIT_NAMES) base[`lockd_limit_refusals_total{limit="${limit}"}`] = 0;
  base["lockd_partial_frame_bytes"] = 0;
  base["lockd_log_lines_dropped_total"] = 0;
  base["lockd_tls_handshakes_started_total"] = 0;
  base["lockd_tls_handshakes_queued"] = 0;
  for (const reason of TLS_SHED_REASONS) {
    base[`lockd_tls_connections_shed_total{reason="${reason}"}`] = 0;
  }
  for (const reason of TLS_HANDSHAKE_FAILURE_REASONS) {
    base[`lockd_tls_handshake_failures_total{reason="${reason}"}`] = 0;
  }
  for (const listener of ["admin", "ops"]) {
    base[`lockd_http_server_restarts_total{listener="${listener}"}`] = 0;
    for (const reason of HTTP_DROP_REASONS) {
      base[`lockd_http_connections_dropped_total{listener="${listener}",reason="${reason}"}`] = 0;
    }
  }
  for (const code of ERROR_CODES) {
    base[`lockd_protocol_errors_total{code="0x${code.toString(16).padStart(2, "0")}"}`] = 0;
  }
  Object.assign(base, {
    "lockd_connections_accepted_total": 0,
    "lockd_accept_errors_total": 0,
    "lockd_tls_handshake_errors_total": 0,
    "lockd_heartbeats_total": 0,
    "lockd_wait_seconds_count": 0,
    "lockd_hold_seconds_count": 0,
    [`lockd_build_info{version="${version}"}`]: 1,
    "lockd_audit_backlog_records": 0,
    "lockd_audit_write_failures_total": 0,
    'lockd_audit_records_lost_total{cause="backlog_full"}': 0,
    'lockd_audit_records_lost_total{cause="exit"}': 0,
  });
  for (const [key, value] of Object.entries(changes)) {
    assert.ok(key in base, `unknown sample ${key}`);
    base[key] = value;
  }
  // Version-1 clients hold exclusive locks only, one owner each (issue 22 item 6).
  const exclusiveOwners = 'lockd_lock_owners{kind="exclusive"}';
  if (!(exclusiveOwners in changes)) base[exclusiveOwners] = base["lockd_locks_held"];
  return base;
}

Deno.test("every gauge and counter of /metrics follows acquires, waits, releases, expiries, kicks and force-releases exactly", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const aclFile = `${dir}/acl`;
    await Deno.writeTextFile(aclFile, "deny ** denied/**\nallow ** **\n");
    const scheduler = new ManualScheduler();
    await using t = await startTestServer({
      adminListen: "127.0.0.1:0",
      opsListen: "127.0.0.1:0",
      aclFile,
      ioTimeoutMs: 60_000,
    }, { scheduler });
    const version = t.server.context.version;
    const check = async (changes: Record<string, number>, step: string) => {
      assert.deepEqual(lockdCounts(await scrape(t)), expected(changes, version), step);
    };
    await check({}, "a fresh server has every sample at 0");

    await using a = await connect({ addr: t.addr });
    await using b = await connect({ addr: t.addr, reconnect: false });
    await using c = await connect({ addr: t.addr, reconnect: false });
    await using d = await connect({ addr: t.addr });
    const held = await a.acquire("m");
    const bWait = await queue(t, b, "m");
    const cWait = await queue(t, c, "m");
    assert.equal(await d.tryAcquire("m"), null);
    await assert.rejects(d.acquire("denied/x"), (error: unknown) => {
      assert.ok(error instanceof LockdError);
      assert.equal(error.codeName, "ACL_DENIED");
      return true;
    });
    await check({
      "lockd_connections_active": 4,
      "lockd_connections_open": 4,
      "lockd_connections_accepted_total": 4,
      "lockd_locks_held": 1,
      "lockd_waiters": 2,
      "lockd_acquires_total": 1,
      "lockd_wait_seconds_count": 1,
      "lockd_acl_denials_total": 1,
      'lockd_protocol_errors_total{code="0x04"}': 1,
      'lockd_protocol_errors_total{code="0x07"}': 1,
    }, "one holder, two waiters, a failed try-lock and an ACL denial");

    scheduler.advance(50);
    await held.release();
    const bLock = await bWait.granted;
    const kicked = await http(
      t.server.adminAddr!,
      "DELETE",
      `/api/locks/m/waiters/${encodeURIComponent(cWait.remoteAddr)}`,
    );
    assert.equal(kicked.status, 204);
    await assert.rejects(cWait.granted);
    const bLost = new Promise<void>((resolve) =>
      bLock.lost.addEventListener("abort", () => resolve(), { once: true })
    );
    const forced = await http(t.server.adminAddr!, "POST", "/api/locks/m/release");
    assert.equal(forced.status, 200);
    await bLost;
    await eventually(() => t.server.context.engine.stats.sessionsOpen === 2, "b and c closed");
    const afterAdmin = {
      "lockd_connections_active": 2,
      "lockd_connections_open": 2,
      "lockd_connections_accepted_total": 4,
      "lockd_acquires_total": 2,
      "lockd_handoffs_total": 1, // b was granted m when a released it
      "lockd_wait_seconds_count": 2,
      "lockd_hold_seconds_count": 2,
      'lockd_releases_total{reason="graceful"}': 1,
      'lockd_releases_total{reason="force"}': 1,
      "lockd_acl_denials_total": 1,
      'lockd_protocol_errors_total{code="0x02"}': 2,
      'lockd_protocol_errors_total{code="0x04"}': 1,
      'lockd_protocol_errors_total{code="0x07"}': 1,
    };
    await check(afterAdmin, "a release handed over, a kick, a force-release");

    // A holder that renews nothing while 200 ms pass on the server's clock loses its lease.
    await using e = await connect({ addr: t.addr });
    const expiring = await e.acquire("exp", { leaseMs: 200 });
    scheduler.advance(200);
    const lost = await new Promise<LockLostError>((resolve) =>
      expiring.lost.addEventListener("abort", () => resolve(expiring.lost.reason), { once: true })
    );
    // The server expired the lease (its clock moved; the holder's heartbeats were acknowledged).
    assert.equal(lost.reason, "expired");
    assert.equal(t.server.context.engine.getLock("exp"), undefined, "server expiry");

    // Heartbeats the server handles, counted exactly.
    await using raw = await RawClient.session(t.addr);
    for (let id = 1; id <= 3; id++) {
      await raw.send({ type: "heartbeat", requestId: id });
      assert.equal((await raw.next())?.type, "heartbeat_ack");
    }
    const final = {
      ...afterAdmin,
      "lockd_connections_active": 4,
      "lockd_connections_open": 4,
      "lockd_connections_accepted_total": 6,
      "lockd_acquires_total": 3,
      "lockd_wait_seconds_count": 3,
      "lockd_hold_seconds_count": 3,
      'lockd_releases_total{reason="expired"}': 1,
      'lockd_protocol_errors_total{code="0x05"}': 1,
      "lockd_heartbeats_total": 3,
    };
    await check(final, "a lease expiry and three heartbeats");

    const samples = await scrape(t);
    const stats = t.server.context.engine.stats;
    assert.equal(samples.get("lockd_wait_seconds_sum"), stats.waitSecondsSum);
    assert.equal(samples.get("lockd_hold_seconds_sum"), stats.holdSecondsSum);
    // The expired ownership alone lasted at least its 200 ms lease.
    assert.ok(stats.holdSecondsSum >= 0.2, `hold sum ${stats.holdSecondsSum}`);
    // b waited from its ACQUIRE until a released, 50 ms later.
    assert.ok(stats.waitSecondsSum >= 0.05, `wait sum ${stats.waitSecondsSum}`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("runtime metrics are present and plausible", async () => {
  await using t = await startTestServer({ opsListen: "127.0.0.1:0" });
  const samples = await scrape(t);
  const rss = samples.get("process_resident_memory_bytes")!;
  assert.ok(rss > 1_000_000, `rss ${rss}`);
  const start = samples.get("process_start_time_seconds")!;
  assert.ok(start <= Date.now() / 1000 && start > Date.now() / 1000 - 3600, `start ${start}`);
  assert.ok(samples.get("process_open_fds")! > 3);
  const used = samples.get("deno_heap_used_bytes")!;
  const total = samples.get("deno_heap_total_bytes")!;
  assert.ok(used > 0 && used <= total, `heap ${used}/${total}`);
  const lag = samples.get("deno_event_loop_lag_seconds")!;
  assert.ok(lag >= 0 && lag < 5, `lag ${lag}`);
});

// ---- probes and routing of the ops server ---------------------------------------

Deno.test("/healthz and /readyz answer 200 ok; /readyz is 503 while the audit log fails, /healthz stays 200", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer({ opsListen: "127.0.0.1:0" }, { scheduler });
  const ops = t.server.opsAddr!;
  for (const path of ["/healthz", "/readyz"]) {
    const answer = await http(ops, "GET", path);
    assert.equal(answer.status, 200);
    assert.equal(answer.text, "ok");
    assert.equal(answer.headers.get("content-type"), "text/plain; charset=utf-8");
  }
  await using client = await connect({ addr: t.addr });
  t.audit.failing = true;
  const pending = client.acquire("needs-audit"); // its record cannot be written
  await eventually(() => !t.server.context.ready, "audit unhealthy");
  const ready = await http(ops, "GET", "/readyz");
  assert.equal(ready.status, 503);
  assert.equal(ready.text, "audit log unavailable");
  const live = await http(ops, "GET", "/healthz");
  assert.equal(live.status, 200);
  assert.equal(live.text, "ok");
  t.audit.failing = false;
  scheduler.advance(AUDIT_RETRY_MS);
  const lock = await pending;
  assert.equal((await http(ops, "GET", "/readyz")).status, 200, "ready again");
  await lock.release();
});

Deno.test("the ops server answers unknown paths with 404 and other methods with 405 and Allow", async () => {
  await using t = await startTestServer({ opsListen: "127.0.0.1:0" });
  const ops = t.server.opsAddr!;
  const notFound = await http(ops, "GET", "/api/info");
  await assertProblem(notFound, 404, "not-found", {
    title: "Not found",
    detail: "No resource at /api/info",
  });
  for (const path of ["/metrics", "/healthz", "/readyz"]) {
    const answer = await http(ops, "POST", path);
    assert.equal(answer.headers.get("allow"), "GET, HEAD");
    await assertProblem(answer, 405, "method-not-allowed", {
      title: "Method not allowed",
      detail: `${path} does not support POST; allowed: GET, HEAD`,
    });
  }
  const head = await http(ops, "HEAD", "/healthz");
  assert.equal(head.status, 200);
  assert.equal(head.text, "");
});
