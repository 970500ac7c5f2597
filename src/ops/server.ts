import type { HostPort } from "../host_port.ts";
import {
  type HttpLimits,
  type HttpListener,
  listenHttp,
  type RequestHead,
} from "../http/listen.ts";
import { createRouter, route } from "../http/router.ts";
import type { ServerView } from "../server/view.ts";
import { healthz, readyz } from "./health.ts";
import { collectMetrics } from "./metrics.ts";
import { encodePrometheus, PROMETHEUS_CONTENT_TYPE } from "./prometheus.ts";
import { RuntimeProbe } from "./runtime.ts";

interface OpsContext {
  readonly server: ServerView;
  readonly probe: RuntimeProbe;
}

/** Routes of the ops server; other paths are 404 problems, other methods 405 with `Allow`. */
const OPS_ROUTES = [
  route<OpsContext>("GET", "/metrics", (_request, { context }) =>
    new Response(
      encodePrometheus(
        collectMetrics({ server: context.server, runtime: context.probe.sample() }),
      ),
      { headers: { "content-type": PROMETHEUS_CONTENT_TYPE } },
    )),
  route<OpsContext>("GET", "/healthz", (_request, { context }) => healthz(context.server)),
  route<OpsContext>("GET", "/readyz", (_request, { context }) => readyz(context.server)),
];

/** A health probe: it must find a connection even when every other one is busy. */
function isProbe(head: RequestHead): boolean {
  return (head.method === "GET" || head.method === "HEAD") &&
    /^\/(?:healthz|readyz)(?:\?|$)/.test(head.target);
}

/** Starts the ops server (`-ops-listen`) and its runtime probe; `close()` stops both. */
export function startOpsServer(
  at: HostPort,
  server: ServerView,
  limits: HttpLimits,
): HttpListener {
  const probe = new RuntimeProbe();
  const router = createRouter(OPS_ROUTES);
  const context: OpsContext = { server, probe };
  const listener = listenHttp(
    at,
    { name: "ops", limits, counters: server.counters, priority: isProbe },
    (request) => router(request, context),
  );
  probe.start();
  return {
    addr: listener.addr,
    async close() {
      try {
        await listener.close();
      } finally {
        probe.stop();
      }
    },
  };
}
