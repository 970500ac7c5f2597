/**
 * The write path of one session: frames encoded into the batch of the turn, one socket write per
 * batch, the frames whose writing someone waits for, and the bounds on what may wait. An idle
 * session holds no reply buffer: it borrows a writer from its pool for a batch and gives it back
 * once the batch is written (issue 24, memory per idle session).
 *
 * @module
 */

import type { ServerCounters } from "../counters.ts";
import {
  LOCK_NAME_BYTES_MAX,
  SESSION_WRITERS_POOLED_MAX,
  WRITE_BUFFER_BYTES_MAX,
} from "../limits.ts";
import { log } from "../log/diagnostic.ts";
import type { StallWatchdog, StallWatched } from "../service/stall_watchdog.ts";
import { cutUtf8, type FrameWriter } from "../wire/frame.ts";
import type { ErrorMessage, ServerMessage } from "../wire/messages.ts";
import {
  type FrameWriterPool,
  frameWriterPool,
  NO_OBSERVERS,
  ObservedFrames,
} from "./session_frames.ts";
import type { Transport } from "./transport.ts";
import { errorText } from "../error_text.ts";

const logger = log("protocol");

/** What the write path needs from its session (called back, never stored elsewhere). */
export interface OutputOwner {
  readonly transport: Transport;
  /** The session is closed: nothing more is encoded or written. */
  readonly closed: boolean;
  /** A frame could not be encoded (a bug): the session cannot be trusted to be in order. */
  encodeFailed(): void;
  /** The client does not read its replies (the batch passed WRITE_BUFFER_BYTES_MAX). */
  slowReader(): void;
  /** A write failed: the peer is gone. */
  writeFailed(): void;
  /** Everything encoded so far is written. */
  flushed(): void;
}

export class SessionOutput {
  readonly #owner: OutputOwner;
  readonly #watched: StallWatched;
  readonly #watchdog: StallWatchdog;
  readonly #counters: ServerCounters;
  readonly #writers: FrameWriterPool;
  /** The writer of the batch being encoded or written; none while the session is idle. */
  #writer: FrameWriter | null = null;
  /** The protocol version the frames are encoded in (fixed at WELCOME; 1 before). */
  version = 1;
  #writing = false;
  #flushScheduled = false;
  /** The write in flight: its bytes, how far it got, the observers of its frames, its job. */
  #bytes: Uint8Array = NO_BYTES;
  #inFlight: FrameWriter | null = null;
  #offset = 0;
  #batchObserved: readonly (() => void)[] = NO_OBSERVERS;
  #job: InstanceType<typeof SessionOutput.Job> | null = null;
  /** Frames whose writing someone waits for (`observe`; created at the first). */
  #observed: ObservedFrames | null = null;

  constructor(
    owner: OutputOwner,
    watched: StallWatched,
    watchdog: StallWatchdog,
    counters: ServerCounters,
    frameBytesMax: number,
  ) {
    this.#owner = owner;
    this.#watched = watched;
    this.#watchdog = watchdog;
    this.#counters = counters;
    this.#writers = frameWriterPool(frameBytesMax);
  }

  /** Whether nothing is being written and no write is about to start. */
  get idle(): boolean {
    return !this.#writing && !this.#flushScheduled;
  }

  /** `written` runs once `message` (sent after this) has been written to the connection. */
  observe(message: ServerMessage, written: () => void): void {
    (this.#observed ??= new ObservedFrames()).observe(message, written);
  }

  /**
   * Encodes a frame into the batch of this turn. An ERROR is counted here, once it is encoded
   * for the wire: not one decided for a session that closed before its turn came, nor one that
   * could not be encoded.
   */
  push(message: ServerMessage): void {
    try {
      (this.#writer ??= this.#writers.take(this.version)).push(message);
    } catch (error) {
      if (message.type === "error" && message.name.length > 0 && this.#pushWithCutName(message)) {
        return;
      }
      // A frame the server cannot encode is a bug; it must not end the process (it may run in
      // a timer). The session cannot be trusted to be in order any more: close it.
      logger.error("cannot encode a frame; closing the session", {
        remote_addr: this.#owner.transport.remoteAddr,
        type: message.type,
        error: errorText(error),
      });
      this.#owner.encodeFailed();
      return;
    }
    this.#afterPush(message);
  }

  #afterPush(message: ServerMessage): void {
    if (message.type === "error") this.#counters.countError(message.code);
    this.#observed?.pushed(message);
    const writer = this.#writer!;
    if (writer.byteLength > WRITE_BUFFER_BYTES_MAX) {
      // The client does not read its replies: close it as an I/O timeout, memory stays bounded.
      logger.warn("slow reader disconnected", {
        remote_addr: this.#owner.transport.remoteAddr,
        buffered_bytes: writer.byteLength,
      });
      writer.take();
      this.#owner.slowReader();
      return;
    }
    if (!this.#flushScheduled && !this.#writing) {
      this.#flushScheduled = true;
      if (toFlush.push(this) === 1) queueMicrotask(flushAll);
    }
  }

  /**
   * An ERROR that echoes an oversized name (an invalid request's) may not fit the frame limit:
   * it goes out with the name cut to LOCK_NAME_BYTES_MAX (marked with "…"), which always fits
   * (the frame limit is at least SERVER_FRAME_BYTES_MAX). Returns whether that worked.
   */
  #pushWithCutName(message: ErrorMessage): boolean {
    try {
      (this.#writer ??= this.#writers.take(this.version))
        .push({ ...message, name: cutUtf8(message.name, LOCK_NAME_BYTES_MAX) });
    } catch {
      return false;
    }
    this.#afterPush(message);
    return true;
  }

  /** The turn's flush (`flushAll`): writes the batch unless a write is in flight. */
  static flush(output: SessionOutput): void {
    output.#flushScheduled = false;
    if (!output.#writing) output.#writeNext();
  }

  /**
   * Writes what was encoded since the last write, one socket write (and the rest of a partial
   * one) at a time, until nothing is left; then the writer goes back and the owner hears of it.
   * No promise or closure of its own per write: the callbacks are a pooled `WriteJob`'s.
   */
  #writeNext(): void {
    const writer = this.#writer;
    const owner = this.#owner;
    if (writer === null || writer.byteLength === 0 || owner.closed) {
      this.#endWriting();
      this.#returnWriter();
      owner.flushed();
      return;
    }
    this.#writing = true;
    // The bytes are a view of the writer's buffer (no copy): frames decided while they are
    // written go into another writer, and this one goes back to the pool once they are written.
    this.#bytes = writer.take(false);
    this.#inFlight = writer;
    this.#writer = null;
    this.#offset = 0;
    this.#batchObserved = this.#observed?.takeBatch() ?? NO_OBSERVERS;
    this.#watchdog.writeStarted(this.#watched);
    this.#send();
  }

  #send(): void {
    const bytes = this.#offset === 0 ? this.#bytes : this.#bytes.subarray(this.#offset);
    let pending: Promise<number>;
    try {
      pending = this.#owner.transport.write(bytes);
    } catch {
      this.#writeFailed();
      return;
    }
    this.#job ??= takeJob(this);
    pending.then(this.#job.wrote, this.#job.failed);
  }

  static #wrote(output: SessionOutput, n: number): void {
    try {
      output.#offset += n;
      if (output.#offset < output.#bytes.length) {
        output.#send();
        return;
      }
      output.#watchdog.writeEnded(output.#watched);
      const observed = output.#batchObserved;
      output.#batchObserved = NO_OBSERVERS;
      output.#bytes = NO_BYTES;
      output.#returnInFlight();
      for (const written of observed) written();
      output.#writeNext();
    } catch {
      output.#writeFailed();
    }
  }

  #writeFailed(): void {
    this.#watchdog.writeEnded(this.#watched);
    this.#endWriting();
    this.#owner.writeFailed();
    // The session closed before (a write was in flight then): the writer comes back now.
    if (this.#owner.closed) this.#returnWriter();
  }

  /** No write in flight any more: the buffers and the job go. */
  #endWriting(): void {
    this.#writing = false;
    this.#bytes = NO_BYTES;
    this.#returnInFlight();
    this.#batchObserved = NO_OBSERVERS;
    if (this.#job !== null) {
      giveJob(this.#job);
      this.#job = null;
    }
  }

  /**
   * The callbacks of one write in flight, pooled: a session borrows a job while it writes and
   * gives it back when writing ends, so no closure is allocated per write nor kept per session.
   */
  static readonly Job = class WriteJob {
    output: SessionOutput | null = null;
    readonly wrote = (n: number) => SessionOutput.#wrote(this.output!, n);
    readonly failed = () => this.output!.#writeFailed();
  };

  /** The session closed: nobody waits for a frame any more, the writer goes back (once no write is in flight). */
  close(): void {
    this.#observed?.clear();
    if (!this.#writing) this.#returnWriter();
  }

  /** The writer whose bytes were being written: they are written (or failed), it goes back. */
  #returnInFlight(): void {
    if (this.#inFlight === null) return;
    this.#writers.give(this.#inFlight);
    this.#inFlight = null;
  }

  /** Everything encoded was written (or the session closed): the writer goes back to the pool. */
  #returnWriter(): void {
    if (this.#writer === null) return;
    this.#writers.give(this.#writer);
    this.#writer = null;
  }
}

const NO_BYTES = new Uint8Array(0);

/** The outputs that have frames to write this turn, flushed together by one microtask. */
const toFlush: SessionOutput[] = [];

function flushAll(): void {
  // An output flushed here may schedule more (a callback of a write that completed at once):
  // they join the array and are flushed in this same pass.
  for (let i = 0; i < toFlush.length; i++) SessionOutput.flush(toFlush[i]);
  toFlush.length = 0;
}

const jobs: InstanceType<typeof SessionOutput.Job>[] = [];

function takeJob(output: SessionOutput): InstanceType<typeof SessionOutput.Job> {
  const job = jobs.pop() ?? new SessionOutput.Job();
  job.output = output;
  return job;
}

function giveJob(job: InstanceType<typeof SessionOutput.Job>): void {
  job.output = null;
  if (jobs.length < SESSION_WRITERS_POOLED_MAX) jobs.push(job);
}
