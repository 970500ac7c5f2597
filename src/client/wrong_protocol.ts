/**
 * The first bytes a server sends back to HELLO, when they cannot be lockd's: a lockd frame starts
 * with 0x00 (its length prefix, below 16 MiB), so anything else is another protocol on that port.
 * Told apart at once, instead of a frame length of gigabytes or a WELCOME that never comes:
 * a TLS record (a TLS listener meeting a plaintext client) and an HTTP answer (an admin or ops
 * port, or any web server: lockd's own HTTP listeners answer a HELLO with 400 at once).
 *
 * @module
 */

import { ConnectionError } from "./errors.ts";

/** What a server that does not speak the lockd protocol (in this mode) answered with. */
export type ForeignProtocol = "tls" | "http" | "unknown";

/**
 * The server answered the handshake with bytes that are not a lockd frame: `protocol` says what
 * they look like. The message names the likely mistake (a TLS listener without `tls`, an HTTP
 * port given as the lock listener's address).
 */
export class WrongProtocolError extends ConnectionError {
  /** What the server's first bytes look like. */
  readonly protocol: ForeignProtocol;
  /** The address that was dialled. */
  readonly addr: string;

  /** Builds the error; the client creates these, applications only read them. */
  constructor(addr: string, protocol: ForeignProtocol, message: string) {
    super(message);
    this.name = "WrongProtocolError";
    this.addr = addr;
    this.protocol = protocol;
  }
}

const HTTP_PREFIX = "HTTP/";
/** The status line quoted in the message, at most this many characters. */
const STATUS_LINE_CHARS_MAX = 60;

/**
 * The error for the first bytes of a server's answer, or null when they may be a lockd frame.
 * `tls`: whether this connection speaks TLS (then TLS records are expected below it).
 */
export function wrongProtocolError(
  addr: string,
  bytes: Uint8Array,
  tls: boolean,
): WrongProtocolError | null {
  if (bytes.length === 0 || bytes[0] === 0x00) return null;
  if (!tls && (bytes[0] === 0x15 || bytes[0] === 0x16) && bytes[1] === 0x03) {
    return new WrongProtocolError(
      addr,
      "tls",
      `Cannot connect to lockd at ${addr}: the server expects TLS (it answered with a TLS ` +
        `record); connect with TLS: tls: { ca } in connect(), -ca FILE for lockd run`,
    );
  }
  const head = latin1(bytes.subarray(0, 200));
  if (head.startsWith(HTTP_PREFIX) || HTTP_PREFIX.startsWith(head)) {
    const statusLine = head.split("\r\n")[0].split("\n")[0].slice(0, STATUS_LINE_CHARS_MAX);
    return new WrongProtocolError(
      addr,
      "http",
      `Cannot connect to lockd at ${addr}: it answered with HTTP (${
        JSON.stringify(statusLine)
      }), not the lockd protocol: is it lockd's -ops-listen or -admin-listen port? A lock ` +
        `client (lockd run -addr, connect()) takes the address of lockd serve's -listen ` +
        `(default port 7400)`,
    );
  }
  const shown = [...bytes.subarray(0, 4)].map((b) => b.toString(16).padStart(2, "0")).join(" ");
  return new WrongProtocolError(
    addr,
    "unknown",
    `Cannot connect to lockd at ${addr}: it answered with bytes that are not a lockd frame ` +
      `(first bytes ${shown}): is this the address of lockd serve's -listen?`,
  );
}

/** Bytes as text, one character per byte: never throws, whatever the bytes. */
function latin1(bytes: Uint8Array): string {
  let text = "";
  for (const byte of bytes) text += String.fromCharCode(byte);
  return text;
}
