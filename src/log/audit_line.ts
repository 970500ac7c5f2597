/**
 * The audit line of a record as bytes, encoded straight into one reused buffer: the same bytes as
 * `formatAuditLine` (`audit_records.ts`, which stays the definition) run through a TextEncoder,
 * without the line's intermediate object and strings (issue 24: the audit record of every grant
 * and release was a tenth of a request's server CPU). Strings of printable ASCII without `"` or
 * `\` are copied byte by byte; any other string, and any value that is not a string, an integer
 * or null, is encoded by JSON.stringify, so escaping is exactly JSON.stringify's.
 *
 * @module
 */

import { rfc3339 } from "../clock.ts";
import { AUDIT_ARENA_BYTES } from "../limits.ts";
import { AUDIT_EVENT_FIELDS, AUDIT_OPTIONAL_FIELDS, type AuditRecord } from "./audit_records.ts";

const encoder = new TextEncoder();
const TERM_IS_OWN_FIELD = Object.fromEntries(
  Object.entries(AUDIT_EVENT_FIELDS).map(([event, names]) => [
    event,
    (names as readonly string[]).includes("term"),
  ]),
) as Record<AuditRecord["event"], boolean>;
/**
 * The arena lines are encoded into, one after the other: a line is a view of its bytes, which
 * are never written again (a full arena is left to the lines that view it, and a new one taken),
 * so a line costs no buffer of its own and the lines of a turn, next to each other, go out as
 * one view (audit.ts, `concat`).
 */
let buffer = new Uint8Array(AUDIT_ARENA_BYTES);
/** Where the line being encoded starts, and where its next byte goes. */
let start = 0;
let length = 0;

/**
 * `formatAuditLine(wallMs, record)` encoded as UTF-8: a view of bytes that never change (they
 * stay until no line views their arena).
 */
export function encodeAuditLine(wallMs: number, record: AuditRecord): Uint8Array {
  const fields = record as unknown as Record<string, unknown>;
  start = length;
  ascii('{"ts":');
  string(rfc3339(wallMs));
  // The common fields, and the two records of every request (a grant and a release), read by
  // name: a property read by a computed name is a slow lookup where records of many shapes meet.
  field("event", record.event);
  field("lock", record.lock);
  field("token", record.token);
  field("identity", record.identity);
  field("remote_addr", record.remote_addr);
  field("session", record.session);
  if (record.event === "acquire") {
    field("client_name", record.client_name);
    field("waited_ms", record.waited_ms);
    kindFields(record);
    field("value_bytes", record.value_bytes);
    field("value_sha256", record.value_sha256);
  } else if (record.event === "release") {
    field("client_name", record.client_name);
    field("reason", record.reason);
    field("held_ms", record.held_ms);
    kindFields(record);
  } else {
    for (const name of AUDIT_EVENT_FIELDS[record.event]) field(name, fields[name]);
    for (const name of AUDIT_OPTIONAL_FIELDS[record.event]) field(name, fields[name]);
  }
  // `term` is one of the event's own fields on the records of an election, else it comes last.
  if (!TERM_IS_OWN_FIELD[record.event]) field("term", record.term);
  ascii("}\n");
  return buffer.subarray(start, length);
}

/** The kind fields of a grant or release record (those present). */
function kindFields(record: { kind?: string; limit?: number; mode?: string; slot?: number }): void {
  field("kind", record.kind);
  field("limit", record.limit);
  field("mode", record.mode);
  field("slot", record.slot);
}

/** `,"name":value`; nothing for an undefined value (JSON.stringify leaves such a field out). */
function field(name: string, value: unknown): void {
  if (value === undefined) return;
  room(name.length + 4);
  // Locals, not the module's bindings, in the loops: each of those is a context slot.
  const bytes = buffer;
  let at = length;
  bytes[at++] = 0x2c; // ,
  bytes[at++] = 0x22; // "
  for (let i = 0; i < name.length; i++) bytes[at++] = name.charCodeAt(i);
  bytes[at++] = 0x22;
  bytes[at++] = 0x3a; // :
  length = at;
  if (typeof value === "string") {
    string(value);
  } else if (typeof value === "number" && value >= 0 && value <= 0x3fffffff && value % 1 === 0) {
    smallInteger(value);
  } else if (typeof value === "number" && Number.isSafeInteger(value)) {
    integer(value);
  } else if (value === null) {
    ascii("null");
  } else {
    json(JSON.stringify(value));
  }
}

/** A JSON string: printable ASCII without `"` and `\` byte by byte, anything else as JSON says. */
function string(text: string): void {
  room(text.length + 2);
  const bytes = buffer;
  let at = length;
  bytes[at++] = 0x22;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) {
      json(JSON.stringify(text)); // from `length`: the quote above is overwritten
      return;
    }
    bytes[at++] = c;
  }
  bytes[at++] = 0x22;
  length = at;
}

/** An integer from 0 to 2^30 − 1 (a V8 Smi, the common case): integer arithmetic only. */
function smallInteger(value: number): void {
  room(10);
  const bytes = buffer;
  let at = length;
  let rest = value | 0;
  do {
    const tenth = (rest / 10) | 0;
    bytes[at++] = 0x30 + rest - tenth * 10;
    rest = tenth;
  } while (rest > 0);
  reverse(bytes, length, at - 1);
  length = at;
}

/**
 * A safe integer in decimal, as JSON.stringify writes it: above 2^30 (fencing tokens are) as its
 * part above 10^9 and its last nine digits, each in integer arithmetic.
 */
function integer(value: number): void {
  if (value < 0) {
    ascii("-");
    value = -value;
  }
  const high = Math.floor(value / 1e9);
  if (high === 0 || high > 0x3fffffff) {
    json(String(value)); // never for a token or a duration in ms: as JSON writes it
    return;
  }
  smallInteger(high);
  room(9);
  const bytes = buffer;
  let low = (value - high * 1e9) | 0;
  for (let at = length + 8; at >= length; at--) {
    const tenth = (low / 10) | 0;
    bytes[at] = 0x30 + low - tenth * 10;
    low = tenth;
  }
  length += 9;
}

/** Reverses `bytes[i..j]` (digits are written lowest first). */
function reverse(bytes: Uint8Array, i: number, j: number): void {
  for (; i < j; i++, j--) {
    const digit = bytes[i];
    bytes[i] = bytes[j];
    bytes[j] = digit;
  }
}

/** Text known to be ASCII (the line's own punctuation). */
function ascii(text: string): void {
  room(text.length);
  for (let i = 0; i < text.length; i++) buffer[length++] = text.charCodeAt(i);
}

/** JSON text of any characters, as UTF-8. */
function json(text: string): void {
  room(text.length * 3);
  length += encoder.encodeInto(text, buffer.subarray(length)).written;
}

/** Makes room for `bytes` more bytes after the line so far: a new arena, the line moved there. */
function room(bytes: number): void {
  if (length + bytes <= buffer.length) return;
  const lineBytes = length - start;
  const arena = new Uint8Array(Math.max(AUDIT_ARENA_BYTES, 2 * (lineBytes + bytes)));
  arena.set(buffer.subarray(start, length));
  buffer = arena;
  start = 0;
  length = lineBytes;
}
