import assert from "node:assert/strict";
import { CONFIG_FLAGS, defaultText } from "../../src/config.ts";
import { durationText } from "../../src/duration.ts";
import { SERVE_FLAGS } from "../../src/cli/serve.ts";

const doc = await Deno.readTextFile(new URL("../../docs/operations.md", import.meta.url));

Deno.test("docs/operations.md lists every serve flag", () => {
  const missing = SERVE_FLAGS.filter((flag) => !doc.includes(`| \`-${flag.name}\``));
  assert.deepEqual(missing.map((flag) => flag.name), []);
});

Deno.test("the serve flag table of docs/operations.md says what src/config.ts says: kind, default, range, meaning", () => {
  const rows = new Map<string, string[]>();
  for (const line of doc.split("\n")) {
    const cells = line.split("|").slice(1, -1).map((cell) => cell.trim());
    if (cells.length === 5 && /^`-[a-z-]+`$/.test(cells[0])) rows.set(cells[0].slice(2, -1), cells);
  }
  const kindText = {
    string: "string",
    duration: "duration",
    int: "integer",
    bool: "boolean",
  } as const;
  for (const row of CONFIG_FLAGS) {
    const show = row.kind === "duration" ? durationText : String;
    const range = row.kind === "string" || row.kind === "bool"
      ? ""
      : row.max === undefined
      ? `≥ ${show(row.min ?? 0)}`
      : `${show(row.min ?? 0)} to ${show(row.max)}`;
    const [, kind, fallback, docRange, meaning] = rows.get(row.flag) ?? [];
    assert.equal(kind, kindText[row.kind], `-${row.flag}: kind`);
    assert.equal(fallback, defaultText(row) ?? (row.kind === "string" ? fallback : "?"));
    if (defaultText(row) === undefined) assert.match(fallback, /^(off|none)$/, `-${row.flag}`);
    assert.equal(docRange, range, `-${row.flag}: range`);
    assert.equal(meaning, row.help, `-${row.flag}: meaning`);
  }
});
