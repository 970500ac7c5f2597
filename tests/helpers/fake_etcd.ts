/**
 * An in-memory etcd for unit tests of cluster mode, on a ManualScheduler: keys with create and
 * mod revisions, leases that expire exactly at processing time + TTL, transactions, watches
 * with history, and faults:
 * - `mode = "down"`: requests fail at once (refused) and watch streams break;
 * - `mode = "stall"`: requests get no answer until the mode is "up" again (then etcd processes
 *   them at that moment, like a request that sat in a buffer) or until their timeout, and watch
 *   streams go silent for good (a black-holed connection);
 * - `latencyMs`: every request is processed that long after it was sent;
 * - `answerDelayMs`: every answer arrives that long after etcd processed its request, while watch
 *   streams already carry the change (a real etcd's watch stream and the answer of a request
 *   travel on different connections, and either may come first).
 */

import type { ManualScheduler } from "../../src/clock.ts";
import {
  type Compare,
  type EndpointHealth,
  type Etcd,
  EtcdError,
  type GetResult,
  type KeyValue,
  type RequestOptions,
  type TxnOp,
  type TxnResult,
  type WatchEvent,
} from "../../src/cluster/etcd.ts";

interface FakeLease {
  ttlS: number;
  expiresAtMs: number;
  keys: Set<string>;
  timer: { cancel(): void } | null;
}

interface Watcher {
  key: string;
  queue: WatchEvent[][];
  wake: (() => void) | null;
  broken: EtcdError | null;
  silent: boolean;
}

export interface LoggedRequest {
  readonly op: string;
  readonly sentAtMs: number;
}

export class FakeEtcd implements Etcd {
  readonly endpoints = ["http://fake-etcd:2379"];
  mode: "up" | "down" | "stall" = "up";
  latencyMs = 0;
  answerDelayMs = 0;
  /** Minimum TTL etcd grants (like etcd's minimum lease TTL). */
  minTtlS = 1;
  readonly requests: LoggedRequest[] = [];
  revision = 1;
  readonly #scheduler: ManualScheduler;
  readonly #kvs = new Map<string, KeyValue>();
  readonly #leases = new Map<string, FakeLease>();
  readonly #history: { revision: number; event: WatchEvent }[] = [];
  readonly #watchers = new Set<Watcher>();
  readonly #stalled: (() => void)[] = [];
  #nextLease = 0x7000_0000_0000;

  constructor(scheduler: ManualScheduler) {
    this.#scheduler = scheduler;
  }

  // ---- test controls -------------------------------------------------------

  setMode(mode: FakeEtcd["mode"]): void {
    this.mode = mode;
    if (mode === "down") {
      for (const w of this.#watchers) this.#break(w, "connection refused");
    }
    if (mode === "stall") {
      for (const w of this.#watchers) w.silent = true;
    }
    if (mode === "up") {
      for (const run of this.#stalled.splice(0)) run();
    }
  }

  /** The stored key, read directly (no request). */
  peek(key: string): KeyValue | undefined {
    return this.#kvs.get(key);
  }

  /** Writes a key directly, as an operator with etcdctl would. */
  putDirect(key: string, value: string, lease = "0"): KeyValue {
    return this.#put(key, value, lease);
  }

  /** Deletes a key directly, as an operator with etcdctl would. */
  deleteDirect(key: string): void {
    this.#delete(key, ++this.revision);
  }

  /** What a new etcd leader does on election: every lease lives `ms` longer from now. */
  extendLeases(ms: number): void {
    for (const [id, lease] of this.#leases) {
      const remainingMs = Math.max(0, lease.expiresAtMs - this.#scheduler.monotonicMs());
      this.#arm(id, lease, remainingMs + ms);
    }
  }

  leaseExists(id: string): boolean {
    return this.#leases.has(id);
  }

  count(op: string): number {
    return this.requests.filter((r) => r.op === op).length;
  }

  /**
   * One node's connection to this etcd: the same store, but its `close()` ends only the watch
   * streams it opened (several nodes share one fake etcd).
   */
  client(): Etcd {
    const controllers = new Set<AbortController>();
    return {
      endpoints: this.endpoints,
      grantLease: (ttlS, options) => this.grantLease(ttlS, options),
      keepAliveOnce: (id, options) => this.keepAliveOnce(id, options),
      revokeLease: (id, options) => this.revokeLease(id, options),
      get: (key, options) => this.get(key, options),
      txn: (compare, success, failure, options) => this.txn(compare, success, failure, options),
      watch: (key, fromRevision, signal) => {
        const controller = new AbortController();
        controllers.add(controller);
        signal.addEventListener("abort", () => controller.abort());
        return this.watch(key, fromRevision, controller.signal);
      },
      health: () => this.health(),
      close: () => {
        for (const controller of controllers) controller.abort();
        controllers.clear();
      },
    };
  }

  // ---- the Etcd interface ------------------------------------------------------

  grantLease(ttlS: number, options?: RequestOptions): Promise<{ id: string; ttlS: number }> {
    return this.#request("grant", options, () => {
      const id = String(this.#nextLease++);
      const granted = Math.max(ttlS, this.minTtlS);
      const lease: FakeLease = { ttlS: granted, expiresAtMs: 0, keys: new Set(), timer: null };
      this.#leases.set(id, lease);
      this.#renew(id, lease);
      return { id, ttlS: granted };
    });
  }

  keepAliveOnce(id: string, options?: RequestOptions): Promise<number> {
    return this.#request("keepalive", options, () => {
      const lease = this.#leases.get(id);
      if (lease === undefined) return 0;
      this.#renew(id, lease);
      return lease.ttlS;
    });
  }

  revokeLease(id: string, options?: RequestOptions): Promise<void> {
    return this.#request("revoke", options, () => {
      this.#revoke(id);
    });
  }

  get(key: string, options?: RequestOptions): Promise<GetResult> {
    return this.#request("get", options, () => ({
      kv: this.#kvs.get(key),
      revision: this.revision,
    }));
  }

  txn(
    compare: readonly Compare[],
    success: readonly TxnOp[],
    failure: readonly TxnOp[],
    options?: RequestOptions,
  ): Promise<TxnResult> {
    return this.#request("txn", options, () => {
      const ok = compare.every((c) => {
        const kv = this.#kvs.get(c.key);
        const actual = kv === undefined
          ? 0
          : c.target === "create"
          ? kv.createRevision
          : kv.modRevision;
        return actual === c.revision;
      });
      const ops = ok ? success : failure;
      for (const op of ops) {
        if (
          op.type === "put" && op.lease !== undefined && op.lease !== "0" &&
          !this.#leases.has(op.lease)
        ) {
          throw new EtcdError("lease_not_found", "etcdserver: requested lease not found");
        }
      }
      const writes = ops.some((op) => op.type !== "get");
      const revision = writes ? this.revision + 1 : this.revision;
      const gets: (KeyValue | undefined)[] = [];
      for (const op of ops) {
        if (op.type === "get") gets.push(this.#kvs.get(op.key));
        else if (op.type === "put") this.#put(op.key, op.value, op.lease ?? "0", revision);
        else this.#delete(op.key, revision);
      }
      this.revision = revision;
      return { succeeded: ok, revision, gets };
    });
  }

  async *watch(
    key: string,
    fromRevision: number,
    signal: AbortSignal,
  ): AsyncIterable<WatchEvent[]> {
    this.requests.push({ op: "watch", sentAtMs: this.#scheduler.monotonicMs() });
    if (this.mode === "down") throw new EtcdError("unavailable", "connection refused");
    const watcher: Watcher = {
      key,
      queue: [],
      wake: null,
      broken: null,
      silent: this.mode === "stall",
    };
    const past = this.#history.filter((h) => h.revision >= fromRevision && h.event.kv.key === key);
    if (past.length > 0 && !watcher.silent) watcher.queue.push(past.map((h) => h.event));
    this.#watchers.add(watcher);
    const onAbort = () => watcher.wake?.();
    signal.addEventListener("abort", onAbort);
    try {
      for (;;) {
        if (signal.aborted) return;
        if (watcher.broken) throw watcher.broken;
        const batch = watcher.queue.shift();
        if (batch !== undefined) {
          yield batch;
          continue;
        }
        await new Promise<void>((resolve) => (watcher.wake = resolve));
        watcher.wake = null;
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.#watchers.delete(watcher);
    }
  }

  health(): Promise<EndpointHealth[]> {
    return Promise.resolve(
      this.endpoints.map((endpoint) => ({ endpoint, healthy: this.mode === "up", tookMs: 0 })),
    );
  }

  close(): void {
    for (const w of this.#watchers) this.#break(w, "closed");
  }

  // ---- internals ---------------------------------------------------------------

  #request<T>(op: string, options: RequestOptions | undefined, process: () => T): Promise<T> {
    this.requests.push({ op, sentAtMs: this.#scheduler.monotonicMs() });
    const { promise, resolve, reject } = Promise.withResolvers<T>();
    let settled = false;
    const settle = (action: () => void) => {
      if (settled) return;
      settled = true;
      timeout?.cancel();
      action();
    };
    const timeout = options?.timeoutMs !== undefined
      ? this.#scheduler.setTimer(
        () => settle(() => reject(new EtcdError("unavailable", `${op}: timed out`))),
        options.timeoutMs,
      )
      : null;
    options?.signal?.addEventListener("abort", () => {
      settle(() => reject(new EtcdError("unavailable", `${op}: aborted`)));
    });
    const run = () => {
      if (settled) return;
      if (this.mode === "down") {
        settle(() => reject(new EtcdError("unavailable", `${op}: connection refused`)));
        return;
      }
      if (this.mode === "stall") {
        this.#stalled.push(run);
        return;
      }
      let answer: () => void;
      try {
        this.#expireDue();
        const result = process();
        answer = () => settle(() => resolve(result));
      } catch (error) {
        answer = () => settle(() => reject(error));
      }
      if (this.answerDelayMs > 0) this.#scheduler.setTimer(answer, this.answerDelayMs);
      else answer();
    };
    if (this.latencyMs > 0) this.#scheduler.setTimer(run, this.latencyMs);
    else run();
    return promise;
  }

  /** Leases past their expiry are gone whether or not their timer ran (etcd checks on renew). */
  #expireDue(): void {
    const now = this.#scheduler.monotonicMs();
    for (const [id, lease] of [...this.#leases]) {
      if (now >= lease.expiresAtMs) this.#revoke(id);
    }
  }

  #renew(id: string, lease: FakeLease): void {
    this.#arm(id, lease, lease.ttlS * 1000);
  }

  #arm(id: string, lease: FakeLease, inMs: number): void {
    lease.expiresAtMs = this.#scheduler.monotonicMs() + inMs;
    lease.timer?.cancel();
    lease.timer = this.#scheduler.setTimer(() => {
      if (this.#leases.get(id) === lease && this.#scheduler.monotonicMs() >= lease.expiresAtMs) {
        this.#revoke(id);
      }
    }, inMs);
  }

  #revoke(id: string): void {
    const lease = this.#leases.get(id);
    if (lease === undefined) return;
    this.#leases.delete(id);
    lease.timer?.cancel();
    if (lease.keys.size === 0) return;
    const revision = ++this.revision;
    for (const key of lease.keys) this.#delete(key, revision);
  }

  #put(key: string, value: string, lease: string, revision = ++this.revision): KeyValue {
    const before = this.#kvs.get(key);
    if (before !== undefined && before.lease !== "0") {
      this.#leases.get(before.lease)?.keys.delete(key);
    }
    const kv: KeyValue = {
      key,
      value,
      createRevision: before?.createRevision ?? revision,
      modRevision: revision,
      lease,
    };
    this.#kvs.set(key, kv);
    if (lease !== "0") this.#leases.get(lease)?.keys.add(key);
    this.#publish(revision, { type: "put", kv });
    return kv;
  }

  #delete(key: string, revision: number): void {
    const before = this.#kvs.get(key);
    if (before === undefined) return;
    this.#kvs.delete(key);
    if (before.lease !== "0") this.#leases.get(before.lease)?.keys.delete(key);
    this.#publish(revision, {
      type: "delete",
      kv: { key, value: "", createRevision: 0, modRevision: revision, lease: "0" },
    });
  }

  #publish(revision: number, event: WatchEvent): void {
    this.#history.push({ revision, event });
    for (const w of this.#watchers) {
      if (w.key !== event.kv.key || w.silent) continue;
      w.queue.push([event]);
      w.wake?.();
    }
  }

  #break(w: Watcher, why: string): void {
    w.broken = new EtcdError("unavailable", `watch: ${why}`);
    w.wake?.();
  }
}

/**
 * Lets every promise chain started so far settle: fake etcd answers are microtasks, and a
 * macrotask runs only once the microtask queue is empty.
 */
export async function settle(): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 0));
}
