/**
 * Looking at locks without queueing (protocol version 2, issue 23): `client.query(name)`,
 * `client.observe(nameOrGlob)` and the SET_VALUE of `lock.setValue(value)`. The client hands
 * this module its current connection ({@link LookConnection}) after each WELCOME and every frame
 * that answers a look; everything else stays in client.ts.
 *
 * An observer's WATCH lives on one connection. When the connection ends the observer stays
 * open, and the client sends its WATCH again on the next connection, whose server answers with a
 * fresh snapshot: no revisions to track. A lock the observer knew of that is not in the new
 * snapshot (it ended meanwhile) is reported with a state of kind `none`, so the last state an
 * observer hands out per lock is always the server's. Like the server, an observer keeps at most
 * one state per lock waiting for its reader: a slow reader gets the latest state of each lock,
 * never an unbounded backlog.
 *
 * Requests of this module have their own expectations (which answers each may get, checked
 * here, with look_checks.ts); a frame that does not fit is a protocol error the client closes
 * the connection for.
 *
 * @module
 */

import { LEASE_MS_MIN, LOCK_NAME_BYTES_MAX } from "../limits.ts";
import { WIRE_CODES } from "../wire/codes.ts";
import { cutUtf8 } from "../wire/frame.ts";
import type {
  Acquired,
  ClientRequest,
  ErrorMessage,
  LockState as WireLockState,
  ValueSet,
  WatchEnded,
  Watching,
  Welcome,
} from "../wire/messages.ts";
import { ConnectionError, LockdError } from "./errors.ts";
import { lockStateMisfit, patternMayMatch } from "./look_checks.ts";
import { quoteUntrusted } from "./redirect.ts";
import {
  type LockEndReason,
  type LockHolder,
  type LockInfo,
  type Observation,
  type ObserveOptions,
  Observer,
} from "./observe.ts";

/** The client's current connection (its session), as this module sees it. */
export interface LookConnection {
  readonly connection: { readonly welcome: Welcome; send(message: ClientRequest): void };
  readonly addr: string;
}

/** A request of this module whose answer may still come. */
type Expected =
  | { readonly kind: "query"; readonly name: string; readonly query: PendingQuery }
  | {
    readonly kind: "set_value";
    readonly name: string;
    readonly value: Uint8Array;
    readonly done: (error: unknown) => void;
  }
  | { readonly kind: "watch"; readonly observer: Observer; snapshots: number; watching: boolean }
  | {
    readonly kind: "downgrade";
    readonly name: string;
    readonly token: number;
    readonly done: (error: unknown, grant?: Acquired) => void;
  };

interface PendingQuery {
  readonly name: string;
  readonly resolve: (state: LockInfo) => void;
  readonly reject: (error: unknown) => void;
  settled: boolean;
}

/** Codes that belong to an ownership or a wait: never the answer to a look. */
const NOT_LOOK_ANSWERS: ReadonlySet<number> = new Set([
  WIRE_CODES.LEASE_EXPIRED.code,
  WIRE_CODES.WAIT_TIMEOUT.code,
  WIRE_CODES.DUPLICATE_CLAIM.code,
  WIRE_CODES.CANCELLED.code,
  WIRE_CODES.CLAIM_VOID.code,
]);

/** The frames that answer looks. */
type LookReply = WireLockState | Watching | WatchEnded | ValueSet | ErrorMessage | Acquired;
const LOOK_REPLIES: ReadonlySet<string> = new Set([
  "acquired",
  "lock_state",
  "watching",
  "watch_ended",
  "value_set",
  "error",
]);

export class Looks {
  /** A request id no request of the current connection uses. */
  readonly #newRequestId: () => number;
  #connection: LookConnection | null = null;
  readonly #expected = new Map<number, Expected>();
  readonly #unsentQueries = new Set<PendingQuery>();
  readonly #observers = new Set<Observer>();
  #over: Error | null = null;

  constructor(newRequestId: () => number) {
    this.#newRequestId = newRequestId;
  }

  /** Whether `requestId` is a look of the current connection that may still get an answer. */
  has(requestId: number): boolean {
    return this.#expected.has(requestId);
  }

  query(name: string): Promise<LockInfo> {
    if (this.#over) return Promise.reject(this.#over);
    const unsendable = wireStrRefusal("a lock name", name);
    if (unsendable !== null) return Promise.reject(unsendable);
    return new Promise((resolve, reject) => {
      const query: PendingQuery = { name, resolve, reject, settled: false };
      this.#sendQuery(query);
    });
  }

  observe(pattern: string, options: ObserveOptions = {}): Observation {
    const observer = new Observer(pattern, (o) => this.#unobserve(o));
    const over = this.#over ?? wireStrRefusal("a pattern", pattern);
    if (over !== null) {
      observer.fail(over);
      return observer;
    }
    if (options.signal?.aborted) {
      observer.end();
      return observer;
    }
    const signal = options.signal;
    if (signal !== undefined) {
      const onAbort = () => void observer.close();
      signal.addEventListener("abort", onAbort, { once: true });
      observer.onDone = () => signal.removeEventListener("abort", onAbort);
    }
    this.#observers.add(observer);
    if (this.#connection !== null) this.#sendWatch(this.#connection, observer);
    return observer;
  }

  /** SET_VALUE of an ownership held on the current connection (lock_handle.ts checks that). */
  setValue(name: string, token: number, value: Uint8Array): Promise<void> {
    const connection = this.#connection;
    if (connection === null) {
      return Promise.reject(
        new ConnectionError(`Cannot set the value of lock "${name}": not connected; try again`),
      );
    }
    if (connection.connection.welcome.version < 2) {
      return Promise.reject(version1(connection, `set the value of lock "${name}"`, name));
    }
    const refusal = valueRefusal(
      connection.connection.welcome,
      connection.addr,
      "set the value of",
      name,
      value,
    );
    if (refusal !== null) return Promise.reject(refusal);
    return new Promise((resolve, reject) => {
      const requestId = this.#newRequestId();
      this.#expected.set(requestId, {
        kind: "set_value",
        name,
        value,
        done: (error) => error === null ? resolve() : reject(error),
      });
      connection.connection.send({ type: "set_value", requestId, token, name, value });
    });
  }

  /**
   * DOWNGRADE of an exclusive ownership held on the current connection (lock_handle.ts checks
   * that): resolves with the ACQUIRED that answers it (checked: the same ownership, now shared).
   */
  downgrade(name: string, token: number): Promise<Acquired> {
    const connection = this.#connection;
    if (connection === null) {
      return Promise.reject(
        new ConnectionError(`Cannot downgrade lock "${name}": not connected; try again`),
      );
    }
    if (connection.connection.welcome.version < 2) {
      return Promise.reject(version1(connection, `downgrade lock "${name}"`, name));
    }
    return new Promise((resolve, reject) => {
      const requestId = this.#newRequestId();
      this.#expected.set(requestId, {
        kind: "downgrade",
        name,
        token,
        done: (error, grant) => error === null ? resolve(grant!) : reject(error),
      });
      connection.connection.send({ type: "downgrade", requestId, token, name });
    });
  }

  /** A new connection is open (after its RESUME and RECLAIMs): queries and watches go out. */
  attached(connection: LookConnection): void {
    this.#connection = connection;
    const queries = [...this.#unsentQueries];
    this.#unsentQueries.clear();
    for (const query of queries) this.#sendQuery(query);
    for (const observer of [...this.#observers]) this.#sendWatch(connection, observer);
  }

  /**
   * The connection ended: queries wait for the next one, observers watch again there, a value
   * being set is unknown (a retryable error).
   */
  detached(): void {
    this.#connection = null;
    for (const expected of this.#expected.values()) {
      if (expected.kind === "query") this.#unsentQueries.add(expected.query);
      else if (expected.kind === "watch") expected.observer.connectionEnded();
      else {
        const action = expected.kind === "downgrade" ? "downgrade" : "set the value of";
        expected.done(
          new ConnectionError(
            `Cannot ${action} lock "${expected.name}": the connection ended first`,
          ),
        );
      }
    }
    this.#expected.clear();
  }

  /**
   * The client is closed (`observersFail` false: observers end quietly) or failed for good
   * (observers fail with `error`); queries waiting for a connection fail with `error` either way.
   */
  stop(error: Error, observersFail: boolean): void {
    this.detached();
    this.#over = error;
    for (const query of this.#unsentQueries) settle(query, error);
    this.#unsentQueries.clear();
    for (const observer of this.#observers) observersFail ? observer.fail(error) : observer.end();
    this.#observers.clear();
  }

  /**
   * A frame whose request id is a look's (`has(requestId)`): null when it fits, else what is
   * wrong (a protocol error: the client closes the connection).
   */
  accept(reply: { type: string; requestId: number }): string | null {
    const connection = this.#connection!;
    const expected = this.#expected.get(reply.requestId);
    const what = `${reply.type.toUpperCase()} for request ${reply.requestId}`;
    if (expected === undefined) {
      return `${what}, which this session never sent or had its last answer to`;
    }
    if (!LOOK_REPLIES.has(reply.type)) return `${what}, which is not an answer to a look`;
    const message = reply as LookReply;
    if (message.type === "error") return this.#error(what, message, expected);
    if (message.type === "acquired") {
      if (expected.kind !== "downgrade") return `${what}, which is not a DOWNGRADE`;
      const misfit = downgradeMisfit(message, expected, connection.connection.welcome);
      if (misfit !== null) return `${what} ${misfit}`;
      this.#expected.delete(message.requestId);
      expected.done(null, message);
      return null;
    }
    if (message.type === "value_set") {
      if (expected.kind !== "set_value") return `${what}, which is not a SET_VALUE`;
      if (message.name !== expected.name) return wrongName(what, message.name, expected.name);
      this.#expected.delete(message.requestId);
      expected.done(null);
      return null;
    }
    if (message.type === "lock_state") return this.#lockState(connection, what, message, expected);
    if (expected.kind !== "watch") return `${what}, which is not a WATCH`;
    if (message.type === "watching") {
      if (expected.watching) return `${what}, but WATCHING came already`;
      if (message.locks !== expected.snapshots) {
        return `${what} counting ${message.locks} snapshot(s), but ${expected.snapshots} came`;
      }
      expected.watching = true;
      expected.observer.watchingNow();
      return null;
    }
    // WATCH_ENDED: the answer to this client's UNWATCH (any reason), or the server's own end.
    this.#expected.delete(message.requestId);
    if (expected.observer.dropped) return null;
    if (message.reason === "unwatched") {
      return `${what} with reason unwatched, but no UNWATCH was sent`;
    }
    this.#observers.delete(expected.observer);
    const pattern = expected.observer.pattern;
    expected.observer.fail(
      message.reason === "too_many_locks"
        ? new LockdError(
          WIRE_CODES.LIMIT_EXCEEDED.code,
          pattern,
          `Cannot observe "${pattern}": it matches too many locks`,
        )
        : new LockdError(
          WIRE_CODES.INVALID_ARGUMENT.code,
          pattern,
          `Cannot observe "${pattern}": the server ended the watch (reason ${message.reason})`,
        ),
    );
    return null;
  }

  #lockState(
    connection: LookConnection,
    what: string,
    message: WireLockState,
    expected: Expected,
  ): string | null {
    if (expected.kind === "set_value" || expected.kind === "downgrade") {
      return `${what}, which is not a QUERY or WATCH`;
    }
    if (expected.kind === "query") {
      if (message.event !== "state") return `${what} with event ${message.event} for a QUERY`;
      if (message.name !== expected.name) return wrongName(what, message.name, expected.name);
    } else {
      if ((message.event === "state") === expected.watching) {
        return `${what} with event ${message.event} ${
          expected.watching ? "after" : "before"
        } WATCHING`;
      }
      if (!patternMayMatch(expected.observer.pattern, message.name)) {
        return `${what} names lock ${quoteUntrusted(message.name)}, which pattern ` +
          `${quoteUntrusted(expected.observer.pattern)} cannot match`;
      }
    }
    const misfit = lockStateMisfit(message, connection.connection.welcome.leaseMaxMs);
    if (misfit !== null) return `${what}: ${misfit}`;
    const state = toState(message);
    if (expected.kind === "query") {
      this.#expected.delete(message.requestId);
      settle(expected.query, null, state);
      return null;
    }
    if (!expected.watching) expected.snapshots++;
    return expected.observer.push(state);
  }

  #error(what: string, message: ErrorMessage, expected: Expected): string | null {
    const kind = expected.kind.toUpperCase();
    const codeText = `${what} with code ${message.code}`;
    if (
      NOT_LOOK_ANSWERS.has(message.code) ||
      (message.code === WIRE_CODES.NOT_OWNER.code &&
        (expected.kind === "query" || expected.kind === "watch"))
    ) {
      return `${codeText}: not an answer to a ${kind}`;
    }
    const error = new LockdError(message.code, message.name, message.message);
    if (expected.kind === "watch") {
      if (expected.watching) return `${codeText} for a WATCH after its WATCHING`;
      const pattern = expected.observer.pattern;
      if (message.name !== "" && !nameFits(message.name, pattern)) {
        return wrongName(what, message.name, pattern);
      }
      this.#expected.delete(message.requestId);
      this.#observers.delete(expected.observer);
      expected.observer.fail(error);
      return null;
    }
    if (!nameFits(message.name, expected.name)) return wrongName(what, message.name, expected.name);
    this.#expected.delete(message.requestId);
    if (expected.kind === "query") settle(expected.query, error);
    else expected.done(error);
    return null;
  }

  #sendQuery(query: PendingQuery): void {
    const connection = this.#connection;
    if (connection === null) {
      this.#unsentQueries.add(query);
      return;
    }
    if (connection.connection.welcome.version < 2) {
      settle(query, version1(connection, `query lock "${query.name}"`, query.name));
      return;
    }
    const requestId = this.#newRequestId();
    this.#expected.set(requestId, { kind: "query", name: query.name, query });
    connection.connection.send({ type: "query", requestId, name: query.name });
  }

  #sendWatch(connection: LookConnection, observer: Observer): void {
    if (connection.connection.welcome.version < 2) {
      this.#observers.delete(observer);
      observer.fail(version1(connection, `observe "${observer.pattern}"`, observer.pattern));
      return;
    }
    const requestId = this.#newRequestId();
    this.#expected.set(requestId, { kind: "watch", observer, snapshots: 0, watching: false });
    observer.watchSent(requestId);
    connection.connection.send({ type: "watch", requestId, pattern: observer.pattern });
  }

  #unobserve(observer: Observer): void {
    this.#observers.delete(observer);
    const requestId = observer.requestId;
    const expected = this.#expected.get(requestId);
    if (this.#connection === null || expected?.kind !== "watch" || expected.observer !== observer) {
      return;
    }
    // Whatever still comes for it is checked and dropped; WATCH_ENDED (unwatched) ends it.
    this.#expected.set(requestId, {
      kind: "watch",
      observer: Observer.dropping(observer.pattern),
      snapshots: expected.snapshots,
      watching: expected.watching,
    });
    this.#connection.connection.send({ type: "unwatch", requestId });
  }
}

/** Why a value cannot go to this connection's server, or null. */
export function valueRefusal(
  welcome: Welcome,
  addr: string,
  action: string,
  name: string,
  value: Uint8Array,
): LockdError | null {
  const max = welcome.valueBytesMax ?? 0;
  if (value.length === 0 || value.length <= max) return null;
  const message = welcome.version < 2 || max === 0
    ? `Cannot ${action} lock "${name}": lockd at ${addr} takes no lock values`
    : `Cannot ${action} lock "${name}": a value of ${value.length} bytes is longer than the ` +
      `server's ${max}`;
  return new LockdError(WIRE_CODES.INVALID_ARGUMENT.code, name, message);
}

/** A name or pattern the wire cannot carry (it is sent again on every reconnect), or null. */
function wireStrRefusal(what: string, text: unknown): Error | null {
  if (typeof text !== "string") return new TypeError(`${what} is a string, not ${typeof text}`);
  const bytes = new TextEncoder().encode(text).length;
  return bytes > 0xffff
    ? new RangeError(`${what} cannot be sent: ${bytes} bytes, above 65535`)
    : null;
}

/** What is wrong with the ACQUIRED answering a DOWNGRADE (the same ownership, now shared), or null. */
function downgradeMisfit(
  message: Acquired,
  asked: { readonly name: string; readonly token: number },
  welcome: Welcome,
): string | null {
  if (message.name !== asked.name) return wrongName("", message.name, asked.name).trim();
  if (message.token !== asked.token) {
    return `with token ${message.token}, but the DOWNGRADE named token ${asked.token}`;
  }
  if (!(message.leaseMs >= LEASE_MS_MIN && message.leaseMs <= welcome.leaseMaxMs)) {
    return `with a lease of ${message.leaseMs} ms`;
  }
  const { mode, limit = 1, slot = 0, writeGeneration = 0 } = message;
  if (mode !== "shared" || limit !== 1 || slot !== 0 || writeGeneration > message.token) {
    return `with mode ${mode}, limit ${limit}, slot ${slot} and write generation ` +
      `${writeGeneration}: not the ownership made shared`;
  }
  return null;
}

function version1(connection: LookConnection, what: string, name: string): LockdError {
  return new LockdError(
    WIRE_CODES.INVALID_ARGUMENT.code,
    name,
    `Cannot ${what}: it needs protocol version 2, and lockd at ${connection.addr} speaks version 1`,
  );
}

function settle(query: PendingQuery, error: unknown, state?: LockInfo): void {
  if (query.settled) return;
  query.settled = true;
  if (error === null) query.resolve(state!);
  else query.reject(error);
}

function nameFits(name: string, asked: string): boolean {
  return name === asked || (name !== "" && name === cutUtf8(asked, LOCK_NAME_BYTES_MAX));
}

function wrongName(what: string, name: string, asked: string): string {
  return `${what} names lock ${quoteUntrusted(name)}, but the request was for ${
    quoteUntrusted(asked)
  }`;
}

function toState(message: WireLockState): LockInfo {
  const holders = message.holders.map((h): LockHolder => ({
    token: h.token,
    heldMs: h.heldMs,
    leaseMs: h.leaseMs,
    mode: h.mode as LockHolder["mode"],
    slot: h.slot,
    identity: h.identity,
    clientName: h.clientName,
    value: h.value,
  }));
  return {
    name: message.name,
    kind: message.kind as LockInfo["kind"],
    limit: message.limit,
    queueLength: message.queueLength,
    owners: message.owners,
    holders,
    holder: holders[0] ?? null,
    event: message.event as LockInfo["event"],
    reason: message.reason === "none" ? null : message.reason as LockEndReason,
  };
}
