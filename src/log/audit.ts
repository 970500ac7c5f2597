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
  readonly #pending: { line: Uint8Array; onWritten?: () => void }[] = [];
  #failure: string | null = null;
  /** Called when the log turns unhealthy (with the error) or healthy again (null). */
  onHealthChange: (failure: string | null) => void = () => {};

  constructor(sink: AuditSink, wallMs: () => number = Date.now) {
    this.#sink = sink;
    this.#wallMs = wallMs;
  }

  /** Whether every record so far is written. */
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
   * when the sink is healthy, else when a retry gets through.
   */
  append(record: AuditRecord, onWritten?: () => void): void {
    const line = this.#encoder.encode(formatAuditLine(this.#wallMs(), record));
    if (this.#pending.length === 0 && this.#tryWrite(line)) {
      onWritten?.();
      return;
    }
    const wasHealthy = this.#pending.length === 0;
    this.#pending.push({ line, onWritten });
    if (wasHealthy) this.onHealthChange(this.#failure ?? "audit sink refused a write");
  }

  /** Retries the backlog in order; returns true when it is empty. */
  retry(): boolean {
    if (this.#pending.length === 0) return true;
    while (this.#pending.length > 0) {
      const next = this.#pending[0];
      if (!this.#tryWrite(next.line)) return false;
      this.#pending.shift();
      next.onWritten?.();
    }
    this.#failure = null;
    this.onHealthChange(null);
    return true;
  }

  close(): void {
    try {
      this.#sink.close?.();
    } catch {
      // Closing a broken sink is not worth an error.
    }
  }

  #tryWrite(line: Uint8Array): boolean {
    try {
      let written = 0;
      while (written < line.length) {
        const n = this.#sink.writeSync(written === 0 ? line : line.subarray(written));
        if (n <= 0) throw new Error("audit sink wrote nothing");
        written += n;
      }
      return true;
    } catch (error) {
      this.#failure = error instanceof Error ? error.message : String(error);
      return false;
    }
  }
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
