// @ts-check
/// <reference lib="dom" />
/**
 * The console's access to the admin API: JSON requests with the bearer token
 * (kept for this tab only, in sessionStorage), and the event stream read with
 * fetch (EventSource cannot send an Authorization header).
 */

const TOKEN_KEY = "lockd-admin-token";

/** An answer other than 2xx; `problem` is the RFC 9457 body when there is one. */
export class HttpError extends Error {
  /**
   * @param {number} status
   * @param {{ type?: string, title?: string, detail?: string } | null} problem
   */
  constructor(status, problem) {
    super(problem?.detail ?? problem?.title ?? `HTTP ${status}`);
    this.name = "HttpError";
    this.status = status;
    this.problem = problem;
  }

  /** The problem's slug (`lock-not-found`, ...), or "". */
  get slug() {
    return (this.problem?.type ?? "").split("/").pop() ?? "";
  }
}

/** @returns {string | null} */
export function savedToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** @param {string} token */
export function saveToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** @returns {Record<string, string>} */
function headers() {
  /** @type {Record<string, string>} */
  const result = { accept: "application/json" };
  const token = savedToken();
  if (token !== null) result.authorization = `Bearer ${token}`;
  return result;
}

/**
 * One admin API request; resolves to the JSON body (null for 204), rejects with HttpError.
 * @param {string} path
 * @param {{ method?: string, signal?: AbortSignal }} [options]
 * @returns {Promise<any>}
 */
export async function api(path, options = {}) {
  const response = await fetch(path, {
    method: options.method ?? "GET",
    headers: headers(),
    cache: "no-store",
    credentials: "omit",
    redirect: "error",
    signal: options.signal,
  });
  const text = await response.text();
  let body = null;
  try {
    body = text === "" ? null : JSON.parse(text);
  } catch {
    body = null;
  }
  if (!response.ok) throw new HttpError(response.status, body);
  return body;
}

/** `/api/locks/{name}` with the name as one percent-encoded segment. */
/** @param {string} name */
export function lockPath(name) {
  return `/api/locks/${encodeURIComponent(name)}`;
}

/**
 * Reads `GET /api/events` until it ends, calling `onEvent(name, data)` for each event.
 * Resolves when the server ends the stream, rejects on an error (HttpError for a status).
 * @param {(name: string, data: any) => void} onEvent
 * @param {AbortSignal} signal
 */
export async function readEvents(onEvent, signal) {
  const response = await fetch("/api/events", {
    headers: { ...headers(), accept: "text/event-stream" },
    cache: "no-store",
    credentials: "omit",
    redirect: "error",
    signal,
  });
  if (!response.ok || response.body === null) {
    let problem = null;
    try {
      problem = await response.json();
    } catch {
      problem = null;
    }
    throw new HttpError(response.status, problem);
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      let data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) name = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (data !== "") onEvent(name, JSON.parse(data));
    }
  }
}
