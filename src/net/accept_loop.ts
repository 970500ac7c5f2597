/**
 * The accept loop every TCP listener of lockd runs (`Deno.listen`): the
 * protocol listener and the admin and ops HTTP listeners. A failed accept
 * (descriptor exhaustion above all) never ends the loop or the process: it is
 * reported, then accepting pauses for an exponential back-off (5 ms doubling to
 * 1 s, reset by the next success), so the loop never spins while the process
 * has no descriptor left, and resumes by itself.
 *
 * @module
 */

import { type Scheduler, systemScheduler, type Timer } from "../clock.ts";
import { ACCEPT_BACKOFF_MS_MAX, ACCEPT_BACKOFF_MS_MIN } from "../limits.ts";

export interface AcceptLoopOptions {
  /** Called for every failed accept, with the pause that follows it. */
  onAcceptError(error: unknown, backoffMs: number): void;
  readonly scheduler?: Scheduler;
}

/** A running accept loop. */
export interface AcceptLoop {
  /** Stops accepting and closes the listening socket; accepted connections stay open. */
  close(): void;
  /** Settles when the loop has ended. */
  readonly done: Promise<void>;
}

/** Accepts connections from `listener` until `close()`; never rejects. */
export function runAcceptLoop(
  listener: Deno.TcpListener,
  onConnection: (conn: Deno.TcpConn) => void,
  options: AcceptLoopOptions,
): AcceptLoop {
  const scheduler = options.scheduler ?? systemScheduler;
  let closed = false;
  let backoff: { timer: Timer; wake: () => void } | null = null;
  const done = (async () => {
    let backoffMs = 0;
    while (!closed) {
      let conn: Deno.TcpConn;
      try {
        conn = await listener.accept();
      } catch (error) {
        if (closed || error instanceof Deno.errors.BadResource) return;
        backoffMs = Math.min(ACCEPT_BACKOFF_MS_MAX, Math.max(ACCEPT_BACKOFF_MS_MIN, backoffMs * 2));
        try {
          options.onAcceptError(error, backoffMs);
        } catch {
          // Counting and logging must not stop the loop.
        }
        await new Promise<void>((resolve) => {
          backoff = { timer: scheduler.setTimer(resolve, backoffMs), wake: resolve };
        });
        backoff = null;
        continue;
      }
      backoffMs = 0;
      try {
        onConnection(conn);
      } catch {
        // A connection handler that throws loses its connection, not the listener.
        try {
          conn.close();
        } catch {
          // Already closed.
        }
      }
    }
  })();
  return {
    close() {
      if (closed) return;
      closed = true;
      const pending = backoff as { timer: Timer; wake: () => void } | null;
      pending?.timer.cancel();
      pending?.wake();
      try {
        listener.close();
      } catch {
        // Already closed.
      }
    },
    done,
  };
}
