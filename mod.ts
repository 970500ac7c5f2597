/**
 * The lockd client library: named exclusive locks from a lockd server, with a FIFO queue per
 * lock, leases kept alive by heartbeats, and a fencing token with every grant. It runs
 * unchanged on Deno 2, Node 20+ and Bun (it uses `node:net` and `node:tls`, nothing else).
 *
 * ```ts
 * import { connect, type Lock, LockdError } from "./mod.ts";
 *
 * export async function runNightly(write: (token: number) => Promise<void>): Promise<void> {
 *   await using client = await connect({ addr: "127.0.0.1:7400", connectTimeoutMs: 2_000 });
 *   let lock: Lock;
 *   try {
 *     // Waits in the FIFO queue at most 30 s (on this client's clock).
 *     lock = await client.acquire("jobs/nightly", { leaseMs: 10_000, waitMs: 30_000 });
 *   } catch (error) {
 *     if (error instanceof LockdError && error.codeName === "WAIT_TIMEOUT") return;
 *     throw error;
 *   }
 *   await using _held = lock; // released when the block ends
 *   // `lost` fires when the ownership may have ended: lease expired or not confirmed in
 *   // time, force-released, session timed out, connection lost.
 *   lock.lost.addEventListener("abort", () => console.error(lock.lost.reason.message));
 *   lock.lost.throwIfAborted();
 *   await write(lock.token); // the guarded resource rejects tokens older than the newest
 * }
 * ```
 *
 * @module
 */
export {
  type AcquireOptions,
  type Client,
  connect,
  type ConnectOptions,
  type Lock,
} from "./src/client/client.ts";
export type { ClientTlsOptions } from "./src/client/transport.ts";
export type { LockState } from "./src/client/lock_handle.ts";
export type {
  LockEndReason,
  LockHolder,
  LockInfo,
  Observation,
  ObserveOptions,
} from "./src/client/observe.ts";
export {
  ConnectionError,
  LockdError,
  LockLostError,
  type LostReason,
  ServerProtocolError,
} from "./src/client/errors.ts";
export { type ForeignProtocol, WrongProtocolError } from "./src/client/wrong_protocol.ts";
export { WIRE_CODES, type WireCodeInfo, type WireCodeName } from "./src/wire/codes.ts";
export type { Clock, Scheduler, Timer } from "./src/clock.ts";
