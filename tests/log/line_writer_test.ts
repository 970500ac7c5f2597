/**
 * The diagnostic log's writer: never blocks, a bounded buffer whose overflow is dropped and
 * counted, one notice once writing works again, a flush with a bound. The real standard error is
 * tested in tests/faults/stderr_stall_test.ts.
 */

import assert from "node:assert/strict";
import { LineWriter } from "../../src/log/line_writer.ts";

const encoder = new TextEncoder();
const line = (text: string) => encoder.encode(`${text}\n`);

/** An asynchronous sink whose writes complete only when the test says so. */
class GatedSink {
  readonly written: string[] = [];
  readonly pending: {
    bytes: Uint8Array;
    resolve: (n: number) => void;
    reject: (e: Error) => void;
  }[] = [];

  write(bytes: Uint8Array): Promise<number> {
    return new Promise((resolve, reject) => this.pending.push({ bytes, resolve, reject }));
  }

  /** Completes the oldest pending write in full. */
  complete(): void {
    const write = this.pending.shift()!;
    this.written.push(new TextDecoder().decode(write.bytes));
    write.resolve(write.bytes.length);
  }
}

const turn = () => new Promise((resolve) => setTimeout(resolve, 0));

Deno.test("line writer: the lines of a turn go out in one write; a stuck write never blocks, lines past the buffer are dropped and counted, and one notice follows when writing works again", async () => {
  const sink = new GatedSink();
  const notices: number[] = [];
  const writer = new LineWriter(sink, {
    bufferBytesMax: 20,
    writeBytesMax: 1024,
    onDropped: (lines) => {
      notices.push(lines);
      writer.write(line(`dropped ${lines}`));
    },
  });
  writer.write(line("a"));
  writer.write(line("b"));
  await turn();
  assert.equal(sink.pending.length, 1, "one write for the turn");
  assert.equal(new TextDecoder().decode(sink.pending[0].bytes), "a\nb\n");

  // The write is stuck (a reader that stopped): new lines wait in the buffer, then overflow.
  for (let i = 0; i < 10; i++) writer.write(line(`line ${i}`)); // 7 bytes each, 20 fit
  assert.equal(writer.bufferedBytes, 14);
  assert.equal(writer.droppedLines, 8);
  assert.deepEqual(notices, []);

  // The reader resumes: the queued lines go out, then one line says how many were dropped.
  sink.complete();
  await turn();
  sink.complete();
  await turn();
  assert.deepEqual(sink.written, ["a\nb\n", "line 0\nline 1\ndropped 8\n"]);
  assert.deepEqual(notices, [8]);
  assert.equal(writer.droppedLines, 8);
});

Deno.test("line writer: a failed write drops its lines (counted) and later lines are written", async () => {
  const sink = new GatedSink();
  const notices: number[] = [];
  const writer = new LineWriter(sink, {
    bufferBytesMax: 1024,
    writeBytesMax: 1024,
    onDropped: (lines) => notices.push(lines),
  });
  writer.write(line("lost 1"));
  writer.write(line("lost 2"));
  await turn();
  sink.pending.shift()!.reject(new Error("Broken pipe (os error 32)"));
  await turn();
  writer.write(line("kept"));
  await turn();
  sink.complete();
  await turn();
  assert.deepEqual(sink.written, ["kept\n"]);
  assert.equal(writer.droppedLines, 2);
  assert.deepEqual(notices, [2]);
});

Deno.test("line writer: flush resolves once everything is written, or false after its bound when a write is stuck", async () => {
  const sink = new GatedSink();
  const writer = new LineWriter(sink, { bufferBytesMax: 1024, writeBytesMax: 1024 });
  assert.equal(await writer.flush(10), true, "nothing to write");
  writer.write(line("x"));
  const flushed = writer.flush(1_000);
  await turn();
  sink.complete();
  assert.equal(await flushed, true);
  writer.write(line("stuck"));
  const startedMs = performance.now();
  assert.equal(await writer.flush(50), false);
  assert.ok(performance.now() - startedMs < 1_000);
  sink.complete(); // let the pending write finish so nothing is left running
  await turn();
});

Deno.test("line writer: with a synchronous sink lines are written at once; a failing write is dropped and noticed later", () => {
  const written: string[] = [];
  let failing = false;
  const notices: number[] = [];
  const writer = new LineWriter({
    write: () => Promise.reject(new Error("unused")),
    writeSync(bytes) {
      if (failing) throw new Error("No space left on device (os error 28)");
      written.push(new TextDecoder().decode(bytes));
      return bytes.length;
    },
  }, { bufferBytesMax: 1024, writeBytesMax: 1024, onDropped: (lines) => notices.push(lines) });
  writer.write(line("one"));
  assert.deepEqual(written, ["one\n"]);
  failing = true;
  writer.write(line("two"));
  failing = false;
  writer.write(line("three"));
  assert.deepEqual(written, ["one\n", "three\n"]);
  assert.deepEqual(notices, [1]);
  assert.equal(writer.droppedLines, 1);
});
