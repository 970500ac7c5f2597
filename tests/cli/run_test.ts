import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { connect } from "../../mod.ts";
import { EXIT_LOCK_LOST, EXIT_WAIT_TIMEOUT } from "../../src/cli/run.ts";
import { certPath, keyPath, serverTlsConfig } from "../fixtures/tls/certs.ts";
import { startTestServer } from "../helpers/start_server.ts";

const MAIN = fileURLToPath(new URL("../../main.ts", import.meta.url));

function lockdRun(args: string[]): Deno.ChildProcess {
  return new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", MAIN, "run", ...args],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
}

Deno.test("lockd run serializes two concurrent commands and passes the token", async () => {
  await using t = await startTestServer();
  const dir = await Deno.makeTempDir();
  const log = `${dir}/log`;
  try {
    const script =
      `echo "start $LOCKD_LOCK $LOCKD_TOKEN" >> ${log}; sleep 0.3; echo "end $LOCKD_TOKEN" >> ${log}`;
    const runs = [0, 1].map(() =>
      lockdRun(["batch/nightly", "-addr", t.addr, "--", "sh", "-c", script])
    );
    const outputs = await Promise.all(runs.map((run) => run.output()));
    for (const output of outputs) {
      assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
    }
    const lines = (await Deno.readTextFile(log)).trim().split("\n");
    assert.equal(lines.length, 4);
    const [s1, e1, s2, e2] = lines.map((line) => line.split(" "));
    assert.deepEqual([s1[0], e1[0], s2[0], e2[0]], ["start", "end", "start", "end"]);
    assert.equal(s1[1], "batch/nightly");
    assert.equal(s1[2], e1[1], "first command ran under one token");
    assert.equal(s2[2], e2[1]);
    assert.ok(Number(s2[2]) > Number(s1[2]), "the second command got a larger token");
    assert.equal(t.server.context.engine.lockCount, 0, "both released");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("lockd run exits with the command's status, 75 when -wait runs out", async () => {
  await using t = await startTestServer();
  const status = await lockdRun(["x", "-addr", t.addr, "--", "sh", "-c", "exit 7"]).output();
  assert.equal(status.code, 7);
  await using holder = await connect({ addr: t.addr });
  const lock = await holder.acquire("x");
  const timedOut = await lockdRun(["x", "-addr", t.addr, "-wait", "200ms", "--", "true"]).output();
  assert.equal(timedOut.code, EXIT_WAIT_TIMEOUT);
  assert.match(new TextDecoder().decode(timedOut.stderr), /wait timed out after 200 ms/);
  await lock.release();
});

Deno.test("lockd run stops the command and exits 69 when the lock is force-released", async () => {
  await using t = await startTestServer();
  const run = lockdRun(["x", "-addr", t.addr, "-kill-grace", "1s", "--", "sleep", "30"]);
  const deadline = performance.now() + 10_000;
  while (t.server.context.engine.getLock("x")?.holder == null) {
    assert.ok(performance.now() < deadline, "lockd run acquired the lock");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const { events } = t.server.context.engine.forceRelease("x");
  t.server.context.dispatcher.apply(events);
  const output = await run.output();
  assert.equal(output.code, EXIT_LOCK_LOST);
  assert.match(new TextDecoder().decode(output.stderr), /an operator force-released it/);
});

Deno.test("lockd run refuses a bad command line with status 2", async () => {
  const output = await lockdRun(["-addr", "127.0.0.1:1"]).output();
  assert.equal(output.code, 2);
  assert.match(new TextDecoder().decode(output.stderr), /needs exactly one lock NAME/);
});

Deno.test("lockd run speaks mutual TLS with -ca -cert -key and the identity shows in the audit log", async () => {
  await using t = await startTestServer(serverTlsConfig(true));
  const output = await lockdRun([
    "tls/job",
    "-addr",
    `localhost:${t.addr.split(":").at(-1)}`,
    "-ca",
    certPath("ca"),
    "-cert",
    certPath("client-uri"),
    "-key",
    keyPath("client-uri"),
    "--",
    "sh",
    "-c",
    'test -n "$LOCKD_TOKEN"',
  ]).output();
  assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
  const acquire = t.audit.records().find((r) => r.event === "acquire");
  assert.equal(acquire?.identity, "spiffe://example.org/worker");
});
