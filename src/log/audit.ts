/**
 * The audit log's sink mechanics: the ordered writer (records of a turn in one write, in order,
 * each reply after its record's last byte), synchronous and asynchronous sinks, the write timeout,
 * retries from the byte where a write stopped, the bounded backlog and the log's health. What a
 * record holds and how it is encoded is `audit_records.ts`'s; the repair of a torn file at start-up
 * is `torn_audit_file.ts`'s.
 *
 * @module
 */

import { type Scheduler, systemScheduler, type Timer } from "../clock.ts";
import {
  AUDIT_CLOSE_TIMEOUT_MS,
  AUDIT_PENDING_BYTES_MAX,
  AUDIT_PENDING_RECORDS_MAX,
  AUDIT_RETRY_MS,
  AUDIT_WRITE_BYTES_MAX,
  AUDIT_WRITE_TIMEOUT_MS_DEFAULT,
} from "../limits.ts";
import type { AuditRecord } from "./audit_records.ts";
import { encodeAuditLine } from "./audit_line.ts";
import { errorText } from "../error_text.ts";
import { log } from "./diagnostic.ts";
import { sinkWritesSynchronously, stdioWritesSynchronously } from "./sink_kind.ts";
import { repairTornAuditFile } from "./torn_audit_file.ts";

const logger = log("audit");

/**
 * Where audit lines go. `write` resolves with how many bytes it wrote (at least 1; fewer than
 * all is a partial write, e.g. a disk that filled up) or rejects. It may stay pending for as
 * long as its reader does not read (a full pipe): the log never waits for it on the event loop.
 */
export interface AuditSink {
  write(bytes: Uint8Array): Promise<number>;
  /**
   * Writes at once, on the event loop, and returns how many bytes it wrote (or throws). Only
   * sinks that no reader can stall have it (a regular file, /dev/null): the log then uses it
   * instead of `write` (see `sinkWritesSynchronously`).
   */
  writeSync?(bytes: Uint8Array): number;
  close?(): void;
}

/** Why records were lost (label `cause` of `lockd_audit_records_lost_total`). */
export const AUDIT_LOSS_CAUSES = ["backlog_full", "exit"] as const;
export type AuditLossCause = typeof AUDIT_LOSS_CAUSES[number];

export interface AuditLogOptions {
  /** Timers (write timeout, retries, the bound of `close()`); tests pass a ManualScheduler. */
  scheduler?: Scheduler;
  /** The `ts` of records; defaults to the scheduler's wall clock. */
  wallMs?: () => number;
  writeTimeoutMs?: number;
  retryMs?: number;
  closeTimeoutMs?: number;
  pendingRecordsMax?: number;
  pendingBytesMax?: number;
}

/**
 * The state of the sink, with its legal moves:
 * - `idle` → `writing` (records appended; the write starts at the end of the turn)
 * - `writing` → `idle` (everything written) | `writing` (more records, or the rest of a
 *   partial write) | `stalled` (the timeout passed, the write is still pending) | `failed`
 * - `stalled` → `writing`/`idle` (the write completes at last) | `failed` (it rejects)
 * - `failed` → `writing` (the retry timer fires)
 * - every state → `closed` (`close()`; nothing is written after it)
 * The log is unhealthy from `stalled` or `failed` until the backlog is written (`idle`).
 */
type SinkState = "idle" | "writing" | "stalled" | "failed" | "closed";

/** Records taken from the queue for one write, and how far it got. */
interface Chunk {
  entries: AuditEntry[];
  bytes: Uint8Array;
  /** Bytes the sink took so far; the next write continues here, never repeating a byte. */
  offset: number;
  /** Entries wholly written (their callbacks ran), and where the next one starts. */
  acknowledged: number;
  acknowledgedBytes: number;
}

/**
 * The audit log: JSON Lines, one event per line, every line whole.
 *
 * "All of this or nothing": the reply that depends on a record (ACQUIRED, RELEASED, ...) is
 * sent by `onWritten`, which runs only once the record's last byte is written. Writes never
 * block the event loop: records of one turn go out in one asynchronous write (up to
 * AUDIT_WRITE_BYTES_MAX); records appended while it is in flight wait and go out together in
 * the next. A write that rejects, or that has not completed after the write timeout, makes the
 * log unhealthy (`onHealthChange`): the server pauses grants and `/readyz` answers 503. The
 * records wait in memory, in order (bounded; the excess is dropped and counted), the write is
 * retried every `retryMs`, and a partial write is finished from the byte where it stopped, so
 * no fragment is ever glued to a repeated record. When the backlog is written the log is
 * healthy again.
 */
export class AuditLog {
  readonly #sink: AuditSink;
  readonly #scheduler: Scheduler;
  readonly #wallMs: () => number;
  readonly #writeTimeoutMs: number;
  readonly #retryMs: number;
  readonly #closeTimeoutMs: number;
  readonly #pendingRecordsMax: number;
  readonly #pendingBytesMax: number;
  #state: SinkState = "idle";
  /** Records not yet taken by a write, oldest first; `#queueHead` is the first one. */
  #queue: AuditEntry[] = [];
  #queueHead = 0;
  /** The write in flight, or the one a failure interrupted (resumed from its offset). */
  #chunk: Chunk | null = null;
  #flushQueued = false;
  /** Checks the write in flight against the write timeout; re-armed lazily, not per write. */
  #timeoutTimer: Timer | null = null;
  /** When the write in flight started (monotonic ms), or null when none is. */
  #writeStartedMs: number | null = null;
  /** Write-timeout periods the write in flight has been counted as failed for. */
  #stalledPeriods = 0;
  #retryTimer: Timer | null = null;
  #failure: string | null = null;
  #pendingRecords = 0;
  #pendingBytes = 0;
  #closing: Promise<void> | null = null;
  #lostAfterClose = 0;
  /** Set when `close()` stops waiting for the backlog: no write starts after it. */
  #stopping = false;
  /** Settles when the write in flight does (null when none is). */
  #writeSettled: Promise<void> | null = null;
  #drained: (() => void) | null = null;
  /** Writes that failed: each rejection, and each write timeout a write stays pending. */
  writeFailures = 0;
  readonly lostRecords: Record<AuditLossCause, number> = { backlog_full: 0, exit: 0 };
  /** Called when the log turns unhealthy (with the error) or healthy again (null). */
  onHealthChange: (failure: string | null) => void = () => {};
  /**
   * Cluster mode: the term every record appended from now on carries (so the logs of several
   * nodes merge into one order); null on a single node and while the node does not lead.
   */
  term: number | null = null;

  constructor(sink: AuditSink, options: AuditLogOptions = {}) {
    this.#sink = sink;
    this.#scheduler = options.scheduler ?? systemScheduler;
    const scheduler = this.#scheduler;
    this.#wallMs = options.wallMs ?? (() => scheduler.wallMs());
    this.#writeTimeoutMs = options.writeTimeoutMs ?? AUDIT_WRITE_TIMEOUT_MS_DEFAULT;
    this.#retryMs = options.retryMs ?? AUDIT_RETRY_MS;
    this.#closeTimeoutMs = options.closeTimeoutMs ?? AUDIT_CLOSE_TIMEOUT_MS;
    this.#pendingRecordsMax = options.pendingRecordsMax ?? AUDIT_PENDING_RECORDS_MAX;
    this.#pendingBytesMax = options.pendingBytesMax ?? AUDIT_PENDING_BYTES_MAX;
  }

  /** False while a write failed or is stuck and the backlog is not written yet. */
  get healthy(): boolean {
    return this.#failure === null;
  }

  /** Why the log is unhealthy, or null. */
  get failure(): string | null {
    return this.#failure;
  }

  /** Records appended and not yet wholly written (queued, or in the write in flight). */
  get pendingCount(): number {
    return this.#pendingRecords;
  }

  /** Whether the backlog is full: further records are dropped. */
  get full(): boolean {
    return this.#pendingRecords >= this.#pendingRecordsMax ||
      this.#pendingBytes >= this.#pendingBytesMax;
  }

  /** Records dropped because the backlog was full (reported when grants resume). */
  get droppedRecords(): number {
    return this.lostRecords.backlog_full;
  }

  /**
   * Appends a record. `onWritten` runs once its last byte is in the sink (never before the end
   * of this turn, never if the record is lost).
   */
  append(record: AuditRecord, onWritten?: () => void): void {
    if (this.#state === "closed") {
      // Nothing should produce records after the shutdown closed the log; say so once.
      if (this.#lostAfterClose++ === 0) {
        logger.error("audit record after the log closed; it is lost", {
          event: record.event,
          lock: record.lock,
        });
      }
      this.lostRecords.exit++;
      return;
    }
    if (this.full) {
      // Memory stays bounded through a long outage; grants are paused, so only endings,
      // refusals and admin actions arrive here. The loss is counted and reported.
      if (this.lostRecords.backlog_full++ === 0 || this.lostRecords.backlog_full % 10_000 === 0) {
        logger.error("audit backlog full; records are being dropped", {
          pending_records: this.#pendingRecords,
          pending_bytes: this.#pendingBytes,
          dropped_records: this.lostRecords.backlog_full,
        });
      }
      return;
    }
    if (this.term !== null && record.term === undefined) record = { ...record, term: this.term };
    const line = encodeAuditLine(this.#wallMs(), record);
    this.#queue.push({ line, onWritten });
    this.#pendingRecords++;
    this.#pendingBytes += line.length;
    if (this.full) {
      // A sink that works but cannot keep up is a failed sink too: grants pause before any
      // record has to be dropped, and resume once the backlog is written.
      this.#fail(
        `audit backlog full (${this.#pendingRecords} records, ${this.#pendingBytes} bytes)`,
      );
    }
    if (this.#state === "idle" && !this.#flushQueued) {
      // The records of this turn go out together, in one write, at its end.
      this.#flushQueued = true;
      queueMicrotask(() => {
        this.#flushQueued = false;
        if (this.#state === "idle") this.#write();
      });
    }
  }

  /**
   * Stops the log: keeps writing the backlog for at most `closeTimeoutMs`, then counts what is
   * left as lost (`lostRecords.exit`, an error line with the number) and closes the sink.
   * Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    if (this.#state === "idle" && this.#pendingRecords > 0) this.#write();
    if (this.#pendingRecords > 0) {
      const drained = Promise.withResolvers<void>();
      this.#drained = drained.resolve;
      const timer = this.#scheduler.setTimer(drained.resolve, this.#closeTimeoutMs);
      await drained.promise;
      timer.cancel();
      this.#drained = null;
    }
    this.#stopping = true;
    if (this.#writeSettled !== null) {
      // A write started just before the bound (a retry) usually settles at once: wait for it a
      // little (a stuck one never does), so no write is left running against a closed sink.
      const settled = Promise.withResolvers<void>();
      const timer = this.#scheduler.setTimer(settled.resolve, this.#retryMs);
      await Promise.race([this.#writeSettled, settled.promise]);
      timer.cancel();
    }
    const partial = this.#chunk !== null && this.#chunk.offset > this.#chunk.acknowledgedBytes;
    const lost = this.#pendingRecords;
    this.#state = "closed";
    this.#timeoutTimer?.cancel();
    this.#retryTimer?.cancel();
    this.#queue = [];
    this.#queueHead = 0;
    this.#chunk = null;
    this.#pendingRecords = 0;
    this.#pendingBytes = 0;
    if (lost > 0) {
      this.lostRecords.exit += lost;
      logger.error("audit log closed with records not written; they are lost", {
        lost_records: lost,
        error: this.#failure ?? "",
        torn_last_line: partial,
      });
    }
    try {
      this.#sink.close?.();
    } catch {
      // Closing a broken sink is not worth an error.
    }
  }

  /** Starts one write: the rest of the current chunk, or a new chunk from the queue. */
  #write(): void {
    if (this.#stopping) return;
    let chunk = this.#chunk;
    if (chunk === null) {
      chunk = this.#takeChunk();
      if (chunk === null) {
        this.#becomeIdle();
        return;
      }
      this.#chunk = chunk;
    }
    if (this.#sink.writeSync !== undefined) {
      this.#writeSync(this.#sink.writeSync.bind(this.#sink), chunk);
      return;
    }
    this.#state = "writing";
    this.#writeStartedMs = this.#scheduler.monotonicMs();
    this.#stalledPeriods = 0;
    // A timer per write would cost more than a short write (clearTimeout + setTimeout).
    this.#timeoutTimer ??= this.#scheduler.setTimer(
      () => this.#checkTimeout(),
      this.#writeTimeoutMs,
    );
    let pending: Promise<number>;
    try {
      pending = this.#sink.write(chunk.bytes.subarray(chunk.offset));
    } catch (error) {
      pending = Promise.reject(error);
    }
    const settled: Promise<void> = pending.then(
      (n) => {
        if (this.#writeSettled === settled) this.#writeSettled = null;
        this.#wrote(chunk, n);
      },
      (error) => {
        if (this.#writeSettled === settled) this.#writeSettled = null;
        this.#writeFailed(chunk, errorText(error));
      },
    );
    this.#writeSettled = settled;
  }

  /**
   * Writes chunks synchronously until the queue is empty or a write fails: a regular file or a
   * character device has no reader that could stop, so a write returns at once (a hung disk is
   * the remaining risk, docs/operations.md). The same rules as the asynchronous path: a reply
   * runs only once its record's last byte is written, a partial write is finished from where it
   * stopped, a failure is retried after `retryMs`.
   */
  #writeSync(writeSync: (bytes: Uint8Array) => number, first: Chunk): void {
    let chunk: Chunk | null = first;
    while (chunk !== null && !this.#stopping) {
      this.#state = "writing";
      let n: number;
      try {
        n = writeSync(chunk.bytes.subarray(chunk.offset));
      } catch (error) {
        this.#writeFailed(chunk, errorText(error));
        return;
      }
      if (!(n >= 1)) {
        this.#writeFailed(chunk, `audit sink wrote ${n} bytes`);
        return;
      }
      chunk.offset = Math.min(chunk.bytes.length, chunk.offset + n);
      this.#acknowledge(chunk);
      // A reply's callback may have closed the log (state changes TypeScript cannot see).
      if ((this.#state as SinkState) === "closed") return;
      if (chunk.offset === chunk.bytes.length) {
        this.#chunk = null;
        chunk = this.#takeChunk();
        this.#chunk = chunk;
      }
    }
    if (chunk === null) this.#becomeIdle();
  }

  #takeChunk(): Chunk | null {
    const queue = this.#queue;
    if (this.#queueHead === queue.length) return null;
    let end = this.#queueHead;
    let length = 0;
    // At least one record; more while they fit in one write.
    do {
      length += queue[end].line.length;
      end++;
    } while (end < queue.length && length + queue[end].line.length <= AUDIT_WRITE_BYTES_MAX);
    const entries = queue.slice(this.#queueHead, end);
    if (end === queue.length) {
      this.#queue = [];
      this.#queueHead = 0;
    } else {
      this.#queueHead = end;
      // Drop the taken prefix now and then, not on every write.
      if (this.#queueHead > 1024 && this.#queueHead * 2 > queue.length) {
        this.#queue = queue.slice(this.#queueHead);
        this.#queueHead = 0;
      }
    }
    const bytes = entries.length === 1 ? entries[0].line : concat(entries, length);
    return { entries, bytes, offset: 0, acknowledged: 0, acknowledgedBytes: 0 };
  }

  #checkTimeout(): void {
    this.#timeoutTimer = null;
    const startedMs = this.#writeStartedMs;
    if (startedMs === null || this.#state === "closed") return; // the next write re-arms it
    const nowMs = this.#scheduler.monotonicMs();
    const periods = Math.floor((nowMs - startedMs) / this.#writeTimeoutMs);
    if (periods > this.#stalledPeriods) {
      // Still pending: one failure per period keeps the failure rate (and its alert) up for as
      // long as the sink is stuck.
      this.writeFailures += periods - this.#stalledPeriods;
      this.#stalledPeriods = periods;
      this.#state = "stalled";
      this.#fail(`audit write did not complete within ${this.#writeTimeoutMs} ms`);
    }
    const nextMs = startedMs + (this.#stalledPeriods + 1) * this.#writeTimeoutMs;
    this.#timeoutTimer = this.#scheduler.setTimer(() => this.#checkTimeout(), nextMs - nowMs);
  }

  #wrote(chunk: Chunk, n: number): void {
    if (this.#state === "closed" || chunk !== this.#chunk) return;
    this.#writeStartedMs = null;
    if (!(n >= 1)) {
      this.#writeFailed(chunk, `audit sink wrote ${n} bytes`);
      return;
    }
    chunk.offset = Math.min(chunk.bytes.length, chunk.offset + n);
    this.#acknowledge(chunk);
    if (chunk.offset === chunk.bytes.length) this.#chunk = null;
    // The rest of a partial write, or the records that queued meanwhile.
    this.#write();
  }

  /** Runs the callbacks of the records the sink now has whole, in order. */
  #acknowledge(chunk: Chunk): void {
    while (chunk.acknowledged < chunk.entries.length) {
      const entry = chunk.entries[chunk.acknowledged];
      if (chunk.acknowledgedBytes + entry.line.length > chunk.offset) break;
      chunk.acknowledged++;
      chunk.acknowledgedBytes += entry.line.length;
      this.#pendingRecords--;
      this.#pendingBytes -= entry.line.length;
      try {
        entry.onWritten?.();
      } catch (error) {
        // A reply that cannot be sent must not stop the records behind it.
        logger.error("reply after an audit record failed", { error: errorText(error) });
      }
    }
  }

  #writeFailed(chunk: Chunk, failure: string): void {
    if (this.#state === "closed" || chunk !== this.#chunk) return;
    this.#writeStartedMs = null;
    this.writeFailures++;
    this.#state = "failed";
    this.#fail(failure);
    if (this.#stopping) return;
    this.#retryTimer = this.#scheduler.setTimer(() => {
      this.#retryTimer = null;
      if (this.#state === "failed") this.#write();
    }, this.#retryMs);
  }

  #fail(failure: string): void {
    const wasHealthy = this.#failure === null;
    this.#failure = failure;
    if (wasHealthy) this.onHealthChange(failure);
  }

  #becomeIdle(): void {
    this.#state = "idle";
    if (this.#failure !== null) {
      this.#failure = null;
      this.onHealthChange(null);
    }
    this.#drained?.();
  }
}

interface AuditEntry {
  line: Uint8Array;
  onWritten?: () => void;
}

function concat(entries: AuditEntry[], length: number): Uint8Array {
  // Lines encoded one after the other lie next to each other in the encoder's arena
  // (audit_line.ts): then the chunk is a view of them, no copy.
  const first = entries[0].line;
  const last = entries[entries.length - 1].line;
  if (
    last.buffer === first.buffer && last.byteOffset + last.length - first.byteOffset === length
  ) {
    return new Uint8Array(first.buffer, first.byteOffset, length);
  }
  const bytes = new Uint8Array(length);
  let offset = 0;
  for (const entry of entries) {
    bytes.set(entry.line, offset);
    offset += entry.line.length;
  }
  return bytes;
}

/**
 * Opens the sink named by `-audit-log`: "-" is standard output, anything else a file opened for
 * append. Writes are synchronous where no reader can stall them (see `sinkWritesSynchronously`
 * in sink_kind.ts), asynchronous otherwise.
 */
export function openAuditSink(path: string): AuditSink & { readonly synchronous: boolean } {
  // Standard output is written to but never closed: the process may still print after shutdown.
  if (path === "-" || path === "") {
    const synchronous = stdioWritesSynchronously(1);
    return {
      synchronous,
      write: (bytes) => Deno.stdout.write(bytes),
      ...(synchronous ? { writeSync: (bytes: Uint8Array) => Deno.stdout.writeSync(bytes) } : {}),
    };
  }
  repairTornAuditFile(path);
  const file = Deno.openSync(path, { append: true, create: true });
  let synchronous = false;
  try {
    const info = file.statSync();
    synchronous = sinkWritesSynchronously({
      isFile: info.isFile,
      isCharDevice: info.isCharDevice === true,
      isTerminal: file.isTerminal(),
    });
  } catch {
    // Cannot tell: the asynchronous path is safe for every kind of file.
  }
  return {
    synchronous,
    write: (bytes) => file.write(bytes),
    ...(synchronous ? { writeSync: (bytes: Uint8Array) => file.writeSync(bytes) } : {}),
    close: () => file.close(),
  };
}
