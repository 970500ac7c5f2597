/**
 * Is the leader alive? A standby asks before it sends a client to the leader named in etcd:
 * right after the leader died, etcd still names it for up to a TTL, and a client sent there
 * would only meet a refused or silent connection and back off. A probe that fails makes the
 * standby hold the client's HELLO until a new leader is elected instead.
 *
 * Alive means the leader's process answers at the application level within the timeout: a
 * WELCOME to a HELLO on a plain listener (a leader that refuses it, shutting down during a
 * planned hand-over, is no leader to send clients to: the standby holds them until the next one
 * serves), a TLS handshake that got as far as the server's answer on a TLS one (a refused
 * certificate still proves a live process). A frozen process (SIGSTOP) fails: the kernel accepts
 * the connection, nothing answers.
 *
 * @module
 */

import type { Scheduler } from "../clock.ts";
import { parseHostPort } from "../host_port.ts";
import { encodeFrame } from "../wire/frame.ts";
import { FrameReader } from "../wire/frame_reader.ts";
import { PROTOCOL_VERSION } from "../wire/messages.ts";

/** A WELCOME or an ERROR fits in this many bytes (a longer reply is no lockd's). */
const PROBE_REPLY_BYTES_MAX = 4_096;

/** Probes `addr`; resolves true when the process behind it answered within `timeoutMs`. */
export type LeaderProbe = (addr: string, timeoutMs: number) => Promise<boolean>;

/**
 * The probe for a plain TCP protocol listener (`tls` false) or a TLS one; its timeout runs on
 * `scheduler` (the server's).
 */
export function leaderProbe(tls: boolean, scheduler: Scheduler): LeaderProbe {
  return (addr, timeoutMs) => probe(addr, tls, timeoutMs, scheduler);
}

async function probe(
  addr: string,
  tls: boolean,
  timeoutMs: number,
  scheduler: Scheduler,
): Promise<boolean> {
  const { hostname, port } = parseHostPort(addr);
  const abort = new AbortController();
  let conn: Deno.Conn | null = null;
  const timer = scheduler.setTimer(() => {
    abort.abort();
    try {
      conn?.close(); // ends a pending handshake or read
    } catch {
      // already closed
    }
  }, timeoutMs);
  try {
    conn = await Deno.connect({ hostname, port, signal: abort.signal });
    if (abort.signal.aborted) return false;
    if (tls) {
      try {
        const secure = await Deno.startTls(conn as Deno.TcpConn, { hostname });
        conn = secure;
        // startTls only wraps the socket: the handshake (the server's answer) happens here.
        await secure.handshake();
        return !abort.signal.aborted;
      } catch (error) {
        // A certificate or handshake refusal came from a live server; a closed socket did not.
        return !abort.signal.aborted && !(error instanceof Deno.errors.ConnectionReset) &&
          !(error instanceof Deno.errors.BadResource) &&
          !(error instanceof Deno.errors.UnexpectedEof);
      }
    }
    await conn.write(
      encodeFrame({ type: "hello", version: PROTOCOL_VERSION, clientName: "lockd-leader-probe" }),
    );
    // A leader that serves WELCOMEs; one that refuses (shutting down: a planned hand-over is
    // under way) is no leader to send a client to: the standby holds the HELLO instead.
    const reader = new FrameReader(PROBE_REPLY_BYTES_MAX);
    const buffer = new Uint8Array(PROBE_REPLY_BYTES_MAX);
    for (;;) {
      const n = await conn.read(buffer);
      if (abort.signal.aborted || n === null || n === 0) return false;
      reader.push(buffer.subarray(0, n));
      const reply = reader.next();
      if (reply !== null) return reply.type === "welcome";
    }
  } catch {
    return false;
  } finally {
    timer.cancel();
    try {
      conn?.close();
    } catch {
      // closed by the timer
    }
  }
}
