/**
 * Every code block of README.md is a checked example (issue 13.4):
 * - `ts` blocks are type-checked the way another project would use them: in a
 *   scratch project with its own (empty) deno.json, importing mod.ts by path;
 * - `json` blocks parse; the import map of "Using the client from another
 *   project" is used by a scratch project that imports `lockd`;
 * - `sh` blocks parse (`bash -n`); the quick start's client commands run
 *   against a test server, and the `deno install` recipe gives a `lockd`
 *   command that runs;
 * - `text` blocks (the layout) are prose; any other language, or none, fails.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { VERSION } from "../../src/version.ts";
import { type CodeBlock, codeBlocks, readRepoFile, runBash } from "../helpers/doc_blocks.ts";
import { startTestServer } from "../helpers/start_server.ts";

const REPO = fileURLToPath(new URL("../../", import.meta.url)).replace(/\/$/, "");
const README = readRepoFile("README.md");
const BLOCKS = codeBlocks(README);

function blocksOf(lang: string): CodeBlock[] {
  return BLOCKS.filter((block) => block.lang === lang);
}

/** `deno check` of files in `dir`, with `dir/deno.json` as the project configuration. */
async function denoCheck(dir: string, files: string[]): Promise<void> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["check", "--quiet", "--config", `${dir}/deno.json`, ...files],
    cwd: dir,
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(output.stderr) + new TextDecoder().decode(output.stdout);
  assert.ok(output.success, `deno check failed:\n${text}`);
}

Deno.test("README: every code block says its language, and it is one the test checks", () => {
  assert.ok(BLOCKS.length >= 6, `${BLOCKS.length} blocks`);
  for (const block of BLOCKS) {
    assert.ok(
      ["ts", "sh", "json", "text"].includes(block.lang),
      `README.md:${block.line}: code block with language "${block.lang}"`,
    );
  }
});

Deno.test("README: every ts block type-checks in another project that imports mod.ts by path", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-readme-" });
  try {
    await Deno.writeTextFile(
      `${dir}/deno.json`,
      JSON.stringify({ compilerOptions: { strict: true } }),
    );
    const files: string[] = [];
    for (const block of blocksOf("ts")) {
      // "./mod.ts" (from this repository) and "../lockd/mod.ts" (from a project beside it).
      const body = block.body.replace(/"(?:\.\/|\.\.\/lockd\/)mod\.ts"/g, `"${REPO}/mod.ts"`);
      assert.ok(body.includes(`"${REPO}/mod.ts"`), `README.md:${block.line} imports mod.ts`);
      const file = `${dir}/readme_line_${block.line}.ts`;
      // Each example is a module of its own (top-level await, its own names).
      await Deno.writeTextFile(file, `${body}\nexport {};\n`);
      files.push(file);
    }
    assert.ok(files.length >= 2);
    await denoCheck(dir, files);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("README: the deno.json import map of another project resolves `lockd` to mod.ts", async () => {
  const [block] = blocksOf("json");
  assert.ok(block, "a json block");
  const config = JSON.parse(block.body) as { imports: Record<string, string> };
  assert.equal(config.imports.lockd, "../lockd/mod.ts");
  // The layout the block assumes: the other project and the checkout side by side.
  const parent = await Deno.makeTempDir({ prefix: "lockd-import-map-" });
  try {
    await Deno.symlink(REPO, `${parent}/lockd`);
    await Deno.mkdir(`${parent}/app`);
    await Deno.writeTextFile(`${parent}/app/deno.json`, block.body);
    await Deno.writeTextFile(
      `${parent}/app/main.ts`,
      'import { connect, LockdError } from "lockd";\n' +
        "const client = await connect({ addr: '127.0.0.1:7400' });\n" +
        "const lock = await client.acquire('a');\n" +
        "const token: number = lock.token;\n" +
        "console.log(token, LockdError.name);\n",
    );
    await denoCheck(`${parent}/app`, [`${parent}/app/main.ts`]);
  } finally {
    await Deno.remove(parent, { recursive: true });
  }
});

Deno.test("README: every sh block parses with bash -n", async () => {
  const blocks = blocksOf("sh");
  assert.ok(blocks.length >= 3);
  for (const block of blocks) {
    await runBash(`bash -n <<'README_BLOCK'\n${block.body}README_BLOCK\n`, { cwd: REPO });
  }
});

Deno.test("README: the quick start's client commands run against a server", async () => {
  await using t = await startTestServer({ adminListen: "127.0.0.1:0" });
  const block = blocksOf("sh").find((b) => b.body.includes("main.ts run "));
  assert.ok(block, "the quick start block with lockd run");
  // The server of `deno task start` is at the default addresses; this one is on port 0. The
  // command's sleep is cut short, and deno is the one running this test.
  const script = block.body
    .replaceAll("npx -y deno@2.9.6", `"${Deno.execPath()}"`)
    .replace("main.ts run ", `main.ts run -addr ${t.addr} `)
    .replace("main.ts admin locks", `main.ts admin -admin ${t.server.adminAddr} locks`)
    .replace("sleep 5", "sleep 0");
  const { stdout } = await runBash(script, { cwd: REPO, env: { NO_COLOR: "1" } });
  assert.match(stdout, /^token \d+$/m);
  assert.match(stdout, /^NAME +HOLDER +TOKEN +SINCE +WAITERS$/m);
  await t.server.shutdown();
  const events = t.audit.records().map((record) => `${record.event} ${record.lock}`);
  assert.deepEqual(events, ["acquire jobs/nightly", "release jobs/nightly"]);
});

Deno.test("README: deno install gives a lockd command that runs offline", async () => {
  const block = blocksOf("sh").find((b) => b.body.includes("deno install -g -n lockd"));
  assert.ok(block, "the deno install block");
  const root = await Deno.makeTempDir({ prefix: "lockd-install-cmd-" });
  try {
    // --root keeps the test out of ~/.deno; the rest of the command is as written.
    const install = block.body.split("\n").find((line) => line.startsWith("deno install"))!;
    const script = `"${Deno.execPath()}" ${
      install.slice("deno ".length).replace(
        "-g ",
        `-g --root ${root} `,
      )
    }\nPATH="${root}/bin:$PATH" lockd version`;
    const { stdout } = await runBash(script, { cwd: REPO, env: { NO_COLOR: "1" } });
    assert.equal(stdout.trim().split("\n").at(-1), VERSION);
    const launcher = await Deno.readTextFile(`${root}/bin/lockd`);
    for (const flag of ["--allow-net", "--allow-read", "--allow-write", "--allow-run"]) {
      assert.ok(launcher.includes(flag), `the installed command has ${flag}`);
    }
    assert.ok(!launcher.includes("--allow-all"));
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
