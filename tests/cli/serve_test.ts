import assert from "node:assert/strict";
import { runLockd, spawnLockd } from "../../bench/lockd_proc.ts";
import { connect } from "../../mod.ts";

Deno.test("lockd serve starts, writes only audit lines to stdout, and exits 0 on SIGTERM", async () => {
  await using server = await spawnLockd({ stdout: "piped", flags: ["-shutdown-grace", "0s"] });
  const stdout = server.child.stdout.pipeThrough(new TextDecoderStream());
  const stdoutText = (async () => {
    let text = "";
    for await (const chunk of stdout) text += chunk;
    return text;
  })();
  {
    await using client = await connect({ addr: server.addr });
    const lock = await client.acquire("cli/test");
    await lock.release();
  }
  const status = await server.stop("SIGTERM");
  assert.equal(status.code, 0);
  const lines = (await stdoutText).trim().split("\n");
  assert.deepEqual(lines.map((line) => JSON.parse(line).event), ["acquire", "release"]);
  const log = server.log();
  assert.match(log, /shutdown complete/);
});

Deno.test("a bad flag exits 2 with a one-line reason and the usage", async () => {
  const output = await runLockd(["serve", "-bogus"]);
  assert.equal(output.code, 2);
  const stderr = output.stderr;
  assert.equal(stderr.split("\n")[0], "lockd: flag provided but not defined: -bogus");
  assert.match(stderr, /Usage: lockd serve \[flags\]/);
  assert.equal(output.stdout.length, 0, "standard output carries nothing but audit lines");
});

Deno.test("-h prints the usage and exits 0; version prints the version", async () => {
  const help = await runLockd(["serve", "-h"]);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /-io-timeout duration/);
  const version = await runLockd(["version"]);
  assert.equal(version.code, 0);
  assert.match(version.stdout, /^\d+\.\d+\.\d+\n$/);
});

Deno.test("a port in use fails the start with status 1 and one line", async () => {
  using blocker = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const output = await runLockd(["-listen", `127.0.0.1:${blocker.addr.port}`, "-data-dir", ""]);
  assert.equal(output.code, 1);
  assert.match(output.stderr, /lockd: .*(in use|Address)/i);
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
    const output = await runLockd(args);
    assert.equal(output.code, 0, args.join(" "));
    assert.match(output.stdout, usage, args.join(" "));
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
  const output = await runLockd(["-listen", "127.0.0.1:0", "-handshake-timeout", "600h"]);
  assert.equal(output.code, 2);
  const stderr = output.stderr;
  assert.equal(stderr.split("\n")[0], "lockd: -handshake-timeout must be between 10ms and 5m");
});
