/**
 * The handshake's rules that are not the session's state machine: which HELLO is refused before
 * the service is asked, and what WELCOME says (docs/protocol.md, "Handshake" and "Versioning").
 *
 * @module
 */

import type { Peer } from "../core/types.ts";
import { CLIENT_NAME_BYTES_MAX } from "../limits.ts";
import type { LockService } from "../service/lock_service.ts";
import { SESSION_ERRORS, type WireError } from "../service/wire_errors.ts";
import type { Welcome } from "../wire/messages.ts";

/**
 * The protocol versions a HELLO may ask for; any other gets UNSUPPORTED_VERSION. A session
 * speaks the version its HELLO asked for (WELCOME confirms it): version 2's messages and fields.
 */
const SESSION_PROTOCOL_VERSIONS: readonly number[] = [1, 2];

/** The first failed check of a HELLO, in the documented order, or null. */
export function helloRefusal(version: number, clientName: string): WireError | null {
  if (new TextEncoder().encode(clientName).length > CLIENT_NAME_BYTES_MAX) {
    return SESSION_ERRORS.clientNameTooLong(CLIENT_NAME_BYTES_MAX);
  }
  if (!SESSION_PROTOCOL_VERSIONS.includes(version)) {
    return SESSION_ERRORS.unsupportedVersion(version, SESSION_PROTOCOL_VERSIONS);
  }
  return null;
}

/** What a WELCOME tells of the server, besides the session. */
export interface WelcomeBounds {
  readonly serverVersion: string;
  readonly ioTimeoutMs: number;
  readonly leaseDefaultMs: number;
  readonly leaseMaxMs: number;
}

/**
 * The WELCOME of a session opened at `version`. Version 2 adds the term (0 on a single node),
 * the reclaim window, and `valueBytesMax` (`-max-lock-value-bytes`).
 */
export function welcomeFor(
  version: number,
  peer: Peer,
  bounds: WelcomeBounds,
  service: LockService,
): Welcome {
  const welcome: Welcome = {
    type: "welcome",
    version,
    serverVersion: bounds.serverVersion,
    sessionId: peer.sessionId,
    ioTimeoutMs: bounds.ioTimeoutMs,
    leaseDefaultMs: bounds.leaseDefaultMs,
    leaseMaxMs: bounds.leaseMaxMs,
  };
  if (version >= 2) {
    welcome.term = service.term;
    welcome.reclaimWindowMs = service.reclaimWindowMs;
    welcome.valueBytesMax = service.valueBytesMax;
  }
  return welcome;
}
