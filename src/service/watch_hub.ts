/**
 * The watches of every session (protocol version 2, issue 23: WATCH, UNWATCH): which locks each
 * one matches, and what each session still has to be told. Pure: no timers, no I/O of its own;
 * the service drives it with the engine's changes (`changed`) and `flush`, and the sessions'
 * ports tell it when a batch of frames has been written (`SessionPort.sendObserved`).
 *
 * A watch first sends a LOCK_STATE (event `state`) per matching lock, then WATCHING, then one
 * LOCK_STATE per change of a matching lock. Changes are noted (`changed`, `watch`) and sent when
 * the driver calls `flush`: the service does so at once, or, while fanning out takes more than
 * its share of the server's time, a little later (watch_pacer.ts). Coalescing: a session has at
 * most one batch of watch frames on its way to its connection (at most WATCH_BATCH_BYTES_MAX);
 * changes that come meanwhile, or before the next flush, wait, at most one per lock and watch (a
 * newer change replaces the waiting one, and the frame is built when it is sent, so it shows the
 * lock's latest state). A slow reader thus gets fewer, later events, never a backlog; one that
 * stops reading is closed by the session's slow-reader rule (its write stalls past the I/O
 * timeout).
 *
 * A flush is a round: the sessions with frames to send when it began, handed out all at once or
 * a few per call (`flush(sessionsMax)`, `midRound`), so that the pacer lets requests in between.
 * A lock's LOCK_STATE is built and encoded once per call and the same bytes go to every session
 * it is for, each with its own request id (`SessionPort.sendEncoded`).
 *
 * @module
 */

import type { LockEngineView } from "../core/lock_queries.ts";
import type { Peer } from "../core/types.ts";
import {
  FRAME_BYTES_MAX_DEFAULT,
  LOCKS_PER_WATCH_MAX,
  WATCH_BATCH_BYTES_MAX,
  WATCHES_PER_SESSION_MAX,
} from "../limits.ts";
import { compileGlob, type Glob, GlobError } from "../security/glob.ts";
import { EncodedFrame } from "../wire/encoded_frame.ts";
import { FrameWriter } from "../wire/frame.ts";
import type {
  LockEndReason,
  LockEvent,
  LockState,
  ServerMessage,
  WatchEndReason,
} from "../wire/messages.ts";
import { type LockChange, lockStateBytes } from "./lock_state_frame.ts";
import type { SessionPort } from "./session_registry.ts";
import type { WireError } from "./wire_errors.ts";

/** A change that waits for its session's previous batch to be written. */
interface Waiting {
  event: LockEvent;
  reason: LockEndReason;
}

/** One WATCH of a session. */
class Watch {
  readonly session: SessionWatches;
  readonly requestId: number;
  readonly glob: Glob;
  /** A pattern without wildcards: one lock, reported even while it does not exist. */
  readonly exact: boolean;
  /** The locks it matches now (for a glob: existing and readable ones). */
  readonly names = new Set<string>();
  /** Snapshots not sent yet, in order. */
  readonly snapshots: string[];
  readonly snapshotCount: number;
  /** WATCHING was sent: changes are reported from now on. */
  watching = false;
  /** Changes not sent yet: at most one per lock. */
  readonly waiting = new Map<string, Waiting>();

  constructor(
    session: SessionWatches,
    requestId: number,
    glob: Glob,
    exact: boolean,
    names: string[],
  ) {
    this.session = session;
    this.requestId = requestId;
    this.glob = glob;
    this.exact = exact;
    for (const name of names) this.names.add(name);
    this.snapshots = names.slice().reverse();
    this.snapshotCount = names.length;
  }
}

/** The watches of one session. */
class SessionWatches {
  readonly peer: Peer;
  readonly watches = new Map<number, Watch>();
  /** A batch of this session's watch frames is on its way to the connection. */
  inFlight = false;
  /** Called once the batch on its way is written (one function per session, not per batch). */
  written: (() => void) | null = null;

  constructor(peer: Peer) {
    this.peer = peer;
  }
}

export interface WatchHubOptions {
  readonly view: LockEngineView;
  /** The port of an open session (undefined once it is gone). */
  readonly port: (sessionId: number) => SessionPort | undefined;
  /** The LOCK_STATE of a lock now (`lockStateOf`). */
  readonly stateOf: (
    name: string,
    requestId: number,
    event: LockEvent,
    reason: LockEndReason,
  ) => LockState;
  /** Whether the session may read the lock (the ACL; a glob's matches are filtered silently). */
  readonly mayRead: (peer: Peer, name: string) => boolean;
  /** The largest frame (`-max-frame-bytes`; default FRAME_BYTES_MAX_DEFAULT). */
  readonly frameBytesMax?: number;
  /** Locks one watch may match (default LOCKS_PER_WATCH_MAX; tests give fewer). */
  readonly locksPerWatchMax?: number;
  /**
   * A session's batch was written and it has more to send: the driver should `flush` (now, or
   * when its pacing allows). Absent: the hub flushes at once.
   */
  readonly wake?: () => void;
}

export class WatchHub {
  readonly #options: WatchHubOptions;
  readonly #locksMax: number;
  readonly #sessions = new Map<number, SessionWatches>();
  /** Watches of one lock name (exact patterns), by name. */
  readonly #exact = new Map<string, Set<Watch>>();
  /** Watches with wildcards. */
  readonly #globs = new Set<Watch>();
  /** Sessions with frames to send (snapshots, WATCHING, waiting changes). */
  readonly #dirty = new Set<SessionWatches>();
  /**
   * Changes not handed to the watches yet: the latest per lock. A change costs one entry here,
   * whatever the number of watchers; `flush` hands them over (a lock handed off as fast as it goes
   * changes thousands of times a second, and a thousand watchers noted one by one per change
   * would cost more than the hand-offs).
   */
  readonly #changes = new Map<string, Waiting>();
  /** The sessions of the round under way (those with frames to send when it began), in order. */
  #round: SessionWatches[] = [];
  /** How many of `#round` have been handed their batch. */
  #roundDone = 0;
  /** Encodes each LOCK_STATE once for all the sessions it goes to. */
  readonly #encoder: FrameWriter;
  /** The LOCK_STATEs encoded in the flush under way, by lock name (emptied after it). */
  readonly #frames = new Map<string, CachedFrame>();
  #flushing = false;

  constructor(options: WatchHubOptions) {
    this.#options = options;
    this.#locksMax = options.locksPerWatchMax ?? LOCKS_PER_WATCH_MAX;
    this.#encoder = new FrameWriter({
      version: 2,
      maxFrameBytes: options.frameBytesMax ?? FRAME_BYTES_MAX_DEFAULT,
    });
  }

  /** Whether no watch is open (nothing to tell of a change: the service skips it). */
  get empty(): boolean {
    return this.#exact.size === 0 && this.#globs.size === 0;
  }

  /** Whether some session has frames to send (`flush` sends them). */
  get pending(): boolean {
    return this.midRound || this.#dirty.size > 0 || this.#changes.size > 0;
  }

  /** A round of `flush` is under way: some of its sessions have not been handed their batch. */
  get midRound(): boolean {
    return this.#roundDone < this.#round.length;
  }

  /**
   * Hands every session with frames to send its next batch, unless its last batch is still on
   * its way (then its `written` brings it back). The driver calls it: at once, or paced. With
   * `sessionsMax`, a round (the sessions with frames to send when it began) is handed out that
   * many sessions per call, so that a driver may let other work in between (`midRound`).
   */
  flush(sessionsMax = Infinity): void {
    if (!this.midRound) {
      this.#handOver();
      this.#round = [...this.#dirty];
      this.#roundDone = 0;
      this.#dirty.clear();
    }
    this.#flushing = true;
    try {
      const end = Math.min(this.#round.length, this.#roundDone + sessionsMax);
      while (this.#roundDone < end) this.#flush(this.#round[this.#roundDone++]);
    } finally {
      this.#flushing = false;
      this.#frames.clear();
      if (!this.midRound) {
        this.#round = [];
        this.#roundDone = 0;
      }
    }
  }

  /** Watches open now, all sessions together. */
  get size(): number {
    let size = 0;
    for (const session of this.#sessions.values()) size += session.watches.size;
    return size;
  }

  /**
   * WATCH: starts a watch with the request's id, or returns the ERROR that refuses it (a bad
   * glob, a request id of a watch still open, too many watches). The ACL check of an exact name
   * is the caller's. A glob that matches more than LOCKS_PER_WATCH_MAX locks ends at once with
   * WATCH_ENDED (too many locks).
   */
  watch(peer: Peer, requestId: number, pattern: string): WireError | null {
    let glob: Glob;
    try {
      glob = compileGlob(pattern);
    } catch (error) {
      if (!(error instanceof GlobError)) throw error;
      return { code: "INVALID_ARGUMENT", message: `Cannot watch "${pattern}": ${error.message}` };
    }
    const session = this.#sessions.get(peer.sessionId) ?? new SessionWatches(peer);
    if (session.watches.has(requestId)) {
      return {
        code: "INVALID_ARGUMENT",
        message: `Cannot watch "${pattern}": request id ${requestId} names a watch still open`,
      };
    }
    if (session.watches.size >= WATCHES_PER_SESSION_MAX) {
      return {
        code: "LIMIT_EXCEEDED",
        message: `Cannot watch "${pattern}": this session has ${WATCHES_PER_SESSION_MAX} ` +
          "watches open, the limit (UNWATCH one first)",
      };
    }
    // Changes made before this watch are the other watches' (its snapshots show their result).
    this.#handOver();
    const exact = glob.literalPrefix === pattern && glob.matches(pattern);
    const names = exact ? [pattern] : this.#matching(peer, glob);
    if (names.length > this.#locksMax) {
      this.#options.port(peer.sessionId)?.send(watchEnded(requestId, "too_many_locks"));
      return null;
    }
    const watch = new Watch(session, requestId, glob, exact, names);
    this.#sessions.set(peer.sessionId, session);
    session.watches.set(requestId, watch);
    if (exact) {
      const set = this.#exact.get(pattern) ?? new Set();
      set.add(watch);
      this.#exact.set(pattern, set);
    } else {
      this.#globs.add(watch);
    }
    this.#dirty.add(session);
    return null;
  }

  /**
   * UNWATCH: ends the watch with this request id (its waiting changes are dropped) and answers
   * WATCH_ENDED (unwatched); an id of no open watch gets the same answer (the watch may have
   * ended by itself meanwhile).
   */
  unwatch(peer: Peer, requestId: number): void {
    const session = this.#sessions.get(peer.sessionId);
    const watch = session?.watches.get(requestId);
    if (session !== undefined && watch !== undefined) this.#drop(session, watch);
    this.#options.port(peer.sessionId)?.send(watchEnded(requestId, "unwatched"));
  }

  /** The session is gone: its watches end without a word. */
  sessionEnded(sessionId: number): void {
    const session = this.#sessions.get(sessionId);
    if (session === undefined) return;
    for (const watch of [...session.watches.values()]) this.#drop(session, watch);
    this.#sessions.delete(sessionId);
    this.#dirty.delete(session);
  }

  /**
   * A lock changed: every watch that matches it hears of it at the next `flush` (coalesced, see
   * the module). One entry per lock until then, whatever the number of watchers.
   */
  changed(change: LockChange): void {
    this.#changes.set(change.name, { event: change.event, reason: change.reason });
  }

  /** Hands the changes noted since the last flush to the watches that match their locks. */
  #handOver(): void {
    if (this.#changes.size === 0) return;
    for (const [name, waiting] of this.#changes) {
      for (const watch of this.#exact.get(name) ?? []) {
        this.#note(watch, name, waiting);
        this.#dirty.add(watch.session);
      }
      if (this.#globs.size > 0) this.#handOverToGlobs(name, waiting);
    }
    this.#changes.clear();
  }

  #handOverToGlobs(name: string, waiting: Waiting): void {
    for (const watch of [...this.#globs]) {
      const session = watch.session;
      if (!watch.names.has(name)) {
        if (!watch.glob.matches(name)) continue;
        if (!this.#options.mayRead(session.peer, name)) continue;
        watch.names.add(name);
        if (watch.names.size > this.#locksMax) {
          this.#drop(session, watch);
          this.#options.port(session.peer.sessionId)?.send(
            watchEnded(watch.requestId, "too_many_locks"),
          );
          continue;
        }
      }
      this.#note(watch, name, waiting);
      this.#dirty.add(session);
    }
  }

  /** Records a change for a watch: a snapshot still to send shows it anyway. */
  #note(watch: Watch, name: string, waiting: Waiting): void {
    if (!watch.watching && watch.snapshots.includes(name)) return;
    watch.waiting.set(name, waiting);
  }

  /**
   * Existing locks `glob` matches that the session may read, by name; more than the bound when
   * there are too many (then it stops counting: no sort or view of a large match).
   */
  #matching(peer: Peer, glob: Glob): string[] {
    let matched = 0;
    const { locks } = this.#options.view.pageLocks({
      prefix: glob.literalPrefix,
      matches: (name) => {
        if (matched > this.#locksMax) return false;
        if (!glob.matches(name) || !this.#options.mayRead(peer, name)) return false;
        matched++;
        return true;
      },
      sort: "name",
      descending: false,
      offset: 0,
      limit: this.#locksMax + 1,
      waitersMax: 0,
    });
    if (matched > this.#locksMax) return locks.map((lock) => lock.name);
    return locks
      .filter((lock) => lock.holders.length > 0 || lock.queueLength > 0)
      .map((lock) => lock.name);
  }

  #drop(session: SessionWatches, watch: Watch): void {
    session.watches.delete(watch.requestId);
    this.#globs.delete(watch);
    const set = this.#exact.get(watch.glob.pattern);
    if (set !== undefined) {
      set.delete(watch);
      if (set.size === 0) this.#exact.delete(watch.glob.pattern);
    }
    if (session.watches.size === 0 && !session.inFlight) {
      this.#sessions.delete(session.peer.sessionId);
      this.#dirty.delete(session);
    }
  }

  /**
   * Hands the session's next batch of watch frames to its connection, unless one is still on its
   * way: snapshots, WATCHING, then waiting changes, watch by watch, up to WATCH_BATCH_BYTES_MAX.
   */
  #flush(session: SessionWatches): void {
    if (session.inFlight) return;
    const port = this.#options.port(session.peer.sessionId);
    if (port === undefined) return;
    while (!session.inFlight) {
      const frames: Outgoing[] = [];
      const ids: number[] = [];
      this.#batch(session, frames, ids);
      const last = frames.length - 1;
      if (last < 0) return;
      for (let i = 0; i < last; i++) send(port, frames[i], ids[i], null);
      if (port.sendObserved === undefined) {
        send(port, frames[last], ids[last], null);
        continue;
      }
      session.inFlight = true;
      session.written ??= () => {
        session.inFlight = false;
        if (session.watches.size === 0) {
          this.#sessions.delete(session.peer.sessionId);
          return;
        }
        if (!hasWork(session)) return;
        this.#dirty.add(session);
        if (this.#options.wake === undefined) this.flush();
        else this.#options.wake();
      };
      send(port, frames[last], ids[last], session.written);
    }
  }

  /** The session's next batch: its frames, and the request id each goes with. */
  #batch(session: SessionWatches, frames: Outgoing[], ids: number[]): void {
    let bytes = 0;
    const view = this.#options.view;
    const add = (frame: Outgoing, requestId: number) => {
      frames.push(frame);
      ids.push(requestId);
      bytes += frame instanceof EncodedFrame ? frame.bytes.length : outgoingBytes(frame);
    };
    for (const watch of session.watches.values()) {
      const id = watch.requestId;
      while (watch.snapshots.length > 0 && bytes < WATCH_BATCH_BYTES_MAX) {
        add(this.#stateFrame(watch.snapshots.pop()!, id, "state", "none"), id);
      }
      if (watch.snapshots.length > 0) return;
      if (!watch.watching) {
        watch.watching = true;
        add({ type: "watching", requestId: id, locks: watch.snapshotCount }, id);
      }
      for (const [name, waiting] of watch.waiting) {
        if (bytes >= WATCH_BATCH_BYTES_MAX) return;
        watch.waiting.delete(name);
        add(this.#stateFrame(name, id, waiting.event, waiting.reason), id);
        // A glob stops counting a lock that is gone (it counts again when it comes back).
        if (!watch.exact && view.getLock(name, 0) === undefined) watch.names.delete(name);
      }
    }
  }

  /**
   * The LOCK_STATE of a lock now, encoded once for every session told of it in this flush (the
   * lock as it is at the flush: the engine's viewVersion grows with every change of owners,
   * waiters, modes and values). A state the encoder refuses goes as a message (the session
   * reports it).
   */
  #stateFrame(name: string, requestId: number, event: LockEvent, reason: LockEndReason): Outgoing {
    const version = this.#options.view.viewVersion;
    const cached = this.#frames.get(name);
    if (
      cached !== undefined && cached.version === version && cached.event === event &&
      cached.reason === reason
    ) {
      return cached.frame;
    }
    const state = this.#options.stateOf(name, 0, event, reason);
    let frame: EncodedFrame;
    try {
      frame = new EncodedFrame(state, this.#encoder);
    } catch {
      return { ...state, requestId };
    }
    if (this.#flushing) this.#frames.set(name, { version, event, reason, frame });
    return frame;
  }
}

/** A frame of a batch: one encoded for many sessions, or a message of this session's. */
type Outgoing = EncodedFrame | ServerMessage;

/** A LOCK_STATE encoded in this flush. */
interface CachedFrame {
  readonly version: number;
  readonly event: LockEvent;
  readonly reason: LockEndReason;
  readonly frame: EncodedFrame;
}

function outgoingBytes(message: ServerMessage): number {
  return message.type === "lock_state" ? lockStateBytes(message) : 16;
}

/** Hands one frame of a batch to the session's port (`written`: null, or the batch's observer). */
function send(
  port: SessionPort,
  frame: Outgoing,
  requestId: number,
  written: (() => void) | null,
): void {
  if (frame instanceof EncodedFrame) {
    if (port.sendEncoded !== undefined) {
      port.sendEncoded(frame, requestId, written);
      return;
    }
    frame = frame.withRequestId(requestId);
  }
  if (written === null) port.send(frame);
  else port.sendObserved!(frame, written);
}

/** Whether a session has frames to send. */
function hasWork(session: SessionWatches): boolean {
  for (const watch of session.watches.values()) {
    if (watch.snapshots.length > 0 || !watch.watching || watch.waiting.size > 0) return true;
  }
  return false;
}

function watchEnded(requestId: number, reason: WatchEndReason): ServerMessage {
  return { type: "watch_ended", requestId, reason };
}
