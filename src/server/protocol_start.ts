/**
 * The protocol listener (`-listen`, plain TCP or TLS) and what every connection it accepts is
 * given: a `Session` on the server's service, timers and limits, admitted to the registry.
 *
 * @module
 */

import type { Scheduler } from "../clock.ts";
import type { ServerConfig } from "../config.ts";
import type { LockEngine } from "../core/engine.ts";
import type { HostPort } from "../host_port.ts";
import { TLS_PENDING_CONNECTIONS_MAX } from "../limits.ts";
import type { ServerCounters } from "../counters.ts";
import { listenTcp, type ProtocolListener } from "../protocol/listener.ts";
import { Session, type SessionHost } from "../protocol/session.ts";
import { listenTls, type TlsProtocolListener } from "../protocol/tls_listener.ts";
import { tcpTransport, type Transport } from "../protocol/transport.ts";
import type { ServerTlsMaterial } from "../security/tls.ts";
import type { LockService } from "../service/lock_service.ts";
import type { StallWatchdog } from "../service/stall_watchdog.ts";
import { VERSION } from "../version.ts";
import type { ConnectionRegistry } from "./connection_registry.ts";

/** What sessions are built from. */
export interface ProtocolParts {
  readonly config: ServerConfig;
  readonly scheduler: Scheduler;
  readonly counters: ServerCounters;
  readonly service: LockService;
  /** Its limits (I/O timeout, lease bounds) as the engine settled them. */
  readonly engine: LockEngine;
  readonly watchdog: StallWatchdog;
  readonly connections: ConnectionRegistry;
}

export interface ProtocolListeners {
  readonly listener: ProtocolListener;
  /** The same listener when it speaks TLS (certificate reloads), else null. */
  readonly tls: TlsProtocolListener | null;
}

/** Binds `at` (TLS when `tlsMaterial` is given) and serves every connection as a session. */
export async function listenProtocol(
  parts: ProtocolParts,
  at: HostPort,
  tlsMaterial: ServerTlsMaterial | null,
): Promise<ProtocolListeners> {
  const { config, scheduler, counters, connections } = parts;
  const host = sessionHost(parts);
  const serve = (transport: Transport) => {
    const session = new Session(transport, host);
    connections.admit(session);
    session.run();
  };
  if (tlsMaterial === null) {
    // One callback for every connection (none allocated per connection).
    const connectionClosed = () => counters.protocolConnectionsOpen--;
    const listener = listenTcp(
      at,
      counters,
      (conn) => serve(tcpTransport(conn, connectionClosed)),
    );
    return { listener, tls: null };
  }
  const tls = await listenTls(at, counters, tlsMaterial, {
    handshakeTimeoutMs: config.handshakeTimeoutMs,
    handshakesPerS: config.tlsHandshakeRatePerS,
    pendingMax: TLS_PENDING_CONNECTIONS_MAX,
    scheduler,
  }, serve);
  return { listener: tls, tls };
}

function sessionHost(parts: ProtocolParts): SessionHost {
  const { config, engine, connections } = parts;
  return {
    service: parts.service,
    scheduler: parts.scheduler,
    counters: parts.counters,
    watchdog: parts.watchdog,
    serverVersion: VERSION,
    frameBytesMax: config.frameBytesMax,
    handshakeTimeoutMs: config.handshakeTimeoutMs,
    ioTimeoutMs: engine.ioTimeoutMs,
    leaseDefaultMs: engine.leaseDefaultMs,
    leaseMaxMs: engine.leaseMaxMs,
    frameBudget: connections.frameBudget,
    handshakeEnded: (session) => connections.handshakeEnded(session),
    closed: (session) => connections.closed(session),
  };
}
