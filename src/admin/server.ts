import type { HostPort } from "../host_port.ts";
import { type HttpListener, listenHttp } from "../http/listen.ts";
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
}

/**
 * Starts the admin API (`-admin-listen`). Every request is checked, in this
 * order, before it is routed:
 * 1. the bearer token, when one is configured (401 + `WWW-Authenticate`);
 * 2. that it does not come from a web page (403): a browser on the operator's
 *    machine could otherwise POST a force-release to a loopback admin API
 *    without a token (cross-site request forgery). Browsers mark such
 *    requests with `Origin` or `Sec-Fetch-Site`; curl, fetch in Deno and
 *    `lockd admin` send neither.
 */
export function startAdminServer(options: AdminServerOptions): HttpListener {
  const { server, opsAddr, token } = options;
  const router = createRouter(ADMIN_ROUTES);
  return listenHttp(options.at, "admin", async (request, remoteAddr) => {
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
}
