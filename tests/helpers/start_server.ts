import type { ServerConfig } from "../../src/config.ts";
import type { ServerDeps } from "../../src/server/deps.ts";
import { type ServerHandle, startServer } from "../../src/server/start.ts";
import type { Actor } from "../../src/log/audit_records.ts";
import { MemorySink } from "./memory_sink.ts";

/** The operator of admin actions that tests take through the service directly. */
export const TEST_ACTOR: Actor = { remote_addr: "127.0.0.1:1", auth: "none" };

export interface TestServer extends AsyncDisposable {
  server: ServerHandle;
  audit: MemorySink;
  addr: string;
}

/**
 * Starts a real server on loopback port 0 with an in-memory audit sink. Without a `dataDir`
 * its tokens are not durable (tests must not leave a `lockd-data/` in the repository).
 */
export async function startTestServer(
  config: Partial<ServerConfig> = {},
  deps: ServerDeps = {},
): Promise<TestServer> {
  const audit = new MemorySink();
  const server = await startServer(
    { listen: "127.0.0.1:0", shutdownGraceMs: 0, dataDir: null, ...config },
    { auditSink: audit, ...deps },
  );
  return {
    server,
    audit,
    addr: server.addr,
    [Symbol.asyncDispose]: () => server.shutdown(),
  };
}

/** Resolves when `check` holds, polling; fails after `timeoutMs`. */
export async function eventually(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 5_000,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`Timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
