import { formatHostPort, type HostPort } from "../host_port.ts";
import { log } from "../log/diagnostic.ts";
import { problemResponse } from "./problem.ts";

const logger = log("http");

/** A running HTTP server (admin API or ops server). */
export interface HttpListener {
  /** The bound address (the real port when 0 was asked for). */
  readonly addr: string;
  /** Stops accepting, closes idle keep-alive connections and waits for requests in flight. */
  close(): Promise<void>;
}

/** A request handler that also sees the peer's address (`host:port`, IPv6 in brackets). */
export type HttpHandler = (request: Request, remoteAddr: string) => Promise<Response>;

/**
 * Starts a plain-HTTP `Deno.serve` listener. This is the only file that calls
 * `Deno.serve`; the admin and ops servers differ only in their handlers.
 * `onListen` is silenced because standard output belongs to the audit log.
 */
export function listenHttp(at: HostPort, name: string, handler: HttpHandler): HttpListener {
  const server = Deno.serve({
    hostname: at.hostname,
    port: at.port,
    onListen: () => {},
    onError: (error) => {
      // The router catches handler errors; this is the last line of defence.
      logger.error("HTTP server error", {
        server: name,
        error: error instanceof Error ? error.message : String(error),
      });
      return problemResponse("internal-error", "internal error");
    },
    handler: (request, info) => {
      const peer = info.remoteAddr as Deno.NetAddr;
      return handler(request, formatHostPort(peer.hostname, peer.port));
    },
  });
  const addr = server.addr as Deno.NetAddr;
  let closing: Promise<void> | undefined;
  return {
    addr: formatHostPort(addr.hostname, addr.port),
    close() {
      closing ??= server.shutdown();
      return closing;
    },
  };
}
