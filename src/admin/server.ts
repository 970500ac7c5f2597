import { type HostPort, parseHostPort } from "../host_port.ts";
import { HostPolicy } from "../http/host_policy.ts";
import {
  type HttpLimits,
  type HttpListener,
  listenHttp,
  type RequestHead,
} from "../http/listen.ts";
import { problemResponse } from "../http/problem.ts";
import { createRouter } from "../http/router.ts";
import type { OperatorPort, ServerView } from "../server/view.ts";
import {
  ADMIN_EVENT_BUFFER_BYTES_MAX,
  ADMIN_EVENT_STREAMS_MAX,
  ADMIN_EVENTS_CHECK_MS,
  ADMIN_EVENTS_KEEPALIVE_MS_MAX,
  ADMIN_HISTORY_INTERVAL_MS,
  ADMIN_HISTORY_SNAPSHOTS_MAX,
} from "../limits.ts";
import { type AdminToken, hasValidAuthorization, hasValidToken } from "./auth.ts";
import { browserVerdict } from "./browser_policy.ts";
import { CONSOLE_ASSETS, consoleResponse } from "./console_assets.ts";
import { EventHub } from "./events.ts";
import { type AdminContext, notLeaderDetail } from "./handlers.ts";
import { StatsHistory } from "./history.ts";
import { ADMIN_ROUTES } from "./routes.ts";

export interface AdminServerOptions {
  readonly at: HostPort;
  readonly server: ServerView;
  /** The operator's actions (force-release, kick a waiter). */
  readonly operator: OperatorPort;
  /** Bound ops address for GET /api/info, null when the ops server is off. */
  readonly opsAddr: string | null;
  /** Required bearer token, null when `-admin-token-file` is not set. */
  readonly token: AdminToken | null;
  /** Canonical entries of `-admin-allowed-hosts` (see host_policy.ts). */
  readonly allowedHosts: readonly string[];
  readonly limits: HttpLimits;
  /** Serve the operator console at `/` (and answer its same-origin requests). */
  readonly console: boolean;
}

/**
 * Starts the admin API (`-admin-listen`). Every request is checked, in this
 * order, before it is routed:
 * 1. that its `Host` (and the authority of an absolute-form target) names this
 *    listener (421): a web page whose name was re-pointed at the listener's
 *    address (DNS rebinding) sends same-origin requests that only the Host
 *    header gives away (see host_policy.ts);
 * 2. the bearer token, when one is configured (401 + `WWW-Authenticate`);
 * 3. that it does not come from another web page (403): a browser on the
 *    operator's machine could otherwise POST a force-release to a loopback
 *    admin API without a token (cross-site request forgery). With the console
 *    on, the console's own same-origin requests pass; with it off, no web page
 *    does (browser_policy.ts).
 *
 * The console's files (`/`, `/ui/...`) hold no data and need no token (a
 * browser cannot attach one to a page load; the page asks for it and sends
 * it with every API request); they are answered to same-origin requests and
 * to top-level navigations from anywhere (a link in a runbook), never to
 * other pages' fetches or frames.
 */
export function startAdminServer(options: AdminServerOptions): HttpListener {
  const { server, token, limits } = options;
  const { scheduler, engine } = server;
  const router = createRouter(ADMIN_ROUTES);
  const events = new EventHub({
    engine,
    scheduler,
    checkMs: ADMIN_EVENTS_CHECK_MS,
    keepAliveMs: Math.min(ADMIN_EVENTS_KEEPALIVE_MS_MAX, Math.floor(limits.idleTimeoutMs / 3)),
    // Streams never end by themselves: they may take at most half of the connections, so with
    // -max-http-connections 1 there is none (requests would find no connection otherwise).
    streamsMax: Math.min(ADMIN_EVENT_STREAMS_MAX, Math.floor(limits.connectionsMax / 2)),
    connectionsMax: limits.connectionsMax,
    bufferBytesMax: ADMIN_EVENT_BUFFER_BYTES_MAX,
  });
  const history = new StatsHistory({
    stats: engine.stats,
    oldestQueuedAtMs: () => engine.oldestQueuedAtMs(),
    scheduler,
    startedAtMs: server.startedAtMonoMs,
    intervalMs: ADMIN_HISTORY_INTERVAL_MS,
    snapshotsMax: ADMIN_HISTORY_SNAPSHOTS_MAX,
  });
  history.onSnapshot = (snapshot) => events.snapshot(snapshot);
  // Set once the listener is bound (its address is part of the policy); no request comes earlier.
  const bound: { hosts?: HostPolicy } = {};
  const listenOptions = {
    name: "admin",
    limits: options.limits,
    counters: server.counters,
    // An operator with the token always finds a connection, even when every other one is busy.
    priority: (head: RequestHead) =>
      token !== null && hasValidAuthorization(head.fields.get("authorization") ?? null, token),
  } as const;
  const handle = adminHandler(options, bound, router, { history, events });
  const listener = listenHttp(
    options.at,
    listenOptions,
    async (request, remoteAddr) => withAnswerHeaders(await handle(request, remoteAddr)),
  );
  // Only now: a listener that could not start leaves no timer behind.
  history.start();
  bound.hosts = new HostPolicy({
    listenHost: options.at.hostname,
    boundHost: parseHostPort(listener.addr).hostname,
    allowedHosts: options.allowedHosts,
  });
  return {
    addr: listener.addr,
    async close() {
      // Event streams never end by themselves: end them first, or the HTTP server's shutdown
      // waits for them forever. New ones are refused from now on.
      events.close();
      history.stop();
      await listener.close();
    },
  };
}

/**
 * The admin listener's answer to one request, in the order of the checks above: Host, the
 * console's files, the token, the browser policy, the leader, then the route table.
 */
function adminHandler(
  options: AdminServerOptions,
  bound: { hosts?: HostPolicy },
  router: (request: Request, context: AdminContext) => Promise<Response>,
  live: { history: StatsHistory; events: EventHub },
): (request: Request, remoteAddr: string) => Promise<Response> {
  const { server, operator, opsAddr, token } = options;
  const { history, events } = live;
  return async (request, remoteAddr) => {
    if (!hostAllowed(request, bound.hosts!)) {
      // The Host is not echoed: a page must not get text of its choosing into an answer.
      return problemResponse(
        "host-not-allowed",
        "The request's Host (or target authority) is not an address of this listener, " +
          "localhost, or a name in -admin-allowed-hosts",
      );
    }
    const verdict = browserVerdict(request);
    const asset = options.console && (request.method === "GET" || request.method === "HEAD")
      ? CONSOLE_ASSETS.get(new URL(request.url).pathname)
      : undefined;
    if (asset !== undefined) {
      if (verdict === "foreign" && !isNavigation(request)) return crossOriginRefused();
      return request.method === "HEAD"
        ? withoutBody(consoleResponse(asset))
        : consoleResponse(asset);
    }
    if (token !== null && !(await hasValidToken(request, token))) {
      return problemResponse(
        "unauthorized",
        "The admin API requires the header Authorization: Bearer <token> with the token from " +
          "-admin-token-file",
        { "www-authenticate": 'Bearer realm="lockd-admin"' },
      );
    }
    if (verdict === "foreign" || (verdict === "same_origin" && !options.console)) {
      return crossOriginRefused();
    }
    const elsewhere = notHere(request, server);
    if (elsewhere !== null) return elsewhere;
    return await router(request, {
      server,
      operator,
      opsAddr,
      actor: { remote_addr: remoteAddr, auth: token === null ? "none" : "token" },
      history,
      events,
    });
  };
}

function crossOriginRefused(): Response {
  return problemResponse(
    "cross-origin-refused",
    "The admin API does not answer requests made by other web pages (Origin or Sec-Fetch-Site " +
      "header); with -admin-console=false it answers no web page",
  );
}

/** A top-level page load (link, bookmark, address bar), not a fetch or a frame of another page. */
function isNavigation(request: Request): boolean {
  return request.headers.get("sec-fetch-mode") === "navigate" &&
    request.headers.get("sec-fetch-dest") === "document";
}

function withoutBody(response: Response): Response {
  return new Response(null, { status: response.status, headers: response.headers });
}

/**
 * Cluster mode: a node that does not serve answers `/api/info` itself and sends every lock view
 * and action to the leader's admin API (307, method and body kept), or says that it is not the
 * leader (503 not-leader) when no leader admin address is known, or it is a paused leader.
 * Null when the request is for this node.
 */
function notHere(request: Request, server: ServerView): Response | null {
  const cluster = server.cluster;
  if (cluster === null || cluster.serving) return null;
  const url = new URL(request.url);
  if (url.pathname === "/api/info") return null;
  const leader = cluster.leader;
  const self = leader !== null && leader.name === cluster.node.name &&
    leader.advertise === cluster.node.advertise;
  if (leader !== null && !self && leader.admin !== null) {
    return new Response(null, {
      status: 307,
      headers: { location: `http://${leader.admin}${url.pathname}${url.search}` },
    });
  }
  return problemResponse("not-leader", notLeaderDetail(server), { "retry-after": "1" });
}

/**
 * Whether the request's Host names this listener. A request without a Host
 * header is answered: browsers always send one, so it cannot be a rebinding
 * page (HTTP/1.0 clients may omit it; the guard refuses HTTP/1.1 without
 * one). The URL's authority is checked too: it is the target of an
 * absolute-form request (`GET http://name/ HTTP/1.1`).
 */
function hostAllowed(request: Request, hosts: HostPolicy): boolean {
  const header = request.headers.get("host");
  if (header === null) return true;
  return hosts.allows(header) && hosts.allows(new URL(request.url).host);
}

/**
 * Every answer of the admin listener, whatever its status (401, 403, 421, 404, a redirect, an
 * event stream...): lock data is not for caches (a browser's disk cache, a proxy), whoever
 * asked, and no browser may guess another type than the one given. The console's files keep
 * their own `cache-control: no-cache` (they hold no data; always revalidated).
 */
function withAnswerHeaders(response: Response): Response {
  let headers = response.headers;
  try {
    headers.set("x-content-type-options", "nosniff");
  } catch {
    // Immutable headers (a Response.redirect): copy them into a new answer.
    headers = new Headers(response.headers);
    headers.set("x-content-type-options", "nosniff");
    response = new Response(response.body, { status: response.status, headers });
  }
  if (!headers.has("cache-control")) headers.set("cache-control", "no-store");
  return response;
}
