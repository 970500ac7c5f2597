/**
 * RFC 9457 problem details (`application/problem+json`) for both HTTP
 * servers, and the one table that maps every problem the admin API and the
 * ops server can report to its HTTP status and title.
 *
 * `type` is `https://lockd.dev/problems/<slug>`: a stable identifier a
 * script can compare against (it is not fetched; nothing needs to answer at
 * that URL). `title` is fixed per type; `detail` says what happened to this
 * request. Bodies never carry stack traces or internal error messages.
 *
 * @module
 */

/** Base of every problem `type` URI. */
const PROBLEM_TYPE_BASE = "https://lockd.dev/problems/";

/** The `Content-Type` of every error body. */
const PROBLEM_CONTENT_TYPE = "application/problem+json";

/** Every problem lockd's HTTP servers answer with: status and fixed title, by slug. */
export const PROBLEMS = {
  "bad-request": { status: 400, title: "Bad request" },
  "invalid-path-encoding": { status: 400, title: "Invalid path encoding" },
  "invalid-glob": { status: 400, title: "Invalid glob" },
  "invalid-lock-name": { status: 400, title: "Invalid lock name" },
  "invalid-query": { status: 400, title: "Invalid query parameter" },
  "unauthorized": { status: 401, title: "Unauthorized" },
  "cross-origin-refused": { status: 403, title: "Cross-origin request refused" },
  "not-found": { status: 404, title: "Not found" },
  "lock-not-found": { status: 404, title: "Lock not found" },
  "waiter-not-found": { status: 404, title: "Waiter not found" },
  "method-not-allowed": { status: 405, title: "Method not allowed" },
  "host-not-allowed": { status: 421, title: "Host not allowed" },
  "lock-has-no-owner": { status: 409, title: "Lock has no owner" },
  "holder-changed": { status: 409, title: "Lock holder changed" },
  "lock-not-reserved": { status: 409, title: "Lock not reserved" },
  "length-required": { status: 411, title: "Length required" },
  "body-too-large": { status: 413, title: "Content too large" },
  "headers-too-large": { status: 431, title: "Request header fields too large" },
  "internal-error": { status: 500, title: "Internal error" },
  "too-many-connections": { status: 503, title: "Too many connections" },
  "too-many-streams": { status: 503, title: "Too many event streams" },
  "unavailable": { status: 503, title: "Service unavailable" },
  "not-leader": { status: 503, title: "Not the leader" },
} as const satisfies Record<string, { status: number; title: string }>;

export type ProblemSlug = keyof typeof PROBLEMS;

/** The JSON body of a problem response, fields in RFC 9457 order. */
export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail: string;
}

/** Builds the body of a problem. */
function problemBody(slug: ProblemSlug, detail: string): ProblemBody {
  const { status, title } = PROBLEMS[slug];
  return { type: PROBLEM_TYPE_BASE + slug, title, status, detail };
}

/** A complete problem response; `headers` adds e.g. `Allow` or `WWW-Authenticate`. */
export function problemResponse(
  slug: ProblemSlug,
  detail: string,
  headers: Record<string, string> = {},
): Response {
  const body = problemBody(slug, detail);
  return new Response(JSON.stringify(body), {
    status: body.status,
    headers: { ...headers, "content-type": PROBLEM_CONTENT_TYPE },
  });
}

/** A JSON response with status 200 unless told otherwise. */
export function jsonResponse(value: unknown, status = 200): Response {
  return new Response(JSON.stringify(value), {
    status,
    headers: { "content-type": "application/json" },
  });
}

/**
 * A problem as a complete HTTP/1.1 response that closes the connection, for
 * the connection guard, which answers some requests itself (before
 * `Deno.serve` sees them) and writes bytes, not `Response` objects.
 */
export function problemResponseBytes(slug: ProblemSlug, detail: string): Uint8Array {
  const body = JSON.stringify(problemBody(slug, detail));
  const { status, title } = PROBLEMS[slug];
  const bodyBytes = new TextEncoder().encode(body);
  // The same two headers as every admin answer (they cost nothing on the ops listener).
  return new TextEncoder().encode(
    `HTTP/1.1 ${status} ${title}\r\ncontent-type: ${PROBLEM_CONTENT_TYPE}\r\n` +
      `cache-control: no-store\r\nx-content-type-options: nosniff\r\n` +
      `content-length: ${bodyBytes.length}\r\nconnection: close\r\n\r\n${body}`,
  );
}
