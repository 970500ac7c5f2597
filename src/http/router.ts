import { log } from "../log/diagnostic.ts";
import { problemResponse } from "./problem.ts";
import { errorStackText } from "../error_text.ts";

const logger = log("http");

/** What a handler gets besides the request: the pattern's groups (still percent-encoded) and per-server context. */
export interface RouteMatch<C> {
  /** Named groups of the matched pattern, exactly as in the URL (percent-encoded). */
  readonly params: Readonly<Record<string, string>>;
  readonly url: URL;
  readonly context: C;
}

/** A route handler: a plain function of the request. */
export type RouteHandler<C> = (
  request: Request,
  match: RouteMatch<C>,
) => Response | Promise<Response>;

/** One row of a route table. */
export interface Route<C> {
  readonly method: "GET" | "POST" | "PUT" | "DELETE";
  readonly pattern: URLPattern;
  readonly handler: RouteHandler<C>;
}

/** Shorthand for a route row with a pathname pattern. */
export function route<C>(
  method: Route<C>["method"],
  pathname: string,
  handler: RouteHandler<C>,
): Route<C> {
  return { method, pattern: new URLPattern({ pathname }), handler };
}

/**
 * Dispatches requests over a route table. It tells an unknown path (404)
 * from a known path with another method (405 with `Allow`); HEAD is served
 * by the GET route without a body. Anything a handler throws becomes a 500
 * problem that says "internal error" only; the cause goes to the diagnostic
 * log.
 */
export function createRouter<C>(
  routes: readonly Route<C>[],
): (request: Request, context: C) => Promise<Response> {
  return async (request, context) => {
    try {
      const url = new URL(request.url);
      const method = request.method === "HEAD" ? "GET" : request.method;
      const allowed = new Set<string>();
      for (const row of routes) {
        const result = row.pattern.exec({ pathname: url.pathname });
        if (result === null) continue;
        if (row.method !== method) {
          allowed.add(row.method);
          continue;
        }
        const params: Record<string, string> = {};
        for (const [key, value] of Object.entries(result.pathname.groups)) {
          if (value !== undefined) params[key] = value;
        }
        const response = await row.handler(request, { params, url, context });
        return request.method === "HEAD" ? withoutBody(response) : response;
      }
      if (allowed.size === 0) {
        return problemResponse("not-found", `No resource at ${url.pathname}`);
      }
      if (allowed.has("GET")) allowed.add("HEAD");
      const allow = [...allowed].sort().join(", ");
      return problemResponse(
        "method-not-allowed",
        `${url.pathname} does not support ${request.method}; allowed: ${allow}`,
        { allow },
      );
    } catch (error) {
      logger.error("HTTP handler failed", {
        method: request.method,
        url: request.url,
        error: errorStackText(error),
      });
      return problemResponse("internal-error", "internal error");
    }
  };
}

function withoutBody(response: Response): Response {
  response.body?.cancel().catch(() => {});
  return new Response(null, { status: response.status, headers: response.headers });
}
