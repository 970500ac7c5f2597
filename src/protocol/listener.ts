import { formatHostPort, type HostPort } from "../host_port.ts";
import { log } from "../log/diagnostic.ts";
import { runAcceptLoop } from "../net/accept_loop.ts";
import type { ServerCounters } from "../counters.ts";
import { errorText } from "../error_text.ts";

const logger = log("protocol");

/** A running accept loop. */
export interface ProtocolListener {
  /** The bound address (the real port when 0 was asked for). */
  readonly addr: string;
  /** Stops accepting; accepted connections stay open (close sessions yourself). */
  close(): void;
  /** Settles when the accept loop has ended. */
  readonly done: Promise<void>;
}

/**
 * The plain-TCP protocol listener (`Deno.listen`). A failed accept (e.g.
 * descriptor exhaustion) is counted and followed by an exponential back-off,
 * so the loop never spins; accepting resumes by itself (net/accept_loop.ts).
 */
export function listenTcp(
  at: HostPort,
  counters: ServerCounters,
  onConnection: (conn: Deno.TcpConn) => void,
): ProtocolListener {
  const listener = Deno.listen({ hostname: at.hostname, port: at.port, transport: "tcp" });
  const loop = runAcceptLoop(listener, (conn) => {
    counters.connectionsAccepted++;
    counters.protocolConnectionsOpen++; // until the transport closes it (server/protocol_start.ts)
    onConnection(conn);
  }, {
    onAcceptError(error, backoffMs) {
      counters.countAcceptError("protocol");
      logger.warn("accept failed, backing off", {
        error: errorText(error),
        backoff_ms: backoffMs,
      });
    },
  });
  const addr = listener.addr;
  return {
    addr: formatHostPort(addr.hostname, addr.port),
    close: () => loop.close(),
    done: loop.done,
  };
}
