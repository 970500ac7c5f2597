/**
 * Test helpers for a real etcd: whether to run etcd tests at all, a client for a cluster, a
 * per-node set of proxies that can cut one node off from every etcd member, and polling.
 */

import { etcdAvailable } from "../../bench/etcd_proc.ts";
import { systemScheduler } from "../../src/clock.ts";
import { EtcdHttpClient } from "../../src/cluster/etcd_http.ts";
import { ChaosProxy } from "./chaos_proxy.ts";

/**
 * Tests that need a real etcd are skipped when no `etcd` binary is on PATH, unless
 * `LOCKD_REQUIRE_ETCD` is set (CI sets it, so a failed install fails the run instead).
 */
export const skipWithoutEtcd = !etcdAvailable() && !Deno.env.get("LOCKD_REQUIRE_ETCD");

export function etcdClient(endpoints: readonly string[], requestTimeoutMs = 1_000): EtcdHttpClient {
  return new EtcdHttpClient({ endpoints, requestTimeoutMs, scheduler: systemScheduler });
}

/** One proxy per etcd member: the node dials `urls`; `partition()` cuts it off from all. */
export class EtcdLink implements AsyncDisposable {
  readonly #proxies: ChaosProxy[];
  private constructor(proxies: ChaosProxy[]) {
    this.#proxies = proxies;
  }

  static open(clientUrls: readonly string[]): EtcdLink {
    return new EtcdLink(clientUrls.map((u) => new ChaosProxy(new URL(u).host)));
  }

  get urls(): string[] {
    return this.#proxies.map((p) => `http://${p.addr}`);
  }

  partition(): void {
    for (const p of this.#proxies) p.partition();
  }

  heal(): void {
    for (const p of this.#proxies) p.heal();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await Promise.all(this.#proxies.map((p) => p[Symbol.asyncDispose]()));
  }
}

/** Polls `check` every 10 ms until it returns true or `timeoutMs` passes (then throws `what`). */
export async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
): Promise<number> {
  const startMs = performance.now();
  while (!(await check())) {
    if (performance.now() - startMs > timeoutMs) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return performance.now() - startMs;
}
