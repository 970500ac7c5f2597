/**
 * The client's timing rules as plain arithmetic (no clock, no timers): the local lease
 * deadline, the heartbeat period and the reconnect back-off. docs/protocol.md ("Writing a
 * client") states the same rules for clients in other languages.
 *
 * @module
 */

import {
  LEASE_MARGIN_MS_MIN,
  LEASE_MS_MIN,
  RECONNECT_BACKOFF_MS_MAX,
  RECONNECT_BACKOFF_MS_MIN,
} from "../limits.ts";

/** Safety margin before the end of a lease: max(lease / 10, min(50 ms, lease / 4)). */
export function leaseMarginMs(leaseMs: number): number {
  return Math.max(leaseMs / 10, Math.min(LEASE_MARGIN_MS_MIN, leaseMs / 4));
}

/**
 * When an ownership stops being safe to use, on the client's monotonic clock.
 *
 * `confirmedSendMs` is the send time of the newest request whose effect on the lease is known:
 * the ACQUIRE that was granted, or a later HEARTBEAT whose HEARTBEAT_ACK has arrived. The
 * server ends the ownership no earlier than that send time plus the lease (it processed the
 * request after it was sent), and no earlier than that send time plus its I/O timeout (it
 * heard the request): whichever bound is shorter, minus the margin.
 */
export function localDeadlineMs(
  confirmedSendMs: number,
  leaseMs: number,
  ioTimeoutMs: number,
): number {
  const boundMs = Math.min(leaseMs, ioTimeoutMs);
  return confirmedSendMs + boundMs - leaseMarginMs(boundMs);
}

/**
 * Time between heartbeats: a third of the smallest of the I/O timeout and every lease the
 * session owns or waits for, so that a grant after a long wait is confirmed by a recent one.
 */
export function heartbeatIntervalMs(ioTimeoutMs: number, leasesMs: Iterable<number>): number {
  let smallestMs = ioTimeoutMs;
  for (const leaseMs of leasesMs) smallestMs = Math.min(smallestMs, leaseMs);
  return smallestMs / 3;
}

/** The lease the server will grant for a requested one (0 = its default), from WELCOME. */
export function effectiveLeaseMs(
  requestedMs: number,
  welcome: { leaseDefaultMs: number; leaseMaxMs: number },
): number {
  if (requestedMs === 0) return welcome.leaseDefaultMs;
  return Math.min(welcome.leaseMaxMs, Math.max(LEASE_MS_MIN, requestedMs));
}

/** Full-jitter back-off: random(0, min(5000, 50 * 2^attempt)) ms; `random` is in [0, 1). */
export function reconnectDelayMs(attempt: number, random: () => number): number {
  const capMs = Math.min(
    RECONNECT_BACKOFF_MS_MAX,
    RECONNECT_BACKOFF_MS_MIN * 2 ** Math.min(attempt, 30),
  );
  return random() * capMs;
}
