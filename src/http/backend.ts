/**
 * The `Deno.serve` behind an HTTP listener. It listens on a Unix socket in a
 * private temporary directory (mode 0700, so no other user can connect) and
 * is reached only through the connection guard of listen.ts, which accepts
 * the TCP connections, enforces the limits `Deno.serve` has no options for,
 * and adds the peer's address as a header whose name holds a random secret.
 *
 * `Deno.serve` stops serving for good when one of its accepts fails (e.g.
 * EMFILE: its `finished` promise rejects; without a handler that rejection
 * would end the process). So when it stops while the listener is open, it is
 * started again, on a fresh socket path, with a back-off; meanwhile
 * `connect()` fails and the guard answers 503.
 *
 * @module
 */

import { type Scheduler, systemScheduler, type Timer } from "../clock.ts";
import { ACCEPT_BACKOFF_MS_MAX, ACCEPT_BACKOFF_MS_MIN } from "../limits.ts";
import { log } from "../log/diagnostic.ts";
import { problemResponse } from "./problem.ts";
import { errorText } from "../error_text.ts";

const logger = log("http");

/** A handler that also sees the peer's address (`host:port`, IPv6 in brackets). */
export type HttpHandler = (request: Request, remoteAddr: string) => Promise<Response>;

export interface HttpBackendOptions {
  /** Listener name for logs and socket file names: "admin" or "ops". */
  readonly name: string;
  /** Name of the header the guard puts the peer address in. */
  readonly peerHeader: string;
  readonly handler: HttpHandler;
  readonly scheduler?: Scheduler;
  /** Called each time the server is started again after it stopped by itself. */
  readonly onRestart?: () => void;
}

/** The internal HTTP server of one listener. */
export class HttpBackend {
  readonly #options: HttpBackendOptions;
  readonly #scheduler: Scheduler;
  readonly #dir: string;
  #server: Deno.HttpServer<Deno.UnixAddr> | null = null;
  #path: string | null = null;
  #generation = 0;
  #closing = false;
  #backoffMs = 0;
  #restartTimer: Timer | null = null;
  #sweep: Promise<void> = Promise.resolve();

  constructor(options: HttpBackendOptions) {
    this.#options = options;
    this.#scheduler = options.scheduler ?? systemScheduler;
    this.#dir = Deno.makeTempDirSync({ prefix: `lockd-${options.name}-` });
    try {
      this.#start();
    } catch (error) {
      Deno.removeSync(this.#dir, { recursive: true });
      throw error;
    }
    this.#sweep = sweepStaleSocketDirs(this.#dir, `lockd-${options.name}-`);
  }

  /** True while the server is up and `connect()` can reach it. */
  get up(): boolean {
    return this.#server !== null;
  }

  /** Opens a connection to the server; rejects while it is down (or restarting). */
  connect(): Promise<Deno.UnixConn> {
    if (this.#path === null) return Promise.reject(new Error("HTTP server is restarting"));
    return Deno.connect({ transport: "unix", path: this.#path });
  }

  #start(): void {
    // Another lockd's sweep may have taken the directory while no socket answered in it.
    Deno.mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
    const path = `${this.#dir}/${this.#options.name}-${this.#generation++}.sock`;
    const { handler, peerHeader } = this.#options;
    const server = Deno.serve({
      path,
      onListen: () => {},
      onError: (error) => {
        // The router catches handler errors; this is the last line of defence.
        logger.error("HTTP server error", {
          server: this.#options.name,
          error: errorText(error),
        });
        return problemResponse("internal-error", "internal error");
      },
      handler: (request) => {
        const remoteAddr = request.headers.get(peerHeader);
        if (remoteAddr === null) {
          // Only the guard can reach this socket, and it adds the header to every head.
          return problemResponse("bad-request", "The request did not come through the listener");
        }
        return handler(request, remoteAddr);
      },
    });
    this.#server = server;
    this.#path = path;
    server.finished.then(
      () => this.#stopped(server, null),
      (error) => this.#stopped(server, error),
    );
  }

  #stopped(server: Deno.HttpServer<Deno.UnixAddr>, error: unknown): void {
    if (this.#server !== server) return;
    this.#server = null;
    this.#path = null;
    if (this.#closing) return;
    logger.error("HTTP server stopped; starting it again", {
      server: this.#options.name,
      error: errorText(error ?? "finished"),
    });
    this.#scheduleRestart();
  }

  #scheduleRestart(): void {
    this.#backoffMs = Math.min(
      ACCEPT_BACKOFF_MS_MAX,
      Math.max(ACCEPT_BACKOFF_MS_MIN, this.#backoffMs * 2),
    );
    this.#restartTimer = this.#scheduler.setTimer(() => {
      this.#restartTimer = null;
      if (this.#closing) return;
      try {
        this.#start();
        this.#backoffMs = 0;
        this.#options.onRestart?.();
        logger.info("HTTP server started again", { server: this.#options.name });
      } catch (error) {
        // E.g. still out of descriptors: try again later.
        logger.warn("HTTP server cannot start yet", {
          server: this.#options.name,
          error: errorText(error),
        });
        this.#scheduleRestart();
      }
    }, this.#backoffMs);
  }

  /**
   * Stops the server: it closes idle connections, finishes the requests in
   * flight (then closes their connections) and removes its directory.
   */
  async close(): Promise<void> {
    this.#closing = true;
    this.#restartTimer?.cancel();
    const server = this.#server;
    if (server !== null) {
      try {
        await server.shutdown();
      } catch {
        // It stopped by itself meanwhile.
      }
    }
    this.#server = null;
    this.#path = null;
    await this.#sweep;
    try {
      Deno.removeSync(this.#dir, { recursive: true });
    } catch {
      // Already gone (a tmp cleaner), nothing to do.
    }
  }
}

/** A socket directory untouched this long whose sockets all refuse connections is left over. */
const STALE_SOCKET_DIR_AGE_MS = 60_000;

/**
 * Removes the socket directories of lockd processes that ended without
 * cleaning up (SIGKILL, a crash): same prefix, beside `ownDir`, older than a
 * minute, and no socket in it accepts a connection. Runs in the background;
 * every error just leaves a directory where it is.
 */
async function sweepStaleSocketDirs(ownDir: string, prefix: string): Promise<void> {
  const parent = ownDir.slice(0, ownDir.lastIndexOf("/"));
  try {
    for (const entry of Deno.readDirSync(parent)) {
      const dir = `${parent}/${entry.name}`;
      if (!entry.isDirectory || !entry.name.startsWith(prefix) || dir === ownDir) continue;
      try {
        // The kernel stamps mtime with the real wall clock: compare it with that, never with
        // the server's scheduler (a manual clock in tests).
        const nowMs = systemScheduler.wallMs();
        const mtimeMs = Deno.statSync(dir).mtime?.getTime() ?? nowMs;
        if (nowMs - mtimeMs < STALE_SOCKET_DIR_AGE_MS) continue;
        let live = false;
        for (const file of Deno.readDirSync(dir)) {
          if (!file.name.endsWith(".sock")) continue;
          try {
            (await Deno.connect({ transport: "unix", path: `${dir}/${file.name}` })).close();
            live = true;
            break;
          } catch {
            // Refused or gone: that server is not running.
          }
        }
        if (!live) Deno.removeSync(dir, { recursive: true });
      } catch {
        // Another user's directory (mode 0700), or removed meanwhile.
      }
    }
  } catch {
    // The temporary directory cannot be listed: nothing to sweep.
  }
}
