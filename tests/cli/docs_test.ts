import assert from "node:assert/strict";
import { SERVE_FLAGS } from "../../src/cli/serve.ts";

Deno.test("docs/operations.md lists every serve flag", async () => {
  const doc = await Deno.readTextFile(new URL("../../docs/operations.md", import.meta.url));
  const missing = SERVE_FLAGS.filter((flag) => !doc.includes(`| \`-${flag.name}\``));
  assert.deepEqual(missing.map((flag) => flag.name), []);
});
