/**
 * Health probes of the ops server.
 *
 * - `/healthz` (liveness): 200 `ok` until shutdown begins, then 503
 *   `shutting down`. It stays 200 while the audit log is unwritable: the
 *   process is alive and recovers by itself, and restarting it would end
 *   every ownership and lose the records not yet written.
 * - `/readyz` (readiness): like `/healthz`, and also 503
 *   `audit log unavailable` while the audit log cannot be written (no new
 *   ownership can be granted then), so load balancers route clients to
 *   another instance.
 *
 * @module
 */

import type { ServerContext } from "../server.ts";

function text(status: number, body: string): Response {
  return new Response(body, {
    status,
    headers: { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" },
  });
}

export function healthz(server: ServerContext): Response {
  return server.live ? text(200, "ok") : text(503, "shutting down");
}

export function readyz(server: ServerContext): Response {
  if (!server.live) return text(503, "shutting down");
  if (!server.ready) return text(503, "audit log unavailable");
  return text(200, "ok");
}
