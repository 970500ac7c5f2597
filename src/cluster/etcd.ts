/**
 * The part of etcd's v3 API that cluster mode uses, as an interface: leases (grant, one
 * keep-alive at a time, revoke), linearizable reads of one key or of a prefix (paginated at one
 * revision), transactions that compare create and mod revisions, and a watch on one key. `etcd_http.ts` speaks it to a real etcd; the unit tests
 * use an in-memory fake with a manual clock.
 *
 * Revisions are plain numbers (a counter that stays below 2^53); lease IDs are int64 and stay
 * strings.
 *
 * @module
 */

/** One stored key. */
export interface KeyValue {
  readonly key: string;
  readonly value: string;
  /** Revision of the put that created the key (since it was last absent). */
  readonly createRevision: number;
  /** Revision of the last put. */
  readonly modRevision: number;
  /** ID of the lease the key is attached to, "0" for none. */
  readonly lease: string;
}

/** A condition of a transaction: the key's create or mod revision equals `revision` (0: absent). */
export interface Compare {
  readonly key: string;
  readonly target: "create" | "mod";
  readonly revision: number;
}

/** One operation of a transaction branch. */
export type TxnOp =
  | { readonly type: "put"; readonly key: string; readonly value: string; readonly lease?: string }
  | { readonly type: "delete"; readonly key: string }
  | { readonly type: "get"; readonly key: string };

export interface TxnResult {
  readonly succeeded: boolean;
  /** Store revision after the transaction (the revision of its writes, when it wrote). */
  readonly revision: number;
  /** Results of the `get` operations of the branch that ran, in order (undefined: absent). */
  readonly gets: readonly (KeyValue | undefined)[];
}

export interface GetResult {
  readonly kv: KeyValue | undefined;
  /** Store revision the read saw; a watch from `revision + 1` misses nothing after it. */
  readonly revision: number;
}

export interface WatchEvent {
  readonly type: "put" | "delete";
  /** For a delete: the key and its deletion revision (`modRevision`); other fields are empty. */
  readonly kv: KeyValue;
}

export interface RequestOptions {
  /** Ends the request early (it then rejects with an `EtcdError` of kind "unavailable"). */
  readonly signal?: AbortSignal;
  /** Overrides the client's request timeout. */
  readonly timeoutMs?: number;
}

/** Options of a prefix read (`Etcd.range`). */
export interface RangeOptions extends RequestOptions {
  /** Most keys to return (0 or absent: no limit; etcd then answers them all in one message). */
  readonly limit?: number;
  /**
   * Read the store as of this revision (0 or absent: the newest). Pages of one listing pass the
   * revision of the first page, so they see one snapshot; a compacted revision rejects with an
   * `EtcdError` of kind "compacted".
   */
  readonly revision?: number;
  /**
   * Start at this key (inclusive) instead of at the prefix; it must begin with the prefix. The
   * next page of a listing starts at the last key returned + "\0".
   */
  readonly fromKey?: string;
}

/** One page of a prefix read. */
export interface RangeResult {
  /** The keys from `fromKey` (or the prefix) on, in ascending byte order of their UTF-8 keys. */
  readonly kvs: readonly KeyValue[];
  /** Whether keys under the prefix beyond the last one returned exist (at that revision). */
  readonly more: boolean;
  /** The revision the read saw: pass it as `revision` for the next page. */
  readonly revision: number;
}

/** How an endpoint answered its last health probe. */
export interface EndpointHealth {
  readonly endpoint: string;
  readonly healthy: boolean;
  /** Round trip of the probe in ms (also when it failed). */
  readonly tookMs: number;
  readonly error?: string;
}

export interface Etcd {
  /** The endpoints (for the operator view). */
  readonly endpoints: readonly string[];
  /** Grants a lease; etcd may raise `ttlS` to its minimum (the result says what it granted). */
  grantLease(ttlS: number, options?: RequestOptions): Promise<{ id: string; ttlS: number }>;
  /**
   * Renews a lease once. Resolves with the TTL the lease was renewed to, in seconds, or 0 when
   * the lease no longer exists (expired or revoked).
   */
  keepAliveOnce(id: string, options?: RequestOptions): Promise<number>;
  /** Revokes a lease (deleting its keys); a lease that is already gone is not an error. */
  revokeLease(id: string, options?: RequestOptions): Promise<void>;
  /** A linearizable read of one key. */
  get(key: string, options?: RequestOptions): Promise<GetResult>;
  /**
   * A linearizable read of the keys that begin with `prefix` (a non-empty string), one page at
   * a time: `limit` keys from `fromKey` on, as of `revision`.
   */
  range(prefix: string, options?: RangeOptions): Promise<RangeResult>;
  txn(
    compare: readonly Compare[],
    success: readonly TxnOp[],
    failure: readonly TxnOp[],
    options?: RequestOptions,
  ): Promise<TxnResult>;
  /**
   * Watches one key from `fromRevision` on. Yields batches of events (each batch in revision
   * order); ends when `signal` aborts (returning) or the stream breaks (throwing an
   * `EtcdError`). A `compacted` error means `fromRevision` is gone: read again and re-watch.
   */
  watch(key: string, fromRevision: number, signal: AbortSignal): AsyncIterable<WatchEvent[]>;
  /** Probes every endpoint. */
  health(options?: RequestOptions): Promise<EndpointHealth[]>;
  close(): void;
}

/**
 * A failed etcd request.
 * - `unavailable`: no answer (refused, reset, timed out, aborted) or etcd could not serve it
 *   now (no leader, leader changed, timeout inside etcd); the outcome of a write is unknown.
 * - `lease_not_found`: the lease named in the request does not exist.
 * - `compacted`: a watch asked for a revision that was compacted away.
 * - `rejected`: any other error etcd answered (bad request, permission denied...).
 */
export class EtcdError extends Error {
  readonly kind: "unavailable" | "lease_not_found" | "compacted" | "rejected";
  /** The endpoint that failed, when one did. */
  readonly endpoint: string | undefined;
  constructor(kind: EtcdError["kind"], message: string, endpoint?: string) {
    super(message);
    this.name = "EtcdError";
    this.kind = kind;
    this.endpoint = endpoint;
  }
}
