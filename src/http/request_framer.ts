/**
 * Finds the requests in the byte stream of one HTTP/1.x connection, so the
 * connection guard (listen.ts) knows when a request head has arrived (the
 * header timeout), when a request is over (the next head starts a new
 * deadline), and can add the peer's address to each head before passing the
 * bytes to the internal `Deno.serve`.
 *
 * It accepts less than HTTP allows, so that it and the server behind it can
 * never disagree on where a request ends (request smuggling): CRLF line ends
 * only, no obsolete line folding, at most one `Host` and one
 * `Content-Length`, no `Transfer-Encoding` (lockd's HTTP APIs take no request
 * bodies; a small one with a `Content-Length` is passed on), no protocol
 * upgrades. HTTP/1.1 requests must carry `Host` (RFC 9112 §3.2).
 *
 * @module
 */

import type { ProblemSlug } from "./problem.ts";

/** What to do with bytes pushed into the framer, in order. */
export type FramerStep =
  /** Pass these bytes on: a complete (rewritten) request head (with `head`), or body bytes. */
  | { readonly kind: "forward"; readonly bytes: Uint8Array; readonly head?: RequestHead }
  /** Answer with this problem and close; nothing after it is read. */
  | { readonly kind: "refuse"; readonly slug: ProblemSlug; readonly detail: string };

/** What the guard may look at in a request head before passing it on. */
export interface RequestHead {
  readonly method: string;
  /** The request target as sent (origin form: path and query). */
  readonly target: string;
  /** Header fields by lower-case name (the first of each name), the injected one excluded. */
  readonly fields: ReadonlyMap<string, string>;
}

export interface RequestFramerOptions {
  /** Longest request head (request line and headers, final CRLF included). */
  readonly headBytesMax: number;
  /** Largest request body (`Content-Length`). */
  readonly bodyBytesMax: number;
  /**
   * Added as the first header of every head, e.g. `x-lockd-peer-1f2e: 10.0.0.1:5000`;
   * a header of the same name sent by the client is dropped.
   */
  readonly injectedHeaderName: string;
  readonly injectedHeaderValue: string;
}

const CR = 0x0d;
const LF = 0x0a;
const REQUEST_LINE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+ [\x21-\x7e]+ HTTP\/1\.([01])$/;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** The bytes a token (a method, a header name) is made of, by value (RFC 9110 §5.6.2). */
const TOKEN_BYTE: readonly boolean[] = Array.from(
  { length: 256 },
  (_, byte) => byte < 0x80 && /^[!#$%&'*+.^_`|~0-9A-Za-z-]$/.test(String.fromCharCode(byte)),
);
const encoder = new TextEncoder();

type State =
  | { readonly kind: "head" }
  | { readonly kind: "body"; remaining: number }
  | { readonly kind: "failed" };

/** Incremental request framer for one connection (see the module comment). */
export class RequestFramer {
  readonly #options: RequestFramerOptions;
  readonly #injected: Uint8Array;
  readonly #injectedName: string;
  #state: State = { kind: "head" };
  /** Bytes of the head being read. */
  #head = new Uint8Array(0);
  #headLength = 0;
  /** How far the head has been searched for its end, so every byte is scanned once. */
  #scanned = 0;
  #requestsComplete = 0;
  #headsForwarded = 0;

  constructor(options: RequestFramerOptions) {
    this.#options = options;
    this.#injectedName = options.injectedHeaderName.toLowerCase();
    this.#injected = encoder.encode(
      `${options.injectedHeaderName}: ${options.injectedHeaderValue}\r\n`,
    );
  }

  /** True from the first byte of a request until the last byte of its body. */
  get inRequest(): boolean {
    return this.#state.kind === "body" || this.#headLength > 0;
  }

  /** Request heads passed on so far. */
  get headsForwarded(): number {
    return this.#headsForwarded;
  }

  /** Requests whose head and body have passed completely. */
  get requestsComplete(): number {
    return this.#requestsComplete;
  }

  /** Feeds bytes read from the client; returns what to do with them. */
  push(chunk: Uint8Array): FramerStep[] {
    const steps: FramerStep[] = [];
    let offset = 0;
    while (offset < chunk.length) {
      const state = this.#state;
      if (state.kind === "failed") break;
      if (state.kind === "body") {
        const take = Math.min(state.remaining, chunk.length - offset);
        steps.push({ kind: "forward", bytes: chunk.subarray(offset, offset + take) });
        offset += take;
        state.remaining -= take;
        if (state.remaining === 0) this.#endRequest();
        continue;
      }
      // Empty lines before a request line are ignored (RFC 9112 §2.2), e.g. a CRLF after a body.
      if (this.#headLength === 0) {
        while (offset < chunk.length && (chunk[offset] === CR || chunk[offset] === LF)) offset++;
        if (offset === chunk.length) break;
        // A request line starts with a method token: any other first byte is refused at once,
        // not after the header timeout. A lockd frame starts with 0x00 (its length prefix): a
        // lock client given this port instead of -listen is told so in its first round trip.
        if (!TOKEN_BYTE[chunk[offset]]) {
          steps.push(this.#fail(
            "bad-request",
            chunk[offset] === 0x00
              ? "This is an HTTP listener of lockd (the admin API or the ops listener), and the " +
                "bytes sent are a lockd protocol frame: lock clients (lockd run -addr, " +
                "connect()) take the address of -listen"
              : "The request line is not METHOD TARGET HTTP/1.x (only HTTP/1.0 and 1.1 are served)",
          ));
          break;
        }
      }
      const room = this.#options.headBytesMax - this.#headLength;
      const take = Math.min(room, chunk.length - offset);
      this.#append(chunk.subarray(offset, offset + take));
      offset += take;
      const end = this.#findHeadEnd();
      if (end < 0) {
        if (this.#headLength >= this.#options.headBytesMax) {
          steps.push(this.#fail(
            "headers-too-large",
            `The request head is longer than ${this.#options.headBytesMax} bytes`,
          ));
        }
        continue;
      }
      // Bytes after the head's end belong to the body or the next request: give them back.
      const extra = this.#headLength - end;
      offset -= extra;
      this.#headLength = end;
      const step = this.#completeHead();
      steps.push(step);
      if (step.kind === "refuse") break;
    }
    return steps;
  }

  #append(bytes: Uint8Array): void {
    const needed = this.#headLength + bytes.length;
    if (needed > this.#head.length) {
      const next = new Uint8Array(
        Math.min(this.#options.headBytesMax, Math.max(needed, 1024, this.#head.length * 2)),
      );
      next.set(this.#head.subarray(0, this.#headLength));
      this.#head = next;
    }
    this.#head.set(bytes, this.#headLength);
    this.#headLength = needed;
  }

  /** Length of the head including its final CRLF CRLF, or -1. */
  #findHeadEnd(): number {
    const head = this.#head;
    for (let i = Math.max(3, this.#scanned); i < this.#headLength; i++) {
      if (head[i] === LF && head[i - 1] === CR && head[i - 2] === LF && head[i - 3] === CR) {
        this.#scanned = 0;
        return i + 1;
      }
    }
    this.#scanned = Math.max(3, this.#headLength);
    return -1;
  }

  #fail(slug: ProblemSlug, detail: string): FramerStep {
    this.#state = { kind: "failed" };
    return { kind: "refuse", slug, detail };
  }

  #endRequest(): void {
    this.#state = { kind: "head" };
    this.#requestsComplete++;
  }

  /** Validates the head in `#head[0, #headLength)` and rewrites it. */
  #completeHead(): FramerStep {
    const head = this.#head.subarray(0, this.#headLength);
    this.#headLength = 0;
    const lines = headLines(head);
    if (lines === null) {
      return this.#fail("bad-request", "Lines of a request head must end with CRLF");
    }
    const requestLine = ascii(lines[0]);
    const version = REQUEST_LINE.exec(requestLine);
    if (version === null) {
      return this.#fail(
        "bad-request",
        "The request line is not METHOD TARGET HTTP/1.x (only HTTP/1.0 and 1.1 are served)",
      );
    }
    const read = this.#readFields(lines);
    if (!("kept" in read)) return read;
    if (read.hosts > 1) return this.#fail("bad-request", "More than one Host header");
    if (read.hosts === 0 && version[1] === "1") {
      return this.#fail("bad-request", "HTTP/1.1 requests must have a Host header");
    }
    const bodyBytes = read.contentLength ?? 0;
    if (bodyBytes > this.#options.bodyBytesMax) {
      return this.#fail(
        "body-too-large",
        `The request body has ${bodyBytes} bytes; at most ${this.#options.bodyBytesMax} are accepted`,
      );
    }
    const out = rebuiltHead(lines[0], this.#injected, read.kept);
    this.#headsForwarded++;
    if (bodyBytes === 0) this.#endRequest();
    else this.#state = { kind: "body", remaining: bodyBytes };
    const [method, target] = requestLine.split(" ");
    return { kind: "forward", bytes: out, head: { method, target, fields: read.fields } };
  }

  /** Checks the header lines; the ones kept, the first value of each field, the counts. */
  #readFields(lines: Uint8Array[]): HeadFields | FramerStep {
    let hosts = 0;
    let contentLength: number | null = null;
    const kept: Uint8Array[] = [];
    const fields = new Map<string, string>();
    for (let n = 1; n < lines.length; n++) {
      const line = lines[n];
      if (line[0] === 0x20 || line[0] === 0x09) {
        return this.#fail("bad-request", "Folded header lines are not accepted");
      }
      const colon = line.indexOf(0x3a);
      const name = colon <= 0 ? "" : ascii(line.subarray(0, colon)).toLowerCase();
      if (!HEADER_NAME.test(name)) {
        return this.#fail("bad-request", "A header line has no valid name");
      }
      for (let i = colon + 1; i < line.length; i++) {
        const byte = line[i];
        if ((byte < 0x20 && byte !== 0x09) || byte === 0x7f) {
          return this.#fail("bad-request", `Header "${name}" has a control character`);
        }
      }
      const value = () => ascii(line.subarray(colon + 1)).trim();
      if (name === this.#injectedName) continue;
      if (!fields.has(name)) fields.set(name, value());
      if (name === "host") hosts++;
      if (name === "content-length") {
        if (contentLength !== null) {
          return this.#fail("bad-request", "More than one Content-Length header");
        }
        const text = value();
        if (!/^\d{1,15}$/.test(text)) {
          return this.#fail("bad-request", "Content-Length is not a number");
        }
        contentLength = Number(text);
      }
      if (name === "transfer-encoding") {
        return this.#fail(
          "length-required",
          `Request bodies need a Content-Length (at most ${this.#options.bodyBytesMax} bytes); ` +
            "Transfer-Encoding is not accepted",
        );
      }
      if (name === "upgrade") {
        return this.#fail("bad-request", "Protocol upgrades are not supported");
      }
      kept.push(line);
    }
    return { hosts, contentLength, kept, fields };
  }
}

/** What the header lines of a valid head say. */
interface HeadFields {
  readonly hosts: number;
  readonly contentLength: number | null;
  /** The client's header lines passed on (the injected header's name dropped). */
  readonly kept: Uint8Array[];
  readonly fields: Map<string, string>;
}

/** A head split into lines on CRLF (the blank line's left out); null for a lone CR or LF. */
function headLines(head: Uint8Array): Uint8Array[] | null {
  const lines: Uint8Array[] = [];
  let start = 0;
  for (let i = 0; i < head.length - 2; i++) {
    const byte = head[i];
    if (byte === CR && head[i + 1] === LF) {
      lines.push(head.subarray(start, i));
      start = i + 2;
      i++;
    } else if (byte === CR || byte === LF) {
      return null;
    }
  }
  return lines;
}

/** The head passed on: request line, the injected header, the client's headers, blank line. */
function rebuiltHead(
  requestLine: Uint8Array,
  injected: Uint8Array,
  kept: Uint8Array[],
): Uint8Array {
  let size = requestLine.length + 2 + injected.length + 2;
  for (const line of kept) size += line.length + 2;
  const out = new Uint8Array(size);
  let at = 0;
  const put = (bytes: Uint8Array) => {
    out.set(bytes, at);
    at += bytes.length;
  };
  const crlf = new Uint8Array([CR, LF]);
  put(requestLine);
  put(crlf);
  put(injected);
  for (const line of kept) {
    put(line);
    put(crlf);
  }
  put(crlf);
  return out;
}

function ascii(bytes: Uint8Array): string {
  let text = "";
  for (let i = 0; i < bytes.length; i++) text += String.fromCharCode(bytes[i]);
  return text;
}
