import { formatHostPort, type HostPort } from "../host_port.ts";
import { ACCEPT_BACKOFF_MS_MAX, ACCEPT_BACKOFF_MS_MIN } from "../limits.ts";
import { log } from "../log/diagnostic.ts";
import type { ServerCounters } from "../ops/counters.ts";

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
 * so the loop never spins; accepting resumes by itself.
 */
export function listenTcp(
  at: HostPort,
  counters: ServerCounters,
  onConnection: (conn: Deno.TcpConn) => void,
): ProtocolListener {
  const listener = Deno.listen({ hostname: at.hostname, port: at.port, transport: "tcp" });
  let closed = false;
  let wakeBackoff: (() => void) | undefined;
  const done = (async () => {
    let backoffMs = 0;
    while (!closed) {
      let conn: Deno.TcpConn;
      try {
        conn = await listener.accept();
      } catch (error) {
        if (closed || error instanceof Deno.errors.BadResource) return;
        counters.acceptErrors++;
        backoffMs = Math.min(ACCEPT_BACKOFF_MS_MAX, Math.max(ACCEPT_BACKOFF_MS_MIN, backoffMs * 2));
        logger.warn("accept failed, backing off", {
          error: error instanceof Error ? error.message : String(error),
          backoff_ms: backoffMs,
        });
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, backoffMs);
          wakeBackoff = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wakeBackoff = undefined;
        continue;
      }
      backoffMs = 0;
      counters.connectionsAccepted++;
      onConnection(conn);
    }
  })();
  const addr = listener.addr;
  return {
    addr: formatHostPort(addr.hostname, addr.port),
    close() {
      if (closed) return;
      closed = true;
      wakeBackoff?.();
      listener.close();
    },
    done,
  };
}
