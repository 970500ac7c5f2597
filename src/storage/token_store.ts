import { join } from "node:path";
import { TOKENS_PER_BLOCK } from "../limits.ts";
import { clockTokenFloor, TokenIssuer } from "../core/tokens.ts";
import { errorText } from "../error_text.ts";

/** Name of the high-water file inside `-data-dir`. */
export const TOKEN_FILE_NAME = "tokens";

/** The file's content: a version line and the high-water mark, both plain text. */
function render(highWater: number): string {
  return `lockd-tokens 1\nhigh_water ${highWater}\n`;
}

/** Reads the high-water mark; 0 when the file does not exist yet. Throws on a corrupt file. */
export function readHighWater(dataDir: string): number {
  const path = join(dataDir, TOKEN_FILE_NAME);
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return 0;
    throw error;
  }
  const match = /^lockd-tokens 1\nhigh_water (\d+)\n$/.exec(text);
  const value = match ? Number(match[1]) : NaN;
  if (!Number.isSafeInteger(value)) {
    throw new Error(`${path}: not a lockd token file (refusing to guess the high-water mark)`);
  }
  return value;
}

/**
 * Makes a high-water mark durable: write a temp file, fsync it, rename it over
 * the old one, fsync the directory. Synchronous on purpose: no token of the new
 * block may be issued before this returns, and it runs once per block.
 */
function writeHighWater(dataDir: string, highWater: number): void {
  const path = join(dataDir, TOKEN_FILE_NAME);
  const temp = `${path}.tmp`;
  const file = Deno.openSync(temp, { write: true, create: true, truncate: true });
  try {
    const bytes = new TextEncoder().encode(render(highWater));
    let written = 0;
    while (written < bytes.length) written += file.writeSync(bytes.subarray(written));
    file.syncSync();
  } finally {
    file.close();
  }
  Deno.renameSync(temp, path);
  try {
    const dir = Deno.openSync(dataDir, { read: true });
    try {
      dir.syncSync();
    } finally {
      dir.close();
    }
  } catch {
    // Some filesystems refuse fsync on a directory; the rename is still atomic.
  }
}

/**
 * The token issuer for a server. Tokens start above the larger of the durable
 * high-water mark in `dataDir` (when given) and a clock-derived floor (see
 * `clockTokenFloor` for its assumption). The file alone makes restarts safe;
 * the floor also covers a server without a data dir, a lost or emptied token
 * file and an old backup restored by mistake, as long as the wall clock is sane.
 *
 * The first block is reserved at once, so a data dir that cannot be written and
 * an exhausted token space stop the start (one line saying why) instead of
 * failing every later ACQUIRE.
 */
export function openTokenIssuer(
  dataDir: string | null,
  wallMs: number,
  blockSize = TOKENS_PER_BLOCK,
): TokenIssuer {
  const floor = clockTokenFloor(wallMs);
  if (dataDir === null) {
    const issuer = new TokenIssuer(floor, Number.MAX_SAFE_INTEGER, () => {});
    issuer.prepare();
    return issuer;
  }
  try {
    Deno.mkdirSync(dataDir, { recursive: true });
  } catch (error) {
    throw new Error(`cannot use -data-dir "${dataDir}": ${errorText(error)}`);
  }
  const start = Math.max(readHighWater(dataDir), floor);
  const issuer = new TokenIssuer(start, blockSize, (next) => writeHighWater(dataDir, next));
  try {
    issuer.prepare();
  } catch (error) {
    if (error instanceof RangeError) throw new Error(`-data-dir "${dataDir}": ${error.message}`);
    throw new Error(`cannot write the token file in -data-dir "${dataDir}": ${errorText(error)}`);
  }
  return issuer;
}

/** Name of the file in `-data-dir` that a running server holds an exclusive lock on. */
const DATA_DIR_LOCK_FILE_NAME = "lock";

/**
 * Takes an exclusive lock on a file in `dataDir` for as long as the server runs, so a second
 * server on the same directory stops at start-up instead of issuing the same tokens. The lock
 * is the kernel's (flock): it ends with the process, also after SIGKILL.
 */
export function lockDataDir(dataDir: string): { release(): void } {
  try {
    Deno.mkdirSync(dataDir, { recursive: true });
  } catch (error) {
    throw new Error(`cannot use -data-dir "${dataDir}": ${errorText(error)}`);
  }
  const path = join(dataDir, DATA_DIR_LOCK_FILE_NAME);
  let file: Deno.FsFile;
  try {
    file = Deno.openSync(path, { read: true, write: true, create: true });
  } catch (error) {
    throw new Error(`cannot use -data-dir "${dataDir}": ${errorText(error)}`);
  }
  let locked = false;
  try {
    locked = file.tryLockSync(true);
  } catch (error) {
    file.close();
    throw new Error(`cannot lock ${path}: ${errorText(error)}`);
  }
  if (!locked) {
    file.close();
    throw new Error(`-data-dir "${dataDir}" is in use by another lockd server (it holds ${path})`);
  }
  let released = false;
  return {
    release() {
      if (released) return;
      released = true;
      file.close(); // closing the descriptor drops the lock
    },
  };
}
