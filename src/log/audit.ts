import { rfc3339 } from "../clock.ts";
import { AUDIT_PENDING_RECORDS_MAX } from "../limits.ts";

/** Where audit lines go. `writeSync` may write part of the bytes, or throw. */
export interface AuditSink {
  writeSync(bytes: Uint8Array): number;
  close?(): void;
}

/** Who performed an admin action. */
export interface Actor {
  remote_addr: string;
  /** "token" when the admin API required a bearer token, else "none". */
  auth: "token" | "none";
}

/** One audit event. Field order is kept in the JSON line. */
export type AuditRecord =
  & {
    event: "acquire" | "release" | "force_release" | "kick_waiter" | "acl_deny";
    lock: string;
    token: number | null;
    identity: string;
    remote_addr: string;
    session: number;
  }
  & {
    reason?: string;
    held_ms?: number;
    waited_ms?: number;
    actor?: Actor;
  };

/**
 * The audit log: JSON Lines, one event per line, each written whole with a
 * single write. "All of this or nothing": a record that cannot be written is
 * kept (in order) and retried; until the backlog is written the log reports
 * itself unhealthy, the server pauses grants, and the reply that depends on a
 * record (ACQUIRED, RELEASED, ...) is sent only once its record is written.
 */
export class AuditLog {
  readonly #sink: AuditSink;
  readonly #wallMs: () => number;
  readonly #encoder = new TextEncoder();
  /** Records that could not be written yet, oldest first (the log is unhealthy while any). */
  readonly #pending: AuditEntry[] = [];
  /** With batching: records of this turn of the event loop, written together at its end. */
  #batch: AuditEntry[] = [];
  readonly #batching: boolean;
  #failure: string | null = null;
  /** Records dropped because the backlog was full (AUDIT_PENDING_RECORDS_MAX). */
  droppedRecords = 0;
  /** Called when the log turns unhealthy (with the error) or healthy again (null). */
  onHealthChange: (failure: string | null) => void = () => {};

  /**
   * @param batchWrites write the records of one turn of the event loop with one write
   *   (each record still whole and in order; callbacks still run only after the write).
   *   The server uses it: a syscall per record was a large part of a grant's cost.
   */
  constructor(sink: AuditSink, wallMs: () => number = Date.now, { batchWrites = false } = {}) {
    this.#sink = sink;
    this.#wallMs = wallMs;
    this.#batching = batchWrites;
  }

  /** Whether every record so far is written (or about to be, at the end of this turn). */
  get healthy(): boolean {
    return this.#pending.length === 0;
  }

  /** The last write error while unhealthy. */
  get failure(): string | null {
    return this.#failure;
  }

  get pendingCount(): number {
    return this.#pending.length;
  }

  /** Whether the backlog is full: callers must stop producing records that grant anything. */
  get full(): boolean {
    return this.#pending.length >= AUDIT_PENDING_RECORDS_MAX;
  }

  /**
   * Appends a record. `onWritten` runs once it is durable in the sink: at once
   * when the sink is healthy (at the end of the turn when batching), else when
   * a retry gets through.
   */
  append(record: AuditRecord, onWritten?: () => void): void {
    const entry = {
      line: this.#encoder.encode(formatAuditLine(this.#wallMs(), record)),
      onWritten,
    };
    if (this.#pending.length > 0) {
      if (this.#pending.length >= AUDIT_PENDING_RECORDS_MAX) {
        // Memory stays bounded through a long outage; grants are paused, so only endings,
        // refusals and admin actions arrive here. The loss is counted and reported.
        this.droppedRecords++;
        return;
      }
      this.#pending.push(entry);
      return;
    }
    if (this.#batching) {
      if (this.#batch.length === 0) queueMicrotask(() => this.#flushBatch());
      this.#batch.push(entry);
      return;
    }
    this.#writeEntries([entry]);
  }

  /** Retries the backlog in order; returns true when it is empty. */
  retry(): boolean {
    this.#flushBatch();
    if (this.#pending.length === 0) return true;
    const entries = this.#pending.splice(0);
    const written = this.#writeEntries(entries, false);
    if (written < entries.length) return false;
    this.#failure = null;
    this.onHealthChange(null);
    return true;
  }

  close(): void {
    this.#flushBatch();
    try {
      this.#sink.close?.();
    } catch {
      // Closing a broken sink is not worth an error.
    }
  }

  #flushBatch(): void {
    if (this.#batch.length === 0) return;
    const batch = this.#batch;
    this.#batch = [];
    if (this.#pending.length > 0) this.#pending.push(...batch);
    else this.#writeEntries(batch);
  }

  /**
   * Writes entries in order with as few writes as possible and runs the callbacks of
   * those written. The rest go (back) to the front of the backlog; returns how many
   * were written.
   */
  #writeEntries(entries: AuditEntry[], announce = true): number {
    const bytes = entries.length === 1 ? entries[0].line : concat(entries);
    const writtenBytes = this.#tryWrite(bytes);
    let done = 0;
    for (let end = 0; done < entries.length; done++) {
      end += entries[done].line.length;
      if (end > writtenBytes) break;
    }
    for (let i = 0; i < done; i++) entries[i].onWritten?.();
    if (done < entries.length) {
      // A record cut by a failed write is written again whole: a torn line is followed by a
      // complete copy rather than lost.
      const wasHealthy = this.#pending.length === 0;
      this.#pending.unshift(...entries.slice(done));
      if (wasHealthy && announce) {
        this.onHealthChange(this.#failure ?? "audit sink refused a write");
      }
    }
    return done;
  }

  /** Writes as much as the sink takes; returns the bytes written. */
  #tryWrite(bytes: Uint8Array): number {
    let written = 0;
    try {
      while (written < bytes.length) {
        const n = this.#sink.writeSync(written === 0 ? bytes : bytes.subarray(written));
        if (n <= 0) throw new Error("audit sink wrote nothing");
        written += n;
      }
    } catch (error) {
      this.#failure = error instanceof Error ? error.message : String(error);
    }
    return written;
  }
}

interface AuditEntry {
  line: Uint8Array;
  onWritten?: () => void;
}

function concat(entries: AuditEntry[]): Uint8Array {
  let length = 0;
  for (const entry of entries) length += entry.line.length;
  const bytes = new Uint8Array(length);
  let offset = 0;
  for (const entry of entries) {
    bytes.set(entry.line, offset);
    offset += entry.line.length;
  }
  return bytes;
}

/** One JSON line with `ts` first. JSON.stringify escapes every control character. */
export function formatAuditLine(wallMs: number, record: AuditRecord): string {
  return JSON.stringify({ ts: rfc3339(wallMs), ...record }) + "\n";
}

/** Opens the sink named by `-audit-log`: "-" is standard output, anything else a file opened for append. */
export function openAuditSink(path: string): AuditSink {
  // Standard output is written to but never closed: the process may still print after shutdown.
  if (path === "-" || path === "") return { writeSync: (bytes) => Deno.stdout.writeSync(bytes) };
  const file = Deno.openSync(path, { append: true, create: true });
  return {
    writeSync: (bytes) => file.writeSync(bytes),
    close: () => file.close(),
  };
}
