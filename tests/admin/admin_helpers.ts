import type { Client, Lock } from "../../mod.ts";
import { ManualScheduler, rfc3339 } from "../../src/clock.ts";
import type { TestServer } from "../helpers/start_server.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

/** Wall-clock start of the manual clock of `start()`, and its RFC 3339 text. */
export const START_WALL_MS = Date.UTC(2026, 0, 1);
export const START = rfc3339(START_WALL_MS);

/**
 * A server with both HTTP listeners and a manual scheduler, so timestamps in bodies are exact
 * and timers (leases, retries) run only when the test moves time.
 */
export async function start(
  config: Parameters<typeof startTestServer>[0] = {},
): Promise<TestServer & { scheduler: ManualScheduler }> {
  const scheduler = new ManualScheduler(START_WALL_MS);
  const t = await startTestServer(
    { adminListen: "127.0.0.1:0", opsListen: "127.0.0.1:0", ...config },
    { scheduler },
  );
  return Object.assign(t, { scheduler });
}

/** One admin (or ops) HTTP answer with its body read (so no body is leaked). */
export interface HttpAnswer {
  status: number;
  headers: Headers;
  text: string;
  /** The parsed body when it is JSON, else undefined. */
  json: unknown;
}

/** Sends one request to `addr` and reads the whole answer. */
export async function http(
  addr: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
): Promise<HttpAnswer> {
  const response = await fetch(`http://${addr}${path}`, { method, headers });
  const text = await response.text();
  const type = response.headers.get("content-type") ?? "";
  return {
    status: response.status,
    headers: response.headers,
    text,
    json: type.includes("json") && text !== "" ? JSON.parse(text) : undefined,
  };
}

/** Starts `client.acquire(name)` and waits until the server has queued it; returns its remote address. */
export async function queue(
  t: TestServer,
  client: Client,
  name: string,
): Promise<{ granted: Promise<Lock>; remoteAddr: string; sessionId: number }> {
  const engine = t.server.context.engine;
  const before = engine.getLock(name)?.waiters.length ?? 0;
  const granted = client.acquire(name);
  // A rejection is observed by the test when it matters; never leave it unhandled.
  granted.catch(() => {});
  await eventually(
    () => (engine.getLock(name)?.waiters.length ?? 0) === before + 1,
    `a waiter for "${name}" queued`,
  );
  const waiter = engine.getLock(name)!.waiters[before];
  return { granted, remoteAddr: waiter.remoteAddr, sessionId: waiter.sessionId };
}
