import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { connect } from "../../mod.ts";

const MAIN = fileURLToPath(new URL("../../main.ts", import.meta.url));

function lockd(args: string[], stdin: "null" | "piped" = "null"): Deno.ChildProcess {
  return new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", MAIN, ...args],
    stdin,
    stdout: "piped",
    stderr: "piped",
  }).spawn();
}

/** Reads stderr lines until one matches, returning the match; keeps draining afterwards. */
async function waitForLine(
  stream: ReadableStream<Uint8Array>,
  pattern: RegExp,
): Promise<{ match: RegExpMatchArray; rest: Promise<string> }> {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`stream ended before ${pattern}: ${text}`);
    text += value;
    const match = text.match(pattern);
    if (match) {
      const rest = (async () => {
        let tail = text;
        for (;;) {
          const next = await reader.read();
          if (next.done) return tail;
          tail += next.value;
        }
      })();
      return { match, rest };
    }
  }
}

Deno.test("lockd serve starts, writes only audit lines to stdout, and exits 0 on SIGTERM", async () => {
  const server = lockd([
    "serve",
    "-listen",
    "127.0.0.1:0",
    "-shutdown-grace",
    "0s",
    "-data-dir",
    "",
  ]);
  const stdout = server.stdout.pipeThrough(new TextDecoderStream());
  const stdoutText = (async () => {
    let text = "";
    for await (const chunk of stdout) text += chunk;
    return text;
  })();
  const { match, rest } = await waitForLine(server.stderr, /listen="(127\.0\.0\.1:\d+)"/);
  {
    await using client = await connect({ addr: match[1] });
    const lock = await client.acquire("cli/test");
    await lock.release();
  }
  server.kill("SIGTERM");
  const status = await server.status;
  assert.equal(status.code, 0);
  const lines = (await stdoutText).trim().split("\n");
  assert.deepEqual(lines.map((line) => JSON.parse(line).event), ["acquire", "release"]);
  const log = await rest;
  assert.match(log, /shutdown complete/);
});

Deno.test("a bad flag exits 2 with a one-line reason and the usage", async () => {
  const output = await lockd(["serve", "-bogus"]).output();
  assert.equal(output.code, 2);
  const stderr = new TextDecoder().decode(output.stderr);
  assert.equal(stderr.split("\n")[0], "lockd: flag provided but not defined: -bogus");
  assert.match(stderr, /Usage: lockd serve \[flags\]/);
  assert.equal(output.stdout.length, 0, "standard output carries nothing but audit lines");
});

Deno.test("-h prints the usage and exits 0; version prints the version", async () => {
  const help = await lockd(["serve", "-h"]).output();
  assert.equal(help.code, 0);
  assert.match(new TextDecoder().decode(help.stdout), /-io-timeout duration/);
  const version = await lockd(["version"]).output();
  assert.equal(version.code, 0);
  assert.match(new TextDecoder().decode(version.stdout), /^\d+\.\d+\.\d+\n$/);
});

Deno.test("a port in use fails the start with status 1 and one line", async () => {
  using blocker = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const output = await lockd(["-listen", `127.0.0.1:${blocker.addr.port}`, "-data-dir", ""])
    .output();
  assert.equal(output.code, 1);
  assert.match(new TextDecoder().decode(output.stderr), /lockd: .*(in use|Address)/i);
});

Deno.test("every subcommand answers -h with its own usage on standard output and exits 0", async () => {
  const cases: [string[], RegExp][] = [
    [["-h"], /^lockd \d+\.\d+\.\d+: a network lock service/],
    [["serve", "-h"], /^Usage: lockd serve \[flags\]/],
    [["-listen", "127.0.0.1:0", "-h"], /^Usage: lockd serve \[flags\]/],
    [["run", "-h"], /^Usage: lockd run NAME/],
    [["admin", "-h"], /^Usage:\n\s+lockd admin/],
    [["health", "-h"], /^Usage: lockd health/],
    [["version", "-h"], /^Usage: lockd version/],
  ];
  for (const [args, usage] of cases) {
    const output = await lockd(args).output();
    assert.equal(output.code, 0, args.join(" "));
    assert.match(new TextDecoder().decode(output.stdout), usage, args.join(" "));
    assert.equal(output.stderr.length, 0, `${args.join(" ")}: nothing on standard error`);
  }
});

Deno.test("only main.ts exits the process: nothing under src/ calls Deno.exit", async () => {
  const offenders: string[] = [];
  for await (const path of walkTs(new URL("../../src/", import.meta.url))) {
    if ((await Deno.readTextFile(path)).includes("Deno.exit(")) offenders.push(path.pathname);
  }
  assert.deepEqual(offenders, []);
});

async function* walkTs(dir: URL): AsyncGenerator<URL> {
  for await (const entry of Deno.readDir(dir)) {
    const url = new URL(entry.name + (entry.isDirectory ? "/" : ""), dir);
    if (entry.isDirectory) yield* walkTs(url);
    else if (entry.name.endsWith(".ts")) yield url;
  }
}

Deno.test("a duration past its maximum exits 2 with one line, before anything listens", async () => {
  const output = await lockd(["-listen", "127.0.0.1:0", "-handshake-timeout", "600h"]).output();
  assert.equal(output.code, 2);
  const stderr = new TextDecoder().decode(output.stderr);
  assert.equal(stderr.split("\n")[0], "lockd: -handshake-timeout must be between 10ms and 5m");
});
