/**
 * The license and the packages' install steps (issue 19, item 16): the repository's LICENSE is the
 * Apache License 2.0, and the npm and Python package metadata say so and ship it; the npm README
 * installs the tarball `deno task npm:pack` makes (nothing is published) and says the example is
 * ES modules; the Python client's virtual environment is ignored by git. `.ci/npm_client.sh`
 * runs the npm README's install steps as written and checks the installed package's license;
 * the Python suite checks the installed distribution's metadata (clients/python/tests).
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { LICENSE_SPDX, npmPackageJson } from "../../npm/package_json.ts";
import { NPM_PACKAGE_NAME, VERSION } from "../../src/version.ts";
import { markedBlock, readRepoFile } from "../helpers/doc_blocks.ts";

const REPO = fileURLToPath(new URL("../../", import.meta.url));

Deno.test("packages: LICENSE is the full text of the Apache License 2.0", () => {
  const license = readRepoFile("LICENSE");
  assert.match(license, /^\s*Apache License\n\s*Version 2\.0, January 2004\n/);
  assert.match(license, /TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION/);
  assert.match(license, /END OF TERMS AND CONDITIONS/);
  assert.match(license, /APPENDIX: How to apply the Apache License to your work\./);
  assert.ok(license.length > 11_000, `${license.length} characters: not the full text`);
});

Deno.test("packages: the npm package is Apache-2.0 and ships LICENSE", async () => {
  assert.equal(LICENSE_SPDX, "Apache-2.0");
  const json = npmPackageJson();
  assert.equal(json.license, "Apache-2.0");
  assert.equal(json.name, NPM_PACKAGE_NAME);
  assert.equal(json.version, VERSION);
  assert.ok((json.files as string[]).includes("LICENSE"), "LICENSE is in files");
  // The build copies it into the package directory, beside package.json.
  const build = await Deno.readTextFile(`${REPO}npm/build.ts`);
  assert.match(build, /copyFile\(`\$\{root\}LICENSE`, `\$\{packageDir\}LICENSE`\)/);
  assert.match(build, /const packageJson = npmPackageJson\(\);/);
});

Deno.test("packages: the Python package is Apache-2.0 and ships the same LICENSE", () => {
  const pyproject = readRepoFile("clients/python/pyproject.toml");
  assert.match(pyproject, /^license = \{ text = "Apache-2\.0" \}$/m);
  assert.match(pyproject, /"License :: OSI Approved :: Apache Software License"/);
  assert.doesNotMatch(pyproject, /MIT/);
  // setuptools ships LICENSE* of the project directory (clients/python) in the distribution.
  assert.equal(readRepoFile("clients/python/LICENSE"), readRepoFile("LICENSE"));
});

Deno.test("packages: the npm README installs the tarball npm:pack makes, not the unpublished name", () => {
  const readme = readRepoFile("npm/README.md");
  const steps = markedBlock(readme, "npm-install");
  assert.equal(steps.lang, "sh");
  const commands = steps.body.split("\n").filter((line) => line.trim() !== "" && !/^#/.test(line));
  assert.deepEqual(commands, [
    "deno task npm:pack",
    `npm install /path/to/lockd/dist/npm/${NPM_PACKAGE_NAME}-${VERSION}.tgz`,
  ]);
  // The task and the directory the build writes the tarball to are those the README names.
  const tasks = JSON.parse(readRepoFile("deno.json")).tasks;
  assert.equal(tasks["npm:pack"], "deno run --allow-all npm/build.ts");
  assert.match(readRepoFile("npm/build.ts"), /const outDir = `\$\{root\}dist\/npm\/`;/);
  // The install section comes before any example, and no block says `npm install lockd-client`.
  assert.ok(readme.indexOf("## Install") < readme.indexOf("```js"));
  assert.doesNotMatch(steps.body, /npm install lockd-client\b/);
  // The example is an ES module: the README says how to run it.
  const usage = readme.slice(readme.indexOf("## Usage (Node)"), readme.indexOf("```js"));
  assert.match(usage, /`\.mjs`/);
  assert.match(usage, /"type": "module"/);
});

Deno.test("packages: the Python client's virtual environment and build output are ignored by git", async () => {
  for (const path of [".venv/bin/python", "clients/python/build/lib/x.py", "x.egg-info/PKG-INFO"]) {
    const result = await new Deno.Command("git", {
      args: ["check-ignore", "-q", "--no-index", path],
      cwd: REPO,
      stdout: "null",
      stderr: "piped",
    }).output();
    assert.equal(result.code, 0, `${path} is not ignored`);
  }
  // The README's venv is the one ignored.
  assert.match(readRepoFile("clients/python/README.md"), /venv .*\.venv$/m);
});
