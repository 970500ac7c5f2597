/**
 * Counts the complete responses in the byte stream the internal `Deno.serve` writes back on one
 * connection, so the connection guard (listen.ts) knows when a keep-alive connection is idle
 * between requests: every request it passed on has had its whole response delivered. Only an
 * idle connection (or one that never completed a request) may be closed for a newcomer at the
 * connection cap (issue 19 item 2).
 *
 * The bytes come from lockd's own `Deno.serve`, whose framing is known: a status line and
 * headers, then `content-length` bytes, or a `transfer-encoding: chunked` body, or nothing (HEAD,
 * 204, 304, interim 1xx answers). Anything else — a body delimited by the end of the connection
 * (HTTP/1.0), a head or chunk line longer than any the server writes, a malformed number — makes
 * the counter stop counting: the connection is then never taken for idle, which is the safe
 * side (it still ends by the idle timeout or when either side closes). Pure: no I/O.
 *
 * @module
 */

const CR = 0x0d;
const LF = 0x0a;
/** A response head longer than this is not one of ours: stop counting. */
const RESPONSE_HEAD_BYTES_MAX = 16 * 1024;
/** A chunk-size or trailer line longer than this is not one of ours: stop counting. */
const CHUNK_LINE_BYTES_MAX = 1024;

type State =
  /** Reading a status line and headers. */
  | { readonly kind: "head" }
  /** `remaining` body bytes of a `content-length` body. */
  | { readonly kind: "length"; remaining: number }
  /** Reading a chunk-size line. */
  | { readonly kind: "chunk_size" }
  /** `remaining` bytes of chunk data, then its CRLF (counted in `remaining`). */
  | { readonly kind: "chunk_data"; remaining: number }
  /** Reading trailer lines after the last chunk, until an empty line. */
  | { readonly kind: "trailers" }
  /** A body delimited by the end of the connection, or bytes that are not understood. */
  | { readonly kind: "uncounted" };

/** Counts the responses on one connection (see the module comment). */
export class ResponseCounter {
  /** Methods of the requests passed on and not answered yet, oldest first. */
  readonly #methods: string[] = [];
  #state: State = { kind: "head" };
  /** The line or head being read (`head`, `chunk_size`, `trailers`). */
  #line: number[] = [];
  #complete = 0;

  /** Responses delivered completely so far. */
  get complete(): number {
    return this.#complete;
  }

  /** True when every request passed on has had its whole response (and counting still works). */
  get idle(): boolean {
    return this.#methods.length === 0 && this.#state.kind === "head" && this.#line.length === 0;
  }

  /** A request head with this method was passed on to the server. */
  requestSent(method: string): void {
    this.#methods.push(method);
  }

  /** Feeds bytes the server wrote (once they are delivered to the client). */
  push(bytes: Uint8Array): void {
    let offset = 0;
    while (offset < bytes.length) {
      const state = this.#state;
      switch (state.kind) {
        case "uncounted":
          return;
        case "length":
        case "chunk_data": {
          const take = Math.min(state.remaining, bytes.length - offset);
          offset += take;
          state.remaining -= take;
          if (state.remaining === 0) {
            if (state.kind === "length") this.#responseDone();
            else this.#state = { kind: "chunk_size" };
          }
          break;
        }
        case "head":
        case "chunk_size":
        case "trailers": {
          const byte = bytes[offset++];
          this.#line.push(byte);
          const limit = state.kind === "head" ? RESPONSE_HEAD_BYTES_MAX : CHUNK_LINE_BYTES_MAX;
          if (this.#line.length > limit) {
            this.#state = { kind: "uncounted" };
            return;
          }
          if (byte !== LF || this.#line[this.#line.length - 2] !== CR) break;
          if (state.kind === "head") {
            if (endsWithBlankLine(this.#line)) this.#headDone();
          } else if (state.kind === "chunk_size") {
            this.#chunkSizeDone();
          } else {
            const empty = this.#line.length === 2;
            this.#line = [];
            if (empty) this.#responseDone();
          }
          break;
        }
      }
    }
  }

  #headDone(): void {
    const text = String.fromCharCode(...this.#line);
    this.#line = [];
    const lines = text.split("\r\n");
    const status = /^HTTP\/1\.[01] (\d{3})(?: |$)/.exec(lines[0]);
    if (status === null) {
      this.#state = { kind: "uncounted" };
      return;
    }
    const code = Number(status[1]);
    if (code >= 100 && code < 200) {
      // An interim answer (100 Continue): the final response follows.
      if (code === 101) this.#state = { kind: "uncounted" };
      return;
    }
    const method = this.#methods[0];
    if (method === undefined) {
      this.#state = { kind: "uncounted" };
      return;
    }
    let length: number | null = null;
    let chunked = false;
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(":");
      if (colon <= 0) continue;
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      if (name === "content-length") {
        if (!/^\d{1,15}$/.test(value) || length !== null) {
          this.#state = { kind: "uncounted" };
          return;
        }
        length = Number(value);
      } else if (name === "transfer-encoding") {
        chunked = value.toLowerCase() === "chunked";
        if (!chunked) {
          this.#state = { kind: "uncounted" };
          return;
        }
      }
    }
    if (method === "HEAD" || code === 204 || code === 304) return this.#responseDone();
    if (chunked) {
      this.#state = { kind: "chunk_size" };
    } else if (length !== null) {
      if (length === 0) return this.#responseDone();
      this.#state = { kind: "length", remaining: length };
    } else {
      this.#state = { kind: "uncounted" };
    }
  }

  #chunkSizeDone(): void {
    const text = String.fromCharCode(...this.#line.slice(0, -2));
    this.#line = [];
    const size = /^([0-9a-fA-F]{1,12})(?:[ \t]*;.*)?$/.exec(text);
    if (size === null) {
      this.#state = { kind: "uncounted" };
      return;
    }
    const bytes = parseInt(size[1], 16);
    this.#state = bytes === 0
      ? { kind: "trailers" }
      : { kind: "chunk_data", remaining: bytes + 2 /* the CRLF after the data */ };
  }

  #responseDone(): void {
    this.#methods.shift();
    this.#complete++;
    this.#state = { kind: "head" };
  }
}

function endsWithBlankLine(line: readonly number[]): boolean {
  const n = line.length;
  return n >= 4 && line[n - 4] === CR && line[n - 3] === LF && line[n - 2] === CR &&
    line[n - 1] === LF;
}
