import { type HostPort, parseHostPort } from "../host_port.ts";
import { HostPolicy } from "../http/host_policy.ts";
import { type HttpLimits, type HttpListener, listenHttp } from "../http/listen.ts";
import { problemResponse } from "../http/problem.ts";
import { createRouter } from "../http/router.ts";
import type { ServerContext } from "../server.ts";
import { type AdminToken, hasValidToken } from "./auth.ts";
import { ADMIN_ROUTES } from "./routes.ts";

export interface AdminServerOptions {
  readonly at: HostPort;
  readonly server: ServerContext;
  /** Bound ops address for GET /api/info, null when the ops server is off. */
  readonly opsAddr: string | null;
  /** Required bearer token, null when `-admin-token-file` is not set. */
  readonly token: AdminToken | null;
  /** Canonical entries of `-admin-allowed-hosts` (see host_policy.ts). */
  readonly allowedHosts: readonly string[];
  readonly limits: HttpLimits;
}

/**
 * Starts the admin API (`-admin-listen`). Every request is checked, in this
 * order, before it is routed:
 * 1. that its `Host` (and the authority of an absolute-form target) names this
 *    listener (421): a web page whose name was re-pointed at the listener's
 *    address (DNS rebinding) sends same-origin requests that only the Host
 *    header gives away (see host_policy.ts);
 * 2. the bearer token, when one is configured (401 + `WWW-Authenticate`);
 * 3. that it does not come from a web page (403): a browser on the operator's
 *    machine could otherwise POST a force-release to a loopback admin API
 *    without a token (cross-site request forgery). Browsers mark such
 *    requests with `Origin` or `Sec-Fetch-Site`; curl, fetch in Deno and
 *    `lockd admin` send neither.
 */
export function startAdminServer(options: AdminServerOptions): HttpListener {
  const { server, opsAddr, token } = options;
  const router = createRouter(ADMIN_ROUTES);
  // Set once the listener is bound (its address is part of the policy); no request comes earlier.
  const bound: { hosts?: HostPolicy } = {};
  const listenOptions = {
    name: "admin",
    limits: options.limits,
    counters: server.counters,
  } as const;
  const listener = listenHttp(options.at, listenOptions, async (request, remoteAddr) => {
    const refusedHost = refusedHostOf(request, bound.hosts!);
    if (refusedHost !== null) {
      return problemResponse(
        "host-not-allowed",
        `Host "${refusedHost}" is not an address of this listener, localhost, or a name in ` +
          "-admin-allowed-hosts",
      );
    }
    if (token !== null && !(await hasValidToken(request, token))) {
      return problemResponse(
        "unauthorized",
        "The admin API requires the header Authorization: Bearer <token> with the token from " +
          "-admin-token-file",
        { "www-authenticate": 'Bearer realm="lockd-admin"' },
      );
    }
    const fetchSite = request.headers.get("sec-fetch-site");
    if (request.headers.has("origin") || (fetchSite !== null && fetchSite !== "none")) {
      return problemResponse(
        "cross-origin-refused",
        "The admin API does not answer requests made by web pages (Origin or Sec-Fetch-Site header)",
      );
    }
    return router(request, {
      server,
      opsAddr,
      actor: { remote_addr: remoteAddr, auth: token === null ? "none" : "token" },
    });
  });
  bound.hosts = new HostPolicy({
    listenHost: options.at.hostname,
    boundHost: parseHostPort(listener.addr).hostname,
    allowedHosts: options.allowedHosts,
  });
  return listener;
}

/**
 * The Host value a request is refused for, or null. A request without a Host
 * header is answered: browsers always send one, so it cannot be a rebinding
 * page (HTTP/1.0 clients may omit it; the guard refuses HTTP/1.1 without
 * one). The URL's authority is checked too: it is the target of an
 * absolute-form request (`GET http://name/ HTTP/1.1`).
 */
function refusedHostOf(request: Request, hosts: HostPolicy): string | null {
  const header = request.headers.get("host");
  if (header === null) return null;
  if (!hosts.allows(header)) return header;
  const authority = new URL(request.url).host;
  return hosts.allows(authority) ? null : authority;
}
