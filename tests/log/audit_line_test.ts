/**
 * The audit log's byte encoder (`src/log/audit_line.ts`) writes exactly the bytes of
 * `formatAuditLine` through a TextEncoder, for every event and for strings that need escaping.
 */

import assert from "node:assert/strict";
import { encodeAuditLine } from "../../src/log/audit_line.ts";
import {
  AUDIT_COMMON_FIELDS,
  AUDIT_EVENT_FIELDS,
  AUDIT_OPTIONAL_FIELDS,
  type AuditRecord,
  formatAuditLine,
} from "../../src/log/audit_records.ts";

const encoder = new TextEncoder();
const WALL_MS = Date.UTC(2026, 10, 28, 13, 0, 0, 123);

/** Strings a peer may choose (lock names, identities, client names), escaping included. */
const STRINGS = [
  "",
  "jobs/nightly",
  'quote " and backslash \\',
  "line\nbreak\r\ttab\u0000nul\u001f",
  "del \u007f, latin é, cjk 锁, emoji 🔒",
  "lone surrogates \ud800 and \udfff",
  "x".repeat(2000),
];

function records(text: string): AuditRecord[] {
  const common = { lock: text, identity: text, remote_addr: "[::1]:5000", session: 42 };
  return [
    { ...common, event: "acquire", token: 2 ** 53 - 1, client_name: text, waited_ms: 0 },
    {
      ...common,
      event: "acquire",
      token: 7,
      client_name: text,
      waited_ms: 12,
      kind: "semaphore",
      limit: 3,
      mode: "shared",
      slot: 2,
      value_bytes: 5,
      value_sha256: "ab".repeat(32),
      term: 9,
    },
    { ...common, event: "release", token: 1, client_name: text, reason: "expired", held_ms: 5300 },
    {
      ...common,
      event: "value_set",
      token: 1,
      client_name: text,
      value_bytes: 0,
      value_sha256: null,
    },
    { ...common, event: "downgrade", token: 4, client_name: text, write_generation: 4 },
    {
      ...common,
      event: "force_release",
      token: 3,
      actor: { remote_addr: text, auth: "token" },
    },
    { ...common, event: "kick_waiter", token: null, actor: { remote_addr: "a", auth: "none" } },
    { ...common, event: "acl_deny", token: null, action: "read" },
    { ...common, event: "acl_deny", token: null },
    {
      ...common,
      event: "reclaim",
      token: null,
      client_name: text,
      claim: "queued",
      prev_session: 0,
      prev_term: 11,
    },
    {
      ...common,
      event: "reclaim_void",
      token: 5,
      client_name: text,
      claim: "owned",
      prev_session: 3,
      prev_term: 2,
      reason: "window",
    },
    {
      ...common,
      event: "reclaim_conflict",
      token: 5,
      winner_token: 6,
      winner_session: 8,
      term: 3,
    },
    { ...common, event: "leader_elected", token: null, node: text, term: 12 },
    { ...common, event: "stepped_down", token: null, reason: "deposed", node: text, term: 12 },
  ];
}

Deno.test("audit line: the encoder writes the bytes of formatAuditLine for every event and string", () => {
  for (const text of STRINGS) {
    for (const record of records(text)) {
      assert.deepEqual(
        encodeAuditLine(WALL_MS, record),
        encoder.encode(formatAuditLine(WALL_MS, record)),
        `${record.event} with ${JSON.stringify(text.slice(0, 40))}`,
      );
    }
  }
});

Deno.test("audit line: large, negative and non-integer numbers are written as JSON.stringify writes them", () => {
  for (
    const waited of [
      1.5,
      -3,
      -0,
      2 ** 30,
      1e9,
      1e9 + 7,
      1_764_330_000_123,
      -(2 ** 40) - 1,
      2 ** 53 - 1,
      2 ** 53,
      1e21,
      Number.NaN,
      Infinity,
    ]
  ) {
    const record: AuditRecord = {
      event: "acquire",
      lock: "l",
      token: 1,
      identity: "",
      remote_addr: "127.0.0.1:1",
      session: 1,
      client_name: "",
      waited_ms: waited,
    };
    assert.deepEqual(
      encodeAuditLine(WALL_MS, record),
      encoder.encode(formatAuditLine(WALL_MS, record)),
      String(waited),
    );
  }
});

Deno.test("audit line: every field the tables name, on every event, is written as formatAuditLine writes it", () => {
  // Records built from the field tables themselves: a field added to a table but not to the
  // encoder's own reading of an event fails here.
  for (const [event, own] of Object.entries(AUDIT_EVENT_FIELDS)) {
    const optional = AUDIT_OPTIONAL_FIELDS[event as keyof typeof AUDIT_OPTIONAL_FIELDS];
    for (const withOptional of [false, true]) {
      const record: Record<string, unknown> = { event, term: 5 };
      let n = 1;
      for (const name of [...AUDIT_COMMON_FIELDS, ...own, ...(withOptional ? optional : [])]) {
        if (name !== "event") record[name] = n++ % 2 === 0 ? n * 1000 : `${name} "${n}"`;
      }
      assert.deepEqual(
        encodeAuditLine(WALL_MS, record as unknown as AuditRecord),
        encoder.encode(formatAuditLine(WALL_MS, record as unknown as AuditRecord)),
        `${event}${withOptional ? " with its optional fields" : ""}`,
      );
    }
  }
});

Deno.test("audit line: lines keep their bytes while later lines fill and replace the arena", () => {
  const lines: [Uint8Array, string][] = [];
  for (let i = 0; i < 400; i++) {
    const record = records("n".repeat(i * 7))[i % 14];
    lines.push([encodeAuditLine(WALL_MS + i, record), formatAuditLine(WALL_MS + i, record)]);
  }
  for (const [bytes, text] of lines) assert.equal(new TextDecoder().decode(bytes), text);
});
