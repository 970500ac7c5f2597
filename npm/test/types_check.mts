// Type-checked (not run) by .ci/npm_client.sh with tsc, module "nodenext", against the
// installed package: the shipped .d.ts must serve a TypeScript program on Node.
import {
  type Client,
  connect,
  type ConnectOptions,
  type Lock,
  LockdError,
  LockLostError,
  type LostReason,
} from "lockd-client";

const options: ConnectOptions = { addr: "127.0.0.1:7400", connectTimeoutMs: 1_000 };
const client: Client = await connect(options);
const lock: Lock | null = await client.tryAcquire("x", { leaseMs: 5_000 });
if (lock !== null) {
  const token: number = lock.token;
  lock.lost.addEventListener("abort", () => {
    const reason = lock.lost.reason as LockLostError;
    const why: LostReason = reason.reason;
    console.log(token, why);
  });
  await lock.release();
}
try {
  await client.acquire("y", { waitMs: 10 });
} catch (error) {
  if (!(error instanceof LockdError) || error.codeName !== "WAIT_TIMEOUT") throw error;
}
await client.close();
