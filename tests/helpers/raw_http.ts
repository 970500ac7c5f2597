import { parseHostPort } from "../../src/host_port.ts";

/** One HTTP/1.x response as read from a raw socket. */
export interface RawResponse {
  status: number;
  /** Header names lower-cased; the last value wins. */
  headers: Map<string, string>;
  body: string;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * A bare HTTP/1.x peer for tests that need what `fetch` will not send (any
 * `Host`, no `Host`, HTTP/1.0, half a request, pipelining) or want to see
 * exactly when the server closes the connection.
 */
export class RawHttp implements Disposable {
  readonly conn: Deno.TcpConn;
  #buffered = new Uint8Array(0);
  #closed = false;

  private constructor(conn: Deno.TcpConn) {
    this.conn = conn;
  }

  static async connect(addr: string): Promise<RawHttp> {
    const at = parseHostPort(addr);
    return new RawHttp(await Deno.connect({ hostname: at.hostname, port: at.port }));
  }

  async send(text: string | Uint8Array): Promise<void> {
    const bytes = typeof text === "string" ? encoder.encode(text) : text;
    let offset = 0;
    while (offset < bytes.length) offset += await this.conn.write(bytes.subarray(offset));
  }

  /** Reads more bytes; false at end of stream (or a reset). */
  async #fill(): Promise<boolean> {
    const chunk = new Uint8Array(64 * 1024);
    let n: number | null;
    try {
      n = await this.conn.read(chunk);
    } catch {
      n = null;
    }
    if (n === null) return false;
    const next = new Uint8Array(this.#buffered.length + n);
    next.set(this.#buffered);
    next.set(chunk.subarray(0, n), this.#buffered.length);
    this.#buffered = next;
    return true;
  }

  /** Reads one response (Content-Length or chunked body, or up to the end of stream). */
  async response(): Promise<RawResponse> {
    let headEnd: number;
    while ((headEnd = indexOfCrlfCrlf(this.#buffered)) < 0) {
      if (!(await this.#fill())) throw new Error("connection closed before a response head");
    }
    const head = decoder.decode(this.#buffered.subarray(0, headEnd));
    let rest = this.#buffered.subarray(headEnd + 4);
    const [statusLine, ...lines] = head.split("\r\n");
    const status = Number(statusLine.split(" ")[1]);
    const headers = new Map<string, string>();
    for (const line of lines) {
      const colon = line.indexOf(":");
      headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
    }
    let body: Uint8Array;
    const length = headers.get("content-length");
    if (length !== undefined) {
      while (rest.length < Number(length)) {
        this.#buffered = rest;
        if (!(await this.#fill())) throw new Error("connection closed inside a response body");
        rest = this.#buffered;
      }
      body = rest.subarray(0, Number(length));
      this.#buffered = rest.subarray(Number(length));
    } else if (headers.get("transfer-encoding") === "chunked") {
      const parts: Uint8Array[] = [];
      for (;;) {
        let lineEnd: number;
        while ((lineEnd = indexOf(rest, "\r\n")) < 0) {
          this.#buffered = rest;
          if (!(await this.#fill())) throw new Error("connection closed inside a chunk");
          rest = this.#buffered;
        }
        const size = parseInt(decoder.decode(rest.subarray(0, lineEnd)), 16);
        while (rest.length < lineEnd + 2 + size + 2) {
          this.#buffered = rest;
          if (!(await this.#fill())) throw new Error("connection closed inside a chunk");
          rest = this.#buffered;
        }
        parts.push(rest.slice(lineEnd + 2, lineEnd + 2 + size));
        rest = rest.subarray(lineEnd + 2 + size + 2);
        if (size === 0) break;
      }
      body = concat(parts);
      this.#buffered = rest;
    } else {
      this.#buffered = rest;
      while (await this.#fill());
      body = this.#buffered;
      this.#buffered = new Uint8Array(0);
    }
    return { status, headers, body: decoder.decode(body) };
  }

  /** Resolves true when the server closes the connection (end of stream or reset) within `timeoutMs`. */
  async closedWithin(timeoutMs: number): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), timeoutMs);
    });
    try {
      for (;;) {
        const more = await Promise.race([this.#fill(), timeout]);
        if (more === "timeout") return false;
        if (!more) return true;
      }
    } finally {
      clearTimeout(timer);
    }
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.conn.close();
    } catch {
      // Already closed.
    }
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/** Sends one request on a fresh connection and reads one response. */
export async function rawRequest(addr: string, request: string): Promise<RawResponse> {
  using client = await RawHttp.connect(addr);
  await client.send(request);
  return await client.response();
}

function indexOfCrlfCrlf(bytes: Uint8Array): number {
  return indexOf(bytes, "\r\n\r\n");
}

function indexOf(bytes: Uint8Array, text: string): number {
  const needle = encoder.encode(text);
  outer: for (let i = 0; i + needle.length <= bytes.length; i++) {
    for (let j = 0; j < needle.length; j++) if (bytes[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}
