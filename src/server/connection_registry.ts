/**
 * The server's protocol connections: every one that is open (in its handshake or in a session),
 * the ones still without HELLO (oldest first, for eviction), the one ration of bytes for
 * oversized frames, and the wait for all of them to close at shutdown.
 *
 * @module
 */

import type { Scheduler } from "../clock.ts";
import type { ServerCounters } from "../counters.ts";
import { SESSION_ERRORS, type WireError } from "../service/wire_errors.ts";
import type { FrameBudget } from "../wire/frame_reader.ts";
import type { Session } from "../protocol/session.ts";

export interface ConnectionRegistryOptions {
  readonly scheduler: Scheduler;
  readonly counters: ServerCounters;
  /** `-max-handshakes`: connections that have not sent HELLO yet. */
  readonly handshakesMax: number;
  /** The ration of bytes for frames larger than any valid request, over all connections. */
  readonly partialFrameBytesMax: number;
}

export class ConnectionRegistry {
  readonly #scheduler: Scheduler;
  readonly #counters: ServerCounters;
  readonly #handshakesMax: number;
  /** Every live protocol connection, in its handshake or open. */
  readonly #open = new Set<Session>();
  /** Connections without HELLO yet, oldest first (a Set keeps insertion order). */
  readonly #handshaking = new Set<Session>();
  /** Set while shutdown waits for the last connection to close. */
  #allClosed: (() => void) | undefined;
  /**
   * Frames larger than any valid request share one ration, so stalled ones cannot pin
   * -max-frame-bytes on every connection at once.
   */
  readonly frameBudget: FrameBudget;

  constructor(options: ConnectionRegistryOptions) {
    this.#scheduler = options.scheduler;
    this.#counters = options.counters;
    this.#handshakesMax = options.handshakesMax;
    const counters = options.counters;
    const bytesMax = options.partialFrameBytesMax;
    this.frameBudget = {
      take(bytes) {
        if (counters.partialFrameBytes + bytes > bytesMax) {
          counters.limitRefusals.partial_frames++;
          return false;
        }
        counters.partialFrameBytes += bytes;
        return true;
      },
      give(bytes) {
        counters.partialFrameBytes -= bytes;
      },
    };
  }

  /** Every live protocol connection (the set itself: it changes as connections come and go). */
  get all(): ReadonlySet<Session> {
    return this.#open;
  }

  /**
   * A new connection, in its handshake. Past `-max-handshakes` the one that waited longest for
   * its HELLO goes, so a client that sends its HELLO at once still gets in.
   */
  admit(session: Session): void {
    this.#open.add(session);
    this.#handshaking.add(session);
    if (this.#handshaking.size <= this.#handshakesMax) return;
    const oldest = this.#handshaking.values().next().value!;
    this.#handshaking.delete(oldest);
    this.#counters.limitRefusals.handshakes++;
    oldest.evictFromHandshake(SESSION_ERRORS.handshakeLimit(this.#handshakesMax));
  }

  /** The connection left its handshake (a session opened, or it is closing). */
  handshakeEnded(session: Session): void {
    this.#handshaking.delete(session);
  }

  /** The connection is closed. */
  closed(session: Session): void {
    this.#handshaking.delete(session);
    this.#open.delete(session);
    if (this.#open.size === 0) this.#allClosed?.();
  }

  /**
   * Shutdown: connections still in their handshake get `finalError`, then every connection has
   * up to `waitMs` to close (open sessions are ended by the service); the rest are closed by force.
   */
  async endAll(finalError: WireError, waitMs: number): Promise<void> {
    for (const session of [...this.#open]) session.refuseShuttingDown(finalError);
    await this.#closed(waitMs);
    for (const session of this.#open) session.transport.close();
  }

  /** Resolves when every connection is closed, or after `waitMs`. */
  #closed(waitMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      if (this.#open.size === 0) return resolve();
      const timer = this.#scheduler.setTimer(() => {
        this.#allClosed = undefined;
        resolve();
      }, waitMs);
      this.#allClosed = () => {
        this.#allClosed = undefined;
        timer.cancel();
        resolve();
      };
    });
  }
}
