/**
 * The audit records (`src/log/audit_records.ts`) and docs/operations.md's "Audit log" tables say
 * the same: the common fields in order, every event, and each event's own fields in order. And
 * the encoder writes the fields in that order however a record was built.
 */

import assert from "node:assert/strict";
import {
  AUDIT_COMMON_FIELDS,
  AUDIT_EVENT_FIELDS,
  AUDIT_OPTIONAL_FIELDS,
  type AuditRecord,
  formatAuditLine,
  valueDigest,
} from "../../src/log/audit_records.ts";

/** The rows of the first Markdown table after `marker` in the "Audit log" section: cells per row. */
async function tableAfter(marker: string): Promise<string[][]> {
  const docs = await Deno.readTextFile(new URL("../../docs/operations.md", import.meta.url));
  const section = docs.slice(docs.indexOf("\n## Audit log\n"));
  const at = section.indexOf(marker);
  assert.ok(at !== -1, `docs/operations.md, "Audit log", lacks: ${marker}`);
  const lines = section.slice(at).split("\n");
  const start = lines.findIndex((line) => line.startsWith("|"));
  const rows: string[][] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith("|")) break;
    rows.push(line.slice(1, -1).split("|").map((cell) => cell.trim()));
  }
  return rows;
}

/** The `backticked` words of a cell, in order. */
function ticked(cell: string): string[] {
  return [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]);
}

const EVENTS = Object.keys(AUDIT_EVENT_FIELDS);

Deno.test("audit records: the common fields are the documented ones, in the documented order", async () => {
  const rows = await tableAfter("Every record has these fields, in this order:");
  assert.deepEqual(rows.map((row) => ticked(row[0])[0]), ["ts", ...AUDIT_COMMON_FIELDS]);
  const event = rows.find((row) => row[0] === "`event`")!;
  assert.deepEqual(ticked(event[2]).toSorted(), EVENTS.toSorted(), "the event field's values");
});

Deno.test("audit records: one documented row per event, naming the event's own fields in order", async () => {
  const rows = await tableAfter("and per kind");
  assert.deepEqual(rows.map((row) => ticked(row[0])[0]), EVENTS);
  // Words of a cell that are a field of some event (values such as `graceful` are not).
  const fieldNames = new Set<string>(Object.values(AUDIT_EVENT_FIELDS).flat());
  for (const [eventCell, , fieldsCell] of rows) {
    const event = ticked(eventCell)[0] as keyof typeof AUDIT_EVENT_FIELDS;
    const named = [...new Set(ticked(fieldsCell).filter((word) => fieldNames.has(word)))];
    assert.deepEqual(named, [...AUDIT_EVENT_FIELDS[event]], `the row of ${event}`);
    if (named.length === 0) assert.equal(fieldsCell, "none", `the row of ${event}`);
  }
});

Deno.test("audit records: the line follows the table's order, not the order the record was built in, with term last", () => {
  const record = {
    term: 7,
    held_ms: 5300,
    reason: "failover",
    client_name: "c",
    session: 3,
    remote_addr: "10.0.0.1:5",
    identity: "",
    token: 9,
    lock: "l",
    event: "release",
  } as const satisfies AuditRecord;
  const line = formatAuditLine(Date.UTC(2026, 0, 1), record);
  assert.equal(
    line,
    '{"ts":"2026-01-01T00:00:00.000Z","event":"release","lock":"l","token":9,"identity":"",' +
      '"remote_addr":"10.0.0.1:5","session":3,"client_name":"c","reason":"failover",' +
      '"held_ms":5300,"term":7}\n',
  );
  const elected = formatAuditLine(Date.UTC(2026, 0, 1), {
    event: "leader_elected",
    term: 4,
    node: "n1",
    lock: "",
    token: null,
    identity: "",
    remote_addr: "10.0.0.2:7400",
    session: 0,
  });
  assert.match(elected, /"session":0,"node":"n1","term":4\}\n$/);
});

Deno.test("audit records: the optional fields table names each event's optional fields, in order", async () => {
  const rows = await tableAfter("Some records carry more fields");
  const documented = new Map<string, string[]>();
  for (const [eventCell, fieldsCell] of rows) {
    const event = ticked(eventCell)[0];
    documented.set(event, [...(documented.get(event) ?? []), ...ticked(fieldsCell)]);
  }
  const expected = Object.entries(AUDIT_OPTIONAL_FIELDS).filter(([, fields]) => fields.length > 0);
  assert.deepEqual([...documented], expected.map(([event, fields]) => [event, [...fields]]));
});

Deno.test("audit records: optional fields come after the event's own, before term, only when present", () => {
  const at = Date.UTC(2026, 0, 1);
  const common = { lock: "render/a", identity: "", remote_addr: "10.0.0.1:5", session: 3 };
  assert.equal(
    formatAuditLine(at, {
      ...common,
      term: 7,
      value_sha256: "ab",
      slot: 2,
      event: "acquire",
      token: 9,
      value_bytes: 1,
      mode: "exclusive",
      limit: 8,
      kind: "semaphore",
      client_name: "c",
      waited_ms: 0,
    }),
    '{"ts":"2026-01-01T00:00:00.000Z","event":"acquire","lock":"render/a","token":9,' +
      '"identity":"","remote_addr":"10.0.0.1:5","session":3,"client_name":"c","waited_ms":0,' +
      '"kind":"semaphore","limit":8,"mode":"exclusive","slot":2,"value_bytes":1,' +
      '"value_sha256":"ab","term":7}\n',
  );
  // Without them, the line of a plain exclusive lock is what it always was.
  assert.equal(
    formatAuditLine(at, {
      ...common,
      event: "acl_deny",
      token: null,
    }),
    '{"ts":"2026-01-01T00:00:00.000Z","event":"acl_deny","lock":"render/a","token":null,' +
      '"identity":"","remote_addr":"10.0.0.1:5","session":3}\n',
  );
  assert.match(
    formatAuditLine(at, { ...common, event: "acl_deny", token: null, action: "read" }),
    /"session":3,"action":"read"\}\n$/,
  );
});

Deno.test("audit records: a value is told by its length and SHA-256, never its bytes", () => {
  assert.deepEqual(valueDigest(new TextEncoder().encode("10.0.0.7:8080")), {
    value_bytes: 13,
    value_sha256: "5ebd9537e0e126dbd3ddd1f134faa69fa2b75f8a431c37b8840b823b13f8a220",
  });
  assert.deepEqual(valueDigest(null), { value_bytes: 0, value_sha256: null });
  assert.deepEqual(valueDigest(new Uint8Array()), { value_bytes: 0, value_sha256: null });
});
