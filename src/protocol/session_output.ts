/**
 * The write path of one session: frames encoded into the batch of the turn, one socket write per
 * batch, the frames whose writing someone waits for, and the bounds on what may wait. An idle
 * session holds no reply buffer: it borrows a writer from its pool for a batch and gives it back
 * once the batch is written (issue 24, memory per idle session).
 *
 * @module
 */

import type { ServerCounters } from "../counters.ts";
import { LOCK_NAME_BYTES_MAX, WRITE_BUFFER_BYTES_MAX } from "../limits.ts";
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
      queueMicrotask(() => this.#flush());
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

  async #flush(): Promise<void> {
    this.#flushScheduled = false;
    if (this.#writing) return;
    this.#writing = true;
    const owner = this.#owner;
    try {
      while (this.#writer !== null && this.#writer.byteLength > 0 && !owner.closed) {
        const bytes = this.#writer.take();
        const observed = this.#observed?.takeBatch() ?? NO_OBSERVERS;
        this.#watchdog.writeStarted(this.#watched);
        let offset = 0;
        while (offset < bytes.length) {
          offset += await owner.transport.write(offset === 0 ? bytes : bytes.subarray(offset));
        }
        this.#watchdog.writeEnded(this.#watched);
        for (const written of observed) written();
      }
    } catch {
      this.#watchdog.writeEnded(this.#watched);
      this.#writing = false;
      owner.writeFailed();
      return;
    }
    this.#writing = false;
    this.#returnWriter();
    owner.flushed();
  }

  /** The session closed: nobody waits for a frame any more, the writer goes back. */
  close(): void {
    this.#observed?.clear();
    this.#returnWriter();
  }

  /** Everything encoded was written (or the session closed): the writer goes back to the pool. */
  #returnWriter(): void {
    if (this.#writer === null) return;
    this.#writers.give(this.#writer);
    this.#writer = null;
  }
}
