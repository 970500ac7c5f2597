/**
 * clients/README.md's parity table names, for each feature and client, the
 * test that proves it (`file#test`). This checks that every named test exists,
 * so the table cannot claim coverage that is not there.
 */
import assert from "node:assert/strict";

const root = new URL("../../", import.meta.url);
const readme = Deno.readTextFileSync(new URL("clients/README.md", root));
const COLUMNS = ["feature", "Deno", "Node", "Bun", "Python"];

interface Cell {
  feature: string;
  client: string;
  refs: { file: string; name: string }[];
}

function parityCells(): Cell[] {
  const start = readme.indexOf("## Parity");
  assert.ok(start >= 0, "clients/README.md has a Parity section");
  const section = readme.slice(start, readme.indexOf("\n## ", start + 3));
  const rows = section.split("\n").filter((line) => line.startsWith("|"))
    .map((line) => line.split("|").slice(1, -1).map((cell) => cell.trim()));
  assert.deepEqual(rows[0], COLUMNS, "the table's columns");
  const cells: Cell[] = [];
  for (const row of rows.slice(2)) {
    assert.equal(row.length, COLUMNS.length, `row ${row[0]}`);
    for (let i = 1; i < COLUMNS.length; i++) {
      const refs = [...row[i].matchAll(/`([^`#]+)#([^`]+)`/g)].map((m) => ({
        file: m[1],
        name: m[2],
      }));
      assert.ok(refs.length > 0 || row[i] === "—", `${row[0]} × ${COLUMNS[i]}: "${row[i]}"`);
      cells.push({ feature: row[0], client: COLUMNS[i], refs });
    }
  }
  return cells;
}

/** Names of the tests a file defines: Python `def test_*`, or the first string of a test call. */
function testNames(file: string): string[] {
  const text = Deno.readTextFileSync(new URL(file, root));
  if (file.endsWith(".py")) {
    return [...text.matchAll(/^\s*(?:async )?def (test_\w+)\(/gm)].map((m) => m[1]);
  }
  // `Deno.test("name", ...)`, `test("name", ...)`, `it(...)`, or `Deno.test({ name: "name", ... })`.
  const pattern = /(?:(?:Deno\.test|\btest|\bit)\(\s*|\bname:\s*)(["'`])((?:\\.|(?!\1).)*)\1/gs;
  return [...text.matchAll(pattern)].map((m) => m[2]);
}

Deno.test("every test named in the clients/README.md parity table exists", () => {
  const cells = parityCells();
  assert.ok(cells.length >= 4 * 10, "at least ten features");
  const missing: string[] = [];
  for (const cell of cells) {
    for (const { file, name } of cell.refs) {
      let names: string[];
      try {
        names = testNames(file);
      } catch {
        missing.push(`${cell.feature} × ${cell.client}: no file ${file}`);
        continue;
      }
      const found = file.endsWith(".py")
        ? names.includes(name)
        : names.some((test) => test.includes(name));
      if (!found) missing.push(`${cell.feature} × ${cell.client}: no test "${name}" in ${file}`);
    }
  }
  assert.deepEqual(missing, []);
});

Deno.test("the Python client has a test for every feature of the parity table", () => {
  const empty = parityCells().filter((cell) => cell.client === "Python" && cell.refs.length === 0);
  assert.deepEqual(empty.map((cell) => cell.feature), []);
});
