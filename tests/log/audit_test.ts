import assert from "node:assert/strict";
import { connect, LockdError, type LockLostError } from "../../mod.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { AUDIT_RETRY_MS } from "../../src/limits.ts";
import {
  AuditLog,
  type AuditLogOptions,
  type AuditSink,
  openAuditSink,
} from "../../src/log/audit.ts";
import { type AuditRecord, formatAuditLine } from "../../src/log/audit_records.ts";
import { captureDiagnosticLog } from "./capture.ts";
import { MemorySink } from "../helpers/memory_sink.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

const RFC3339_UTC_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const WALL_MS = Date.UTC(2026, 0, 2, 3, 4, 5, 678);

const WORKER = {
  identity: "spiffe://example.org/worker",
  remote_addr: "10.0.3.17:51234",
  session: 7,
} as const;
const ACTOR = { remote_addr: "127.0.0.1:40112", auth: "token" } as const;

/** One record of each kind with its time, exactly as docs/operations.md shows them. */
const EXAMPLES: [number, AuditRecord][] = [
  [WALL_MS, {
    event: "acquire",
    lock: "jobs/nightly",
    token: 42,
    ...WORKER,
    client_name: "lockd-run@build-7:4242",
    waited_ms: 120,
  }],
  [WALL_MS + 5_300, {
    event: "release",
    lock: "jobs/nightly",
    token: 42,
    ...WORKER,
    client_name: "lockd-run@build-7:4242",
    reason: "graceful",
    held_ms: 5300,
  }],
  [WALL_MS + 600_000, {
    event: "force_release",
    lock: "jobs/nightly",
    token: 43,
    identity: "spiffe://example.org/batch",
    remote_addr: "10.0.3.18:40022",
    session: 9,
    actor: ACTOR,
  }],
  [WALL_MS + 660_000, {
    event: "kick_waiter",
    lock: "jobs/nightly",
    token: null,
    identity: "spiffe://example.org/batch",
    remote_addr: "[2001:db8::7]:51240",
    session: 12,
    actor: ACTOR,
  }],
  [WALL_MS + 720_000, {
    event: "acl_deny",
    lock: "secrets/db",
    token: null,
    ...WORKER,
  }],
];

Deno.test("audit line: ts first in RFC 3339 UTC with ms, then the record's fields in order", () => {
  const line = formatAuditLine(WALL_MS, EXAMPLES[0][1]);
  assert.ok(line.endsWith("\n"));
  assert.equal(line.indexOf("\n"), line.length - 1, "exactly one line");
  assert.equal(
    line,
    '{"ts":"2026-01-02T03:04:05.678Z","event":"acquire","lock":"jobs/nightly","token":42,' +
      '"identity":"spiffe://example.org/worker","remote_addr":"10.0.3.17:51234","session":7,' +
      '"client_name":"lockd-run@build-7:4242","waited_ms":120}\n',
  );
  for (const [wallMs, record] of EXAMPLES) {
    const parsed = JSON.parse(formatAuditLine(wallMs, record));
    assert.match(parsed.ts, RFC3339_UTC_MS);
    assert.deepEqual(Object.keys(parsed).slice(0, 7), [
      "ts",
      "event",
      "lock",
      "token",
      "identity",
      "remote_addr",
      "session",
    ]);
  }
});

Deno.test("audit line: the documented examples are the encoder's output", async () => {
  const docs = await Deno.readTextFile(new URL("../../docs/operations.md", import.meta.url));
  for (const [wallMs, record] of EXAMPLES) {
    const line = formatAuditLine(wallMs, record).trimEnd();
    assert.ok(docs.includes(line), `docs/operations.md lacks the example line:\n${line}`);
  }
});

Deno.test("audit line: quotes, newlines and control characters in any field cannot forge a line", () => {
  const hostile = 'x"}\n{"event":"release","lock":"y\u0000\u001b[31m\u2028';
  const line = formatAuditLine(WALL_MS, {
    ...EXAMPLES[4][1],
    lock: hostile,
    identity: hostile,
  });
  assert.equal(line.split("\n").length, 2, "one line and the final newline");
  const raw = [...line.slice(0, -1)].filter((c) => c.charCodeAt(0) < 0x20);
  assert.deepEqual(raw, [], "no raw control characters");
  const parsed = JSON.parse(line);
  assert.equal(parsed.lock, hostile);
  assert.equal(parsed.identity, hostile);
  assert.equal(parsed.event, "acl_deny");
});

Deno.test("audit: acquire and release records carry the client name the session sent in HELLO", async () => {
  await using t = await startTestServer();
  // One from the client library, one from a raw HELLO with a hostile name (escaped, one line).
  const hostile = 'evil"}\n{"event":"release"';
  await using client = await connect({ addr: t.addr, reconnect: false, clientName: "worker-7" });
  const lock = await client.acquire("audit/client-name");
  await lock.release();
  await using raw = await (await RawClient.connect(t.addr)).hello(hostile);
  await raw.send({ type: "acquire", requestId: 1, name: "audit/raw", leaseMs: 0, waitMs: 0 });
  const granted = await raw.next();
  assert.equal(granted?.type, "acquired");
  const token = granted?.type === "acquired" ? granted.token : 0;
  await raw.send({ type: "release", requestId: 2, name: "audit/raw", token });
  assert.equal((await raw.next())?.type, "released");
  await eventually(() => t.audit.lines.length === 4, "four records");
  const records = t.audit.records();
  assert.deepEqual(records.map((r) => [r.event, r.lock, r.client_name]), [
    ["acquire", "audit/client-name", "worker-7"],
    ["release", "audit/client-name", "worker-7"],
    ["acquire", "audit/raw", hostile],
    ["release", "audit/raw", hostile],
  ]);
  // The existing fields keep their place; client_name follows session.
  assert.deepEqual(Object.keys(records[0]).slice(0, 9), [
    "ts",
    "event",
    "lock",
    "token",
    "identity",
    "remote_addr",
    "session",
    "client_name",
    "waited_ms",
  ]);
  assert.equal(t.audit.lines.length, 4, "the hostile client name forged no line");
});

/** Lets every pending promise callback run (the sinks here resolve at once or when told). */
const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

/** A sink that takes at most `chunk` bytes per write, like a pipe that is nearly full. */
class TrickleSink implements AuditSink {
  readonly bytes: number[] = [];
  constructor(readonly chunk: number) {}
  write(bytes: Uint8Array): Promise<number> {
    const n = Math.min(this.chunk, bytes.length);
    this.bytes.push(...bytes.subarray(0, n));
    return Promise.resolve(n);
  }
}

/**
 * A sink whose writes complete only when the test says so: a pipe nobody reads, a disk that
 * fills up half-way through a write.
 */
class GateSink implements AuditSink {
  readonly pending: {
    bytes: Uint8Array;
    resolve: (n: number) => void;
    reject: (error: Error) => void;
  }[] = [];
  /** Every byte the sink took, in order. */
  readonly taken: number[] = [];
  writes = 0;

  write(bytes: Uint8Array): Promise<number> {
    this.writes++;
    const { promise, resolve, reject } = Promise.withResolvers<number>();
    this.pending.push({ bytes: bytes.slice(), resolve, reject });
    return promise;
  }

  /** Completes the oldest pending write, taking `n` of its bytes (all by default). */
  complete(n?: number): Uint8Array {
    const write = this.pending.shift()!;
    const count = n ?? write.bytes.length;
    this.taken.push(...write.bytes.subarray(0, count));
    write.resolve(count);
    return write.bytes;
  }

  /** Fails the oldest pending write. */
  fail(message = "No space left on device (os error 28)"): void {
    this.pending.shift()!.reject(new Error(message));
  }

  text(): string {
    return new TextDecoder().decode(new Uint8Array(this.taken));
  }
}

function manualLog(sink: AuditSink, options: Partial<AuditLogOptions> = {}) {
  const scheduler = new ManualScheduler(WALL_MS);
  const audit = new AuditLog(sink, {
    scheduler,
    writeTimeoutMs: 1_000,
    retryMs: 500,
    closeTimeoutMs: 2_000,
    ...options,
  });
  const health: (string | null)[] = [];
  audit.onHealthChange = (failure) => health.push(failure);
  const written: string[] = [];
  const append = (i: number, tag = String(i)) =>
    audit.append(EXAMPLES[i % EXAMPLES.length][1], () => written.push(tag));
  return { scheduler, audit, health, written, append };
}

Deno.test("AuditLog: a sink that takes a few bytes per write still gets whole lines", async () => {
  const sink = new TrickleSink(7);
  const { audit, written, append } = manualLog(sink);
  for (let i = 0; i < EXAMPLES.length; i++) append(i);
  for (let i = 0; i < 200 && written.length < EXAMPLES.length; i++) await settle();
  const text = new TextDecoder().decode(new Uint8Array(sink.bytes));
  assert.deepEqual(
    text.trimEnd().split("\n").map((line) => JSON.parse(line).event),
    EXAMPLES.map(([, r]) => r.event),
  );
  assert.deepEqual(written, ["0", "1", "2", "3", "4"]);
  assert.equal(audit.healthy, true);
});

Deno.test("AuditLog: the records of one turn go out in one write, and callbacks run only after it", async () => {
  const sink = new GateSink();
  const { audit, written, append } = manualLog(sink);
  append(0);
  append(1);
  assert.equal(sink.writes, 0, "the write starts at the end of the turn");
  await settle();
  assert.equal(sink.writes, 1, "one write for the turn");
  // Records appended while a write is in flight wait for it and go out together next.
  append(2);
  append(3);
  await settle();
  assert.equal(sink.writes, 1);
  assert.deepEqual(written, [], "nothing is acknowledged before its write completes");
  assert.equal(audit.pendingCount, 4);
  assert.equal(new TextDecoder().decode(sink.complete()).split("\n").length, 3, "two lines");
  await settle();
  assert.deepEqual(written, ["0", "1"]);
  assert.equal(sink.writes, 2);
  sink.complete();
  await settle();
  assert.deepEqual(written, ["0", "1", "2", "3"]);
  assert.equal(audit.pendingCount, 0);
  assert.equal(audit.healthy, true, "a slow write within the timeout is healthy");
});

Deno.test("AuditLog: a write that never completes turns the log unhealthy after the write timeout, never blocks, and recovers when it completes", async () => {
  const sink = new GateSink();
  const { scheduler, audit, health, written, append } = manualLog(sink);
  append(0);
  await settle();
  assert.equal(sink.pending.length, 1);
  scheduler.advance(999);
  assert.equal(audit.healthy, true);
  assert.equal(audit.writeFailures, 0);
  scheduler.advance(1);
  assert.equal(audit.healthy, false);
  assert.deepEqual(health, ["audit write did not complete within 1000 ms"]);
  assert.equal(audit.writeFailures, 1);
  // The event loop is free: more records queue behind the stuck write.
  append(1);
  append(2);
  await settle();
  assert.equal(sink.writes, 1, "no second write while one is pending");
  assert.equal(audit.pendingCount, 3);
  // Each further period it stays stuck counts as a failure (the alert's rate stays up).
  scheduler.advance(5_000);
  assert.equal(audit.writeFailures, 6);
  assert.equal(health.length, 1, "reported once");
  assert.deepEqual(written, []);

  // The reader resumes.
  sink.complete();
  await settle();
  assert.deepEqual(written, ["0"]);
  assert.equal(audit.healthy, false, "unhealthy until the backlog is written");
  assert.equal(sink.writes, 2, "the backlog goes out at once, in one write");
  sink.complete();
  await settle();
  assert.deepEqual(written, ["0", "1", "2"]);
  assert.equal(audit.healthy, true);
  assert.deepEqual(health, ["audit write did not complete within 1000 ms", null]);
  scheduler.advance(2_000);
  assert.equal(scheduler.pendingTimers, 0, "no timer left once idle");
  assert.deepEqual(
    sink.text().trimEnd().split("\n").map((line) => JSON.parse(line).event),
    ["acquire", "release", "force_release"],
  );
});

Deno.test("AuditLog: a failing sink keeps records in order, retries on the scheduler, defers callbacks and reports health once each way", async () => {
  const sink = new MemorySink();
  const { scheduler, audit, health, written, append } = manualLog(sink);
  append(0, "a");
  await settle();
  sink.failing = true;
  append(1, "b");
  append(2, "c");
  await settle();
  assert.deepEqual(written, ["a"]);
  assert.equal(audit.healthy, false);
  assert.equal(audit.pendingCount, 2);
  assert.deepEqual(health, ["No space left on device (os error 28)"]);
  assert.equal(audit.writeFailures, 1);
  scheduler.advance(500);
  await settle();
  assert.equal(audit.writeFailures, 2, "retried after retryMs, still failing");
  assert.equal(health.length, 1);
  sink.failing = false;
  // A record appended while a backlog exists waits behind it, even if the sink works now.
  append(3, "d");
  await settle();
  assert.deepEqual(written, ["a"]);
  scheduler.advance(499);
  await settle();
  assert.deepEqual(written, ["a"]);
  scheduler.advance(1);
  await settle();
  assert.deepEqual(written, ["a", "b", "c", "d"]);
  assert.deepEqual(sink.records().map((r) => r.event), [
    "acquire",
    "release",
    "force_release",
    "kick_waiter",
  ]);
  assert.deepEqual(health, ["No space left on device (os error 28)", null]);
  scheduler.advance(1_000);
  assert.equal(scheduler.pendingTimers, 0);
});

Deno.test("AuditLog: a partial write is finished from the byte where it stopped, so no line is ever torn or doubled", async () => {
  const sink = new GateSink();
  const { scheduler, audit, health, written, append } = manualLog(sink);
  append(0);
  append(1);
  await settle();
  const first = sink.pending[0].bytes;
  const firstLine = first.indexOf(0x0a) + 1;
  // The disk fills up half-way through the second record...
  const cut = firstLine + 40;
  sink.complete(cut);
  await settle();
  assert.deepEqual(written, ["0"], "the whole first record is acknowledged, not the second");
  assert.equal(sink.pending.length, 1, "the rest is written at once");
  assert.deepEqual(sink.pending[0].bytes, first.subarray(cut));
  // ...and the next write fails outright.
  sink.fail();
  await settle();
  assert.equal(audit.healthy, false);
  append(2);
  scheduler.advance(500);
  await settle();
  // The retry continues the torn record exactly where it stopped.
  assert.deepEqual(sink.pending[0].bytes, first.subarray(cut));
  sink.complete(3);
  await settle();
  sink.complete();
  await settle();
  sink.complete();
  await settle();
  assert.deepEqual(written, ["0", "1", "2"]);
  assert.deepEqual(health, ["No space left on device (os error 28)", null]);
  const lines = sink.text().split("\n");
  assert.equal(lines.pop(), "", "ends with a newline");
  assert.deepEqual(lines.map((line) => JSON.parse(line).event), [
    "acquire",
    "release",
    "force_release",
  ]);
});

Deno.test("AuditLog: a full backlog drops further records and counts them, keeping memory bounded", async () => {
  const sink = new GateSink();
  const { audit, written, append } = manualLog(sink, { pendingRecordsMax: 10 });
  for (let i = 0; i < 9; i++) append(i);
  assert.equal(audit.healthy, true);
  append(9);
  // A full backlog is a failed sink: grants pause before records must be dropped.
  assert.equal(audit.healthy, false);
  assert.match(audit.failure ?? "", /^audit backlog full \(10 records, \d+ bytes\)$/);
  for (let i = 10; i < 15; i++) append(i);
  assert.equal(audit.pendingCount, 10);
  assert.equal(audit.full, true);
  assert.deepEqual(audit.lostRecords, { backlog_full: 5, exit: 0 });
  await settle();
  sink.complete();
  await settle();
  assert.equal(written.length, 10);
  assert.equal(audit.pendingCount, 0);
  assert.equal(audit.healthy, true, "healthy again once the backlog is written");
  // The byte bound holds too (records with long names are large).
  const bytes = manualLog(new GateSink(), { pendingBytesMax: 1_000 });
  for (let i = 0; i < 10; i++) bytes.append(i);
  assert.ok(bytes.audit.pendingCount < 10);
  assert.equal(bytes.audit.lostRecords.backlog_full, 10 - bytes.audit.pendingCount);
});

Deno.test("AuditLog.close writes the backlog within its bound, then counts and logs what is left as lost", async () => {
  using captured = captureDiagnosticLog("info", "json");
  // A sink that recovers before the bound: everything is written.
  const recovering = new MemorySink();
  const a = manualLog(recovering);
  recovering.failing = true;
  a.append(0);
  a.append(1);
  await settle();
  const closingA = a.audit.close();
  recovering.failing = false;
  a.scheduler.advance(500);
  await closingA;
  assert.deepEqual(a.written, ["0", "1"]);
  assert.deepEqual(a.audit.lostRecords, { backlog_full: 0, exit: 0 });
  assert.equal(a.scheduler.pendingTimers, 0);

  // A sink that never completes: after the bound the records are lost, counted and logged.
  const stuck = new GateSink();
  const b = manualLog(stuck);
  for (let i = 0; i < 3; i++) b.append(i);
  await settle();
  const closingB = b.audit.close();
  b.scheduler.advance(1_999);
  await settle();
  b.append(3); // appended during the close: still written if the sink comes back in time
  assert.equal(b.audit.lostRecords.exit, 0);
  b.scheduler.advance(1);
  await settle();
  // The write in flight at the bound gets one retry period to settle; this one never does.
  b.scheduler.advance(500);
  await closingB;
  assert.deepEqual(b.audit.lostRecords, { backlog_full: 0, exit: 4 });
  b.append(4);
  assert.equal(b.audit.lostRecords.exit, 5, "a record after the close is lost and counted");
  assert.equal(b.scheduler.pendingTimers, 0);
  stuck.complete(); // a write completing after the close changes nothing
  await settle();
  assert.deepEqual(b.written, []);
  const errors = captured.records().filter((r) => r.level === "ERROR");
  assert.equal(errors.length, 2, JSON.stringify(captured.records()));
  assert.match(String(errors[0].message), /audit log closed with records not written/);
  assert.equal(errors[0].lost_records, 4);
  assert.match(String(errors[1].message), /audit record after the log closed/);
});

Deno.test("openAuditSink appends to an existing file and never truncates it", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const path = `${dir}/audit.jsonl`;
    await Deno.writeTextFile(path, '{"earlier":true}\n');
    for (const [, record] of EXAMPLES.slice(0, 2)) {
      const audit = new AuditLog(openAuditSink(path), { wallMs: () => WALL_MS });
      audit.append(record);
      await audit.close();
    }
    const lines = (await Deno.readTextFile(path)).trimEnd().split("\n");
    assert.deepEqual(lines.map((line) => JSON.parse(line).event ?? "earlier"), [
      "earlier",
      "acquire",
      "release",
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("standard output is only the audit log: nothing in src/ prints to it", async () => {
  const offenders: string[] = [];
  const walk = async (dir: URL) => {
    for await (const entry of Deno.readDir(dir)) {
      const url = new URL(entry.name + (entry.isDirectory ? "/" : ""), dir);
      if (entry.isDirectory) await walk(url);
      else if (entry.name.endsWith(".ts")) {
        const text = await Deno.readTextFile(url);
        const path = url.pathname.slice(url.pathname.indexOf("/src/") + 1);
        // The client commands (`lockd admin`, `lockd run`, `lockd health`) are other processes
        // whose standard output belongs to their user; `lockd serve` is the server.
        if (path.startsWith("src/cli/") && path !== "src/cli/serve.ts") continue;
        if (/console\.(log|info|debug|table|dir)\(/.test(text)) offenders.push(`${path}: console`);
        if (text.includes("Deno.stdout") && path !== "src/log/audit.ts") {
          offenders.push(`${path}: Deno.stdout`);
        }
      }
    }
  };
  await walk(new URL("../../src/", import.meta.url));
  assert.deepEqual(offenders, []);
});

// ---- "all of this or nothing" through a real server ------------------------

Deno.test("a failing audit sink pauses grants: ACQUIRE gets AUDIT_UNAVAILABLE, nothing is granted unaudited, and the backlog is written in order once it works", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer({}, { scheduler });
  await using a = await connect({ addr: t.addr, reconnect: false });
  await using b = await connect({ addr: t.addr, reconnect: false });
  await using c = await connect({ addr: t.addr, reconnect: false });
  const context = t.server.context;
  const lockA = await a.acquire("held");
  // b waits behind a: the hand-off will happen while the sink fails.
  const bWaits = b.acquire("held");
  await eventually(() => context.engine.getLock("held")?.waiters.length === 1, "b queued");
  assert.equal(context.ready, true);

  t.audit.failing = true;
  // The release's record cannot be written: the RELEASED reply waits for it, grants pause.
  let released = false;
  const releaseA = lockA.release().then(() => released = true);
  await eventually(() => !context.ready, "ready turns false");
  assert.equal(context.audit.healthy, false);

  // A new ACQUIRE is refused with a retryable AUDIT_UNAVAILABLE.
  await assert.rejects(c.acquire("free"), (error: unknown) => {
    assert.ok(error instanceof LockdError);
    assert.equal(error.code, 0x0c);
    assert.equal(error.codeName, "AUDIT_UNAVAILABLE");
    assert.equal(error.retryable, true);
    return true;
  });
  assert.equal(context.counters.protocolErrors.get(0x0c), 1);
  // Nothing reached a client: a's RELEASED is held back, b is not granted the lock, and the
  // retries keep failing.
  scheduler.advance(AUDIT_RETRY_MS * 3);
  assert.equal(released, false);
  let bGranted = false;
  bWaits.then(() => bGranted = true);
  // A round trip through the server: had b's ACQUIRED been sent, it would have been sent first.
  await assert.rejects(c.acquire("free"), (error: unknown) => error instanceof LockdError);
  assert.equal(bGranted, false);
  assert.equal(t.audit.lines.length, 1, "only a's acquire is written");

  t.audit.failing = false;
  scheduler.advance(AUDIT_RETRY_MS - 1);
  assert.equal(context.ready, false, "not before the next retry");
  scheduler.advance(1);
  await eventually(() => context.ready, "the next retry writes the backlog and grants resume");
  const lockB = await bWaits;
  assert.equal(bGranted, true);
  await releaseA;
  assert.ok(lockB.token > lockA.token);
  const lockC = await c.acquire("free");
  await lockB.release();
  await lockC.release();

  const records = t.audit.records();
  assert.deepEqual(records.map((r) => [r.event, r.lock, r.token]), [
    ["acquire", "held", lockA.token],
    ["release", "held", lockA.token],
    ["acquire", "held", lockB.token],
    ["acquire", "free", lockC.token],
    ["release", "held", lockB.token],
    ["release", "free", lockC.token],
  ]);
  assertEveryTokenOnceAcquiredOnceReleased(records);
});

Deno.test("a grant whose record cannot be written reaches its client only after the record does", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer({}, { scheduler });
  await using a = await connect({ addr: t.addr, reconnect: false });
  t.audit.failing = true;
  let granted = false;
  const pending = a.acquire("first-after-failure").then((lock) => {
    granted = true;
    return lock;
  });
  await eventually(() => !t.server.context.ready, "not ready");
  // A heartbeat round trip: had the ACQUIRED been sent, it would have arrived before the ACK.
  await using raw = await RawClient.session(t.addr);
  await raw.send({ type: "heartbeat", requestId: 1 });
  assert.equal((await raw.next())?.type, "heartbeat_ack");
  assert.equal(granted, false, "ACQUIRED is held back while its record is not written");
  assert.equal(t.audit.lines.length, 0);
  t.audit.failing = false;
  scheduler.advance(AUDIT_RETRY_MS);
  const lock = await pending;
  assert.deepEqual(t.audit.records().map((r) => [r.event, r.token]), [["acquire", lock.token]]);
  await lock.release();
});

// ---- mixed traffic --------------------------------------------------------

function assertEveryTokenOnceAcquiredOnceReleased(records: Record<string, unknown>[]): void {
  const byToken = new Map<number, string[]>();
  for (const record of records) {
    if (record.event !== "acquire" && record.event !== "release") continue;
    const token = record.token as number;
    byToken.set(token, [...byToken.get(token) ?? [], record.event as string]);
  }
  for (const [token, events] of byToken) {
    assert.deepEqual(events, ["acquire", "release"], `token ${token}`);
  }
}

Deno.test("mixed traffic: every audit line parses and every token has one acquire and one release with the right reason", async () => {
  const scheduler = new ManualScheduler();
  const t = await startTestServer({ ioTimeoutMs: 1_000 }, { scheduler });
  const expected = new Map<string, string>(); // lock → release reason of its first ownership
  try {
    // Clean release and hand-offs along a queue.
    await using h1 = await connect({ addr: t.addr, reconnect: false });
    await using h2 = await connect({ addr: t.addr, reconnect: false });
    await using h3 = await connect({ addr: t.addr, reconnect: false });
    const first = await h1.acquire("mix/handoff");
    const second = h2.acquire("mix/handoff");
    await eventually(
      () => t.server.context.engine.getLock("mix/handoff")?.waiters.length === 1,
      "h2",
    );
    const third = h3.acquire("mix/handoff");
    await eventually(
      () => t.server.context.engine.getLock("mix/handoff")?.waiters.length === 2,
      "h3",
    );
    await first.release();
    await (await second).release();
    await (await third).release();

    // A lease that expires: no heartbeat renews it while 200 ms pass on the server's clock.
    await using stalled = await connect({ addr: t.addr, reconnect: false });
    await using next = await connect({ addr: t.addr, reconnect: false });
    const doomed = await stalled.acquire("mix/expire", { leaseMs: 200 });
    const lost = new Promise<LockLostError>((resolve) =>
      doomed.lost.addEventListener("abort", () => resolve(doomed.lost.reason))
    );
    const successorGranted = next.acquire("mix/expire", { leaseMs: 5_000 });
    await eventually(
      () => t.server.context.engine.getLock("mix/expire")?.waiters.length === 1,
      "next queued",
    );
    scheduler.advance(200);
    const successor = await successorGranted;
    assert.equal((await lost).reason, "expired");
    await successor.release();

    // A client that disconnects while holding a lock and waiting for another.
    const leaver = await connect({ addr: t.addr, reconnect: false });
    await using blocker = await connect({ addr: t.addr, reconnect: false });
    const block = await blocker.acquire("mix/wanted");
    await leaver.acquire("mix/disconnect");
    const abandoned = leaver.acquire("mix/wanted").catch(() => "gone");
    await eventually(
      () => t.server.context.engine.getLock("mix/wanted")?.waiters.length === 1,
      "leaver queued",
    );
    await leaver.close();
    assert.equal(await abandoned, "gone");
    await eventually(
      () => t.server.context.engine.getLock("mix/disconnect") === undefined,
      "freed",
    );
    await block.release();

    // A raw client that takes a lock and then falls silent: the I/O timeout ends it.
    await using silent = await RawClient.session(t.addr);
    await silent.send({
      type: "acquire",
      requestId: 1,
      name: "mix/silent",
      leaseMs: 60_000,
      waitMs: 0,
    });
    assert.equal((await silent.next())?.type, "acquired");
    scheduler.advance(1_000);
    assert.equal(t.server.context.engine.getLock("mix/silent"), undefined, "io timeout");

    expected.set("mix/handoff", "graceful").set("mix/expire", "expired").set(
      "mix/disconnect",
      "graceful",
    ).set("mix/wanted", "graceful").set("mix/silent", "io_timeout");
  } finally {
    await t.server.shutdown();
  }

  // MemorySink refuses a write that does not end with a whole line, so every line here is whole.
  const records = t.audit.lines.map((line) => JSON.parse(line) as Record<string, unknown>);
  for (const record of records) {
    assert.match(String(record.ts), RFC3339_UTC_MS);
    assert.match(String(record.remote_addr), /^127\.0\.0\.1:\d+$/);
    assert.equal(record.identity, "");
    assert.equal(typeof record.session, "number");
    if (record.event === "acquire") assert.equal(typeof record.waited_ms, "number");
    if (record.event === "release") assert.equal(typeof record.held_ms, "number");
  }
  assertEveryTokenOnceAcquiredOnceReleased(records);
  const acquires = records.filter((r) => r.event === "acquire");
  assert.equal(acquires.length, 8);
  const firstRelease = new Map<string, string>();
  for (const record of records) {
    if (record.event === "release" && !firstRelease.has(record.lock as string)) {
      firstRelease.set(record.lock as string, record.reason as string);
    }
  }
  assert.deepEqual(Object.fromEntries(firstRelease), Object.fromEntries(expected));
  // The queue waited: the second and third owners of mix/handoff report waiting.
  const handoffWaits = acquires.filter((r) => r.lock === "mix/handoff").map((r) => r.waited_ms);
  assert.equal(handoffWaits[0], 0);
});
