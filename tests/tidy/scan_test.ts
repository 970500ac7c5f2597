/**
 * The tidy test's scanner and graph checks on small inputs, so a rule that stops finding what
 * it should fails here first.
 */

import assert from "node:assert/strict";
import {
  allowListProblems,
  cycles,
  type Edge,
  parseRooms,
  roomOf,
  upwardViolations,
} from "./rooms.ts";
import { exportedValues, functionsOf, importsOf, lex } from "./scan.ts";

Deno.test("scan: comments and the insides of strings, templates and regular expressions are blanked, lengths kept", () => {
  const source = [
    'const a = "x // not a comment"; // a comment',
    "const b = `t ${a + `in ${1}`} {`; /* block",
    "   still */ const c = /[/{]\\//g.test(a) ? 1 / 2 : 3;",
  ].join("\n");
  const { text, code } = lex(source);
  assert.equal(code.length, source.length);
  assert.equal(text.length, source.length);
  assert.equal(code.split("\n").length, 3);
  assert.doesNotMatch(code, /not a comment|a comment|still|block/);
  assert.match(text, /not a comment/);
  assert.doesNotMatch(text, /a comment$/m);
  assert.match(code, /\$\{|a \+ /); // a template's expressions stay code
  assert.doesNotMatch(code, /\{`/); // its text does not
  assert.match(code, /\? 1 \/ 2 : 3/); // a division is not a regular expression
  assert.equal([...code].filter((c) => c === "{").length, 0);
});

Deno.test("scan: every kind of import is found, with its names", () => {
  const found = importsOf(lex([
    'import { a, type B, c as d } from "./one.ts";',
    'import type { E } from "../two.ts";',
    'import * as ns from "./three.ts";',
    'export { f, g as h } from "./four.ts";',
    'export * from "./five.ts";',
    'import "./six.ts";',
    'const m = await import("./seven.ts");',
    'import x from "./eight.js" with { type: "text" };',
    '// import { no } from "./comment.ts";',
    'const s = "import { no } from \\"./string.ts\\"";',
    "export const notAnImport = 1;",
  ].join("\n")));
  assert.deepEqual(
    found.map((i) => [i.specifier, i.line, i.dynamic, i.reexport, [...i.names]]),
    [
      ["./one.ts", 1, false, false, [["a", "a"], ["B", "B"], ["c", "d"]]],
      ["../two.ts", 2, false, false, [["E", "E"]]],
      ["./three.ts", 3, false, false, [["*", "ns"]]],
      ["./four.ts", 4, false, true, [["f", "f"], ["g", "h"]]],
      ["./five.ts", 5, false, true, [["*", "*"]]],
      ["./six.ts", 6, false, false, []],
      ["./seven.ts", 7, true, false, []],
      ["./eight.js", 8, false, false, [["default", "x"]]],
    ],
  );
});

Deno.test("scan: functions, methods and arrow functions are measured from header to closing brace", () => {
  const source = [
    "export async function one(a: number): Promise<{ ok: boolean }> {", // 1
    "  return { ok: a > 0 };",
    "}",
    "class K {",
    "  #two(x: string): void {", // 5
    "    if (x) {",
    "      return;",
    "    }",
    "  }",
    "  overload(): void;", // 10: a signature, no body
    "  get three(): number {", // 11
    "    return 3;",
    "  }",
    "}",
    "const four = async (", // 15
    "  b: number,",
    ") => {",
    "  const s = `}`;",
    "};",
  ].join("\n");
  assert.deepEqual(
    functionsOf(lex(source)).map((f) => [f.name, f.line, f.lines]),
    [["one", 1, 3], ["#two", 5, 5], ["three", 11, 3], ["four", 15, 5]],
  );
});

Deno.test("scan: exported values are found, types are not", () => {
  const found = exportedValues(lex([
    "export function f() {}",
    "export async function* g() {}",
    "export class C {}",
    "export const X = 1, Y = 2;",
    "export let z = 0;",
    "export enum E { A }",
    "export interface I {}",
    "export type T = number;",
    "const local = 1;",
    "export { local, local as renamed, type T as U };",
  ].join("\n")));
  assert.deepEqual(found.map((e) => e.name), ["f", "g", "C", "X", "z", "E", "local", "renamed"]);
});

const ROOMS_DOC = `# x

## The rooms

| room | what |
| --- | --- |
| \`src/a.ts\`, \`src/b.ts\` | leaves |
| \`src/low/\` | below |
| \`src/low/special.ts\` | a file of its own |
| \`src/top/\`, \`main.ts\` | last |

## Next
| not | a room |
`;

Deno.test("rooms: the table is parsed in order, and a file goes to its closest path", () => {
  const rooms = parseRooms(ROOMS_DOC);
  assert.deepEqual(rooms.map((r) => [r.paths, r.rank]), [
    [["src/a.ts", "src/b.ts"], 0],
    [["src/low/"], 1],
    [["src/low/special.ts"], 2],
    [["src/top/", "main.ts"], 3],
  ]);
  assert.equal(roomOf(rooms, "src/low/x.ts")?.rank, 1);
  assert.equal(roomOf(rooms, "src/low/special.ts")?.rank, 2);
  assert.equal(roomOf(rooms, "main.ts")?.rank, 3);
  assert.equal(roomOf(rooms, "src/other.ts"), undefined);
});

Deno.test("rooms: an import down the table is found; up or within a room is not", () => {
  const rooms = parseRooms(ROOMS_DOC);
  const edges: Edge[] = [
    { from: "src/top/t.ts", to: "src/a.ts", line: 1 },
    { from: "src/low/x.ts", to: "src/low/y.ts", line: 1 },
    { from: "src/b.ts", to: "src/a.ts", line: 1 },
    { from: "src/low/x.ts", to: "src/low/special.ts", line: 2 },
    { from: "src/a.ts", to: "src/top/t.ts", line: 3 },
  ];
  assert.deepEqual(upwardViolations(rooms, edges), [
    "src/low/x.ts -> src/low/special.ts",
    "src/a.ts -> src/top/t.ts",
  ]);
});

Deno.test("rooms: cycles are found, of two files, of three and of one", () => {
  const edge = (from: string, to: string): Edge => ({ from, to, line: 1 });
  assert.deepEqual(
    cycles([
      edge("a", "b"),
      edge("b", "a"),
      edge("c", "d"),
      edge("d", "e"),
      edge("e", "c"),
      edge("e", "f"),
      edge("g", "g"),
      edge("h", "a"),
    ]),
    ["a <-> b", "c <-> d <-> e", "g"],
  );
  assert.deepEqual(cycles([edge("a", "b"), edge("b", "c"), edge("a", "c")]), []);
});

Deno.test("allow-lists: a finding not listed fails, and so does a stale entry", () => {
  assert.deepEqual(allowListProblems({ kept: "why", gone: "why" }, ["kept", "new"]), [
    "not allowed: new",
    "stale allow-list entry (remove it): gone",
  ]);
  assert.deepEqual(allowListProblems({ kept: "why" }, ["kept"]), []);
});
