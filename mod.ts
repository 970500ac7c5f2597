/**
 * The lockd client library.
 *
 * ```ts
 * import { connect } from "./mod.ts";
 *
 * await using client = await connect({ addr: "127.0.0.1:7400" });
 * await using lock = await client.acquire("jobs/nightly", { leaseMs: 10_000 });
 * console.log("owned with fencing token", lock.token);
 * lock.lost.addEventListener("abort", () => console.error(lock.lost.reason));
 * ```
 *
 * @module
 */
export {
  type AcquireOptions,
  Client,
  connect,
  type ConnectOptions,
  type Lock,
} from "./src/client/client.ts";
export type { ClientTlsOptions } from "./src/client/connection.ts";
export {
  ConnectionError,
  LockdError,
  LockLostError,
  type LostReason,
} from "./src/client/errors.ts";
export { WIRE_CODES, type WireCodeInfo, type WireCodeName } from "./src/protocol/codes.ts";
