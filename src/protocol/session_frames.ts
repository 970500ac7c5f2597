/**
 * What a session keeps about the frames it writes, apart from its reading and its state: their
 * rough weight while held in the reply order, the frames whose writing someone waits for
 * (`SessionPort.sendObserved`: how watches coalesce for a slow reader), and the debug line of a
 * frame.
 *
 * @module
 */

import type { Message, ServerMessage } from "../wire/messages.ts";

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

  takeBatch(): (() => void)[] {
    return this.#batch.splice(0);
  }

  /** The session is closed: nobody is called any more. */
  clear(): void {
    this.#waiting.clear();
    this.#batch = [];
  }
}
