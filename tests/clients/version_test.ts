/**
 * One version for the release: src/version.ts is the source; the Python
 * client cannot import it, so its two copies (pyproject.toml and the VERSION
 * it sends in HELLO) are checked against it here. The npm package is built
 * from src/version.ts itself (npm/build.ts).
 */
import assert from "node:assert/strict";
import { VERSION } from "../../src/version.ts";

const root = new URL("../../", import.meta.url);
const read = (path: string) => Deno.readTextFileSync(new URL(path, root));

Deno.test("the Python package and the version its client sends are src/version.ts's", () => {
  const pyproject = read("clients/python/pyproject.toml").match(/^version\s*=\s*"([^"]+)"/m);
  assert.equal(pyproject?.[1], VERSION, "clients/python/pyproject.toml version");
  const client = read("clients/python/lockd/_client.py").match(/^VERSION\s*=\s*"([^"]+)"/m);
  assert.equal(client?.[1], VERSION, "clients/python/lockd/_client.py VERSION");
});
