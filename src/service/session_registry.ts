import type { EncodedFrame } from "../wire/encoded_frame.ts";
import type { ErrorMessage, ServerMessage } from "../wire/messages.ts";

/**
 * What the service needs of a session to reply: frames leave in the order the service
 * decides them (docs/architecture.md, "Reply order").
 */
export interface SessionPort {
  /**
   * The protocol version of the session (absent: 1). Version 2 gets reclaim tickets and the
   * fields version 2 added to ACQUIRED and QUEUED.
   */
  readonly version?: number;
  /** Queues a frame after every frame decided before it. */
  send(message: ServerMessage): void;
  /**
   * Reserves the next place in the reply order for a frame that waits for its audit record;
   * every later frame waits behind it. Call the returned function once the record is written,
   * with the frame for that place (or null: nothing but the record was awaited).
   */
  hold(): (message: ServerMessage | null) => void;
  /**
   * Queues a frame as `send` does and calls `written` once it has been written to the connection
   * (never, when the session closes first): how watches coalesce what a slow reader has not taken
   * yet. Absent: frames count as written at once.
   */
  sendObserved?(message: ServerMessage, written: () => void): void;
  /**
   * Queues a frame encoded once for many sessions (a watch event) with this session's request id,
   * as `send` queues the message it encodes, without encoding it again; `written` as for
   * `sendObserved` (null: nobody waits). Absent: the caller sends the message instead.
   */
  sendEncoded?(frame: EncodedFrame, requestId: number, written: (() => void) | null): void;
  /** The engine closed the session: send the final ERROR (in order, when given), then close. */
  terminate(finalError: ErrorMessage | null): void;
}

/** Open engine sessions by id: how the service reaches the connection of an event's peer. */
export class SessionRegistry {
  readonly #ports = new Map<number, SessionPort>();

  add(sessionId: number, port: SessionPort): void {
    this.#ports.set(sessionId, port);
  }

  get(sessionId: number): SessionPort | undefined {
    return this.#ports.get(sessionId);
  }

  remove(sessionId: number): SessionPort | undefined {
    const port = this.#ports.get(sessionId);
    this.#ports.delete(sessionId);
    return port;
  }

  get size(): number {
    return this.#ports.size;
  }
}
