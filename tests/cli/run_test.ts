import assert from "node:assert/strict";
import { lockdCommand } from "../../bench/lockd_proc.ts";
import { connect } from "../../mod.ts";
import { EXIT_LOCK_LOST, EXIT_WAIT_TIMEOUT, RUN_FLAGS } from "../../src/cli/run.ts";
import { certPath, keyPath, serverTlsConfig } from "../fixtures/tls/certs.ts";
import { ChaosProxy } from "../helpers/chaos_proxy.ts";
import { HostileServer } from "../helpers/hostile_server.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { eventually, startTestServer, TEST_ACTOR } from "../helpers/start_server.ts";

function lockdRun(args: string[]): Deno.ChildProcess {
  return lockdCommand(["run", ...args]).spawn();
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
  t.server.context.service.forceRelease("x", TEST_ACTOR);
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

Deno.test("lockd run takes a 1,024-byte lock name and names itself lockd-run@<host>:<pid> in the audit log, under the shipped permissions", async () => {
  await using t = await startTestServer();
  const name = "n/" + "é".repeat(511); // 1,024 UTF-8 bytes: the longest lock name
  // The permissions of the compiled binary (deno task compile): no --allow-sys, no prompt.
  const run = lockdCommand(["run", name, "-addr", t.addr, "--", "true"], {
    permissions: ["--allow-net", "--allow-read", "--allow-write", "--allow-run"],
  }).spawn();
  const output = await run.output();
  assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
  const records = t.audit.records();
  assert.deepEqual(records.map((r) => [r.event, r.lock]), [["acquire", name], ["release", name]]);
  const expected = `lockd-run@${Deno.hostname()}:${run.pid}`;
  assert.deepEqual(records.map((r) => r.client_name), [expected, expected]);
});

Deno.test("lockd run -client-name sets the client name, cut to 256 bytes between two characters", async () => {
  await using t = await startTestServer();
  const chosen = await lockdRun([
    "x",
    "-addr",
    t.addr,
    "-client-name",
    "nightly-report",
    "--",
    "true",
  ])
    .output();
  assert.equal(chosen.code, 0, new TextDecoder().decode(chosen.stderr));
  const long = "€".repeat(100); // 300 bytes
  const cut = await lockdRun(["y", "-addr", t.addr, "-client-name", long, "--", "true"]).output();
  assert.equal(cut.code, 0, new TextDecoder().decode(cut.stderr));
  const names = t.audit.records().filter((r) => r.event === "acquire").map((r) => r.client_name);
  assert.deepEqual(names, ["nightly-report", "€".repeat(84) + "…"]);
});

Deno.test("lockd run meeting a NOT_LEADER that names no address exits 1 with one line, not a stack trace", async () => {
  await using standby = new HostileServer({
    hello: (conn) =>
      conn.send({
        type: "error",
        requestId: 0,
        code: WIRE_CODES.NOT_LEADER.code,
        name: "evil:99999",
        message: "not the leader",
      }),
  });
  const output = await lockdRun(["x", "-addr", standby.addr, "--", "true"]).output();
  const stderr = new TextDecoder().decode(output.stderr);
  assert.equal(output.code, 1, stderr);
  assert.match(stderr, /naming "evil:99999" as the leader, which is not a host:port address/);
  assert.doesNotMatch(stderr, /RangeError|\n\s+at /);
  assert.equal(stderr.trim().split("\n").length, 1, stderr);
});

Deno.test("lockd run tries its first connect again until -wait has passed: a server that comes up meanwhile gives it the lock", async () => {
  const free = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const addr = `127.0.0.1:${free.addr.port}`;
  free.close();
  const run = lockdRun(["x", "-addr", addr, "-wait", "20s", "--", "true"]);
  await new Promise((resolve) => setTimeout(resolve, 1_500)); // refused meanwhile
  await using t = await startTestServer({ listen: addr });
  const output = await run.output();
  assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
  assert.ok(t.audit.records().some((r) => r.event === "acquire" && r.lock === "x"));
  // Without -wait, one try: refused at once, exit 1.
  const free2 = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const addr2 = `127.0.0.1:${free2.addr.port}`;
  free2.close();
  const refused = await lockdRun(["x", "-addr", addr2, "--", "true"]).output();
  assert.equal(refused.code, 1);
  assert.match(new TextDecoder().decode(refused.stderr), /connection refused/);
});

// ---- the command's process group --------------------------------------------------------

/** Force-releases `name` through the admin API, as an operator would. */
async function forceRelease(t: { server: { adminAddr: string | null } }, name: string) {
  const response = await fetch(
    `http://${t.server.adminAddr}/api/locks/${encodeURIComponent(name)}/release`,
    { method: "POST" },
  );
  assert.equal(response.status, 200, await response.text());
}

/** Whether `pid` is a live process (a zombie is not: it cannot run or write). */
function processAlive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return !/^[ZX]/.test(stat.slice(stat.lastIndexOf(")") + 2));
  } catch {
    return false;
  }
}

async function waitForFile(path: string, check: (text: string) => boolean): Promise<string> {
  const deadline = performance.now() + 10_000;
  for (;;) {
    const text = await Deno.readTextFile(path).catch(() => "");
    if (check(text)) return text;
    assert.ok(performance.now() < deadline, `${path} never got there: ${JSON.stringify(text)}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

Deno.test("after a loss, lockd run stops the background grandchild too: nothing writes once it has reported the loss", async () => {
  await using t = await startTestServer({ adminListen: "127.0.0.1:0" });
  const dir = await Deno.makeTempDir();
  try {
    const out = `${dir}/writes`;
    const pidFile = `${dir}/grandchild.pid`;
    // The README's shape: work in the background, the foreground sleeps.
    const grandchild =
      `echo $$ > ${pidFile}; while :; do echo "$LOCKD_TOKEN" >> ${out}; sleep 0.01; done`;
    const run = lockdRun([
      "x",
      "-addr",
      t.addr,
      "--",
      "sh",
      "-c",
      `sh -c '${grandchild}' & sleep 30`,
    ]);
    await waitForFile(out, (text) => text.split("\n").length > 3);
    await forceRelease(t, "x");
    const output = await run.output();
    const reportedAt = (await Deno.stat(out)).size;
    assert.equal(output.code, EXIT_LOCK_LOST);
    assert.match(
      new TextDecoder().decode(output.stderr),
      /an operator force-released it; the command group was stopped \(SIGTERM\)/,
    );
    const pid = Number((await Deno.readTextFile(pidFile)).trim());
    assert.equal(processAlive(pid), false, "the grandchild is gone when lockd run exits");
    await new Promise((resolve) => setTimeout(resolve, 100)); // ten write periods
    assert.equal((await Deno.stat(out)).size, reportedAt, "no write after the report");
    const tokens = new Set((await Deno.readTextFile(out)).trim().split("\n"));
    assert.equal(tokens.size, 1, "every write carried the one token");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a group that ignores SIGTERM gets SIGKILL after -kill-grace; lockd run waits for it and never exits 0 after a loss", async () => {
  await using t = await startTestServer({ adminListen: "127.0.0.1:0" });
  const dir = await Deno.makeTempDir();
  try {
    const out = `${dir}/writes`;
    // The grandchild ignores SIGTERM; the command itself exits 0 on SIGTERM.
    const grandchild = `trap "" TERM; while :; do echo w >> ${out}; sleep 0.01; done`;
    const run = lockdRun([
      "x",
      "-addr",
      t.addr,
      "-kill-grace",
      "300ms",
      "--",
      "sh",
      "-c",
      `sh -c '${grandchild}' & trap "exit 0" TERM; while :; do sleep 0.05; done`,
    ]);
    await waitForFile(out, (text) => text.length > 0);
    const lostAt = performance.now();
    await forceRelease(t, "x");
    const output = await run.output();
    const exitedAt = performance.now();
    const size = (await Deno.stat(out)).size;
    assert.equal(output.code, EXIT_LOCK_LOST, new TextDecoder().decode(output.stderr));
    assert.match(new TextDecoder().decode(output.stderr), /stopped \(SIGKILL after 300 ms\)/);
    assert.ok(exitedAt - lostAt >= 300, "waited for the SIGKILL");
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal((await Deno.stat(out)).size, size, "no write after lockd run exited");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("background processes the command leaves in its group keep the lock until they exit", async () => {
  await using t = await startTestServer();
  const dir = await Deno.makeTempDir();
  try {
    const out = `${dir}/writes`;
    const run = lockdRun([
      "x",
      "-addr",
      t.addr,
      "--",
      "sh",
      "-c",
      `(sleep 0.3; echo "late $LOCKD_TOKEN" >> ${out}) & exit 3`,
    ]);
    const output = await run.output();
    assert.equal(output.code, 3, new TextDecoder().decode(output.stderr));
    assert.match(await Deno.readTextFile(out), /^late \d+\n$/, "written before lockd run exited");
    await using other = await connect({ addr: t.addr });
    const next = await other.acquire("x");
    const [, token] = (await Deno.readTextFile(out)).trim().split(" ");
    assert.ok(next.token > Number(token));
    await next.release();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("over a stalled path, lockd run stops its command group before the next owner's command starts", async () => {
  await using t = await startTestServer();
  await using proxy = new ChaosProxy(t.addr);
  const dir = await Deno.makeTempDir();
  try {
    const out = `${dir}/writes`;
    const first = lockdRun([
      "x",
      "-addr",
      proxy.addr,
      "-lease",
      "2s",
      "--",
      "sh",
      "-c",
      `sh -c 'while :; do echo "A $LOCKD_TOKEN" >> ${out}; sleep 0.01; done' & sleep 60`,
    ]);
    await waitForFile(out, (text) => text.startsWith("A "));
    const second = lockdRun([
      "x",
      "-addr",
      t.addr,
      "--",
      "sh",
      "-c",
      `echo "B $LOCKD_TOKEN" >> ${out}`,
    ]);
    await eventually(() => t.server.context.engine.getLock("x")?.waiters.length === 1, "queued");
    proxy.hold(); // no FIN, no RST: the first holder's heartbeats and acks just stop
    const [a, b] = await Promise.all([first.output(), second.output()]);
    await proxy.resume();
    assert.equal(a.code, EXIT_LOCK_LOST, new TextDecoder().decode(a.stderr));
    assert.match(new TextDecoder().decode(a.stderr), /no heartbeat was acknowledged in time/);
    assert.equal(b.code, 0, new TextDecoder().decode(b.stderr));
    const lines = (await Deno.readTextFile(out)).trim().split("\n");
    const firstB = lines.findIndex((line) => line.startsWith("B "));
    assert.equal(firstB, lines.length - 1, "B's write comes after every A write");
    assert.ok(lines.slice(0, firstB).every((line) => line.startsWith("A ")));
    assert.ok(Number(lines[firstB].split(" ")[1]) > Number(lines[0].split(" ")[1]));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("docs/operations.md lists every lockd run flag", async () => {
  const doc = await Deno.readTextFile(new URL("../../docs/operations.md", import.meta.url));
  const missing = RUN_FLAGS.filter((flag) => !doc.includes(`| \`-${flag.name}\``));
  assert.deepEqual(missing.map((flag) => flag.name), []);
});
