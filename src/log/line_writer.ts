/**
 * Writes log lines without ever blocking the event loop: the diagnostic log's way to standard
 * error, whose reader (a terminal, journald, a container runtime, `| tee`) can stop reading.
 *
 * @module
 */

import { type Scheduler, systemScheduler } from "../clock.ts";

/** Where lines go: an asynchronous write, and a synchronous one where no reader can stall it. */
export interface LineSink {
  /** Resolves with how many bytes were written (at least 1), or rejects. */
  write(bytes: Uint8Array): Promise<number>;
  /** Present only for sinks that cannot be stalled (a regular file, /dev/null). */
  writeSync?(bytes: Uint8Array): number;
}

export interface LineWriterOptions {
  /** Bytes of lines waiting to be written at most; a line that does not fit is dropped. */
  bufferBytesMax: number;
  /** Largest single write. */
  writeBytesMax: number;
  /**
   * Called once writing works again after lines were dropped, with how many were (the caller
   * logs a line saying so, which comes through this writer like any other).
   */
  onDropped?: (lines: number) => void;
  /**
   * The timer of `flush`. Default: the process clock (the diagnostic log belongs to the process,
   * and is flushed at exit, after any server's scheduler is gone).
   */
  scheduler?: Scheduler;
}

/**
 * A bounded queue of lines in front of a sink. `write` never blocks and never throws: with a
 * synchronous sink the line is written at once; otherwise it is queued and the lines of a turn go
 * out together in one asynchronous write, while the next ones wait. Lines that do not fit in the
 * buffer (the reader stopped) or whose write failed are dropped and counted.
 */
export class LineWriter {
  readonly #sink: LineSink;
  readonly #options: LineWriterOptions;
  #queue: Uint8Array[] = [];
  #queuedBytes = 0;
  #writing = false;
  #droppedSinceNotice = 0;
  /** The notice about dropped lines is being written (it must not notice itself). */
  #noticing = false;
  #idle: (() => void)[] = [];
  /** Lines dropped since the writer was made. */
  droppedLines = 0;

  constructor(sink: LineSink, options: LineWriterOptions) {
    this.#sink = sink;
    this.#options = options;
  }

  /** Bytes of lines waiting to be written. */
  get bufferedBytes(): number {
    return this.#queuedBytes;
  }

  write(line: Uint8Array): void {
    if (this.#sink.writeSync !== undefined) {
      this.#writeSync(this.#sink.writeSync.bind(this.#sink), line);
      return;
    }
    // The notice about dropped lines may go past the bound (one short line per notice), so a
    // buffer still full when writing resumes does not drop the notice too.
    if (this.#queuedBytes + line.length > this.#options.bufferBytesMax && !this.#noticing) {
      this.#drop(1);
      return;
    }
    this.#queue.push(line);
    this.#queuedBytes += line.length;
    if (!this.#writing) {
      this.#writing = true;
      // The lines of this turn go out together, at its end.
      queueMicrotask(() => void this.#pump());
    }
  }

  /**
   * Resolves once every queued line is written (true), or after `timeoutMs` (false: the reader
   * is not reading; the lines still queued are lost when the process exits).
   */
  flush(timeoutMs: number): Promise<boolean> {
    if (!this.#writing) return Promise.resolve(true);
    return new Promise((resolve) => {
      const scheduler = this.#options.scheduler ?? systemScheduler;
      const timer = scheduler.setTimer(() => resolve(false), timeoutMs);
      this.#idle.push(() => {
        timer.cancel();
        resolve(true);
      });
    });
  }

  #writeSync(writeSync: (bytes: Uint8Array) => number, line: Uint8Array): void {
    try {
      let written = 0;
      while (written < line.length) written += writeSync(line.subarray(written));
    } catch {
      this.#drop(1);
      return;
    }
    this.#noticeDropped();
  }

  async #pump(): Promise<void> {
    while (this.#queue.length > 0) {
      const lines = this.#take();
      let bytes = lines.length === 1 ? lines[0] : concat(lines);
      try {
        while (bytes.length > 0) {
          const n = await this.#sink.write(bytes);
          if (!(n >= 1)) throw new Error(`wrote ${n} bytes`);
          bytes = bytes.subarray(n);
        }
      } catch {
        // A reader that went away (EPIPE): these lines are lost; later ones are tried again.
        this.#drop(lines.length);
        continue;
      }
      this.#noticeDropped();
    }
    this.#writing = false;
    const idle = this.#idle;
    this.#idle = [];
    for (const resolve of idle) resolve();
  }

  /** Whole lines from the front of the queue, up to writeBytesMax (at least one). */
  #take(): Uint8Array[] {
    let bytes = 0;
    let count = 0;
    do {
      bytes += this.#queue[count].length;
      count++;
    } while (
      count < this.#queue.length &&
      bytes + this.#queue[count].length <= this.#options.writeBytesMax
    );
    const lines = this.#queue.splice(0, count);
    this.#queuedBytes -= bytes;
    return lines;
  }

  #drop(lines: number): void {
    this.droppedLines += lines;
    this.#droppedSinceNotice += lines;
  }

  /** A write worked: say how many lines were dropped before it, once. */
  #noticeDropped(): void {
    if (this.#droppedSinceNotice === 0 || this.#noticing) return;
    const dropped = this.#droppedSinceNotice;
    this.#droppedSinceNotice = 0;
    const droppedBefore = this.droppedLines;
    this.#noticing = true;
    try {
      this.#options.onDropped?.(dropped);
    } finally {
      this.#noticing = false;
    }
    // The notice could not be written (a synchronous write failed): its count waits for the
    // next notice, which counts the notice too.
    if (this.droppedLines > droppedBefore) this.#droppedSinceNotice += dropped;
  }
}

function concat(lines: Uint8Array[]): Uint8Array {
  let length = 0;
  for (const line of lines) length += line.length;
  const out = new Uint8Array(length);
  let offset = 0;
  for (const line of lines) {
    out.set(line, offset);
    offset += line.length;
  }
  return out;
}
