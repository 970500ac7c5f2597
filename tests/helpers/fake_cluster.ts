/**
 * In-process lockd servers in cluster mode on the in-memory etcd (fake_etcd.ts) and one
 * ManualScheduler: real listeners on loopback port 0, manual time, no etcd process.
 */

import type { ManualScheduler } from "../../src/clock.ts";
import type { ServerConfig } from "../../src/config.ts";
import { type FakeEtcd, settle } from "./fake_etcd.ts";
import { startTestServer, type TestServer } from "./start_server.ts";

export const FAKE_TTL_MS = 2_000;

/** Starts one cluster node named `name` on `etcd` (TTL 2 s) and lets its first steps settle. */
export async function startFakeClusterServer(
  etcd: FakeEtcd,
  scheduler: ManualScheduler,
  name: string,
  config: Partial<ServerConfig> = {},
): Promise<TestServer> {
  const t = await startTestServer({
    clusterEtcd: [...etcd.endpoints],
    cluster: "test",
    clusterNode: name,
    clusterTtlMs: FAKE_TTL_MS,
    ...config,
  }, { scheduler, etcd: etcd.client() });
  await settle();
  return t;
}

/** Moves manual time in small steps, letting etcd answers and socket reads settle between them. */
export async function runFor(scheduler: ManualScheduler, ms: number, stepMs = 10): Promise<void> {
  for (let t = 0; t < ms; t += stepMs) {
    scheduler.advance(Math.min(stepMs, ms - t));
    await settle();
  }
}
