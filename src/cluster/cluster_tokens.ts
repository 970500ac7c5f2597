/**
 * Fencing tokens in cluster mode: the high-water mark lives in etcd (`<cluster>/tokens`) and
 * is reserved ahead in blocks by a transaction guarded by the leader key's create revision (the
 * term), so a deposed leader's reservation fails and it learns that it was deposed. A new leader
 * starts above the stored mark and above the wall-clock floor (`clockTokenFloor`), so tokens
 * grow per lock and globally across every node and fail-over.
 *
 * `next()` is synchronous (the engine grants synchronously): it hands out tokens of the block
 * already reserved and throws when none is left, which leaves the lock ownerless until
 * `onReserved` says a new block is in (the server then retries grants). The next block is
 * reserved in the background once half of the current one is used, so at normal rates no grant
 * ever waits for etcd.
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import { clockTokenFloor } from "../core/tokens.ts";
import { CLUSTER_RETRY_MS, TOKEN_MAX } from "../limits.ts";
import { type Etcd, EtcdError, type KeyValue } from "./etcd.ts";
import { clusterKeys } from "./leadership.ts";

export interface ClusterTokensOptions {
  readonly etcd: Etcd;
  readonly scheduler: Scheduler;
  readonly cluster: string;
  readonly blockSize: number;
  readonly requestTimeoutMs: number;
  /** Delay before retrying a reservation etcd did not answer (`CLUSTER_RETRY_MS`). */
  readonly retryMs?: number;
  /** A reservation found another term's key (or none): the node must step down. */
  readonly onFenced: (current: KeyValue | undefined) => void;
  /** A block was reserved: grants that waited for a token can be retried. */
  readonly onReserved: () => void;
}

/** Thrown by `next()` when no reserved token is left (the grant waits for `onReserved`). */
export class TokensNotReserved extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TokensNotReserved";
  }
}

export class ClusterTokens {
  readonly #etcd: Etcd;
  readonly #scheduler: Scheduler;
  readonly #keys: ReturnType<typeof clusterKeys>;
  readonly #blockSize: number;
  readonly #timeoutMs: number;
  readonly #retryMs: number;
  readonly #onFenced: ClusterTokensOptions["onFenced"];
  readonly #onReserved: ClusterTokensOptions["onReserved"];

  #term = 0;
  #epoch = 0;
  #last = 0;
  #reservedThrough = 0;
  /** Mod revision of the tokens key as last seen (0: absent). */
  #modRevision = 0;
  #reserving = false;
  #retryTimer: Timer | null = null;

  constructor(options: ClusterTokensOptions) {
    if (!Number.isSafeInteger(options.blockSize) || options.blockSize < 1) {
      throw new RangeError(`Invalid token block size ${options.blockSize}`);
    }
    this.#etcd = options.etcd;
    this.#scheduler = options.scheduler;
    this.#keys = clusterKeys(options.cluster);
    this.#blockSize = options.blockSize;
    this.#timeoutMs = options.requestTimeoutMs;
    this.#retryMs = options.retryMs ?? CLUSTER_RETRY_MS;
    this.#onFenced = options.onFenced;
    this.#onReserved = options.onReserved;
  }

  /** The term tokens are issued for, 0 between terms. */
  get term(): number {
    return this.#term;
  }

  /** The largest token issued in this term (or the starting floor). */
  get lastIssued(): number {
    return this.#last;
  }

  /** The mark stored in etcd by this term: no later term issues a token at or below it. */
  get reservedThrough(): number {
    return this.#reservedThrough;
  }

  /** Whether a token can be issued now. */
  get ready(): boolean {
    return this.#term !== 0 && this.#last < this.#reservedThrough;
  }

  /**
   * Starts issuing for `term`: reads the stored mark, starts above it and above the wall-clock
   * floor, and reserves the first block. Resolves when the first block is in; rejects with an
   * EtcdError when etcd cannot be read (the caller retries), or when the term ended meanwhile.
   */
  async begin(term: number, wallMs: number): Promise<void> {
    this.end();
    const epoch = ++this.#epoch;
    this.#term = term;
    const { kv } = await this.#etcd.get(this.#keys.tokens, { timeoutMs: this.#timeoutMs });
    if (epoch !== this.#epoch) throw new EtcdError("rejected", "the term ended");
    const stored = kv === undefined ? 0 : parseMark(kv.value);
    this.#modRevision = kv?.modRevision ?? 0;
    this.#last = Math.max(stored, clockTokenFloor(wallMs));
    this.#reservedThrough = this.#last;
    const first = Promise.withResolvers<void>();
    this.#reserve(epoch, first);
    await first.promise;
  }

  /** Stops issuing (the node stepped down): `next()` throws until the next `begin()`. */
  end(): void {
    this.#epoch++;
    this.#term = 0;
    this.#reserving = false;
    this.#retryTimer?.cancel();
    this.#retryTimer = null;
  }

  /** Throws unless a token can be issued now (and starts a reservation if one is due). */
  prepare(): void {
    if (this.#term === 0) throw new TokensNotReserved("This node is not the leader");
    if (this.#last >= TOKEN_MAX) {
      throw new RangeError(`fencing tokens are exhausted: the last token issued is ${this.#last}`);
    }
    if (this.#last >= this.#reservedThrough) {
      this.#reserve(this.#epoch);
      throw new TokensNotReserved("The next block of fencing tokens is not reserved yet");
    }
  }

  /** Returns the next token, or throws `TokensNotReserved` (the grant waits). */
  next(): number {
    this.prepare();
    const token = ++this.#last;
    if (this.#reservedThrough - this.#last < this.#blockSize / 2) this.#reserve(this.#epoch);
    return token;
  }

  /** Reserves the next block; `first` settles with the outcome of this term's first one. */
  #reserve(epoch: number, first?: PromiseWithResolvers<void>): void {
    if (epoch !== this.#epoch || this.#term === 0 || this.#reserving) return;
    this.#reserving = true;
    const term = this.#term;
    const mark = Math.min(TOKEN_MAX, Math.max(this.#reservedThrough, this.#last) + this.#blockSize);
    this.#etcd.txn(
      [
        { key: this.#keys.leader, target: "create", revision: term },
        { key: this.#keys.tokens, target: "mod", revision: this.#modRevision },
      ],
      [{ type: "put", key: this.#keys.tokens, value: String(mark) }],
      [{ type: "get", key: this.#keys.leader }, { type: "get", key: this.#keys.tokens }],
      { timeoutMs: this.#timeoutMs },
    ).then(
      (result) => {
        if (epoch !== this.#epoch) {
          first?.reject(new EtcdError("rejected", "the term ended"));
          return;
        }
        this.#reserving = false;
        if (result.succeeded) {
          this.#reservedThrough = mark;
          this.#modRevision = result.revision;
          first?.resolve();
          this.#onReserved();
          return;
        }
        const [leader, tokens] = result.gets;
        if (leader === undefined || leader.createRevision !== term) {
          this.end();
          first?.reject(new EtcdError("rejected", `term ${term} is over`));
          this.#onFenced(leader);
          return;
        }
        // Our term still holds, so only this term wrote the mark since we read it: a
        // reservation whose answer was lost landed (or someone edited the key by hand). Never
        // issue at or below what is stored; keep what we reserved.
        const stored = tokens === undefined ? 0 : Number(tokens.value);
        this.#modRevision = tokens?.modRevision ?? 0;
        if (Number.isSafeInteger(stored) && stored > this.#reservedThrough) {
          this.#reservedThrough = stored;
        }
        if (this.#reservedThrough - this.#last >= this.#blockSize / 2) {
          first?.resolve();
          this.#onReserved();
        } else {
          this.#reserve(epoch, first);
        }
      },
      (error) => {
        if (epoch !== this.#epoch) {
          first?.reject(error);
          return;
        }
        this.#reserving = false;
        // Unknown outcome: the mod revision compare makes the retry safe (a reservation that
        // did land fails it, and the failure branch shows the stored mark).
        this.#retryTimer?.cancel();
        this.#retryTimer = this.#scheduler.setTimer(() => {
          this.#retryTimer = null;
          this.#reserve(epoch, first);
        }, this.#retryMs);
      },
    );
  }
}

function parseMark(text: string): number {
  const mark = Number(text);
  if (!Number.isSafeInteger(mark) || mark < 0) {
    throw new RangeError(`The stored token mark "${text}" is not a token`);
  }
  return mark;
}
