/**
 * Tidiness rules checked on the source tree itself, in the spirit of TigerBeetle's tidy.zig:
 *
 * 1. The core is pure: `src/core/` imports nothing outside `src/core/` except `src/limits.ts`
 *    (and `import type` only from there too), so the engine can be reasoned about and tested
 *    without I/O, clocks or the protocol.
 * 2. No unused exports: every exported value (function, class, const, let, enum) of `src/` is
 *    named by some other module (src, tests, bench, main.ts, mod.ts). Exported types are
 *    exempt: a type in an exported signature is exported for its callers and the docs even
 *    when nobody names it.
 * 3. No file is longer than FILE_LINES_MAX lines (the largest today is about 890): past that, a
 *    file has more than one responsibility and should be split.
 * 4. Only `main.ts` exits the process (tests/cli/serve_test.ts checks it).
 * 5. Time only through the scheduler: no `Date.now`, `performance.now`, `setTimeout`,
 *    `setInterval` (nor their clear*, `AbortSignal.timeout`, `new Date()`) outside the files of
 *    RAW_TIME_ALLOWED; `systemScheduler` only as the default of an injected scheduler, but for the
 *    files of SYSTEM_CLOCK_ALLOWED; none of them at all in `src/core/`, nor `Deno.` or
 *    `globalThis`.
 * 6. The core is pure in its code too: no `Deno`, global object, clock, timer or randomness
 *    in `src/core/` (the engine takes every reading of the clock as an argument).
 */

import assert from "node:assert/strict";

/** Longest allowed TypeScript file, in lines. */
const FILE_LINES_MAX = 1_000;

const ROOT = new URL("../", import.meta.url);
/** Not source: version control, build output and installed packages. */
const SKIPPED_DIRS = new Set([".git", "dist", "node_modules"]);

async function tsFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (path: string) => {
    for await (const entry of Deno.readDir(new URL(path, ROOT))) {
      const child = `${path}/${entry.name}`;
      if (entry.isDirectory && !SKIPPED_DIRS.has(entry.name)) await walk(child);
      else if (entry.name.endsWith(".ts")) out.push(child);
    }
  };
  await walk(dir);
  return out.sort();
}

async function read(path: string): Promise<string> {
  return await Deno.readTextFile(new URL(path, ROOT));
}

/** The module specifiers a file imports or re-exports. */
function importsOf(text: string): string[] {
  return [...text.matchAll(/^(?:import|export)\b[^;]*?from\s+"([^"]+)"/gms)].map((m) => m[1]);
}

Deno.test("tidy: src/core imports nothing outside src/core except src/limits.ts", async () => {
  const offenders: string[] = [];
  for (const file of await tsFiles("src/core")) {
    for (const specifier of importsOf(await read(file))) {
      const inCore = specifier.startsWith("./") && !specifier.includes("..");
      if (!inCore && specifier !== "../limits.ts") offenders.push(`${file}: ${specifier}`);
    }
  }
  assert.deepEqual(offenders, []);
});

/**
 * Names that reach the outside world or a clock: the engine takes the time as an argument and
 * does no I/O, so none of these may appear in src/core's code (comments aside).
 */
const IMPURE_NAMES = [
  "Deno",
  "globalThis",
  "window",
  "self",
  "Date",
  "performance",
  "setTimeout",
  "setInterval",
  "clearTimeout",
  "clearInterval",
  "queueMicrotask",
  "requestAnimationFrame",
  "fetch",
  "crypto",
  "process",
  "Math.random",
];

/** A file's text without its comments (line numbers kept). */
function withoutComments(text: string): string {
  return text
    .replace(/\/\*[\s\S]*?\*\//g, (comment) => comment.replace(/[^\n]/g, ""))
    .replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
}

Deno.test("tidy: src/core is pure: no Deno, globals, clocks, timers or randomness in its code", async () => {
  const offenders: string[] = [];
  const pattern = new RegExp(
    `(?<![\\w.$])(${IMPURE_NAMES.map((n) => n.replace(".", "\\.")).join("|")})(?![\\w$])`,
    "g",
  );
  for (const file of await tsFiles("src/core")) {
    for (const [line, text] of withoutComments(await read(file)).split("\n").entries()) {
      for (const match of text.matchAll(pattern)) {
        offenders.push(`${file}:${line + 1}: ${match[1]}`);
      }
    }
  }
  assert.deepEqual(offenders, []);
});

Deno.test("tidy: every exported value of src/ is used by another module", async () => {
  // Every TypeScript file of the repository may use an export (npm/build.ts, clients/, ...).
  const files: string[] = [];
  for await (const entry of Deno.readDir(ROOT)) {
    if (entry.isFile && entry.name.endsWith(".ts")) files.push(entry.name);
    if (entry.isDirectory && !SKIPPED_DIRS.has(entry.name)) {
      files.push(...await tsFiles(entry.name));
    }
  }
  const texts = new Map<string, string>();
  for (const file of files) texts.set(file, await read(file));
  const unused: string[] = [];
  for (const file of files.filter((f) => f.startsWith("src/"))) {
    const declared = texts.get(file)!.matchAll(
      /^export (?:async )?(?:function\*?|class|const|let|enum) ([A-Za-z_$][\w$]*)/gm,
    );
    for (const [, name] of declared) {
      const word = new RegExp(`\\b${name.replace("$", "\\$")}\\b`);
      if (!files.some((other) => other !== file && word.test(texts.get(other)!))) {
        unused.push(`${file}: ${name}`);
      }
    }
  }
  assert.deepEqual(unused, []);
});

Deno.test(`tidy: no TypeScript file is longer than ${FILE_LINES_MAX} lines`, async () => {
  const long: string[] = [];
  for (const dir of ["src", "tests", "bench"]) {
    for (const file of await tsFiles(dir)) {
      const lines = (await read(file)).split("\n").length;
      if (lines > FILE_LINES_MAX) long.push(`${file}: ${lines} lines`);
    }
  }
  assert.deepEqual(long, []);
});

/**
 * The only files of `src/` that may read the process clock or set a timer of their own; every
 * other file takes a `Scheduler` (src/clock.ts), so tests drive its time by hand. Entries only
 * shrink. Not checked: the operator console (`src/admin/console/*.js`), which runs in the browser,
 * where no Scheduler exists (its refresh, reconnect and chart timers are the page's own, and the
 * browser test drives it in real time).
 */
const RAW_TIME_ALLOWED: Readonly<Record<string, string>> = {
  "src/clock.ts": "the clock itself: systemScheduler (performance.now, Date.now, setTimeout in " +
    "steps) and afterIoTurn (setTimeout 0: an order after the I/O events of a turn, not a time)",
  "src/ops/runtime.ts": "the event-loop lag probe measures the real event loop: an unref'd " +
    "setInterval (Deno.unrefTimer needs the raw timer; a Scheduler's timer keeps the process " +
    "alive) read with performance.now; on a manual clock it would measure nothing",
};

/**
 * Files of `src/` that use the process clock (`systemScheduler`) other than as the default of an
 * injected scheduler or reading (`?? systemScheduler`): each reads real time on purpose. Entries
 * only shrink.
 */
const SYSTEM_CLOCK_ALLOWED: Readonly<Record<string, string>> = {
  "src/clock.ts": "defines it",
  "src/cli/admin.ts":
    "the standard IO of `lockd admin` (tests pass their own, with a manual clock)",
  "src/http/backend.ts": "a socket directory's age compares the kernel's mtime with the real " +
    "wall clock, never with a server's (manual) scheduler",
};

/** Reads of the process clock and timers outside a Scheduler. */
const RAW_TIME =
  /\b(?:Date\.now|performance\.now|setTimeout|setInterval|clearTimeout|clearInterval|AbortSignal\.timeout)\b|\bnew Date\(\)/g;

Deno.test("tidy: time only through the scheduler: raw clock reads and timers only in the listed files of src/", async () => {
  const offenders: string[] = [];
  const used = new Set<string>();
  for (const file of await tsFiles("src")) {
    const found = [...new Set(withoutComments(await read(file)).match(RAW_TIME) ?? [])];
    if (found.length === 0) continue;
    if (file in RAW_TIME_ALLOWED) used.add(file);
    else offenders.push(`${file}: ${found.join(", ")}`);
  }
  assert.deepEqual(offenders, []);
  assert.deepEqual(Object.keys(RAW_TIME_ALLOWED).filter((f) => !used.has(f)), [], "stale entries");
});

Deno.test("tidy: the process clock (systemScheduler) only as the default of an injected scheduler, but for the listed files", async () => {
  const offenders: string[] = [];
  const used = new Set<string>();
  for (const file of await tsFiles("src")) {
    const code = withoutComments(await read(file))
      .replace(/^import\b[^;]*;/gms, "")
      .replace(/\?\?\s*systemScheduler\b/g, "");
    if (!/\bsystemScheduler\b/.test(code)) continue;
    if (file in SYSTEM_CLOCK_ALLOWED) used.add(file);
    else offenders.push(file);
  }
  assert.deepEqual(offenders, []);
  assert.deepEqual(
    Object.keys(SYSTEM_CLOCK_ALLOWED).filter((f) => !used.has(f)),
    [],
    "stale entries",
  );
});

Deno.test("tidy: src/core reads no clock, sets no timer and touches neither Deno nor globalThis", async () => {
  const offenders: string[] = [];
  for (const file of await tsFiles("src/core")) {
    const code = withoutComments(await read(file));
    const found = [
      ...(code.match(RAW_TIME) ?? []),
      ...(code.match(/\bDeno\.|\bglobalThis\b|\bsystemScheduler\b|\bqueueMicrotask\b/g) ?? []),
    ];
    if (found.length > 0) offenders.push(`${file}: ${[...new Set(found)].join(", ")}`);
  }
  assert.deepEqual(offenders, []);
});
