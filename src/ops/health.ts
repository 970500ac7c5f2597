/**
 * Health probes of the ops server.
 *
 * - `/healthz` (liveness): 200 `ok` until shutdown begins, then 503
 *   `shutting down`. It stays 200 while grants are blocked: the process is
 *   alive and recovers by itself, and restarting it would end every
 *   ownership (and lose the audit records not yet written).
 * - `/readyz` (readiness): like `/healthz`, and also 503 while no ownership
 *   can be granted, for whatever reason, with the reason as the body:
 *   `audit log unavailable` or `token store unavailable`; load balancers
 *   then route clients to another instance. In cluster mode also 503 on every node but the
 *   serving leader (`not the leader (standby: ...)`, `paused leader (...)`, with the node's status
 *   line, cluster_status.ts); the serving leader in its reclaim window answers 200
 *   `ok (serving term N, reclaiming until T: ...)`.
 *
 * @module
 */

import { clusterStatusText } from "../cluster/cluster_status.ts";
import type { GrantBlock } from "../core/types.ts";
import type { ServerView } from "../server/view.ts";

function text(status: number, body: string): Response {
  return new Response(body, {
    status,
    headers: { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" },
  });
}

export function healthz(server: ServerView): Response {
  return server.live ? text(200, "ok") : text(503, "shutting down");
}

/** The body of a 503 `/readyz`, by why grants are blocked. */
const NOT_READY: Readonly<Record<GrantBlock, string>> = {
  shutting_down: "shutting down",
  audit_unavailable: "audit log unavailable",
  token_store_unavailable: "token store unavailable",
  not_leader: "not the leader",
};

export function readyz(server: ServerView): Response {
  if (!server.live) return text(503, "shutting down");
  const block = server.engine.grantBlock;
  if (block !== null) return text(503, NOT_READY[block]);
  // Cluster mode: only the serving leader takes clients (a load balancer in front uses this).
  const cluster = server.cluster;
  if (cluster === null) return text(200, "ok");
  const status = cluster.status;
  switch (status.phase) {
    case "serving":
      return text(200, "ok");
    case "reclaiming":
      return text(200, `ok (${clusterStatusText(status)})`);
    case "paused":
      return text(503, `paused leader (${clusterStatusText(status)})`);
    default:
      return text(503, `not the leader (${clusterStatusText(status)})`);
  }
}
