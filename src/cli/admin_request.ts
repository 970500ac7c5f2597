/**
 * How `lockd admin` asks the admin API: one address after the other (a cluster's nodes), a 307
 * followed only within `-admin` (the bearer token never leaves the hosts the operator named), and
 * a timeout on each request.
 *
 * @module
 */

import type { Scheduler } from "../clock.ts";
import { ADMIN_REQUEST_TIMEOUT_MS, ADMIN_WAIT_RETRY_MS } from "../limits.ts";
import { describeFetchError } from "./http_errors.ts";

/** An admin API request: method and path. */
export interface AdminRequest {
  readonly method: "GET" | "POST" | "DELETE";
  readonly path: string;
}

/**
 * One answer of the admin API, or why there was none; a `final` failure is not handed over to
 * the next address.
 */
export type Reply = Answer | { failure: string; final?: boolean };

/** An answer of the admin API (any status). */
export interface Answer {
  status: number;
  statusText: string;
  contentType: string;
  body: string;
}

/**
 * Asks the admin API, one address after the other (the one that answered last first). A cluster
 * standby answers lock views and actions with 307 to the leader's admin API: followed here, not
 * by fetch, so the token goes along (fetch drops Authorization on a redirect to another origin),
 * but only to an address of the -admin list: a redirect elsewhere is refused, and the token
 * never leaves the hosts the operator named. A node that cannot be reached, or says it is not
 * the leader (503), hands over to the next address.
 */
export function adminRequester(
  io: { readonly fetch: typeof fetch; readonly scheduler: Scheduler },
  adminAddrs: readonly string[],
  baseUrls: readonly string[],
  { method, path }: AdminRequest,
  headers: Record<string, string>,
): () => Promise<Reply> {
  const listed = new Set(baseUrls.map((base) => new URL(base).origin));
  let current = 0;

  const requestOne = async (url: string, addr: string, redirects = 0): Promise<Reply> => {
    const controller = new AbortController();
    const timer = io.scheduler.setTimer(() => controller.abort(), ADMIN_REQUEST_TIMEOUT_MS);
    try {
      const response = await io.fetch(url, {
        method,
        headers,
        signal: controller.signal,
        redirect: "manual",
      });
      const location = response.headers.get("location");
      if (response.status === 307 && location !== null && redirects < 2) {
        await response.body?.cancel();
        timer.cancel();
        const target = URL.canParse(location, url) ? new URL(location, url) : null;
        if (target === null || !listed.has(target.origin)) {
          return { failure: refusedRedirectText(addr, location, target, adminAddrs), final: true };
        }
        return await requestOne(target.href, target.host, redirects + 1);
      }
      return {
        status: response.status,
        statusText: response.statusText,
        contentType: response.headers.get("content-type") ?? "",
        body: await response.text(),
      };
    } catch (error) {
      const target = {
        what: "the admin API",
        addr,
        clientFlag: "-admin",
        serverFlag: "-admin-listen",
      };
      const cause = controller.signal.aborted ? new DOMException("timeout", "TimeoutError") : error;
      return { failure: describeFetchError(cause, target, ADMIN_REQUEST_TIMEOUT_MS) };
    } finally {
      timer.cancel();
    }
  };

  return async () => {
    let reply: Reply | null = null;
    for (let i = 0; i < baseUrls.length; i++) {
      const index = (current + i) % baseUrls.length;
      reply = await requestOne(baseUrls[index] + path, adminAddrs[index]);
      const tryNext = "failure" in reply
        ? reply.final !== true
        : reply.status === 503 && /not-leader/.test(reply.body);
      if (!tryNext) {
        current = index;
        return reply;
      }
    }
    return reply!;
  };
}

/** Why a 307 was not followed: its target is not an address of -admin (or not a URL at all). */
function refusedRedirectText(
  from: string,
  location: string,
  target: URL | null,
  adminAddrs: readonly string[],
): string {
  const shown = JSON.stringify(location.slice(0, 200));
  if (target === null) {
    return `the admin API at ${from} redirected (307) to ${shown}, which is not a URL; not followed`;
  }
  const where = target.protocol === "http:" ? target.host : target.origin;
  return `the admin API at ${from} redirected (307) to ${where} (${shown}), which is not in ` +
    `-admin: not followed, so the admin token is not sent there. If ${where} is the admin ` +
    `API of a node of your cluster, add it: -admin ${[...adminAddrs, where].join(",")}`;
}

/**
 * `request`, asked again (every ADMIN_WAIT_RETRY_MS) until `waitMs` has passed while no node
 * answers for the leader (none reachable, or every one a standby without a leader yet: 503
 * `not-leader`), so that `lockd admin` run during a fail-over is held rather than refused. A
 * failure no retry mends (a redirect outside -admin) ends it at once.
 */
export function retryWhileNoLeader(
  scheduler: Scheduler,
  waitMs: number,
  request: () => Promise<Reply>,
): () => Promise<Reply> {
  return async () => {
    const endMs = scheduler.monotonicMs() + waitMs;
    for (;;) {
      const reply = await request();
      const again = "failure" in reply
        ? reply.final !== true
        : reply.status === 503 && /not-leader/.test(reply.body);
      const leftMs = endMs - scheduler.monotonicMs();
      if (!again || leftMs <= 0) return reply;
      await new Promise<void>((resolve) =>
        scheduler.setTimer(resolve, Math.min(ADMIN_WAIT_RETRY_MS, leftMs))
      );
    }
  };
}
