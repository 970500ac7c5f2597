/**
 * The session write path against a scripted transport and the stall watchdog on a manual clock:
 * a write that never settles closes the session once it has been in flight longer than the I/O
 * timeout, whether nothing of the batch was written or part of it; a batch written in several
 * partial writes ends its watch; the bytes of a write in flight are never overwritten while frames
 * decided meanwhile are encoded; the pooled callbacks of one session's write never reach
 * another session; and a frame encoded once for many sessions goes out with each one's request id.
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { ServerCounters } from "../../src/counters.ts";
import { FRAME_BYTES_MAX_DEFAULT, WRITE_BUFFER_BYTES_MAX } from "../../src/limits.ts";
import { type OutputOwner, SessionOutput } from "../../src/protocol/session_output.ts";
import type { Transport } from "../../src/protocol/transport.ts";
import { StallWatchdog } from "../../src/service/stall_watchdog.ts";
import { EncodedFrame } from "../../src/wire/encoded_frame.ts";
import { FrameWriter } from "../../src/wire/frame.ts";
import type { ServerMessage } from "../../src/wire/messages.ts";

const IO_TIMEOUT_MS = 500;
/** How often the watchdog checks with this timeout (a quarter of it). */
const CHECK_EVERY_MS = IO_TIMEOUT_MS / 4;

/** One write handed to the transport: the bytes as the session passed them, settled by the test. */
interface ScriptedWrite {
  /** The session's own view (it must not change until the write settles). */
  readonly bytes: Uint8Array;
  /** A copy taken when the write started. */
  readonly copy: Uint8Array;
  /** Settles the write with `n` bytes written (all by default). */
  settle(n?: number): void;
  fail(): void;
}

/** A transport whose writes settle only when the test says so; `close()` fails those in flight. */
class ScriptedTransport implements Transport {
  readonly remoteAddr: string;
  readonly identity = "";
  readonly writes: ScriptedWrite[] = [];
  /** Every byte the peer got, in order. */
  readonly received: number[] = [];
  closed = false;

  constructor(remoteAddr: string) {
    this.remoteAddr = remoteAddr;
  }

  read(): Promise<number | null> {
    return new Promise(() => {}); // the session under test only writes
  }

  write(bytes: Uint8Array): Promise<number> {
    if (this.closed) return Promise.reject(new Error("closed"));
    return new Promise((resolve, reject) => {
      let settled = false;
      const write: ScriptedWrite = {
        bytes,
        copy: bytes.slice(),
        settle: (n = bytes.length) => {
          if (settled) return;
          settled = true;
          assert.deepEqual(bytes, write.copy, "the bytes of a write in flight were overwritten");
          this.received.push(...bytes.subarray(0, n));
          resolve(n);
        },
        fail: () => {
          if (settled) return;
          settled = true;
          reject(new Error("connection reset"));
        },
      };
      this.writes.push(write);
    });
  }

  /** The write in flight (the last one handed over). */
  get last(): ScriptedWrite {
    const write = this.writes.at(-1);
    assert.ok(write !== undefined, "no write was started");
    return write;
  }

  close(): void {
    this.closed = true;
    for (const write of this.writes) write.fail();
  }
}

/** One session's write side, with what its owner and the watchdog heard. */
class Harness implements OutputOwner {
  readonly transport: ScriptedTransport;
  readonly output: SessionOutput;
  closed = false;
  readonly events: string[] = [];

  constructor(watchdog: StallWatchdog, sessionId: number) {
    this.transport = new ScriptedTransport(`127.0.0.1:${40_000 + sessionId}`);
    const watched = {
      remoteAddr: this.transport.remoteAddr,
      sessionId,
      // As Session.closeForStall: the session closes, its connection with it.
      closeForStall: () => {
        this.events.push("stalled");
        this.#close();
      },
    };
    this.output = new SessionOutput(
      this,
      watched,
      watchdog,
      new ServerCounters(),
      FRAME_BYTES_MAX_DEFAULT,
    );
  }

  encodeFailed(): void {
    this.events.push("encodeFailed");
  }

  slowReader(): void {
    this.events.push("slowReader");
    this.#close();
  }

  writeFailed(): void {
    this.events.push("writeFailed");
    this.#close();
  }

  flushed(): void {
    this.events.push("flushed");
  }

  #close(): void {
    if (this.closed) return;
    this.closed = true;
    this.output.close();
    this.transport.close();
  }
}

function ack(requestId: number): ServerMessage {
  return { type: "heartbeat_ack", requestId, renewed: 1 };
}

/** The bytes of `messages` as one batch. */
function encoded(...messages: ServerMessage[]): number[] {
  const writer = new FrameWriter();
  for (const message of messages) writer.push(message);
  return [...writer.take()];
}

/** Lets the flush microtask and the callbacks of settled writes run. */
function turn(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

function setup(): { scheduler: ManualScheduler; watchdog: StallWatchdog } {
  const scheduler = new ManualScheduler();
  return { scheduler, watchdog: new StallWatchdog(scheduler, IO_TIMEOUT_MS) };
}

Deno.test("session output: a write that never settles closes the session after the I/O timeout", async () => {
  const { scheduler, watchdog } = setup();
  try {
    const s = new Harness(watchdog, 1);
    s.output.push(ack(1));
    await turn();
    assert.equal(s.transport.writes.length, 1);
    scheduler.advance(IO_TIMEOUT_MS);
    assert.deepEqual(s.events, [], "not before the I/O timeout has passed");
    s.output.push(ack(2)); // decided while the write is stuck: waits in another writer
    scheduler.advance(CHECK_EVERY_MS);
    assert.deepEqual(s.events, ["stalled"]);
    await turn(); // the write fails once the connection is closed; nothing more is written
    assert.deepEqual(s.events, ["stalled", "writeFailed"]);
    assert.equal(s.transport.writes.length, 1);
    assert.ok(s.output.idle);
    scheduler.advance(10 * IO_TIMEOUT_MS);
    assert.deepEqual(s.events, ["stalled", "writeFailed"], "closed once");
  } finally {
    watchdog.stop();
  }
});

Deno.test("session output: a batch written in partial writes ends its watch; one that stalls midway is closed", async () => {
  const { scheduler, watchdog } = setup();
  try {
    const s = new Harness(watchdog, 2);
    const messages = [ack(1), ack(2), ack(3)];
    for (const message of messages) s.output.push(message);
    await turn();
    const total = s.transport.last.bytes.length;
    // Five bytes per write, the clock moving less than the timeout in all.
    while (s.transport.received.length < total) {
      s.transport.last.settle(Math.min(5, s.transport.last.bytes.length));
      scheduler.advance(CHECK_EVERY_MS / 2);
      await turn();
    }
    assert.ok(s.transport.writes.length > 3, "the batch took several writes");
    assert.deepEqual(s.transport.received, encoded(...messages));
    assert.deepEqual(s.events, ["flushed"]);
    assert.ok(s.output.idle);
    scheduler.advance(10 * IO_TIMEOUT_MS);
    assert.deepEqual(s.events, ["flushed"], "a finished batch is not watched any more");

    // The next batch: its first part is written, the rest never is.
    s.output.push(ack(4));
    await turn();
    s.transport.last.settle(3);
    await turn();
    assert.equal(s.transport.received.length, total + 3);
    scheduler.advance(IO_TIMEOUT_MS + CHECK_EVERY_MS);
    assert.deepEqual(s.events, ["flushed", "stalled"]);
    await turn();
  } finally {
    watchdog.stop();
  }
});

Deno.test("session output: frames decided during a write follow it, and a write of one session never settles another's", async () => {
  const { scheduler, watchdog } = setup();
  try {
    const a = new Harness(watchdog, 3);
    const b = new Harness(watchdog, 4);
    a.output.push(ack(1));
    b.output.push(ack(1));
    await turn();
    // While both first writes are in flight, more frames are decided for both.
    a.output.push(ack(2));
    b.output.push(ack(2));
    b.output.push(ack(3));
    b.transport.last.settle();
    await turn();
    b.transport.last.settle(); // b's second batch: its own frames, its own writer
    await turn();
    assert.deepEqual(b.transport.received, encoded(ack(1), ack(2), ack(3)));
    assert.deepEqual(b.events, ["flushed"]);

    // a's write fails: a closes; b, writing again with a job from the same pool, goes on.
    b.output.push(ack(4));
    await turn();
    a.transport.last.fail();
    await turn();
    assert.deepEqual(a.events, ["writeFailed"]);
    assert.equal(a.transport.writes.length, 1, "nothing more is written for a closed session");
    b.transport.last.settle();
    await turn();
    assert.deepEqual(b.transport.received, encoded(ack(1), ack(2), ack(3), ack(4)));
    assert.deepEqual(b.events, ["flushed", "flushed"]);

    // b still stalls as b.
    b.output.push(ack(5));
    await turn();
    scheduler.advance(IO_TIMEOUT_MS + CHECK_EVERY_MS);
    assert.deepEqual(b.events, ["flushed", "flushed", "stalled"]);
    await turn();
    assert.deepEqual(a.events, ["writeFailed"]);
  } finally {
    watchdog.stop();
  }
});

Deno.test("session output: frames piling up behind a stuck write past WRITE_BUFFER_BYTES_MAX close the session", async () => {
  const { watchdog } = setup();
  try {
    const s = new Harness(watchdog, 5);
    s.output.push(ack(0));
    await turn();
    const ackBytes = encoded(ack(1)).length;
    for (let i = 1; i <= Math.ceil(WRITE_BUFFER_BYTES_MAX / ackBytes) + 1 && !s.closed; i++) {
      s.output.push(ack(i));
    }
    assert.deepEqual(s.events, ["slowReader"]);
    await turn();
    assert.deepEqual(s.events, ["slowReader", "writeFailed"]);
    assert.equal(s.transport.writes.length, 1);
  } finally {
    watchdog.stop();
  }
});

Deno.test("session output: a frame encoded once goes out with each session's request id, in order with the rest, and its observer runs once its batch is written", async () => {
  const { watchdog } = setup();
  try {
    const state: ServerMessage = {
      type: "lock_state",
      requestId: 0,
      event: "granted",
      reason: "none",
      kind: "exclusive",
      limit: 1,
      queueLength: 0,
      owners: 0,
      name: "leader",
      holders: [],
    };
    const frame = new EncodedFrame(state, new FrameWriter({ version: 2 }));
    const shared = frame.bytes.slice();
    const [a, b] = [new Harness(watchdog, 3), new Harness(watchdog, 4)];
    a.output.version = b.output.version = 2;
    const written: string[] = [];
    a.output.push(ack(1));
    a.output.pushEncoded(frame, 7, () => written.push("a"));
    b.output.pushEncoded(frame, 9, null);
    await turn();
    assert.deepEqual(written, [], "not before its batch is written");
    a.transport.last.settle();
    b.transport.last.settle();
    await turn();
    assert.deepEqual(written, ["a"]);
    const v2 = (...messages: ServerMessage[]) => {
      const writer = new FrameWriter({ version: 2 });
      for (const message of messages) writer.push(message);
      return [...writer.take()];
    };
    assert.deepEqual(a.transport.received, v2(ack(1), { ...state, requestId: 7 }));
    assert.deepEqual(b.transport.received, v2({ ...state, requestId: 9 }));
    assert.deepEqual(frame.bytes, shared, "the shared bytes are never changed");
  } finally {
    watchdog.stop();
  }
});
