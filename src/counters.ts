/**
 * Counters kept by the adapters (the engine keeps its own, see EngineStats).
 * `/metrics` reads both at scrape time, so every value is exact.
 */
export class ServerCounters {
  connectionsAccepted = 0;
  /**
   * Protocol connections open now, in any state (TLS handshake, before HELLO, session):
   * about one file descriptor each. `/proc/self/fd` needs `--allow-all` in Deno, so this is
   * the figure the descriptor runbook can rely on under the shipped permissions.
   */
  protocolConnectionsOpen = 0;
  /** Failed accepts of every listener (the spec's unlabelled `lockd_accept_errors_total`). */
  acceptErrors = 0;
  /** The same failed accepts by listener. */
  readonly acceptErrorsByListener: Record<ListenerName, number> = { protocol: 0, admin: 0, ops: 0 };
  /** Failed TLS handshakes (the spec's unlabelled `lockd_tls_handshake_errors_total`). */
  tlsHandshakeErrors = 0;
  /** The same failures by reason (`lockd_tls_handshake_failures_total`); they sum to the above. */
  readonly tlsHandshakeFailures: Record<TlsHandshakeFailureReason, number> = Object.fromEntries(
    TLS_HANDSHAKE_FAILURE_REASONS.map((reason) => [reason, 0]),
  ) as Record<TlsHandshakeFailureReason, number>;
  /** TLS handshakes started (admitted by the handshake rate limit). */
  tlsHandshakesStarted = 0;
  /** Accepted TLS connections waiting for their handshake to start. */
  tlsHandshakesQueued = 0;
  /** Accepted TLS connections dropped before their handshake started, by reason. */
  readonly tlsShed: Record<TlsShedReason, number> = { pending_full: 0, queue_timeout: 0 };
  /** ACQUIREs the ACL refused (the spec's `lockd_acl_denials_total`). */
  aclDenials = 0;
  /** Reads (QUERY, WATCH) the ACL refused (`lockd_acl_read_denials_total`). */
  aclReadDenials = 0;
  /** Requests and connections refused (or closed) because a limit was reached, by limit. */
  readonly limitRefusals: Record<LimitName, number> = {
    sessions: 0,
    handshakes: 0,
    claims: 0,
    claims_per_session: 0,
    waiters_per_lock: 0,
    partial_frames: 0,
  };
  /** Bytes held now for unfinished frames larger than any valid request (all connections). */
  partialFrameBytes = 0;
  /** ERROR frames sent, by wire code. */
  readonly protocolErrors = new Map<number, number>();
  /** Connection counts of the two HTTP listeners. */
  readonly http: Record<HttpListenerName, HttpListenerStats> = {
    admin: new HttpListenerStats(),
    ops: new HttpListenerStats(),
  };

  countError(code: number): void {
    this.protocolErrors.set(code, (this.protocolErrors.get(code) ?? 0) + 1);
  }

  /** One failed TLS handshake, in the total and under its reason. */
  countTlsHandshakeFailure(reason: TlsHandshakeFailureReason): void {
    this.tlsHandshakeErrors++;
    this.tlsHandshakeFailures[reason]++;
  }

  countAcceptError(listener: ListenerName): void {
    this.acceptErrors++;
    this.acceptErrorsByListener[listener]++;
  }
}

/**
 * Which limit refused something (the `limit` label of `lockd_limit_refusals_total`):
 * `sessions` (a HELLO past -max-sessions), `handshakes` (the oldest connection without HELLO,
 * closed past -max-handshakes), `claims` (an ACQUIRE past -max-claims), `claims_per_session`,
 * `waiters_per_lock`, `partial_frames` (a connection whose frame, larger than any valid
 * request, found the server's room for such frames in use).
 */
export const LIMIT_NAMES = [
  "sessions",
  "handshakes",
  "claims",
  "claims_per_session",
  "waiters_per_lock",
  "partial_frames",
] as const;
export type LimitName = typeof LIMIT_NAMES[number];

/**
 * Why a TLS connection was dropped before its handshake started (the `reason` label of
 * `lockd_tls_connections_shed_total`): `pending_full` (the oldest waiting connection, dropped for
 * a new one), `queue_timeout` (waited past the handshake timeout).
 */
export const TLS_SHED_REASONS = ["pending_full", "queue_timeout"] as const;
export type TlsShedReason = typeof TLS_SHED_REASONS[number];

/**
 * Why a TLS handshake failed (the `reason` label of `lockd_tls_handshake_failures_total`; a
 * closed set, every value exposed from the start):
 * - `no_client_certificate`: mutual TLS, and the client sent no certificate;
 * - `client_certificate_rejected`: the client's certificate did not verify against
 *   `-tls-client-ca`: signed by another CA, expired or not yet valid, or otherwise invalid
 *   (Deno's TLS stack reports all of these with one code; the log line carries its verdict);
 * - `client_certificate_unusable`: verified, but its names cannot be read safely (no identity);
 * - `server_certificate_rejected`: the client refused the server's certificate (an alert such as
 *   unknown CA or bad certificate: the client trusts another CA, or the name does not match);
 * - `not_tls`: the first bytes do not start a TLS handshake (a plaintext lockd client, HTTP);
 * - `timeout`: no ClientHello, or no finished handshake, within `-handshake-timeout`;
 * - `closed`: the client closed or reset the connection during the handshake;
 * - `protocol`: any other TLS error (no common version or cipher, a malformed record, another
 *   alert).
 */
export const TLS_HANDSHAKE_FAILURE_REASONS = [
  "no_client_certificate",
  "client_certificate_rejected",
  "client_certificate_unusable",
  "server_certificate_rejected",
  "not_tls",
  "timeout",
  "closed",
  "protocol",
] as const;
export type TlsHandshakeFailureReason = typeof TLS_HANDSHAKE_FAILURE_REASONS[number];

/** lockd's listeners, as the `listener` label of the per-listener metrics names them. */
export type ListenerName = "protocol" | "admin" | "ops";
export type HttpListenerName = "admin" | "ops";

/**
 * Why the connection guard closed an HTTP connection itself (the `reason` label of
 * `lockd_http_connections_dropped_total`): `header_timeout` (a request head, or its body,
 * not complete in time), `idle_timeout` (no byte either way), `evicted` (the least recently
 * active connection not serving a request, closed for a new one at the cap), `limit` (a new
 * connection at the cap with none to evict that is no probe, in a reserved slot or not),
 * `invalid_request` (a head the guard refuses: too large, malformed, a body too large or
 * chunked), `unavailable` (the internal server could not be reached: descriptors exhausted,
 * or restarting).
 */
export const HTTP_DROP_REASONS = [
  "header_timeout",
  "idle_timeout",
  "evicted",
  "limit",
  "invalid_request",
  "unavailable",
] as const;
export type HttpDropReason = typeof HTTP_DROP_REASONS[number];

/** Connection counts of one HTTP listener. */
export class HttpListenerStats {
  /** Connections open now. */
  open = 0;
  readonly dropped: Record<HttpDropReason, number> = {
    header_timeout: 0,
    idle_timeout: 0,
    evicted: 0,
    limit: 0,
    invalid_request: 0,
    unavailable: 0,
  };
  /** Times the internal `Deno.serve` stopped by itself and was started again. */
  serverRestarts = 0;
}
