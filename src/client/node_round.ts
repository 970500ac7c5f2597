/**
 * One round over the addresses of a client (the nodes of a cluster, or one server): dial them in
 * order, follow a NOT_LEADER as redirect.ts allows, start the next address beside an attempt that
 * stays silent, and resolve with the first WELCOME.
 *
 * @module
 */

import type { Scheduler, Timer } from "../clock.ts";
import { WIRE_CODES } from "../wire/codes.ts";
import { Connection } from "./connection.ts";
import { ConnectionError, LockdError, ServerProtocolError } from "./errors.ts";
import { nodeKey, redirectVerdict, refusedRedirectText } from "./redirect.ts";
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
): Promise<{ connection: Connection; addr: string }> {
  const rest = settings.addrs.filter((a) => a !== preferred && a !== avoid);
  const order = [
    ...(preferred === null ? [] : [preferred]),
    ...rest,
    ...(avoid !== null && avoid !== preferred && settings.addrs.includes(avoid) ? [avoid] : []),
  ];
  const tried = new Set<string>(); // node keys
  let redirects = 0;
  let lastError: unknown = null;
  let inFlight = 0;
  let settled = false;
  let stagger: Timer | null = null;
  const attempts = new Set<AbortController>();
  return new Promise((resolve, reject) => {
    const finish = (error: unknown) => {
      settled = true;
      stagger?.cancel();
      if (settings.addrs.length > 1 && error instanceof Error && !signal?.aborted) {
        reject(
          new ConnectionError(
            `Cannot connect to any lockd node of ${settings.addrs.join(", ")}: ${error.message}`,
            { cause: error },
          ),
        );
      } else {
        reject(error);
      }
    };
    const startNext = () => {
      stagger?.cancel();
      stagger = null;
      if (settled) return;
      while (order.length > 0 && tried.has(nodeKey(order[0]))) order.shift();
      if (order.length === 0) {
        if (inFlight === 0) finish(lastError);
        return;
      }
      const addr = order.shift()!;
      tried.add(nodeKey(addr));
      inFlight++;
      const attempt = new AbortController();
      attempts.add(attempt);
      const onOuterAbort = () => attempt.abort(signal!.reason);
      signal?.addEventListener("abort", onOuterAbort, { once: true });
      Connection.open({ ...settings, addr, signal: attempt.signal }).then(
        (connection) => {
          inFlight--;
          attempts.delete(attempt);
          signal?.removeEventListener("abort", onOuterAbort);
          if (settled) {
            connection.close();
            return;
          }
          settled = true;
          stagger?.cancel();
          for (const other of attempts) other.abort(new ConnectionError("Another node answered"));
          resolve({ connection, addr });
        },
        (error) => {
          inFlight--;
          attempts.delete(attempt);
          signal?.removeEventListener("abort", onOuterAbort);
          if (settled) return;
          lastError = error;
          if (signal?.aborted) {
            settled = true;
            stagger?.cancel();
            for (const other of attempts) other.abort(signal.reason);
            reject(error);
            return;
          }
          if (error instanceof LockdError && error.code === WIRE_CODES.NOT_LEADER.code) {
            const verdict = redirectVerdict(
              error.lockName,
              settings.addrs,
              settings.tls !== undefined,
            );
            if (verdict.follow) {
              if (!tried.has(nodeKey(verdict.addr)) && redirects < REDIRECTS_PER_ROUND_MAX) {
                redirects++;
                order.unshift(verdict.addr);
              }
            } else if (verdict.why !== "no_leader") {
              // A redirect that is not followed: that node failed; the list goes on.
              lastError = verdict.why === "invalid"
                ? new ServerProtocolError(
                  addr,
                  refusedRedirectText(addr, error.lockName, "invalid"),
                  {
                    cause: error,
                  },
                )
                : new ConnectionError(
                  `Cannot connect to lockd: ${
                    refusedRedirectText(addr, error.lockName, "outside_list")
                  }`,
                  { cause: error },
                );
            }
          }
          startNext();
        },
      );
      // A node that neither answers nor refuses (frozen, black-holed) must not hold the others
      // back: the next address starts in parallel; the first WELCOME wins.
      if (order.length > 0) stagger = settings.scheduler.setTimer(startNext, NEXT_NODE_AFTER_MS);
    };
    startNext();
  });
}

/** What a client was configured with (connect() options, resolved). */
export interface Settings {
  readonly addrs: readonly string[];
  readonly clientName: string;
  readonly tls?: ClientTlsOptions;
  readonly reconnect: boolean;
  readonly timeoutMs: number;
  readonly signal?: AbortSignal;
  readonly onProtocolError?: (error: ServerProtocolError) => void;
  readonly scheduler: Scheduler;
  readonly dial: Dial;
  readonly random: () => number;
  readonly onReconnectFailed?: (attempt: number, error: Error) => void;
}
