/**
 * The audit log's synchronous path: a regular file or a character device that is not a terminal
 * (/dev/null) cannot be stalled by a reader, so records go out with a synchronous write and the
 * reply that waits for its record does not wait for a round trip through a runtime worker
 * thread (the asynchronous path halved contended hand-offs). Pipes, sockets and terminals stay
 * asynchronous with the write timeout (tests/faults/audit_stall_test.ts). Both paths keep "the
 * reply waits for its record" and whole lines after partial writes and failures.
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { AUDIT_RETRY_MS } from "../../src/limits.ts";
import { AuditLog, type AuditSink, openAuditSink } from "../../src/log/audit.ts";
import type { AcquireRecord } from "../../src/log/audit_records.ts";
import { sinkWritesSynchronously } from "../../src/log/sink_kind.ts";

const RECORD: AcquireRecord = {
  event: "acquire",
  lock: "jobs/nightly",
  token: 42,
  identity: "",
  remote_addr: "127.0.0.1:5000",
  session: 1,
  client_name: "",
  waited_ms: 0,
};

/** A synchronous sink in memory: may take only `take` bytes per write, or fail. */
class SyncSink implements AuditSink {
  readonly bytes: number[] = [];
  writes = 0;
  asyncWrites = 0;
  take = Infinity;
  failing = false;

  write(_bytes: Uint8Array): Promise<number> {
    this.asyncWrites++;
    return Promise.reject(new Error("the synchronous path must not write asynchronously"));
  }

  writeSync(bytes: Uint8Array): number {
    this.writes++;
    if (this.failing) throw new Error("No space left on device (os error 28)");
    const n = Math.min(this.take, bytes.length);
    this.bytes.push(...bytes.subarray(0, n));
    return n;
  }

  lines(): string[] {
    const text = new TextDecoder().decode(new Uint8Array(this.bytes));
    return text.split("\n").slice(0, -1);
  }
}

Deno.test("the sink rule: regular files and character devices that are not terminals are written synchronously; pipes, sockets and terminals are not", () => {
  const rows: [string, { isFile: boolean; isCharDevice: boolean; isTerminal: boolean }, boolean][] =
    [
      ["regular file", { isFile: true, isCharDevice: false, isTerminal: false }, true],
      ["/dev/null", { isFile: false, isCharDevice: true, isTerminal: false }, true],
      ["terminal", { isFile: false, isCharDevice: true, isTerminal: true }, false],
      ["pipe or socket", { isFile: false, isCharDevice: false, isTerminal: false }, false],
    ];
  for (const [what, kind, sync] of rows) assert.equal(sinkWritesSynchronously(kind), sync, what);
});

Deno.test("openAuditSink: a regular file and /dev/null are written synchronously, a FIFO asynchronously", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-audit-sink-" });
  try {
    const file = openAuditSink(`${dir}/audit.jsonl`);
    assert.equal(file.synchronous, true);
    assert.equal(file.writeSync!(new TextEncoder().encode("{}\n")), 3);
    file.close?.();
    assert.equal(await Deno.readTextFile(`${dir}/audit.jsonl`), "{}\n");

    const devNull = openAuditSink("/dev/null");
    assert.equal(devNull.synchronous, true);
    devNull.close?.();

    const fifo = `${dir}/fifo`;
    const made = await new Deno.Command("mkfifo", { args: [fifo] }).output();
    assert.ok(made.success);
    // Opening a FIFO for writing waits for a reader: give it one.
    const reader = new Deno.Command("cat", { args: [fifo], stdout: "null" }).spawn();
    const pipe = openAuditSink(fifo);
    assert.equal(pipe.synchronous, false);
    assert.equal(pipe.writeSync, undefined);
    pipe.close?.();
    await reader.status;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("synchronous sink: the records of a turn are written at its end in one write, and each callback runs only after its record", async () => {
  const sink = new SyncSink();
  const log = new AuditLog(sink, { scheduler: new ManualScheduler() });
  const written: number[] = [];
  log.append(RECORD, () => written.push(1));
  log.append({ ...RECORD, token: 43 }, () => written.push(2));
  assert.deepEqual(written, [], "nothing before the end of the turn");
  assert.equal(sink.writes, 0);
  await Promise.resolve();
  assert.deepEqual(written, [1, 2]);
  assert.equal(sink.writes, 1, "one write for the turn");
  assert.equal(sink.asyncWrites, 0);
  assert.equal(sink.lines().length, 2);
  assert.equal(log.healthy, true);
  assert.equal(log.pendingCount, 0);
});

Deno.test("synchronous sink: partial writes are finished from where they stopped, a failure is retried on the scheduler, lines stay whole and callbacks wait", async () => {
  const scheduler = new ManualScheduler();
  const sink = new SyncSink();
  const health: (string | null)[] = [];
  const log = new AuditLog(sink, { scheduler });
  log.onHealthChange = (failure) => health.push(failure);
  const written: number[] = [];

  // 7 bytes per write: many writes, never a repeated byte.
  sink.take = 7;
  log.append(RECORD, () => written.push(1));
  await Promise.resolve();
  assert.deepEqual(written, [1]);
  assert.ok(sink.writes > 10);

  // The disk fills up in the middle of a record: the callback waits, the log turns unhealthy.
  sink.take = 20;
  let calls = 0;
  const original = sink.writeSync.bind(sink);
  sink.writeSync = (bytes) => {
    if (++calls === 2) sink.failing = true;
    return original(bytes);
  };
  log.append({ ...RECORD, token: 43 }, () => written.push(2));
  log.append({ ...RECORD, token: 44 }, () => written.push(3));
  await Promise.resolve();
  assert.deepEqual(written, [1]);
  assert.equal(log.healthy, false);
  assert.equal(log.writeFailures, 1);
  assert.deepEqual(health, ["No space left on device (os error 28)"]);

  // Space again: the retry finishes the record from its byte 40, then the next one.
  sink.failing = false;
  sink.take = Infinity;
  scheduler.advance(AUDIT_RETRY_MS);
  assert.deepEqual(written, [1, 2, 3]);
  assert.deepEqual(health, ["No space left on device (os error 28)", null]);
  const lines = sink.lines();
  assert.deepEqual(lines.map((line) => JSON.parse(line).token), [42, 43, 44]);
  assert.equal(sink.asyncWrites, 0);
});

Deno.test("synchronous sink: close() writes what is queued at once", async () => {
  const sink = new SyncSink();
  const log = new AuditLog(sink, { scheduler: new ManualScheduler() });
  log.append(RECORD);
  await log.close();
  assert.equal(sink.lines().length, 1);
  assert.deepEqual(log.lostRecords, { backlog_full: 0, exit: 0 });
});
