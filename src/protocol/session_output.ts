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
import type { EncodedFrame } from "../wire/encoded_frame.ts";
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
  /** The write in flight, while one is. */
  #job: WriteJob | null = null;
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

  /**
   * Appends a frame encoded once for many sessions with this session's request id (nothing is
   * encoded again); `written` runs once it has been written (null: nobody waits).
   */
  pushEncoded(frame: EncodedFrame, requestId: number, written: (() => void) | null): void {
    try {
      (this.#writer ??= this.#writers.take(this.version)).pushEncoded(frame.bytes, requestId);
    } catch (error) {
      logger.error("cannot append a frame; closing the session", {
        remote_addr: this.#owner.transport.remoteAddr,
        type: frame.message.type,
        error: errorText(error),
      });
      this.#owner.encodeFailed();
      return;
    }
    if (written !== null) (this.#observed ??= new ObservedFrames()).pushedWritten(written);
    this.#afterBytes();
  }

  #afterPush(message: ServerMessage): void {
    if (message.type === "error") this.#counters.countError(message.code);
    this.#observed?.pushed(message);
    this.#afterBytes();
  }

  /** Frames went into the batch: the slow-reader bound, and the batch's write. */
  #afterBytes(): void {
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
   * No promise or closure of its own per write: the callbacks are a pooled `WriteJob`'s, which
   * also holds the write in flight (an idle session keeps none of it).
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
    const job = this.#job ??= takeJob(this);
    // The bytes are a view of the writer's buffer (no copy): frames decided while they are
    // written go into another writer, and this one goes back to the pool once they are written.
    job.bytes = writer.take(false);
    job.writer = writer;
    this.#writer = null;
    job.offset = 0;
    job.observed = this.#observed?.takeBatch() ?? NO_OBSERVERS;
    this.#watchdog.writeStarted(this.#watched);
    this.#send(job);
  }

  #send(job: WriteJob): void {
    const bytes = job.offset === 0 ? job.bytes : job.bytes.subarray(job.offset);
    let pending: Promise<number>;
    try {
      pending = this.#owner.transport.write(bytes);
    } catch {
      this.#writeFailed();
      return;
    }
    pending.then(job.wrote, job.failed);
  }

  static #wrote(output: SessionOutput, job: WriteJob, n: number): void {
    try {
      job.offset += n;
      if (job.offset < job.bytes.length) {
        output.#send(job);
        return;
      }
      output.#watchdog.writeEnded(output.#watched);
      const observed = job.observed;
      job.observed = NO_OBSERVERS;
      job.bytes = NO_BYTES;
      output.#writers.give(job.writer!);
      job.writer = null;
      for (let i = 0; i < observed.length; i++) observed[i]();
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

  /** No write in flight any more: the job goes back (with the writer it was writing from). */
  #endWriting(): void {
    this.#writing = false;
    const job = this.#job;
    if (job === null) return;
    this.#job = null;
    if (job.writer !== null) this.#writers.give(job.writer);
    giveJob(job);
  }

  /**
   * One write in flight and its callbacks, pooled: a session borrows a job while it writes and
   * gives it back when writing ends, so no closure is allocated per write nor kept per session.
   */
  static readonly Job = class WriteJob {
    output: SessionOutput | null = null;
    /** The writer whose bytes are being written, the bytes, how far they got. */
    writer: FrameWriter | null = null;
    bytes: Uint8Array = NO_BYTES;
    offset = 0;
    /** Called once the bytes are written: the observers of their frames. */
    observed: readonly (() => void)[] = NO_OBSERVERS;
    readonly wrote = (n: number) => SessionOutput.#wrote(this.output!, this, n);
    readonly failed = () => this.output!.#writeFailed();
  };

  /** The session closed: nobody waits for a frame any more, the writer goes back (once no write is in flight). */
  close(): void {
    this.#observed?.clear();
    if (!this.#writing) this.#returnWriter();
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
  // Flushing one output may decide frames for others (a session that closes hands its lock
  // over): they join the array and are flushed in this same pass.
  for (let i = 0; i < toFlush.length; i++) {
    try {
      SessionOutput.flush(toFlush[i]);
    } catch (error) {
      // A bug must not stop the other sessions' writes (nor leave this array uncleared).
      logger.error("session flush failed", { error: errorText(error) });
    }
  }
  toFlush.length = 0;
}

type WriteJob = InstanceType<typeof SessionOutput.Job>;
const jobs: WriteJob[] = [];

function takeJob(output: SessionOutput): WriteJob {
  const job = jobs.pop() ?? new SessionOutput.Job();
  job.output = output;
  return job;
}

function giveJob(job: WriteJob): void {
  job.output = null;
  if (jobs.length < SESSION_WRITERS_POOLED_MAX) jobs.push(job);
}
