/**
 * What a session keeps about the frames it writes, apart from its reading and its state: their
 * rough weight while held in the reply order, the frames whose writing someone waits for
 * (`SessionPort.sendObserved`: how watches coalesce for a slow reader), and the debug line of a
 * frame.
 *
 * @module
 */

import {
  SESSION_WRITER_BYTES_MIN,
  SESSION_WRITER_RETAINED_BYTES_MAX,
  SESSION_WRITERS_POOLED_MAX,
} from "../limits.ts";
import { FrameWriter } from "../wire/frame.ts";
import type { Message, ServerMessage } from "../wire/messages.ts";

/**
 * The reply buffers of the sessions of one frame limit. A session borrows a writer for the
 * frames of a batch and gives it back once the batch is written, so an idle session holds no
 * reply buffer (issue 24: memory per idle session) and a busy one reuses a warm writer instead
 * of allocating one. At most SESSION_WRITERS_POOLED_MAX wait here, each at most
 * SESSION_WRITER_RETAINED_BYTES_MAX (a writer grown past it by a burst is replaced at `take()`).
 */
export class FrameWriterPool {
  readonly #maxFrameBytes: number;
  readonly #free: FrameWriter[] = [];

  constructor(maxFrameBytes: number) {
    this.#maxFrameBytes = maxFrameBytes;
  }

  /** An empty writer that encodes the layouts of protocol `version`. */
  take(version: number): FrameWriter {
    const writer = this.#free.pop() ?? new FrameWriter({
      initialBytes: SESSION_WRITER_BYTES_MIN,
      maxFrameBytes: this.#maxFrameBytes,
      retainedBytesMax: SESSION_WRITER_RETAINED_BYTES_MAX,
    });
    writer.version = version;
    return writer;
  }

  /** A writer whose frames have all been taken (`byteLength` 0) comes back. */
  give(writer: FrameWriter): void {
    if (writer.byteLength !== 0) writer.take();
    if (this.#free.length < SESSION_WRITERS_POOLED_MAX) this.#free.push(writer);
  }
}

const pools = new Map<number, FrameWriterPool>();

/** The one pool of the sessions whose frames may have up to `maxFrameBytes` bytes. */
export function frameWriterPool(maxFrameBytes: number): FrameWriterPool {
  let pool = pools.get(maxFrameBytes);
  if (pool === undefined) {
    pool = new FrameWriterPool(maxFrameBytes);
    pools.set(maxFrameBytes, pool);
  }
  return pool;
}

/** What `ObservedFrames.takeBatch` gives when nobody waits (shared: nothing is ever added). */
export const NO_OBSERVERS: readonly (() => void)[] = Object.freeze([]);

/** Rough bytes of a frame held back in the reply order, to bound what a session may queue. */
export function heldBytes(message: ServerMessage | null): number {
  if (message === null) return 16;
  return 32 + ("name" in message ? message.name.length : 0) +
    (message.type === "error" ? message.message.length : 0);
}

/** The fields of a frame's debug line: session, peer, type, request id, lock, code. */
export function frameFields(
  message: Message,
  session: number,
  remoteAddr: string,
): Record<string, string | number> {
  return {
    session,
    remote_addr: remoteAddr,
    type: message.type,
    request_id: "requestId" in message ? message.requestId : 0,
    lock: "name" in message ? message.name : "",
    ...(message.type === "error" ? { code: message.code } : {}),
  };
}

/**
 * Frames whose writing someone waits for: `observe` when the frame is sent, `pushed` when it
 * goes into the writer's batch, `takeBatch` when that batch is taken for one write (call them
 * once it is written).
 */
export class ObservedFrames {
  readonly #waiting = new Map<ServerMessage, () => void>();
  #batch: (() => void)[] = [];

  observe(message: ServerMessage, written: () => void): void {
    this.#waiting.set(message, written);
  }

  pushed(message: ServerMessage): void {
    const written = this.#waiting.get(message);
    if (written === undefined) return;
    this.#waiting.delete(message);
    this.#batch.push(written);
  }

  /** A frame pushed without a message (`SessionOutput.pushEncoded`): `written` joins the batch. */
  pushedWritten(written: () => void): void {
    this.#batch.push(written);
  }

  takeBatch(): readonly (() => void)[] {
    if (this.#batch.length === 0) return NO_OBSERVERS;
    return this.#batch.splice(0);
  }

  /** The session is closed: nobody is called any more. */
  clear(): void {
    this.#waiting.clear();
    this.#batch = [];
  }
}
