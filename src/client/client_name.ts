/**
 * The client name a session sends in HELLO. The server shows it in the admin API and writes it
 * into the audit records of acquire and release, so by default it says which host and which
 * process hold a lock, even without mutual TLS: `<program>@<host>:<pid>`. It is informational
 * (any client can send any name), and bounded: the server refuses a HELLO whose name is over
 * CLIENT_NAME_BYTES_MAX bytes, so a longer one (a long host name, a long name the user chose)
 * is cut at a character boundary and marked with "…" instead of failing every connect.
 *
 * @module
 */

import os from "node:os";
import { CLIENT_NAME_BYTES_MAX } from "../limits.ts";
import { cutUtf8 } from "../wire/frame.ts";

/**
 * `<program>@<host>:<pid>`, cut to fit CLIENT_NAME_BYTES_MAX (the host is what gets cut).
 * `<program>:<pid>` when the host name cannot be read without asking for a permission.
 */
export function defaultClientName(program: string): string {
  return composeClientName(program, readableHostName(), processId());
}

/** {@link defaultClientName} with the host and process given ("" / null: unknown). */
export function composeClientName(program: string, host: string, pid: number | null): string {
  const tail = pid === null ? "" : `:${pid}`;
  if (host === "") return boundClientName(`${program}${tail}`);
  const roomBytes = CLIENT_NAME_BYTES_MAX - utf8Bytes(`${program}@`) - utf8Bytes(tail);
  const cutHost = roomBytes > 3 ? cutUtf8(host, roomBytes) : host;
  return boundClientName(`${program}@${cutHost}${tail}`);
}

/**
 * A client name that fits HELLO: at most CLIENT_NAME_BYTES_MAX UTF-8 bytes, cut between two
 * characters (never inside one, never between the halves of a surrogate pair) and ending with
 * "…" when cut. A lone surrogate, which UTF-8 cannot carry, becomes U+FFFD first.
 */
export function boundClientName(name: string): string {
  return cutUtf8(name.isWellFormed() ? name : name.toWellFormed(), CLIENT_NAME_BYTES_MAX);
}

/** The part of Deno's namespace the probe below uses. */
interface DenoGlobal {
  Deno?: { permissions?: { querySync(d: { name: "sys"; kind: "hostname" }): { state: string } } };
}

/**
 * The one look at the Deno namespace in the client, when it exists (tests/client/
 * runtime_neutral_test.ts and npm/build.ts allow exactly this line): on Deno, reading the host
 * name without the `sys` permission would stop a program in a terminal with a permission prompt.
 */
const denoPermissions = (globalThis as DenoGlobal).Deno?.permissions;

/**
 * The host name, where reading it asks nobody: Node and Bun always; Deno only when the process
 * already has the `sys` permission for it (`--allow-sys`, `-A`).
 */
function readableHostName(): string {
  try {
    if (
      denoPermissions !== undefined &&
      denoPermissions.querySync({ name: "sys", kind: "hostname" }).state !== "granted"
    ) {
      return "";
    }
    return os.hostname();
  } catch {
    return ""; // a runtime that refuses: the name goes without the host
  }
}

function processId(): number | null {
  const pid = (globalThis as { process?: { pid?: unknown } }).process?.pid;
  return typeof pid === "number" && Number.isInteger(pid) && pid > 0 ? pid : null;
}

function utf8Bytes(text: string): number {
  return new TextEncoder().encode(text).length;
}
