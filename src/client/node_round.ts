/**
 * One round over the addresses of a client (the nodes of a cluster, or one server): dial them in
 * order, follow a NOT_LEADER as redirect.ts allows, start the next address beside an attempt that
 * stays silent, and resolve with the first WELCOME.
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import { WIRE_CODES } from "../wire/codes.ts";
import { Connection, final, isFinal } from "./connection.ts";
import { ConnectionError, LockdError, ServerProtocolError } from "./errors.ts";
import { nodeKey, redirectVerdict, refusedRedirectText } from "./redirect.ts";
import { reconnectDelayMs } from "./timing.ts";
import type { ClientTlsOptions, Dial } from "./transport.ts";

/** How many NOT_LEADER redirects one round over the addresses follows. */
const REDIRECTS_PER_ROUND_MAX = 3;
/**
 * With several addresses, how long a silent connect attempt runs alone before the next address
 * is tried beside it: a live node answers (or refuses) within milliseconds, a node holding the
 * HELLO for an election answers in seconds, a frozen one never.
 */
const NEXT_NODE_AFTER_MS = 1_000;

/**
 * One round over the addresses: `preferred` first (the node that last served, or the leader a
 * NOT_LEADER named), then the list in order; a NOT_LEADER naming a leader is followed at once,
 * as redirect.ts allows (a listed address; any valid one with TLS). Resolves with the first
 * WELCOME; rejects with the last failure. Never throws: every failure of a node is a value.
 */
export function openAny(
  settings: Settings,
  preferred: string | null,
  signal: AbortSignal | undefined,
  avoid: string | null = null,
): Promise<Opened> {
  const rest = settings.addrs.filter((a) => a !== preferred && a !== avoid);
  const order = [
    ...(preferred === null ? [] : [preferred]),
    ...rest,
    ...(avoid !== null && avoid !== preferred && settings.addrs.includes(avoid) ? [avoid] : []),
  ];
  return new Promise((resolve, reject) => {
    new NodeRound(settings, order, signal, resolve, reject).startNext();
  });
}

/** A round's outcome: the first connection welcomed, and the address it was dialled at. */
interface Opened {
  readonly connection: Connection;
  readonly addr: string;
}

/** One round's state: the addresses left, the attempts running, whether it has settled. */
class NodeRound {
  readonly #settings: Settings;
  /** The addresses still to try, in order; a followed redirect goes in front. */
  readonly #order: string[];
  readonly #signal: AbortSignal | undefined;
  readonly #resolve: (opened: Opened) => void;
  readonly #reject: (error: unknown) => void;
  readonly #tried = new Set<string>(); // node keys
  readonly #attempts = new Set<AbortController>();
  #redirects = 0;
  #lastError: unknown = null;
  /** A NOT_LEADER of this round that was not followed: the round fails with it. */
  #refused: unknown = null;
  #inFlight = 0;
  #settled = false;
  #stagger: Timer | null = null;

  constructor(
    settings: Settings,
    order: string[],
    signal: AbortSignal | undefined,
    resolve: (opened: Opened) => void,
    reject: (error: unknown) => void,
  ) {
    this.#settings = settings;
    this.#order = order;
    this.#signal = signal;
    this.#resolve = resolve;
    this.#reject = reject;
  }

  /** Dials the next address not tried yet, or, with none left and none running, fails. */
  startNext(): void {
    this.#stagger?.cancel();
    this.#stagger = null;
    if (this.#settled) return;
    const order = this.#order;
    while (order.length > 0 && this.#tried.has(nodeKey(order[0]))) order.shift();
    if (order.length === 0) {
      if (this.#inFlight === 0) this.#finish(this.#refused ?? this.#lastError);
      return;
    }
    const addr = order.shift()!;
    this.#tried.add(nodeKey(addr));
    this.#inFlight++;
    const attempt = new AbortController();
    this.#attempts.add(attempt);
    const signal = this.#signal;
    const onOuterAbort = () => attempt.abort(signal!.reason);
    signal?.addEventListener("abort", onOuterAbort, { once: true });
    const ended = () => {
      this.#inFlight--;
      this.#attempts.delete(attempt);
      signal?.removeEventListener("abort", onOuterAbort);
    };
    Connection.open({ ...this.#settings, addr, signal: attempt.signal }).then(
      (connection) => {
        ended();
        this.#welcomed(connection, addr);
      },
      (error) => {
        ended();
        this.#failed(addr, error);
      },
    );
    // A node that neither answers nor refuses (frozen, black-holed) must not hold the others
    // back: the next address starts in parallel; the first WELCOME wins.
    if (order.length > 0) {
      this.#stagger = this.#settings.scheduler.setTimer(() => this.startNext(), NEXT_NODE_AFTER_MS);
    }
  }

  /** The first WELCOME wins: the other attempts are called off; a later one is closed. */
  #welcomed(connection: Connection, addr: string): void {
    if (this.#settled) {
      connection.close();
      return;
    }
    this.#settled = true;
    this.#stagger?.cancel();
    for (const other of this.#attempts) other.abort(new ConnectionError("Another node answered"));
    this.#resolve({ connection, addr });
  }

  /** An attempt failed: the round ends if the caller gave up, else a redirect or the next. */
  #failed(addr: string, error: unknown): void {
    if (this.#settled) return;
    this.#lastError = error;
    const signal = this.#signal;
    if (signal?.aborted) {
      this.#settled = true;
      this.#stagger?.cancel();
      for (const other of this.#attempts) other.abort(signal.reason);
      this.#reject(error);
      return;
    }
    if (error instanceof LockdError && error.code === WIRE_CODES.NOT_LEADER.code) {
      this.#redirected(addr, error);
    }
    this.startNext();
  }

  /** A NOT_LEADER: its leader goes first if redirect.ts allows following it. */
  #redirected(addr: string, error: LockdError): void {
    const settings = this.#settings;
    const verdict = redirectVerdict(error.lockName, settings.addrs, settings.tls !== undefined);
    if (verdict.follow) {
      if (!this.#tried.has(nodeKey(verdict.addr)) && this.#redirects < REDIRECTS_PER_ROUND_MAX) {
        this.#redirects++;
        this.#order.unshift(verdict.addr);
      }
    } else if (verdict.why !== "no_leader") {
      // A redirect that is not followed: that node failed; the list goes on.
      // A configuration to fix, not a moment: a first connect ends with it.
      this.#lastError = final(
        verdict.why === "invalid"
          ? new ServerProtocolError(addr, refusedRedirectText(addr, error.lockName, "invalid"), {
            cause: error,
          })
          : new ConnectionError(
            `Cannot connect to lockd: ${refusedRedirectText(addr, error.lockName, "outside_list")}`,
            { cause: error },
          ),
      );
      this.#refused = this.#lastError;
    }
  }

  /** No address is left: the round fails with the last failure (named for a cluster). */
  #finish(error: unknown): void {
    const { addrs } = this.#settings;
    this.#settled = true;
    this.#stagger?.cancel();
    if (addrs.length > 1 && error instanceof Error && !this.#signal?.aborted) {
      const failure = new ConnectionError(
        `Cannot connect to any lockd node of ${addrs.join(", ")}: ${error.message}`,
        { cause: error },
      );
      this.#reject(isFinal(error) ? final(failure) : failure);
    } else {
      this.#reject(error);
    }
  }
}

/** What a client was configured with (connect() options, resolved). */
export interface Settings {
  readonly addrs: readonly string[];
  readonly clientName: string;
  readonly tls?: ClientTlsOptions;
  readonly reconnect: boolean;
  /** Carry claims over to a new leader after a fail-over (protocol version 2). */
  readonly reclaim: boolean;
  readonly timeoutMs: number;
  readonly signal?: AbortSignal;
  readonly onProtocolError?: (error: ServerProtocolError) => void;
  readonly scheduler: Scheduler;
  readonly dial: Dial;
  readonly random: () => number;
  readonly onReconnectFailed?: (attempt: number, error: Error) => void;
  readonly onValueDropped?: (name: string, valueBytes: number, valueBytesMax: number) => void;
}

/**
 * The first connect. One address: one round. Several (a cluster, maybe in the middle of a
 * fail-over, its standbys answering NOT_LEADER or nothing yet): rounds over them with full-jitter
 * back-off until `settings.timeoutMs` has passed, each attempt bounded by the time left; a
 * failure no retry mends ends it at once (connection.ts's `isFinal`).
 */
export async function openFirst(
  settings: Settings,
  signal: AbortSignal | undefined,
  onRetry: (error: unknown) => void = () => {},
): Promise<Opened> {
  if (settings.addrs.length === 1) return await openAny(settings, null, signal);
  const { scheduler } = settings;
  const endMs = scheduler.monotonicMs() + settings.timeoutMs;
  let informative: unknown = null;
  for (let attempt = 0;; attempt++) {
    const leftMs = endMs - scheduler.monotonicMs();
    try {
      return await openAny({ ...settings, timeoutMs: Math.max(1, leftMs) }, null, signal);
    } catch (error) {
      if (signal?.aborted || isFinal(error)) throw error;
      if (!/no WELCOME within/.test(String((error as Error)?.message))) informative = error;
      const delayMs = Math.min(
        reconnectDelayMs(attempt, settings.random),
        endMs - scheduler.monotonicMs(),
      );
      // What the nodes said is worth more than "no WELCOME in time".
      if (scheduler.monotonicMs() >= endMs - 1) throw informative ?? error;
      onRetry(error);
      await sleep(scheduler, Math.max(0, delayMs), signal);
      if (scheduler.monotonicMs() >= endMs - 1) throw informative ?? error;
    }
  }
}

/** Resolves after `delayMs` on `scheduler`, or rejects when `signal` aborts. */
function sleep(scheduler: Scheduler, delayMs: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      timer.cancel();
      reject(signal!.reason);
    };
    const timer = scheduler.setTimer(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, delayMs);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
