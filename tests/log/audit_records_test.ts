/**
 * The audit records (`src/log/audit_records.ts`) and docs/operations.md's "Audit log" tables say
 * the same: the common fields in order, every event, and each event's own fields in order. And
 * the encoder writes the fields in that order however a record was built.
 */

import assert from "node:assert/strict";
import {
  AUDIT_COMMON_FIELDS,
  AUDIT_EVENT_FIELDS,
  type AuditRecord,
  formatAuditLine,
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
