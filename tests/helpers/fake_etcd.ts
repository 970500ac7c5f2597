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
 *
 * Each node talks to it through `client(link)`: a `FakeLink` gives that node's connection its
 * own faults (random per-request latency, lost requests and answers, delayed, silent or broken
 * watch streams) and decides when the node takes an answer (a frozen process takes nothing until
 * it runs again). Leases expire by the fake's own clock (the ManualScheduler), whatever the
 * clocks of the nodes say.
 */

import type { ManualScheduler, Scheduler } from "../../src/clock.ts";
import {
  type Compare,
  type EndpointHealth,
  type Etcd,
  EtcdError,
  type GetResult,
  type KeyValue,
  type RangeOptions,
  type RangeResult,
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

/**
 * One node's connection to the fake etcd, each hook consulted per request (all optional: the
 * default is a perfect link). Delays are counted on the fake's clock; a request that is lost, or
 * whose answer is lost, ends with the request's own timeout (counted on `scheduler`, the node's
 * clock) or never.
 */
export interface FakeLink {
  /** Delay before etcd sees the request (ms). */
  requestDelayMs?(op: string): number;
  /** Delay before the node sees the answer (ms). */
  answerDelayMs?(op: string): number;
  /** Lose the request: etcd never sees it. */
  dropRequest?(op: string): boolean;
  /** Lose the answer: etcd processed the request, the node never hears of it. */
  dropAnswer?(op: string): boolean;
  /** Delay of one watch batch (batches keep their order). */
  watchDelayMs?(): number;
  /** Lose one watch batch (a silent stream: a black-holed connection). */
  dropWatchBatch?(): boolean;
  /** Runs `take` when the node can take an answer: at once, later (a frozen process) or never. */
  deliver?(take: () => void): void;
  /** The node's scheduler, for the requests' timeouts (default: the fake's). */
  readonly scheduler?: Scheduler;
}

/** One node's connection: the Etcd interface, and a way to break its watch streams. */
export interface FakeClient extends Etcd {
  /** Ends every watch stream of this client with an error (a reset connection). */
  breakWatches(): void;
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
  /** Most operations per transaction branch (etcd's `--max-txn-ops`, 128 by default). */
  maxTxnOps = 128;
  /** Revisions below this are compacted away (`compact()`): reads at them fail. */
  compactedRevision = 0;
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

  /** Compacts the history up to `revision` (exclusive), like `etcdctl compaction`. */
  compact(revision = this.revision): void {
    this.compactedRevision = Math.max(this.compactedRevision, revision);
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

  /** When the lease expires on the fake's clock, or undefined when it does not exist. */
  leaseExpiresAtMs(id: string): number | undefined {
    return this.#leases.get(id)?.expiresAtMs;
  }

  count(op: string): number {
    return this.requests.filter((r) => r.op === op).length;
  }

  /**
   * One node's connection to this etcd: the same store, but its `close()` ends only the watch
   * streams it opened (several nodes share one fake etcd), and `link` gives it its own faults.
   */
  client(link?: FakeLink): FakeClient {
    const controllers = new Set<AbortController>();
    const broken = new Set<() => void>();
    const linked = <T>(
      op: string,
      options: RequestOptions | undefined,
      run: (options: RequestOptions | undefined) => Promise<T>,
    ): Promise<T> =>
      link === undefined ? run(options) : this.#linked(link, op, options, () => run(undefined));
    return {
      endpoints: this.endpoints,
      grantLease: (ttlS, options) => linked("grant", options, (o) => this.grantLease(ttlS, o)),
      keepAliveOnce: (id, options) =>
        linked("keepalive", options, (o) => this.keepAliveOnce(id, o)),
      revokeLease: (id, options) => linked("revoke", options, (o) => this.revokeLease(id, o)),
      get: (key, options) => linked("get", options, (o) => this.get(key, o)),
      range: (prefix, options) =>
        linked(
          "range",
          options,
          (o) => this.range(prefix, { ...options, signal: o?.signal, timeoutMs: o?.timeoutMs }),
        ),
      txn: (compare, success, failure, options) =>
        linked("txn", options, (o) => this.txn(compare, success, failure, o)),
      watch: (key, fromRevision, signal) => {
        const controller = new AbortController();
        controllers.add(controller);
        signal.addEventListener("abort", () => controller.abort());
        const stream = this.watch(key, fromRevision, controller.signal);
        return link === undefined ? stream : this.#linkedWatch(link, stream, controller, broken);
      },
      health: () => this.health(),
      breakWatches: () => {
        for (const breakIt of [...broken]) breakIt();
      },
      close: () => {
        for (const controller of controllers) controller.abort();
        controllers.clear();
      },
    };
  }

  /** A request over a faulty link: its own delays, losses, timeout and delivery. */
  #linked<T>(
    link: FakeLink,
    op: string,
    options: RequestOptions | undefined,
    run: () => Promise<T>,
  ): Promise<T> {
    const { promise, resolve, reject } = Promise.withResolvers<T>();
    const deliver = link.deliver ?? ((take: () => void) => take());
    let settled = false;
    const settle = (take: () => void) => {
      if (settled) return;
      settled = true;
      timeout?.cancel();
      deliver(take);
    };
    const timeout = options?.timeoutMs !== undefined
      ? (link.scheduler ?? this.#scheduler).setTimer(
        () => settle(() => reject(new EtcdError("unavailable", `${op}: timed out`))),
        options.timeoutMs,
      )
      : null;
    options?.signal?.addEventListener("abort", () => {
      settle(() => reject(new EtcdError("unavailable", `${op}: aborted`)));
    });
    const answer = (take: () => void) => {
      if (settled || link.dropAnswer?.(op)) return;
      const delayMs = link.answerDelayMs?.(op) ?? 0;
      if (delayMs > 0) this.#scheduler.setTimer(() => settle(take), delayMs);
      else settle(take);
    };
    const send = () => {
      if (settled) return;
      run().then(
        (value) => answer(() => resolve(value)),
        (error) => answer(() => reject(error)),
      );
    };
    if (link.dropRequest?.(op)) return promise;
    const delayMs = link.requestDelayMs?.(op) ?? 0;
    if (delayMs > 0) this.#scheduler.setTimer(send, delayMs);
    else send();
    return promise;
  }

  /** A watch stream over a faulty link: batches delayed in order, lost, or the stream broken. */
  async *#linkedWatch(
    link: FakeLink,
    stream: AsyncIterable<WatchEvent[]>,
    controller: AbortController,
    broken: Set<() => void>,
  ): AsyncIterable<WatchEvent[]> {
    const deliver = link.deliver ?? ((take: () => void) => take());
    type Item = { batch: WatchEvent[] } | { error: unknown } | { end: true };
    const ready: Item[] = [];
    let wake: (() => void) | null = null;
    let lastAtMs = -Infinity;
    let reset = false;
    const push = (item: Item, delayMs: number) => {
      // In order: never before the item sent ahead of it.
      const atMs = Math.max(lastAtMs, this.#scheduler.monotonicMs() + delayMs);
      lastAtMs = atMs;
      const take = () =>
        deliver(() => {
          ready.push(item);
          wake?.();
        });
      const inMs = atMs - this.#scheduler.monotonicMs();
      if (inMs > 0) this.#scheduler.setTimer(take, inMs);
      else take();
    };
    const breakIt = () => {
      if (reset) return;
      reset = true;
      push({ error: new EtcdError("unavailable", "watch: connection reset") }, 0);
      controller.abort();
    };
    broken.add(breakIt);
    const onAbort = () => wake?.();
    controller.signal.addEventListener("abort", onAbort);
    // Pump the stream into the link.
    (async () => {
      try {
        for await (const batch of stream) {
          if (reset) return;
          if (link.dropWatchBatch?.()) continue;
          push({ batch }, link.watchDelayMs?.() ?? 0);
        }
        if (!reset) push({ end: true }, 0);
      } catch (error) {
        if (!reset) push({ error }, 0);
      }
    })();
    try {
      for (;;) {
        // Stopped by the node: at once. Reset by the link: once the node takes the error.
        if (controller.signal.aborted && !reset) return;
        const item = ready.shift();
        if (item === undefined) {
          await new Promise<void>((resolve) => (wake = resolve));
          wake = null;
          continue;
        }
        if ("error" in item) throw item.error;
        if ("end" in item) return;
        yield item.batch;
      }
    } finally {
      broken.delete(breakIt);
      controller.signal.removeEventListener("abort", onAbort);
      controller.abort();
    }
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

  /**
   * A prefix read as etcd does it: keys in ascending UTF-8 byte order, `limit` per page, at the
   * newest revision or an older one rebuilt from the history (a compacted one fails).
   */
  range(prefix: string, options: RangeOptions = {}): Promise<RangeResult> {
    const { limit = 0, revision = 0, fromKey = prefix } = options;
    return this.#request("range", options, () => {
      if (prefix === "" || !fromKey.startsWith(prefix)) throw new RangeError("bad range");
      if (revision > this.revision) {
        throw new EtcdError("rejected", "etcdserver: mvcc: required revision is a future revision");
      }
      if (revision > 0 && revision < this.compactedRevision) {
        throw new EtcdError("compacted", "etcdserver: mvcc: required revision has been compacted");
      }
      const store = revision === 0 ? this.#kvs : this.#storeAt(revision);
      const from = encoder.encode(fromKey);
      const keys = [...store.values()]
        .filter((kv) => kv.key.startsWith(prefix))
        .map((kv) => ({ kv, bytes: encoder.encode(kv.key) }))
        .filter((k) => compareBytes(k.bytes, from) >= 0)
        .sort((a, b) => compareBytes(a.bytes, b.bytes));
      const page = limit > 0 ? keys.slice(0, limit) : keys;
      return {
        kvs: page.map((k) => k.kv),
        more: page.length < keys.length,
        revision: revision === 0 ? this.revision : revision,
      };
    });
  }

  txn(
    compare: readonly Compare[],
    success: readonly TxnOp[],
    failure: readonly TxnOp[],
    options?: RequestOptions,
  ): Promise<TxnResult> {
    return this.#request("txn", options, () => {
      for (const branch of [success, failure]) {
        if (branch.length > this.maxTxnOps) {
          throw new EtcdError("rejected", "etcdserver: too many operations in txn request");
        }
        const written = branch.filter((op) => op.type !== "get").map((op) => op.key);
        if (new Set(written).size !== written.length) {
          throw new EtcdError("rejected", "etcdserver: duplicate key given in txn request");
        }
      }
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

  /** The keys as they were at `revision`, replayed from the history. */
  #storeAt(revision: number): Map<string, KeyValue> {
    const store = new Map<string, KeyValue>();
    for (const h of this.#history) {
      if (h.revision > revision) break;
      if (h.event.type === "put") store.set(h.event.kv.key, h.event.kv);
      else store.delete(h.event.kv.key);
    }
    return store;
  }

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

const encoder = new TextEncoder();

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    if (a[i] !== b[i]) return a[i] - b[i];
  }
  return a.length - b.length;
}

/**
 * Lets every promise chain started so far settle: fake etcd answers are microtasks, and a
 * macrotask runs only once the microtask queue is empty.
 */
export async function settle(): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 0));
}
