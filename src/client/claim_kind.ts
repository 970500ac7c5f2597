/**
 * What kind of claim an acquire asks for (protocol version 2, issues 22 and 23): its mode, its
 * limit and the holder's value, checked when `acquire` is called, refused locally when the
 * connection's server cannot take it, and put on the wire.
 *
 * @module
 */

import { WIRE_CODES } from "../wire/codes.ts";
import type { Welcome } from "../wire/messages.ts";
import { EMPTY_VALUE } from "../wire/messages.ts";
import { LockdError } from "./errors.ts";
import type { AskedKind } from "./look_checks.ts";
import { valueRefusal } from "./looks.ts";

/** The longest value a `bin` field carries. */
const BIN_BYTES_MAX = 0xffff;

/** What an acquire asks for beyond a lock name, lease and wait. */
export interface ClaimKind {
  readonly mode: "exclusive" | "shared";
  /** 0: no opinion (the lock's, or a server rule's); N ≥ 1: a semaphore of N (1: a plain lock). */
  readonly limit: number;
  readonly value: Uint8Array;
}

/** The options of `acquire` that choose the kind. */
export interface KindOptions {
  readonly mode?: "exclusive" | "shared";
  readonly limit?: number;
  readonly value?: Uint8Array | string;
}

/** A value as bytes: a string as UTF-8. */
export function valueBytes(value: Uint8Array | string): Uint8Array {
  if (typeof value === "string") return new TextEncoder().encode(value);
  if (value instanceof Uint8Array) return value;
  throw new TypeError(`A lock value is a Uint8Array or a string, not ${typeof value}`);
}

/** The kind `options` ask for, or the error that refuses them (nothing is sent). */
export function claimKind(options: KindOptions): ClaimKind | Error {
  const mode = options.mode ?? "exclusive";
  if (mode !== "exclusive" && mode !== "shared") {
    return new RangeError(`mode must be "exclusive" or "shared": ${String(mode)}`);
  }
  const limit = options.limit ?? 1;
  if (!(Number.isInteger(limit) && limit >= 0 && limit <= 0xffff_ffff)) {
    return new RangeError(`limit must be a whole number in 0..2^32-1: ${limit}`);
  }
  let value: Uint8Array;
  try {
    value = options.value === undefined ? EMPTY_VALUE : valueBytes(options.value);
  } catch (error) {
    return error as Error;
  }
  if (value.length > BIN_BYTES_MAX) {
    return new RangeError(`A lock value is at most ${BIN_BYTES_MAX} bytes: ${value.length}`);
  }
  return { mode, limit, value };
}

/** Why the server of this connection cannot take the claim (a kind or value it lacks), or null. */
export function kindRefusal(
  claim: { readonly kind: ClaimKind; readonly name: string },
  session: { readonly connection: { readonly welcome: Welcome }; readonly addr: string },
): LockdError | null {
  const { kind, name } = claim;
  const { welcome } = session.connection;
  const addr = session.addr;
  if (welcome.version < 2 && (kind.mode !== "exclusive" || kind.limit > 1)) {
    const what = kind.mode !== "exclusive" ? "a shared lock" : "a semaphore";
    return new LockdError(
      WIRE_CODES.INVALID_ARGUMENT.code,
      name,
      `Cannot acquire lock "${name}": ${what} needs protocol version 2, and lockd at ${addr} ` +
        "speaks version 1",
    );
  }
  return valueRefusal(welcome, addr, "acquire", name, kind.value);
}

/** The ACQUIRE's kind fields for a session of `version` (none on version 1: a plain lock). */
export function wireKind(kind: ClaimKind, version: number): Partial<ClaimKind> {
  return version === 2 ? kind : {};
}

/** What the ledger checks the grant against (a version-1 grant is a plain lock: any limit 1). */
export function askedKind(kind: ClaimKind, version: number, slot: number | null = null): AskedKind {
  return { mode: kind.mode, limit: version === 2 ? kind.limit : 0, slot };
}
