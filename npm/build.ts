/**
 * Builds the npm package of the TypeScript client from the very sources Deno runs (mod.ts and
 * what it imports), with TypeScript's own compiler from npm: ES2022 modules plus `.d.ts`,
 * relative `.ts` imports rewritten to `.js` (`rewriteRelativeImportExtensions`). Then
 * `npm pack` makes the tarball. Its package.json is npm/package_json.ts's (name and version
 * from src/version.ts, the one place they are kept; the license of LICENSE, shipped with it).
 *
 *     deno task npm:pack      # prints the path of dist/npm/<name>-<version>.tgz
 *
 * The compiler and Node's type declarations are build tools only, installed under
 * dist/npm/tools; the package itself has no dependencies.
 *
 * @module
 */

import { npmPackageJson } from "./package_json.ts";

const TYPESCRIPT = "typescript@6.0.3";
const NODE_TYPES = "@types/node@20.19.43";

const root = new URL("../", import.meta.url).pathname;
const outDir = `${root}dist/npm/`;
const packageDir = `${outDir}package/`;
const toolsDir = `${outDir}tools/`;

async function run(command: string, args: string[], cwd: string): Promise<string> {
  const output = await new Deno.Command(command, { args, cwd, stderr: "inherit" }).output();
  const stdout = new TextDecoder().decode(output.stdout);
  if (!output.success) {
    throw new Error(`${command} ${args.join(" ")} failed (${output.code}):\n${stdout}`);
  }
  return stdout;
}

async function installedVersion(name: string): Promise<string | null> {
  try {
    const text = await Deno.readTextFile(`${toolsDir}node_modules/${name}/package.json`);
    return JSON.parse(text).version;
  } catch {
    return null;
  }
}

/** Installs the compiler and Node's types into dist/npm/tools unless they are there already. */
async function installTools(): Promise<void> {
  const want = [TYPESCRIPT, NODE_TYPES];
  const have = await Promise.all(
    want.map(async (spec) => {
      const at = spec.lastIndexOf("@");
      return await installedVersion(spec.slice(0, at)) === spec.slice(at + 1);
    }),
  );
  if (have.every(Boolean)) return;
  await Deno.mkdir(toolsDir, { recursive: true });
  await Deno.writeTextFile(`${toolsDir}package.json`, '{ "private": true }\n');
  await run("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", ...want], toolsDir);
}

async function compile(): Promise<void> {
  const tsconfig = {
    compilerOptions: {
      target: "ES2022",
      module: "ESNext",
      moduleResolution: "Bundler",
      lib: ["ES2022", "ES2024.String", "ESNext.Disposable"], // isWellFormed: Node 20 has it
      types: ["node"],
      typeRoots: [`${toolsDir}node_modules/@types`],
      strict: true,
      declaration: true,
      rewriteRelativeImportExtensions: true,
      verbatimModuleSyntax: true,
      skipLibCheck: true,
      noEmitOnError: true,
      rootDir: root,
      outDir: packageDir,
    },
    files: [`${root}mod.ts`],
  };
  await Deno.writeTextFile(`${outDir}tsconfig.json`, JSON.stringify(tsconfig, null, 2));
  await run(`${toolsDir}node_modules/.bin/tsc`, ["-p", `${outDir}tsconfig.json`], outDir);
}

/** Every emitted file, relative to the package directory. */
async function emitted(dir = packageDir, prefix = ""): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    const path = `${prefix}${entry.name}`;
    if (entry.isDirectory) files.push(...await emitted(`${dir}${entry.name}/`, `${path}/`));
    else files.push(path);
  }
  return files.sort();
}

/**
 * The client must not touch Deno's namespace: it would fail on Node and Bun. One optional probe is
 * allowed, in client_name.js: `globalThis.Deno?.permissions` (is reading the host name allowed
 * without a prompt?), undefined elsewhere.
 */
async function checkRuntimeNeutral(files: string[]): Promise<void> {
  const probe = /globalThis\.Deno\?\.permissions/g;
  for (const file of files.filter((f) => f.endsWith(".js"))) {
    const source = (await Deno.readTextFile(`${packageDir}${file}`))
      .replace(/\/\*[\s\S]*?\*\//g, "") // comments may name Deno APIs; code may not
      .replace(/^\s*\/\/.*$/gm, "");
    const probes = source.match(probe)?.length ?? 0;
    if (probes !== (file === "src/client/client_name.js" ? 1 : 0)) {
      throw new Error(`${file}: the Deno permission probe belongs to client_name.js, once`);
    }
    const code = source.replace(probe, "");
    if (/\bDeno\b/.test(code)) throw new Error(`${file} uses the Deno namespace`);
  }
}

async function main(): Promise<void> {
  await Deno.remove(packageDir, { recursive: true }).catch(() => {});
  await Deno.mkdir(packageDir, { recursive: true });
  await installTools();
  await compile();
  const files = await emitted();
  await checkRuntimeNeutral(files);
  const packageJson = npmPackageJson();
  await Deno.writeTextFile(
    `${packageDir}package.json`,
    JSON.stringify(packageJson, null, 2) + "\n",
  );
  await Deno.copyFile(`${root}npm/README.md`, `${packageDir}README.md`);
  await Deno.copyFile(`${root}LICENSE`, `${packageDir}LICENSE`);
  const tarball =
    (await run("npm", ["pack", "--pack-destination", outDir, "--loglevel=error"], packageDir))
      .trim().split("\n").at(-1)!;
  console.log(`${outDir}${tarball}`);
}

await main();
