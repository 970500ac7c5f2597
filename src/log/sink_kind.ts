/**
 * Which log sinks may be written synchronously: those that no reader can stall. Shared by the
 * audit log (standard output or a file) and the diagnostic log (standard error).
 *
 * @module
 */

import { fstatSync } from "node:fs";
import { isatty } from "node:tty";

/** What kind of file a sink writes to, as `fstat` tells it. */
export interface SinkKind {
  isFile: boolean;
  isCharDevice: boolean;
  /** A terminal is a character device that can stop (XOFF, a paused terminal). */
  isTerminal: boolean;
}

/**
 * Whether writes to this kind of sink may be synchronous: a regular file or a character device
 * that is not a terminal (/dev/null) has no reader that can stop reading, so a write returns at
 * once. Pipes, sockets and terminals (standard output to Docker, journald, `| tee`, a paused
 * terminal) can stall forever and are written asynchronously. The risk left on the synchronous
 * path is a disk that hangs (a dead NFS server): then the event loop waits for it.
 */
export function sinkWritesSynchronously(kind: SinkKind): boolean {
  return kind.isFile || (kind.isCharDevice && !kind.isTerminal);
}

/**
 * Whether standard output (1) or standard error (2) may be written synchronously; false when it
 * cannot be told. By descriptor: `fstat` needs no permission, where `Deno.statSync("/dev/stdout")`
 * needs `--allow-all`.
 */
export function stdioWritesSynchronously(fd: 1 | 2): boolean {
  try {
    const stat = fstatSync(fd);
    return sinkWritesSynchronously({
      isFile: stat.isFile(),
      isCharDevice: stat.isCharacterDevice(),
      isTerminal: isatty(fd),
    });
  } catch {
    return false;
  }
}
