/**
 * The accept watchdog of the TLS listener (see tls_accept.ts for why one is needed: in Deno 2.9
 * a node `net.Server` whose accept failed with EMFILE never accepts again, and says nothing).
 *
 * Once a second, when no connection came in, the watchdog connects to its own listener (a
 * probe) and waits for that connection to be accepted. It acts only on a real failure:
 *
 * - a probe that cannot connect because the process is out of descriptors is a failed accept
 *   (counted; accepting fails the same way);
 * - a probe that was not accepted within `ACCEPT_PROBE_TIMEOUT_MS`, and still not one round
 *   later, while no other connection was accepted either, means the listener is stuck: counted
 *   once, and the listener listens again on the same address. The extra round keeps a busy
 *   event loop (a timer and the accept both ready after a long turn) from passing for a stuck
 *   listener.
 *
 * Its own probe is never taken for a client (issue 19 item 1): the listener accepts the probe's
 * connection before `connect()` has returned its local port to the watchdog, so every connection
 * accepted from the probe's source address while the probe is connecting is held back until the
 * port is known, then either recognised as the probe or handed on as a client. Probes are never
 * counted as accepted connections.
 *
 * @module
 */

import { ACCEPT_PROBE_INTERVAL_MS, ACCEPT_PROBE_TIMEOUT_MS } from "../limits.ts";
import type { Socket } from "node:net";
import type { Scheduler, Timer } from "../clock.ts";
import { log } from "../log/diagnostic.ts";
import { errorText } from "../error_text.ts";

const logger = log("tls");

/** EMFILE (process) and ENFILE (system) as Deno reports them. */
const DESCRIPTORS_EXHAUSTED = /os error 2[34]\b|Too many open files/i;

/** What the watchdog needs from the listener it watches. */
export interface WatchedListener {
  /** The bound address and port (numeric), or null while not listening (a re-listen failed). */
  bound(): { address: string; port: number } | null;
  /** Closes the listening socket (if any) and binds the same address again; rejects if it cannot. */
  relisten(): Promise<void>;
  /** Counts one failed accept (`lockd_accept_errors_total`). */
  countAcceptError(): void;
  /** The address as shown in log lines. */
  readonly addr: string;
}

/** A probe connection: connecting (`localPort` unknown) or waiting to be accepted. */
interface Probe {
  readonly sentAtMs: number;
  /** The address the probe connects to, and so the source address the listener sees. */
  readonly source: string;
  conn: Deno.TcpConn | null;
  localPort: number | null;
  /** Connections from `source` accepted while the probe was connecting, in arrival order. */
  readonly held: Socket[];
  /** False once held connections may no longer wait for the probe's port (it connects too slowly). */
  holding: boolean;
  /** Set when the probe is forgotten: a connect that resolves later is closed at once. */
  dropped: boolean;
}

/** Probes remembered at most (the one asked about plus a few late ones still to be recognised). */
const PROBES_IN_FLIGHT_MAX = 4;

/** Watches one listener; see the module documentation. */
export class AcceptWatchdog {
  readonly #listener: WatchedListener;
  readonly #scheduler: Scheduler;
  readonly #deliver: (socket: Socket) => void;
  #timer: Timer | null = null;
  #acceptedSinceCheck = false;
  /** The probe of the open question "does the listener still accept?", if one is asked. */
  #current: Probe | null = null;
  /** Overdue rounds of `#current` (not accepted within ACCEPT_PROBE_TIMEOUT_MS). */
  #overdueRounds = 0;
  /** Probes not yet accepted, oldest first (`#current` among them), so a late one is still recognised. */
  #inFlight: Probe[] = [];
  #closed = false;

  /** `deliver` receives every accepted connection that is not one of the watchdog's probes. */
  constructor(listener: WatchedListener, scheduler: Scheduler, deliver: (socket: Socket) => void) {
    this.#listener = listener;
    this.#scheduler = scheduler;
    this.#deliver = deliver;
    this.#arm();
  }

  /** Every connection the listener accepts passes here first. */
  accepted(socket: Socket): void {
    const remote = unmapped(socket.remoteAddress);
    for (const probe of this.#inFlight) {
      if (probe.source !== remote) continue;
      if (probe.localPort === null) {
        if (!probe.holding) continue;
        probe.held.push(socket);
        return;
      }
      if (socket.remotePort === probe.localPort) {
        this.#arrived(probe, socket);
        return;
      }
    }
    this.#acceptedSinceCheck = true;
    this.#deliver(socket);
  }

  /** Stops the watchdog; held connections are closed (the listener is closing). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#timer?.cancel();
    this.#timer = null;
    for (const probe of this.#inFlight.splice(0)) {
      this.#drop(probe);
      for (const socket of probe.held.splice(0)) socket.destroy();
    }
    this.#current = null;
  }

  #arm(): void {
    if (this.#closed) return;
    this.#timer = this.#scheduler.setTimer(() => {
      this.#timer = null;
      void this.#round().catch((error) => {
        logger.error("accept check failed", {
          error: errorText(error),
        });
      }).finally(() => this.#arm());
    }, ACCEPT_PROBE_INTERVAL_MS);
  }

  /** One round: re-listen if a re-listen failed; else nothing if connections came in; else probe. */
  async #round(): Promise<void> {
    const nowMs = this.#scheduler.monotonicMs();
    for (const probe of this.#inFlight) {
      // A connect this slow means a full backlog: connections it holds wait no longer for it.
      if (probe.localPort === null && nowMs - probe.sentAtMs >= ACCEPT_PROBE_TIMEOUT_MS) {
        this.#stopHolding(probe);
      }
    }
    const bound = this.#listener.bound();
    if (bound === null) {
      await this.#relisten();
      return;
    }
    const accepted = this.#acceptedSinceCheck;
    this.#acceptedSinceCheck = false;
    if (accepted) {
      // The listener accepts: the open question (if any) is answered.
      this.#current = null;
      return;
    }
    const probe = this.#current;
    if (probe === null) {
      this.#send(bound);
      return;
    }
    if (nowMs - probe.sentAtMs < ACCEPT_PROBE_TIMEOUT_MS) return;
    if (++this.#overdueRounds < 2) return;
    this.#listener.countAcceptError();
    logger.warn("TLS listener stopped accepting (descriptor exhaustion?); listening again", {
      listen: this.#listener.addr,
      probe_waited_ms: nowMs - probe.sentAtMs,
    });
    // Probes sent to the stuck socket will never be accepted: forget them all.
    for (const stale of this.#inFlight.splice(0)) {
      this.#drop(stale);
      this.#stopHolding(stale);
    }
    this.#current = null;
    await this.#relisten();
  }

  async #relisten(): Promise<void> {
    try {
      await this.#listener.relisten();
      logger.info("TLS listener listening again", { listen: this.#listener.addr });
    } catch (error) {
      // Tried again at the next round; meanwhile the port refuses connections.
      this.#listener.countAcceptError();
      logger.warn("TLS listener cannot listen again yet", {
        error: errorText(error),
      });
    }
  }

  #send(bound: { address: string; port: number }): void {
    const hostname = bound.address === "0.0.0.0"
      ? "127.0.0.1"
      : bound.address === "::"
      ? "::1"
      : unmapped(bound.address);
    const probe: Probe = {
      sentAtMs: this.#scheduler.monotonicMs(),
      source: hostname,
      conn: null,
      localPort: null,
      held: [],
      holding: true,
      dropped: false,
    };
    this.#current = probe;
    this.#overdueRounds = 0;
    this.#inFlight.push(probe);
    while (this.#inFlight.length > PROBES_IN_FLIGHT_MAX) {
      const oldest = this.#inFlight.shift()!;
      this.#drop(oldest);
      this.#stopHolding(oldest);
    }
    Deno.connect({ hostname, port: bound.port }).then((conn) => {
      if (probe.dropped) {
        closeQuietly(conn);
        return;
      }
      probe.conn = conn;
      probe.localPort = (conn.localAddr as Deno.NetAddr).port;
      // The listener may have accepted it already (it usually has): look again at what it held.
      for (const socket of probe.held.splice(0)) this.accepted(socket);
    }, (error: unknown) => {
      if (probe.dropped) return;
      this.#forget(probe);
      this.#stopHolding(probe);
      if (this.#current === probe) this.#current = null;
      // Out of descriptors: accepts fail as well, count it. Anything else (a firewall that
      // refuses the server's own address) says nothing about the listener: log only.
      const message = errorText(error);
      if (DESCRIPTORS_EXHAUSTED.test(message)) {
        this.#listener.countAcceptError();
        logger.warn("accept check failed: out of file descriptors", { error: message });
      } else {
        logger.debug("accept check could not connect", { error: message });
      }
    });
  }

  #arrived(probe: Probe, socket: Socket): void {
    socket.destroy();
    this.#forget(probe);
    if (this.#current === probe) {
      this.#current = null;
      logger.debug("accept check: the listener accepted its probe", {
        listen: this.#listener.addr,
        probe_ms: this.#scheduler.monotonicMs() - probe.sentAtMs,
      });
    }
  }

  /** Hands on the connections `probe` held (they are clients, or its own, unrecognised). */
  #stopHolding(probe: Probe): void {
    probe.holding = false;
    for (const socket of probe.held.splice(0)) {
      this.#acceptedSinceCheck = true;
      this.#deliver(socket);
    }
  }

  /** Removes `probe` from the probes in flight and closes its connection. */
  #forget(probe: Probe): void {
    const i = this.#inFlight.indexOf(probe);
    if (i !== -1) this.#inFlight.splice(i, 1);
    this.#drop(probe);
  }

  #drop(probe: Probe): void {
    probe.dropped = true;
    if (probe.conn !== null) closeQuietly(probe.conn);
    probe.conn = null;
  }
}
/** `::ffff:127.0.0.1` → `127.0.0.1`: a dual-stack socket may report IPv4 peers either way. */
function unmapped(address: string | undefined): string {
  if (address === undefined) return "";
  return address.startsWith("::ffff:") && address.includes(".") ? address.slice(7) : address;
}

function closeQuietly(conn: Deno.TcpConn): void {
  try {
    conn.close();
  } catch {
    // Already closed by the listener's side.
  }
}
