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
import {
  AUDIT_COMMON_FIELDS,
  AUDIT_EVENT_FIELDS,
  AUDIT_OPTIONAL_FIELDS,
  type AuditRecord,
} from "./audit_records.ts";

const encoder = new TextEncoder();
const TERM_IS_OWN_FIELD = Object.fromEntries(
  Object.entries(AUDIT_EVENT_FIELDS).map(([event, names]) => [
    event,
    (names as readonly string[]).includes("term"),
  ]),
) as Record<AuditRecord["event"], boolean>;
/** The line being encoded; grown for a longer line and kept (lines are short: a lock name). */
let buffer = new Uint8Array(512);
let length = 0;

/** `formatAuditLine(wallMs, record)` encoded as UTF-8, in a new array of its own. */
export function encodeAuditLine(wallMs: number, record: AuditRecord): Uint8Array {
  const fields = record as unknown as Record<string, unknown>;
  length = 0;
  ascii('{"ts":');
  string(rfc3339(wallMs));
  for (const name of AUDIT_COMMON_FIELDS) field(name, fields[name]);
  for (const name of AUDIT_EVENT_FIELDS[record.event]) field(name, fields[name]);
  for (const name of AUDIT_OPTIONAL_FIELDS[record.event]) field(name, fields[name]);
  // `term` is one of the event's own fields on the records of an election, else it comes last.
  if (!TERM_IS_OWN_FIELD[record.event]) field("term", record.term);
  ascii("}\n");
  return buffer.slice(0, length);
}

/** `,"name":value`; nothing for an undefined value (JSON.stringify leaves such a field out). */
function field(name: string, value: unknown): void {
  if (value === undefined) return;
  room(name.length + 4);
  buffer[length++] = 0x2c; // ,
  buffer[length++] = 0x22; // "
  for (let i = 0; i < name.length; i++) buffer[length++] = name.charCodeAt(i);
  buffer[length++] = 0x22;
  buffer[length++] = 0x3a; // :
  if (typeof value === "string") {
    string(value);
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
  const start = length;
  buffer[length++] = 0x22;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) {
      length = start;
      json(JSON.stringify(text));
      return;
    }
    buffer[length++] = c;
  }
  buffer[length++] = 0x22;
}

/** A safe integer in decimal, as JSON.stringify writes it (-0 as 0). */
function integer(value: number): void {
  room(17);
  if (value < 0) buffer[length++] = 0x2d; // -
  let rest = Math.abs(value);
  const start = length;
  do {
    buffer[length++] = 0x30 + (rest % 10);
    rest = Math.floor(rest / 10);
  } while (rest > 0);
  for (let i = start, j = length - 1; i < j; i++, j--) {
    const digit = buffer[i];
    buffer[i] = buffer[j];
    buffer[j] = digit;
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

/** Makes room for `bytes` more bytes after the line so far. */
function room(bytes: number): void {
  if (length + bytes <= buffer.length) return;
  const grown = new Uint8Array(Math.max(2 * buffer.length, length + bytes));
  grown.set(buffer.subarray(0, length));
  buffer = grown;
}
