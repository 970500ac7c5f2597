/**
 * `GET /api/events`: a server-sent-event stream that tells the console when
 * to look again, so changes show within a second without polling.
 *
 * Events (each `event:` line with one `data:` line of JSON):
 * - `state` at once and then whenever a lock gets or loses an owner or a
 *   waiter, or a session opens or closes, checked every
 *   ADMIN_EVENTS_CHECK_MS: `{"version", "locks", "held", "waiters",
 *   "sessions"}`. It carries counts only, not locks: a reader fetches what it
 *   shows (one page of `GET /api/locks`, one lock), so the cost of a change
 *   does not grow with the number of locks or of streams.
 * - `snapshot` with each new snapshot of `GET /api/history`.
 * - a comment line (`: keep-alive`) after ADMIN_EVENTS_KEEPALIVE_MS_MAX of
 *   silence, or a third of the idle timeout when that is shorter.
 *
 * Bounds: at most `streamsMax` streams at once (503 `too-many-streams`
 * beyond), each one of the listener's connections: half of them at most, so
 * none with `-max-http-connections 1`; at most
 * `bufferBytesMax` bytes waiting for a reader that does not read, past which
 * the stream is ended. `close()` ends every stream, so the HTTP server's
 * shutdown is not kept waiting by answers that never end.
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import type { LockEngineView } from "../core/lock_queries.ts";
import { problemResponse } from "../http/problem.ts";
import type { SnapshotJson } from "./history.ts";

/** The `state` event's data. */
export interface StateEventJson {
  /** Grows with every change of an owner or a queue (the engine's viewVersion). */
  version: number;
  locks: number;
  held: number;
  waiters: number;
  sessions: number;
}

export interface EventHubOptions {
  readonly engine: LockEngineView;
  readonly scheduler: Scheduler;
  readonly checkMs: number;
  readonly keepAliveMs: number;
  /** At most half of `connectionsMax` (0 with a cap of 1: no streams at all). */
  readonly streamsMax: number;
  /** The listener's `-max-http-connections`, for the answer when no stream is allowed. */
  readonly connectionsMax: number;
  readonly bufferBytesMax: number;
}

const encoder = new TextEncoder();

/** One open stream: its controller and when it last sent something. */
interface Stream {
  readonly controller: ReadableStreamDefaultController<Uint8Array>;
  lastSentMs: number;
}

/** The event streams of one admin listener. */
export class EventHub {
  readonly #options: EventHubOptions;
  readonly #streams = new Set<Stream>();
  #timer: Timer | null = null;
  #lastState = "";
  #closed = false;

  constructor(options: EventHubOptions) {
    this.#options = options;
  }

  /** How many streams are open. */
  get size(): number {
    return this.#streams.size;
  }

  /** Answers GET /api/events: a new stream, or 503 when there are too many (or at shutdown). */
  open(): Response {
    if (this.#closed) {
      return problemResponse("unavailable", "The admin API is shutting down");
    }
    if (this.#options.streamsMax === 0) {
      return problemResponse(
        "too-many-streams",
        `Event streams are off: they take at most half of the admin listener's connections, ` +
          `and -max-http-connections ${this.#options.connectionsMax} leaves none; poll instead`,
      );
    }
    if (this.#streams.size >= this.#options.streamsMax) {
      return problemResponse(
        "too-many-streams",
        `The admin API has ${this.#options.streamsMax} event streams open; close one or poll`,
      );
    }
    const { bufferBytesMax, scheduler } = this.#options;
    let stream: Stream;
    const body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        stream = { controller, lastSentMs: scheduler.monotonicMs() };
        this.#streams.add(stream);
        const state = this.#state();
        // The only stream has seen this state; with others open, the next check tells them all.
        if (this.#streams.size === 1) this.#lastState = stateKey(state);
        // A reconnecting EventSource waits this long; the console's own reader does the same.
        this.#send(stream, `retry: 2000\n\n${stateEvent(state)}`);
        this.#arm();
      },
      cancel: () => this.#drop(stream),
    }, { highWaterMark: bufferBytesMax, size: (chunk) => chunk.byteLength });
    return new Response(body, {
      headers: {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-store",
        // Proxies (nginx) would otherwise hold events back in their buffers.
        "x-accel-buffering": "no",
      },
    });
  }

  /** Sends a snapshot to every stream (called by the history). */
  snapshot(snapshot: SnapshotJson): void {
    if (this.#streams.size === 0) return;
    const text = `event: snapshot\ndata: ${JSON.stringify(snapshot)}\n\n`;
    for (const stream of [...this.#streams]) this.#send(stream, text);
  }

  /** Ends every stream and refuses new ones (shutdown). */
  close(): void {
    this.#closed = true;
    this.#timer?.cancel();
    this.#timer = null;
    for (const stream of [...this.#streams]) this.#end(stream);
  }

  #state(): StateEventJson {
    const { engine } = this.#options;
    return {
      version: engine.viewVersion,
      locks: engine.lockCount,
      held: engine.stats.locksHeld,
      waiters: engine.stats.waiters,
      sessions: engine.stats.sessionsOpen,
    };
  }

  /** Runs the check timer while any stream is open. */
  #arm(): void {
    if (this.#timer !== null || this.#streams.size === 0 || this.#closed) return;
    this.#timer = this.#options.scheduler.setTimer(() => {
      this.#timer = null;
      this.#check();
      this.#arm();
    }, this.#options.checkMs);
  }

  #check(): void {
    const state = this.#state();
    const key = stateKey(state);
    const changed = key !== this.#lastState;
    this.#lastState = key;
    const nowMs = this.#options.scheduler.monotonicMs();
    const text = stateEvent(state);
    for (const stream of [...this.#streams]) {
      if (changed) this.#send(stream, text);
      else if (nowMs - stream.lastSentMs >= this.#options.keepAliveMs) {
        this.#send(stream, ": keep-alive\n\n");
      }
    }
  }

  /** Queues text on a stream; ends the stream when its reader has fallen too far behind. */
  #send(stream: Stream, text: string): void {
    const bytes = encoder.encode(text);
    if ((stream.controller.desiredSize ?? 0) < bytes.byteLength) return this.#end(stream);
    try {
      stream.controller.enqueue(bytes);
      stream.lastSentMs = this.#options.scheduler.monotonicMs();
    } catch {
      this.#drop(stream); // Cancelled meanwhile.
    }
  }

  #end(stream: Stream): void {
    this.#drop(stream);
    try {
      stream.controller.close();
    } catch {
      // Already closed or cancelled.
    }
  }

  #drop(stream: Stream): void {
    this.#streams.delete(stream);
    if (this.#streams.size === 0) {
      this.#timer?.cancel();
      this.#timer = null;
    }
  }
}

/** What a change is: the locks' version and the number of sessions (counts follow from them). */
function stateKey(state: StateEventJson): string {
  return `${state.version}/${state.sessions}`;
}

function stateEvent(state: StateEventJson): string {
  return `event: state\ndata: ${JSON.stringify(state)}\n\n`;
}
