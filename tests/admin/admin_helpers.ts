import type { Client, Lock } from "../../mod.ts";
import type { TestServer } from "../helpers/start_server.ts";
import { eventually } from "../helpers/start_server.ts";

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

/** The exact body of a problem answer, as the server writes it. */
export function problemText(slug: string, title: string, status: number, detail: string): string {
  return JSON.stringify({ type: `https://lockd.dev/problems/${slug}`, title, status, detail });
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
