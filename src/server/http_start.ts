/**
 * The HTTP servers: the ops server (`-ops-listen`) first, then the admin API (`-admin-listen`),
 * each only when asked for. They see the server through its read-only view; the admin API acts
 * through the operator port.
 *
 * @module
 */

import { startAdminServer } from "../admin/server.ts";
import type { ServerConfig } from "../config.ts";
import type { HttpLimits, HttpListener } from "../http/listen.ts";
import { HTTP_BODY_BYTES_MAX, HTTP_HEAD_BYTES_MAX } from "../limits.ts";
import { log } from "../log/diagnostic.ts";
import { startOpsServer } from "../ops/server.ts";
import type { StartInputs } from "./start_inputs.ts";
import { listenError } from "./start_errors.ts";
import type { OperatorPort, ServerView } from "./view.ts";

const logger = log("server");

/** Where the started servers go as each starts (shutdown stops those that did). */
export interface HttpServers {
  admin: HttpListener | null;
  ops: HttpListener | null;
}

/**
 * Starts the ops server, then the admin API, into `started`. A listener that cannot bind throws
 * a start error naming its flag; the ones started before it are left in `started`.
 */
export function startHttpServers(
  config: ServerConfig,
  inputs: StartInputs,
  server: ServerView,
  operator: OperatorPort,
  started: HttpServers,
): void {
  const limits: HttpLimits = {
    headerTimeoutMs: config.httpHeaderTimeoutMs,
    idleTimeoutMs: config.httpIdleTimeoutMs,
    connectionsMax: config.httpConnectionsMax,
    headBytesMax: HTTP_HEAD_BYTES_MAX,
    bodyBytesMax: HTTP_BODY_BYTES_MAX,
  };
  const { adminAt, opsAt, adminToken } = inputs;
  if (opsAt !== null) {
    started.ops = bindOrExplain(
      "-ops-listen",
      config.opsListen!,
      () => startOpsServer(opsAt, server, limits),
    );
    logger.info("ops server started", { ops_listen: started.ops.addr });
  }
  if (adminAt === null) return;
  const admin = started.admin = bindOrExplain(
    "-admin-listen",
    config.adminListen!,
    () =>
      startAdminServer({
        at: adminAt,
        server,
        operator,
        opsAddr: started.ops?.addr ?? null,
        token: adminToken,
        allowedHosts: inputs.adminAllowedHosts,
        limits,
        console: config.adminConsole,
      }),
  );
  logger.info("admin API started", {
    admin_listen: admin.addr,
    auth: adminToken === null ? "none" : "token",
    console: config.adminConsole,
  });
  const exposure = adminExposureWarning(adminAt.hostname, adminToken !== null);
  if (exposure !== null) logger.warn(exposure, { admin_listen: admin.addr });
}

function bindOrExplain(flag: string, addr: string, start: () => HttpListener): HttpListener {
  try {
    return start();
  } catch (error) {
    throw listenError(error, flag, addr);
  }
}

/**
 * The start-up warning for an admin API that anyone on the network can use:
 * a non-loopback listen address and no token. Null when there is nothing to say.
 */
export function adminExposureWarning(hostname: string, hasToken: boolean): string | null {
  if (hasToken || isLoopbackHost(hostname)) return null;
  return "admin API listens on a non-loopback address without a token: anyone who can reach it " +
    "can force-release locks; add -admin-token-file, or listen on 127.0.0.1";
}

/** Whether a listen host accepts connections from this machine only. */
function isLoopbackHost(hostname: string): boolean {
  return hostname === "localhost" || hostname === "::1" || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}
