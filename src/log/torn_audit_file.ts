/**
 * An audit file that ends in a torn record (the process died mid-write) is cut back to its last
 * whole line at start-up, before the log appends to it.
 *
 * @module
 */

import { log } from "./diagnostic.ts";
import { errorText } from "../error_text.ts";

const logger = log("audit");

/** What {@link repairTornAuditFile} found at the end of the file. */
export interface AuditFileRepair {
  /** Bytes after the last newline (a record whose write never finished). */
  fragmentBytes: number;
  /** How it was dealt with: cut off, or (when the file cannot be truncated) a newline added. */
  action: "none" | "truncated" | "newline";
}

/**
 * A file that does not end with a newline ends with a record whose write never finished (the
 * process died mid-write, or stopped while the disk was full). It is cut off at the last
 * newline, so the next record starts a line of its own and every line stays one whole record.
 * Nothing is lost that anyone relied on: a record's reply is sent only after its last byte is
 * written, so no client was told of that event. The fragment goes to the diagnostic log. Where
 * the file cannot be truncated (e.g. `chattr +a`), a newline ends the fragment instead.
 * Only regular files are looked at (not /dev/null, pipes or terminals).
 */
export function repairTornAuditFile(path: string): AuditFileRepair {
  let file: Deno.FsFile;
  try {
    // Look before opening: opening a FIFO to read waits for a writer, which would hang the start.
    if (!Deno.statSync(path).isFile) return { fragmentBytes: 0, action: "none" };
    file = Deno.openSync(path, { read: true });
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return { fragmentBytes: 0, action: "none" };
    throw error;
  }
  let keepBytes: number;
  let size: number;
  let fragment: Uint8Array;
  try {
    const info = file.statSync();
    size = info.size;
    if (!info.isFile || size === 0) return { fragmentBytes: 0, action: "none" };
    // Read backwards until a newline: a fragment is at most one record long.
    const step = 64 * 1024;
    let end = size;
    let tail: Uint8Array = new Uint8Array(0);
    keepBytes = 0;
    for (;;) {
      const start = Math.max(0, end - step);
      const piece = new Uint8Array(end - start);
      file.seekSync(start, Deno.SeekMode.Start);
      readFully(file, piece);
      const newline = piece.lastIndexOf(0x0a);
      if (newline !== -1) {
        keepBytes = start + newline + 1;
        tail = concatBytes(piece.subarray(newline + 1), tail);
        break;
      }
      tail = concatBytes(piece, tail);
      if (start === 0) break;
      end = start;
    }
    fragment = tail;
  } finally {
    file.close();
  }
  if (keepBytes === size) return { fragmentBytes: 0, action: "none" };
  const fragmentBytes = size - keepBytes;
  const shown = new TextDecoder().decode(fragment.subarray(0, 512));
  try {
    Deno.truncateSync(path, keepBytes);
    logger.warn("audit log ended in a torn record; cut it off at the last whole line", {
      audit_log: path,
      fragment_bytes: fragmentBytes,
      fragment: shown,
    });
    return { fragmentBytes, action: "truncated" };
  } catch (error) {
    const appender = Deno.openSync(path, { append: true });
    try {
      appender.writeSync(new Uint8Array([0x0a]));
    } finally {
      appender.close();
    }
    logger.warn(
      "audit log ended in a torn record and cannot be truncated; ended it with a newline",
      {
        audit_log: path,
        fragment_bytes: fragmentBytes,
        error: errorText(error),
      },
    );
    return { fragmentBytes, action: "newline" };
  }
}

function readFully(file: Deno.FsFile, into: Uint8Array): void {
  let done = 0;
  while (done < into.length) {
    const n = file.readSync(into.subarray(done));
    if (n === null || n === 0) throw new Error("audit log shrank while it was read");
    done += n;
  }
}

function concatBytes(a: Uint8Array, b: Uint8Array): Uint8Array {
  if (b.length === 0) return a;
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}
