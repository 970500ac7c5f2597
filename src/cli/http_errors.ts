/**
 * Turns a failed `fetch` of the CLI's HTTP commands (`lockd admin`, `lockd
 * health`) into one line that says where and why: Deno's own message is
 * only "fetch failed"; the reason is in `error.cause`.
 *
 * @module
 */

import { errorText } from "../error_text.ts";

/** What was dialled, for the message: `the ops listener`, and the flag that names its address. */
export interface HttpTarget {
  /** "the admin API", "the ops listener". */
  readonly what: string;
  /** The address dialled, `host:port`. */
  readonly addr: string;
  /** The client flag that chose the address (`-ops`) and the server flag that sets it (`-ops-listen`). */
  readonly clientFlag: string;
  readonly serverFlag: string;
}

/** One line: `cannot reach the ops listener at 127.0.0.1:7402: connection refused (...)`. */
export function describeFetchError(error: unknown, target: HttpTarget, timeoutMs: number): string {
  const where = `${target.what} at ${target.addr}`;
  if (error instanceof DOMException && error.name === "TimeoutError") {
    return `no answer from ${where} within ${timeoutMs} ms (a server that is stuck, or a ` +
      `firewall that drops packets)`;
  }
  const detail = causeText(error);
  if (/connection refused/i.test(detail)) {
    return `cannot reach ${where}: connection refused, nothing listens there. Is lockd ` +
      `running, with ${target.serverFlag} ${target.addr}? Give its address with ` +
      `${target.clientFlag} HOST:PORT.`;
  }
  if (/lookup address|name or service not known|no such host|dns error/i.test(detail)) {
    return `cannot reach ${where}: the host name does not resolve (${detail})`;
  }
  if (/connection reset|broken pipe|unexpected eof|connection closed/i.test(detail)) {
    return `cannot reach ${where}: the connection was closed without an HTTP answer (${detail}); ` +
      `is ${target.addr} a lockd HTTP listener (${target.serverFlag}) and not the protocol port?`;
  }
  return `cannot reach ${where}: ${detail}`;
}

/** The most specific text of an error chain, on one line. */
function causeText(error: unknown): string {
  const texts: string[] = [];
  for (let e: unknown = error; e !== undefined && e !== null && texts.length < 5;) {
    texts.push(errorText(e));
    e = e instanceof Error ? e.cause : undefined;
  }
  // Deno: "error sending request for url (...): client error (Connect): tcp connect error: X".
  const last = texts.at(-1) ?? "";
  const tail = last.split(/: (?:client error \(\w+\): )?(?:tcp connect error: )?/).at(-1) ?? last;
  return (texts.length > 1 ? tail : last).replace(/\s*\n\s*/g, " ");
}
