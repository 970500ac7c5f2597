/**
 * Per-listener metric families (issue 9 items 5 and 6): failed accepts by
 * listener, and the HTTP connection guard's counts. The spec's unlabelled
 * `lockd_accept_errors_total` stays the sum over all listeners.
 *
 * @module
 */

import {
  HTTP_DROP_REASONS,
  type ServerCounters,
  TLS_HANDSHAKE_FAILURE_REASONS,
  TLS_SHED_REASONS,
} from "../counters.ts";
import type { MetricFamily } from "./prometheus.ts";

const HTTP_LISTENERS = ["admin", "ops"] as const;

/** The families, every label value present from the start. */
export function listenerFamilies(counters: ServerCounters): MetricFamily[] {
  return [...tlsFamilies(counters), ...httpFamilies(counters)];
}

/** Failed accepts by listener, and the TLS listener's handshakes. */
function tlsFamilies(counters: ServerCounters): MetricFamily[] {
  return [
    {
      name: "lockd_listener_accept_errors_total",
      help:
        "Failed accepts by listener (protocol, admin, ops); lockd_accept_errors_total is their sum.",
      type: "counter",
      samples: (["protocol", "admin", "ops"] as const).map((listener) => ({
        labels: { listener },
        value: counters.acceptErrorsByListener[listener],
      })),
    },
    {
      name: "lockd_tls_handshakes_started_total",
      help: "TLS handshakes started (admitted by -max-tls-handshake-rate).",
      type: "counter",
      samples: [{ value: counters.tlsHandshakesStarted }],
    },
    {
      name: "lockd_tls_handshakes_queued",
      help: "Accepted TLS connections waiting for their handshake to start.",
      type: "gauge",
      samples: [{ value: counters.tlsHandshakesQueued }],
    },
    {
      // Beside the spec's unlabelled lockd_tls_handshake_errors_total (kept exactly as the spec
      // lists it), the same failures by reason; every reason is present from the start.
      name: "lockd_tls_handshake_failures_total",
      help:
        "Failed TLS handshakes by reason; they sum to lockd_tls_handshake_errors_total (see docs/operations.md).",
      type: "counter",
      samples: TLS_HANDSHAKE_FAILURE_REASONS.map((reason) => ({
        labels: { reason },
        value: counters.tlsHandshakeFailures[reason],
      })),
    },
    {
      name: "lockd_tls_connections_shed_total",
      help: "TLS connections dropped before their handshake started, by reason.",
      type: "counter",
      samples: TLS_SHED_REASONS.map((reason) => ({
        labels: { reason },
        value: counters.tlsShed[reason],
      })),
    },
  ];
}

/** The HTTP connection guard's counts, by listener. */
function httpFamilies(counters: ServerCounters): MetricFamily[] {
  return [
    {
      name: "lockd_http_connections_open",
      help: "Open connections of the admin and ops HTTP listeners.",
      type: "gauge",
      samples: HTTP_LISTENERS.map((listener) => ({
        labels: { listener },
        value: counters.http[listener].open,
      })),
    },
    {
      name: "lockd_http_connections_dropped_total",
      help: "HTTP connections the server closed itself, by listener and reason.",
      type: "counter",
      samples: HTTP_LISTENERS.flatMap((listener) =>
        HTTP_DROP_REASONS.map((reason) => ({
          labels: { listener, reason },
          value: counters.http[listener].dropped[reason],
        }))
      ),
    },
    {
      name: "lockd_http_server_restarts_total",
      help: "Times the internal HTTP server of a listener stopped by itself and was started again.",
      type: "counter",
      samples: HTTP_LISTENERS.map((listener) => ({
        labels: { listener },
        value: counters.http[listener].serverRestarts,
      })),
    },
  ];
}
