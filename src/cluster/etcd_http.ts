/**
 * The etcd adapter: speaks etcd's v3 API through the JSON gateway that every etcd 3.4+ member
 * serves on its client URL (`POST /v3/kv/range`, `/v3/kv/txn`, `/v3/lease/*`, `/v3/watch`), with
 * `fetch`. Why not the gRPC client (`npm:etcd3`): it needs environment access (grpc-js reads a
 * dozen `GRPC_*` variables and the proxy variables, so the server would need `--allow-env` and its
 * etcd traffic could silently follow an `https_proxy`), and this way every keep-alive is one
 * request whose answer confirms exactly that send.
 *
 * Endpoints are used one at a time; a request that gets no answer moves the client to the next
 * endpoint for the requests after it (the failed request is not retried here: the callers know
 * whether a retry is safe and when it is due). This is the one file that knows etcd's JSON and
 * error codes.
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
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
} from "./etcd.ts";
import { errorText } from "../error_text.ts";

/** PEM texts for TLS to etcd: the CA that signed etcd's certificates, and a client pair. */
export interface EtcdTls {
  readonly caCert?: string;
  readonly cert?: string;
  readonly key?: string;
}

export interface EtcdHttpOptions {
  /** `http://host:port` or `https://host:port`, one per etcd member. */
  readonly endpoints: readonly string[];
  readonly tls?: EtcdTls;
  /** Default time a request may take before it counts as unanswered. */
  readonly requestTimeoutMs: number;
  /** Called after every request (not watches) with its operation, duration and outcome. */
  readonly observe?: (op: EtcdOp, seconds: number, ok: boolean) => void;
  /** The clock and timers of request deadlines and of the durations measured (the server's). */
  readonly scheduler: Scheduler;
}

/** Operation names, as used in the `op` label of the etcd latency metric. */
export const ETCD_OPS = ["grant", "keepalive", "revoke", "get", "txn"] as const;
export type EtcdOp = typeof ETCD_OPS[number];

// gRPC status codes etcd answers with (google.golang.org/grpc/codes).
const GRPC_NOT_FOUND = 5;
const GRPC_OUT_OF_RANGE = 11;
const GRPC_CANCELED = 1;
const GRPC_DEADLINE_EXCEEDED = 4;
const GRPC_RESOURCE_EXHAUSTED = 8;
const GRPC_UNAVAILABLE = 14;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function b64(text: string): string {
  let binary = "";
  for (const byte of encoder.encode(text)) binary += String.fromCharCode(byte);
  return btoa(binary);
}

function b64Bytes(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

/**
 * The `range_end` of a prefix read: the prefix's UTF-8 bytes with the last byte below 0xff
 * incremented and the bytes after it dropped (etcd's `clientv3.GetPrefixRangeEnd`); all 0xff
 * (never for a UTF-8 prefix) gives "\0", every key from the prefix on.
 */
export function prefixRangeEnd(prefix: string): Uint8Array {
  const bytes = encoder.encode(prefix);
  for (let i = bytes.length - 1; i >= 0; i--) {
    if (bytes[i] < 0xff) {
      const end = bytes.slice(0, i + 1);
      end[i]++;
      return end;
    }
  }
  return new Uint8Array([0]);
}

function unb64(text: string | undefined): string {
  if (!text) return "";
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return decoder.decode(bytes);
}

function num(value: unknown): number {
  return value === undefined || value === null ? 0 : Number(value);
}

// deno-lint-ignore no-explicit-any
type Json = any;

function keyValue(kv: Json): KeyValue {
  return {
    key: unb64(kv.key),
    value: unb64(kv.value),
    createRevision: num(kv.create_revision),
    modRevision: num(kv.mod_revision),
    lease: kv.lease === undefined ? "0" : String(kv.lease),
  };
}

function compareJson(c: Compare): Json {
  return c.target === "create"
    ? { key: b64(c.key), target: "CREATE", result: "EQUAL", create_revision: String(c.revision) }
    : { key: b64(c.key), target: "MOD", result: "EQUAL", mod_revision: String(c.revision) };
}

function opJson(op: TxnOp): Json {
  switch (op.type) {
    case "put":
      return {
        request_put: {
          key: b64(op.key),
          value: b64(op.value),
          ...(op.lease !== undefined && op.lease !== "0" ? { lease: op.lease } : {}),
        },
      };
    case "delete":
      return { request_delete_range: { key: b64(op.key) } };
    case "get":
      return { request_range: { key: b64(op.key) } };
  }
}

/** Maps an etcd error body (`{error, code, message}`) to an EtcdError. */
function errorOf(body: Json, endpoint: string, status: number): EtcdError {
  const code = num(body?.code);
  const message = String(body?.message ?? body?.error ?? `HTTP ${status}`);
  if (code === GRPC_NOT_FOUND && /lease not found/.test(message)) {
    return new EtcdError("lease_not_found", message, endpoint);
  }
  if (code === GRPC_OUT_OF_RANGE && /compacted/.test(message)) {
    return new EtcdError("compacted", message, endpoint);
  }
  if (
    code === GRPC_UNAVAILABLE || code === GRPC_DEADLINE_EXCEEDED || code === GRPC_CANCELED ||
    code === GRPC_RESOURCE_EXHAUSTED || status >= 500 && code === 0
  ) {
    return new EtcdError("unavailable", `${endpoint}: ${message}`, endpoint);
  }
  return new EtcdError("rejected", `${endpoint}: ${message}`, endpoint);
}

export class EtcdHttpClient implements Etcd {
  readonly endpoints: readonly string[];
  readonly #client: Deno.HttpClient;
  readonly #timeoutMs: number;
  readonly #scheduler: Scheduler;
  /** Timers of requests in flight (#deadline), cancelled by close(). */
  readonly #deadlineTimers = new Set<Timer>();
  readonly #observe: EtcdHttpOptions["observe"];
  #current = 0;
  readonly #closing = new AbortController();

  constructor(options: EtcdHttpOptions) {
    if (options.endpoints.length === 0) throw new RangeError("No etcd endpoint given");
    this.endpoints = options.endpoints.map((e) => e.replace(/\/+$/, ""));
    const tls = options.tls ?? {};
    this.#client = Deno.createHttpClient({
      ...(tls.caCert !== undefined ? { caCerts: [tls.caCert] } : {}),
      ...(tls.cert !== undefined && tls.key !== undefined ? { cert: tls.cert, key: tls.key } : {}),
    });
    this.#timeoutMs = options.requestTimeoutMs;
    this.#observe = options.observe;
    this.#scheduler = options.scheduler;
  }

  /** The endpoint requests go to now. */
  get currentEndpoint(): string {
    return this.endpoints[this.#current];
  }

  async grantLease(ttlS: number, options?: RequestOptions): Promise<{ id: string; ttlS: number }> {
    const r = await this.#call("grant", "/v3/lease/grant", { TTL: String(ttlS) }, options);
    if (r.error) throw new EtcdError("rejected", String(r.error));
    return { id: String(r.ID), ttlS: num(r.TTL) };
  }

  async keepAliveOnce(id: string, options?: RequestOptions): Promise<number> {
    // A bidirectional stream on the gateway: one JSON request in, one `{"result": ...}` out.
    const r = await this.#call("keepalive", "/v3/lease/keepalive", { ID: id }, options);
    if (r.error) throw errorOf(r.error, this.currentEndpoint, 200);
    return Math.max(0, num(r.result?.TTL));
  }

  async revokeLease(id: string, options?: RequestOptions): Promise<void> {
    try {
      await this.#call("revoke", "/v3/lease/revoke", { ID: id }, options);
    } catch (error) {
      if (error instanceof EtcdError && error.kind === "lease_not_found") return;
      throw error;
    }
  }

  async get(key: string, options?: RequestOptions): Promise<GetResult> {
    const r = await this.#call("get", "/v3/kv/range", { key: b64(key) }, options);
    return { kv: r.kvs?.[0] ? keyValue(r.kvs[0]) : undefined, revision: num(r.header?.revision) };
  }

  /**
   * One page of a prefix read through `/v3/kv/range` (observed as a `get`: the metric's `op`
   * label keeps its documented values). Keys come sorted ascending by bytes, etcd's default.
   */
  async range(prefix: string, options?: RangeOptions): Promise<RangeResult> {
    if (prefix === "") throw new RangeError("Cannot read an empty prefix (every key)");
    const fromKey = options?.fromKey ?? prefix;
    if (!fromKey.startsWith(prefix)) {
      throw new RangeError(`The start key "${fromKey}" is not under the prefix "${prefix}"`);
    }
    const limit = options?.limit ?? 0;
    const revision = options?.revision ?? 0;
    if (!Number.isSafeInteger(limit) || limit < 0) throw new RangeError(`Invalid limit ${limit}`);
    if (!Number.isSafeInteger(revision) || revision < 0) {
      throw new RangeError(`Invalid revision ${revision}`);
    }
    const r = await this.#call("get", "/v3/kv/range", {
      key: b64(fromKey),
      range_end: b64Bytes(prefixRangeEnd(prefix)),
      ...(limit > 0 ? { limit: String(limit) } : {}),
      ...(revision > 0 ? { revision: String(revision) } : {}),
    }, options);
    return {
      kvs: (r.kvs ?? []).map(keyValue),
      more: r.more === true,
      revision: num(r.header?.revision),
    };
  }

  async txn(
    compare: readonly Compare[],
    success: readonly TxnOp[],
    failure: readonly TxnOp[],
    options?: RequestOptions,
  ): Promise<TxnResult> {
    const r = await this.#call("txn", "/v3/kv/txn", {
      compare: compare.map(compareJson),
      success: success.map(opJson),
      failure: failure.map(opJson),
    }, options);
    const succeeded = r.succeeded === true;
    const ops = succeeded ? success : failure;
    const gets: (KeyValue | undefined)[] = [];
    ops.forEach((op, i) => {
      if (op.type !== "get") return;
      const kv = r.responses?.[i]?.response_range?.kvs?.[0];
      gets.push(kv ? keyValue(kv) : undefined);
    });
    return { succeeded, revision: num(r.header?.revision), gets };
  }

  async *watch(
    key: string,
    fromRevision: number,
    signal: AbortSignal,
  ): AsyncIterable<WatchEvent[]> {
    const endpoint = this.currentEndpoint;
    const both = AbortSignal.any([signal, this.#closing.signal]);
    let response: Response;
    try {
      response = await fetch(`${endpoint}/v3/watch`, {
        method: "POST",
        body: JSON.stringify({
          create_request: { key: b64(key), start_revision: String(fromRevision) },
        }),
        client: this.#client,
        signal: both,
      });
    } catch (error) {
      if (signal.aborted) return;
      this.#rotate(endpoint);
      throw new EtcdError("unavailable", `${endpoint}: ${messageOf(error)}`, endpoint);
    }
    if (!response.ok || response.body === null) {
      const body = await response.json().catch(() => ({}));
      throw errorOf(body, endpoint, response.status);
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let rest = "";
    try {
      for (;;) {
        let chunk: ReadableStreamReadResult<string>;
        try {
          chunk = await reader.read();
        } catch (error) {
          if (signal.aborted) return;
          this.#rotate(endpoint);
          throw new EtcdError("unavailable", `${endpoint}: watch: ${messageOf(error)}`, endpoint);
        }
        if (chunk.done) {
          if (signal.aborted) return;
          throw new EtcdError("unavailable", `${endpoint}: the watch stream ended`, endpoint);
        }
        rest += chunk.value;
        let newline: number;
        while ((newline = rest.indexOf("\n")) !== -1) {
          const line = rest.slice(0, newline).trim();
          rest = rest.slice(newline + 1);
          if (line === "") continue;
          const events = watchEvents(JSON.parse(line), endpoint, fromRevision);
          if (events.length > 0) yield events;
        }
      }
    } finally {
      await reader.cancel().catch(() => {});
    }
  }

  async health(options?: RequestOptions): Promise<EndpointHealth[]> {
    const timeoutMs = options?.timeoutMs ?? this.#timeoutMs;
    return await Promise.all(this.endpoints.map(async (endpoint) => {
      const startMs = this.#scheduler.monotonicMs();
      const deadline = this.#deadline(options?.signal, timeoutMs);
      try {
        const response = await fetch(`${endpoint}/health`, {
          client: this.#client,
          signal: deadline.signal,
        });
        const body = await response.json();
        const healthy = response.ok && body.health === "true";
        return {
          endpoint,
          healthy,
          tookMs: this.#scheduler.monotonicMs() - startMs,
          ...(healthy ? {} : { error: body.reason ?? `HTTP ${response.status}` }),
        };
      } catch (error) {
        return {
          endpoint,
          healthy: false,
          tookMs: this.#scheduler.monotonicMs() - startMs,
          error: messageOf(error),
        };
      } finally {
        deadline.done();
      }
    }));
  }

  /** Aborts every request and watch in flight and releases the connection pool. Idempotent. */
  close(): void {
    if (this.#closing.signal.aborted) return;
    this.#closing.abort();
    // Requests nobody awaits (a revoke at step-down) settle later: their timers go now.
    for (const timer of this.#deadlineTimers) timer.cancel();
    this.#deadlineTimers.clear();
    this.#client.close();
  }

  /**
   * A signal that aborts after `timeoutMs` on the scheduler, on close() or with the caller's;
   * `done()` cancels the timer (AbortSignal.timeout would leave one running after every quick
   * answer, and would not follow a manual clock).
   */
  #deadline(
    signal: AbortSignal | undefined,
    timeoutMs: number,
  ): { signal: AbortSignal; done: () => void } {
    const timeout = new AbortController();
    const timer = this.#scheduler.setTimer(() => {
      this.#deadlineTimers.delete(timer);
      timeout.abort(new DOMException("timed out", "TimeoutError"));
    }, timeoutMs);
    this.#deadlineTimers.add(timer);
    const signals = [timeout.signal, this.#closing.signal];
    if (signal !== undefined) signals.push(signal);
    return {
      signal: AbortSignal.any(signals),
      done: () => {
        timer.cancel();
        this.#deadlineTimers.delete(timer);
      },
    };
  }

  /** Moves later requests to the next endpoint, unless another failure already did. */
  #rotate(failed: string): void {
    if (this.endpoints[this.#current] === failed) {
      this.#current = (this.#current + 1) % this.endpoints.length;
    }
  }

  async #call(op: EtcdOp, path: string, body: Json, options?: RequestOptions): Promise<Json> {
    const endpoint = this.currentEndpoint;
    const startMs = this.#scheduler.monotonicMs();
    const deadline = this.#deadline(options?.signal, options?.timeoutMs ?? this.#timeoutMs);
    let ok = false;
    try {
      let response: Response;
      let text: string;
      try {
        response = await fetch(endpoint + path, {
          method: "POST",
          body: JSON.stringify(body),
          client: this.#client,
          signal: deadline.signal,
        });
        text = await response.text();
      } catch (error) {
        this.#rotate(endpoint);
        throw new EtcdError("unavailable", `${endpoint}: ${op}: ${messageOf(error)}`, endpoint);
      }
      let json: Json;
      try {
        json = JSON.parse(text);
      } catch {
        this.#rotate(endpoint);
        throw new EtcdError(
          "unavailable",
          `${endpoint}: ${op}: not JSON (HTTP ${response.status}): ${text.slice(0, 200)}`,
          endpoint,
        );
      }
      if (!response.ok) {
        const error = errorOf(json, endpoint, response.status);
        if (error.kind === "unavailable") this.#rotate(endpoint);
        throw error;
      }
      ok = true;
      return json;
    } finally {
      deadline.done();
      this.#observe?.(op, (this.#scheduler.monotonicMs() - startMs) / 1000, ok);
    }
  }
}

function messageOf(error: unknown): string {
  if (error instanceof DOMException && error.name === "TimeoutError") return "timed out";
  if (error instanceof DOMException && error.name === "AbortError") return "aborted";
  return errorText(error);
}

/** The events of one message of a watch stream; its error, compaction or cancel thrown. */
function watchEvents(message: Json, endpoint: string, fromRevision: number): WatchEvent[] {
  if (message.error) throw errorOf(message.error, endpoint, 200);
  const result = message.result ?? {};
  if (num(result.compact_revision) > 0) {
    throw new EtcdError(
      "compacted",
      `${endpoint}: revision ${fromRevision} was compacted (now ${result.compact_revision})`,
      endpoint,
    );
  }
  if (result.canceled) {
    throw new EtcdError(
      "unavailable",
      `${endpoint}: the watch was cancelled: ${result.cancel_reason ?? "no reason given"}`,
      endpoint,
    );
  }
  return (result.events ?? []).map((e: Json) => ({
    type: e.type === "DELETE" ? "delete" : "put",
    kv: keyValue(e.kv),
  }));
}
