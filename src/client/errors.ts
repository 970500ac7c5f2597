import { wireCodeInfo } from "../wire/codes.ts";

/** A request failed with a wire ERROR; `code` is the wire code (see docs/protocol.md). */
export class LockdError extends Error {
  /** Wire code, e.g. 0x07 for WAIT_TIMEOUT. */
  readonly code: number;
  /** Wire code name, e.g. "WAIT_TIMEOUT". */
  readonly codeName: string;
  /** Whether trying again later may succeed. */
  readonly retryable: boolean;
  /** The lock the error is about ("" when none). */
  readonly lockName: string;

  /** Builds the error for wire code `code` (its name and retryability come from the code table). */
  constructor(code: number, lockName: string, message: string) {
    super(message);
    const info = wireCodeInfo(code);
    this.name = "LockdError";
    this.code = code;
    this.codeName = info.name;
    this.retryable = info.retryable;
    this.lockName = lockName;
  }
}

/**
 * Why an owned lock was lost (the same strings in every lockd client):
 * - `expired`: the server ended the ownership because its lease ran out (ERROR 0x05).
 * - `force`: an operator force-released it, or removed a waiter of the same session (0x02).
 * - `io_timeout`: the server timed the session out (0x0e).
 * - `disconnected`: the connection ended (network, server shutdown, the client was closed).
 * - `lease_unconfirmed`: no heartbeat was acknowledged in time to be sure the lease still
 *   runs (the local lease deadline passed); the server may already have given the lock away.
 * - `failover`: cluster mode: the leader changed (it died, stepped down or handed over) and the
 *   lock could not be carried over to the new one (ERROR 0x12 CLAIM_VOID, the cause then; the
 *   reclaim window ran out; or a server or client that does not reclaim, protocol version 1).
 */
export type LostReason =
  | "expired"
  | "force"
  | "io_timeout"
  | "disconnected"
  | "lease_unconfirmed"
  | "failover";

/** The reason of `lock.lost` once it is aborted. */
export class LockLostError extends Error {
  /** Why the ownership ended. */
  readonly reason: LostReason;
  /** The lock that was lost. */
  readonly lockName: string;
  /** The fencing token of the lost ownership. */
  readonly token: number;

  /**
   * Builds the error; the client creates these, applications only read them. `options.cause`:
   * what the server said, when it said something (a {@link LockdError} CLAIM_VOID).
   */
  constructor(lockName: string, token: number, reason: LostReason, options?: ErrorOptions) {
    super(`Lost lock "${lockName}" (token ${token}): ${describeLoss(reason)}`, options);
    this.name = "LockLostError";
    this.reason = reason;
    this.lockName = lockName;
    this.token = token;
  }
}

/** The client was closed, could not connect in time, or lost its connection for good. */
export class ConnectionError extends Error {
  /** Builds the error; `options.cause` keeps the underlying failure. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "ConnectionError";
  }
}

/**
 * The server broke the protocol: a reply that does not fit the request it names (an unknown
 * request id, another lock's name, a reply of the wrong type), a WELCOME outside the documented
 * bounds, a frame that does not parse, a NOT_LEADER naming something that is not an address.
 * The client closes that connection (its owned locks report `lost`, waiting acquires move to
 * the next connection), counts it (`client.protocolErrors`) and reports it
 * (`ConnectOptions.onProtocolError`); a `connect()` that meets one on every node rejects with it.
 */
export class ServerProtocolError extends ConnectionError {
  /** The node (`host:port`) that broke the protocol. */
  readonly addr: string;

  /** Builds the error; the client creates these, applications only read them. */
  constructor(addr: string, what: string, options?: ErrorOptions) {
    super(`lockd at ${addr} broke the protocol: ${what}; the connection was closed`, options);
    this.name = "ServerProtocolError";
    this.addr = addr;
  }
}

function describeLoss(reason: LostReason): string {
  switch (reason) {
    case "expired":
      return "its lease expired";
    case "force":
      return "an operator force-released it";
    case "io_timeout":
      return "the server timed the session out";
    case "disconnected":
      return "the connection to the server was lost";
    case "lease_unconfirmed":
      return "no heartbeat was acknowledged in time to be sure the lease still runs";
    case "failover":
      return "the cluster's leader changed and the lock could not be carried over to the new one " +
        "(fail-over)";
  }
}
