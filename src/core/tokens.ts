import { TOKEN_MAX } from "../limits.ts";

/**
 * Where the engine takes fencing tokens from: the `TokenIssuer` below (a single node, with or
 * without a data dir), or the etcd-backed issuer of cluster mode (src/cluster/).
 */
export interface TokenSource {
  /** The largest token issued so far (or the starting floor). */
  readonly lastIssued: number;
  /** Throws unless the next token can be issued now (reserving it first if needed). */
  prepare(): void;
  /** Returns the next token; throws when none can be issued (the engine blocks grants). */
  next(): number;
  /**
   * A token issued elsewhere (an ownership restored after a fail-over) is in use: every later
   * `next()` must be above it. Optional: a source whose new tokens are always above every
   * restorable token (cluster mode starts each term above the stored mark) need not have it;
   * the engine then refuses to restore a token above `lastIssued`.
   */
  observe?(token: number): void;
}

/**
 * Issues fencing tokens: each larger than every one issued before.
 *
 * Tokens are reserved ahead in blocks. Before the first token of a new block
 * is issued, `reserve(highWater)` must make `highWater` durable (the data-dir
 * adapter writes a temp file, fsyncs and renames); a restart then starts above
 * it, so tokens keep growing across restarts. `reserve` throwing means the
 * token is not issued.
 */
export class TokenIssuer implements TokenSource {
  #last: number;
  #reservedThrough: number;
  readonly #blockSize: number;
  readonly #reserve: (highWater: number) => void;

  /**
   * @param lastIssued every token issued before is ≤ this (the durable high-water mark)
   * @param blockSize how many tokens one reservation covers
   * @param reserve makes a new high-water mark durable; called before issuing past the old one
   */
  constructor(lastIssued: number, blockSize: number, reserve: (highWater: number) => void) {
    if (!Number.isSafeInteger(lastIssued) || lastIssued < 0) {
      throw new RangeError(`Invalid token high-water mark ${lastIssued}`);
    }
    if (!Number.isSafeInteger(blockSize) || blockSize < 1) {
      throw new RangeError(`Invalid token block size ${blockSize}`);
    }
    this.#last = lastIssued;
    this.#reservedThrough = lastIssued;
    this.#blockSize = blockSize;
    this.#reserve = reserve;
  }

  /** The largest token issued so far (or the starting floor). */
  get lastIssued(): number {
    return this.#last;
  }

  /**
   * Makes sure the next token is reserved (durable) without issuing it; throws when the
   * space is exhausted or the reservation fails. The server calls it at start-up (so an
   * unwritable data dir or an exhausted space stops the start) and to probe a failed store.
   */
  prepare(): void {
    const token = this.#last + 1;
    if (token > TOKEN_MAX) {
      throw new RangeError(
        `fencing tokens are exhausted: the last token issued is ${this.#last} (2^53-1)`,
      );
    }
    if (token > this.#reservedThrough) {
      const highWater = Math.min(TOKEN_MAX, this.#last + this.#blockSize);
      this.#reserve(highWater);
      this.#reservedThrough = highWater;
    }
  }

  /** Returns the next token; throws when the space is exhausted or the reservation fails. */
  next(): number {
    this.prepare();
    return ++this.#last;
  }

  /**
   * Every later token is above `token` (a restored ownership's). The next `next()` reserves a
   * new block first when `token` passed the reserved mark.
   */
  observe(token: number): void {
    if (!Number.isSafeInteger(token) || token < 0 || token > TOKEN_MAX) {
      throw new RangeError(`Invalid token ${token}`);
    }
    if (token > this.#last) this.#last = token;
  }
}

/**
 * The starting point without a data dir: wall-clock milliseconds × 1000.
 * A restart issues larger tokens than before as long as the previous run
 * issued fewer than 1000 tokens per millisecond of its uptime on average
 * and the wall clock did not step back. Stays below 2^53-1 until year 2255.
 */
export function clockTokenFloor(wallMs: number): number {
  return Math.floor(wallMs) * 1000;
}
