/**
 * Bearer-token authentication of the admin API (`-admin-token-file`).
 *
 * The token is read once at start; every request must then carry
 * `Authorization: Bearer <token>`. Tokens are compared as SHA-256 digests
 * with a loop that always looks at every byte, so neither the length nor the
 * first differing byte of a wrong token shows in the response time.
 *
 * @module
 */

import { errorText } from "../error_text.ts";

const encoder = new TextEncoder();

/** A loaded admin token, kept only as its digest. */
export interface AdminToken {
  readonly digest: Uint8Array;
}

/** Reads and checks the token file: surrounding whitespace is trimmed; an empty file is an error. */
export async function readAdminToken(path: string): Promise<AdminToken> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (error) {
    throw new Error(
      `Cannot read admin token file "${path}": ${errorText(error)}`,
    );
  }
  const token = text.trim();
  if (token === "") {
    throw new Error(`Cannot use admin token file "${path}": it is empty`);
  }
  return { digest: await sha256(token) };
}

/**
 * Whether the request carries the token. The scheme is matched
 * case-insensitively (RFC 9110); the token itself exactly.
 */
export function hasValidToken(request: Request, expected: AdminToken): Promise<boolean> {
  return hasValidAuthorization(request.headers.get("authorization"), expected);
}

/** The same check on the value of an `Authorization` header (null: none was sent). */
export async function hasValidAuthorization(
  authorization: string | null,
  expected: AdminToken,
): Promise<boolean> {
  const header = authorization ?? "";
  const match = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
  // A missing or malformed header is still hashed, so it takes as long as a wrong token.
  const presented = await sha256(match?.[1] ?? "");
  return match !== null && constantTimeEqual(presented, expected.digest);
}

async function sha256(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
}

function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false; // digests: always equal lengths
  let difference = 0;
  for (let i = 0; i < a.length; i++) difference |= a[i] ^ b[i];
  return difference === 0;
}
