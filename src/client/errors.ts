import { wireCodeInfo } from "../protocol/codes.ts";

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

/** Why an owned lock was lost. */
export type LostReason = "expired" | "force" | "io_timeout" | "disconnected";

/** The reason of `lock.lost` once it is aborted. */
export class LockLostError extends Error {
  readonly reason: LostReason;
  readonly lockName: string;
  readonly token: number;

  constructor(lockName: string, token: number, reason: LostReason) {
    super(`Lost lock "${lockName}" (token ${token}): ${describeLoss(reason)}`);
    this.name = "LockLostError";
    this.reason = reason;
    this.lockName = lockName;
    this.token = token;
  }
}

/** The client was closed, or could not connect. */
export class ConnectionError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "ConnectionError";
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
  }
}
