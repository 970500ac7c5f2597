// The Node example of the package README, exactly as shipped in the installed package, runs
// against a real lockd server.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import process from "node:process";
import { startServer } from "./lockd_server.mjs";

test("the README's Node example runs against a lockd server", async () => {
  const require = createRequire(import.meta.url);
  const packageDir = dirname(require.resolve("lockd-client"));
  const readme = readFileSync(join(packageDir, "README.md"), "utf8");
  const example = /```js\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(example, "the README has a js example");
  const file = join(process.cwd(), "readme_example.mjs");
  writeFileSync(file, example);
  const server = await startServer();
  try {
    const { stdout } = await new Promise((resolve, reject) =>
      execFile(
        process.execPath,
        [file],
        { env: { ...process.env, LOCKD_ADDR: server.addr }, timeout: 30_000 },
        (error, stdout, stderr) =>
          error ? reject(new Error(`${error}\n${stderr}`)) : resolve({ stdout }),
      )
    );
    assert.match(stdout, /^holding jobs\/nightly with fencing token \d{16}\n$/);
  } finally {
    await server.close();
  }
});
