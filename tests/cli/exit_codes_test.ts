/**
 * Every row of the README's exit-status table, and the messages that go with
 * them (issue 13.2): each start-up or CLI error names the flag, the address or
 * path, and what to do. Every command runs as its own process, as an operator
 * runs it.
 */
import assert from "node:assert/strict";
import { type LockdOutput, runLockd, spawnLockd } from "../../bench/lockd_proc.ts";
import { connect } from "../../mod.ts";
import { OBSERVE_EXIT } from "../../src/cli/observe.ts";
import { RUN_EXIT } from "../../src/cli/run.ts";
import { writeAcl } from "../helpers/acl_file.ts";
import { startTestServer } from "../helpers/start_server.ts";

/** The permissions of the compiled binary (deno task compile). */
const SHIPPED = ["--allow-net", "--allow-read", "--allow-write", "--allow-run"];

async function lockd(args: string[]): Promise<LockdOutput> {
  // A server leaves no lockd-data/ behind (a -data-dir in args comes later and wins).
  const serveArgs = args[0] === "serve" ? ["serve", "-data-dir", "", ...args.slice(1)] : args;
  return await runLockd(serveArgs, { permissions: SHIPPED });
}

/** A port nothing listens on (bound, then closed). */
function closedPort(): number {
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  return listener.addr.port;
}

Deno.test("exit codes: lockd serve is 1 when a listener's address is taken, naming that listener, with no shutdown story", async () => {
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const busy = `127.0.0.1:${taken.addr.port}`;
  for (const flag of ["-listen", "-ops-listen", "-admin-listen"]) {
    const args = ["serve", "-listen", "127.0.0.1:0", "-ops-listen", "127.0.0.1:0", flag, busy];
    const result = await lockd(args);
    assert.equal(result.code, 1, `${flag}: ${result.stderr}`);
    const last = result.stderr.trimEnd().split("\n").at(-1)!;
    assert.equal(
      last,
      `lockd: Cannot listen on ${busy} (${flag}): the address is already in use: another ` +
        `process (or another lockd) listens on it. Find it with: ss -ltnp 'sport = ` +
        `:${taken.addr.port}'; stop it or give ${flag} another port (Address already in use ` +
        `(os error 98))`,
    );
    assert.doesNotMatch(result.stderr, /shutdown/, `${flag}: no shutdown lines for a failed start`);
    assert.equal(result.stdout, "");
  }
});

Deno.test("exit codes: lockd serve is 1 for files it cannot use, naming the flag, the path and the fix", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-start-errors-" });
  try {
    await Deno.writeTextFile(`${dir}/file`, "not a directory\n");
    const cases: [string[], RegExp][] = [
      [
        ["-audit-log", `${dir}/missing/audit.jsonl`],
        /^lockd: Cannot use the audit log ".*missing\/audit\.jsonl" \(-audit-log\): .*No such file.*Create its directory/m,
      ],
      [
        ["-data-dir", `${dir}/file`],
        /^lockd: cannot use -data-dir ".*\/file": /m,
      ],
      [
        ["-admin-listen", "127.0.0.1:0", "-admin-token-file", `${dir}/no.token`],
        /^lockd: Cannot use the admin token file ".*no\.token" \(-admin-token-file\): No such file.*step 4/m,
      ],
      [
        ["-acl-file", `${dir}/no.acl`],
        /^lockd: Cannot use the ACL file \(-acl-file\): .*no\.acl:0: cannot read/m,
      ],
      [
        ["-tls-cert", `${dir}/no.crt`, "-tls-key", `${dir}/no.key`],
        /^lockd: Cannot read -tls-(cert|key) file ".*no\.(crt|key)"/m,
      ],
    ];
    for (const [flags, expected] of cases) {
      const result = await lockd(["serve", "-listen", "127.0.0.1:0", ...flags]);
      assert.equal(result.code, 1, `${flags.join(" ")}: ${result.stderr}`);
      assert.match(result.stderr, expected);
    }
    // With -log-format json, standard error is JSON lines only: the error is in the log line.
    const json = await lockd([
      "serve",
      "-listen",
      "127.0.0.1:0",
      "-log-format",
      "json",
      "-audit-log",
      `${dir}/missing/audit.jsonl`,
    ]);
    assert.equal(json.code, 1);
    const lines = json.stderr.trim().split("\n").map((line) => JSON.parse(line));
    assert.match(lines.at(-1).error, /\(-audit-log\)/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("exit codes: lockd serve is 2 for a usage error and 0 after SIGTERM", async () => {
  const bad = await lockd(["serve", "-max-sessions", "0"]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /^lockd: -max-sessions must be at least 1\n/);
  await using server = await spawnLockd({
    permissions: ["--allow-net", "--allow-read", "--allow-write"],
    flags: ["-shutdown-grace", "0s"],
  });
  assert.equal((await server.stop("SIGTERM")).code, 0);
});

Deno.test("exit codes: lockd admin and lockd health are 0, 1 or 2, and say where and why", async () => {
  await using t = await startTestServer({ adminListen: "127.0.0.1:0", opsListen: "127.0.0.1:0" });
  const admin = t.server.adminAddr!;
  const ops = t.server.opsAddr!;
  const nowhere = `127.0.0.1:${closedPort()}`;

  assert.equal((await lockd(["admin", "-admin", admin, "info"])).code, 0);
  const unreachable = await lockd(["admin", "-admin", nowhere, "info"]);
  assert.equal(unreachable.code, 1);
  assert.match(
    unreachable.stderr,
    new RegExp(`^lockd admin: cannot reach the admin API at ${nowhere}: connection refused`),
  );
  const notFound = await lockd(["admin", "-admin", admin, "show", "idle/lock"]);
  assert.equal(notFound.code, 1);
  assert.match(notFound.stderr, /^lockd admin: 404 Lock not found: /);
  assert.equal((await lockd(["admin", "-admin", admin, "bogus"])).code, 2);

  // -json: failures are JSON too.
  const jsonMissing = await lockd(["admin", "-json", "-admin", admin, "show", "idle/lock"]);
  assert.equal(jsonMissing.code, 1);
  const problem = JSON.parse(jsonMissing.stderr);
  assert.equal(problem.status, 404);
  assert.equal(problem.problem.type, "https://lockd.dev/problems/lock-not-found");
  const jsonDown = await lockd(["admin", "-json", "-admin", nowhere, "info"]);
  assert.equal(jsonDown.code, 1);
  assert.deepEqual(Object.keys(JSON.parse(jsonDown.stderr)), ["error", "status", "problem"]);
  const jsonUsage = await lockd(["admin", "-json", "-admin", admin, "show"]);
  assert.equal(jsonUsage.code, 2);
  assert.match(JSON.parse(jsonUsage.stderr).error, /show takes 1 argument/);

  assert.equal((await lockd(["health", "-ops", ops])).code, 0);
  const down = await lockd(["health", "-ops", nowhere]);
  assert.equal(down.code, 1);
  assert.equal(
    down.stderr.trim(),
    `lockd health: cannot reach the ops listener at ${nowhere}: connection refused, nothing ` +
      `listens there. Is lockd running, with -ops-listen ${nowhere}? Give its address with ` +
      `-ops HOST:PORT.`,
  );
  const notOps = await lockd(["health", "-ops", admin]);
  assert.equal(notOps.code, 1);
  assert.match(notOps.stderr, /^lockd health: the ops listener at .* answered 404/);
  assert.equal((await lockd(["health", "-ops", "no-port"])).code, 2);
});

Deno.test("exit codes: lockd run is the command's status, 1, 2, 69 or 75", async () => {
  await using t = await startTestServer({ adminListen: "127.0.0.1:0" });
  const own = await lockd(["run", "exit/own", "-addr", t.addr, "--", "sh", "-c", "exit 7"]);
  assert.equal(own.code, 7);
  const ok = await lockd(["run", "exit/own", "-addr", t.addr, "--", "true"]);
  assert.equal(ok.code, 0);

  const nowhere = `127.0.0.1:${closedPort()}`;
  const unreachable = await lockd(["run", "exit/x", "-addr", nowhere, "--", "true"]);
  assert.equal(unreachable.code, 1);
  assert.match(
    unreachable.stderr,
    new RegExp(`Cannot connect to lockd at ${nowhere}: connection refused, nothing listens there`),
  );

  const halfPair = await lockd(["run", "exit/x", "-cert", "client.crt", "--", "true"]);
  assert.equal(halfPair.code, 2);
  assert.match(halfPair.stderr, /^lockd run: -cert and -key go together/);
  assert.equal((await lockd(["run", "exit/x", "-bogus", "--", "true"])).code, 2);

  await using holder = await connect({ addr: t.addr });
  const held = await holder.acquire("exit/held");
  const timedOut = await lockd([
    "run",
    "exit/held",
    "-addr",
    t.addr,
    "-wait",
    "100ms",
    "--",
    "true",
  ]);
  assert.equal(timedOut.code, 75);
  await held.release();

  // Lost while the command runs: an operator force-releases it.
  const running = lockd([
    "run",
    "exit/lost",
    "-addr",
    t.addr,
    "-kill-grace",
    "1s",
    "--",
    "sleep",
    "30",
  ]);
  const engine = t.server.context.engine;
  for (let i = 0; i < 500 && engine.getLock("exit/lost")?.holder == null; i++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const release = await fetch(`http://${t.server.adminAddr}/api/locks/exit%2Flost/release`, {
    method: "POST",
  });
  await release.body?.cancel();
  assert.equal(release.status, 200);
  assert.equal((await running).code, 69);
});

Deno.test("exit codes: lockd run is 77 for an ACL denial and 65 for a refused lock name, never 1", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-run-exit-" });
  try {
    // Without a client certificate the identity is "": it may take public/* only.
    const acl = await writeAcl(dir, 'allow "" public/*\n');
    await using t = await startTestServer({ aclFile: acl });
    const allowed = await lockd(["run", "public/x", "-addr", t.addr, "--", "true"]);
    assert.equal(allowed.code, 0, allowed.stderr);

    const denied = await lockd(["run", "private/x", "-addr", t.addr, "--", "true"]);
    assert.equal(denied.code, RUN_EXIT.denied.status, denied.stderr);
    assert.equal(denied.code, 77);
    assert.match(denied.stderr, /^lockd run: .*"private\/x".* \(ACL_DENIED\)\n$/);

    await using open = await startTestServer();
    for (const name of ["..", "e\u0301"]) {
      const refused = await lockd(["run", name, "-addr", open.addr, "--", "true"]);
      assert.equal(refused.code, RUN_EXIT.badName.status, refused.stderr);
      assert.equal(refused.code, 65);
      assert.match(refused.stderr, /^lockd run: .*lock name .* \(INVALID_ARGUMENT\)\n$/);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("exit codes: lockd run is 78 when a TLS file cannot be used, 127 when the command cannot be started", async () => {
  await using t = await startTestServer();
  const dir = await Deno.makeTempDir({ prefix: "lockd-run-exit-" });
  try {
    const missing = await lockd([
      "run",
      "x",
      "-addr",
      t.addr,
      "-ca",
      `${dir}/no-ca.pem`,
      "--",
      "true",
    ]);
    assert.equal(missing.code, RUN_EXIT.tlsFiles.status, missing.stderr);
    assert.equal(missing.code, 78);
    assert.match(missing.stderr, /^lockd run: Cannot read -ca file ".*no-ca\.pem"/);
    await Deno.writeTextFile(`${dir}/junk.pem`, "not a certificate\n");
    const junk = await lockd(["run", "x", "-addr", t.addr, "-ca", `${dir}/junk.pem`, "--", "true"]);
    assert.equal(junk.code, 78, junk.stderr);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  const cannotRun = await lockd(["run", "x", "-addr", t.addr, "--", "/nonexistent/command"]);
  assert.equal(cannotRun.code, RUN_EXIT.cannotRun.status, cannotRun.stderr);
  assert.equal(cannotRun.code, 127);
  assert.match(cannotRun.stderr, /^lockd run: cannot run "\/nonexistent\/command"/);
});

Deno.test("exit codes: the usage of lockd run, README.md and docs/operations.md list lockd run's statuses, one row each", async () => {
  const rows = Object.values(RUN_EXIT);
  assert.equal(new Set(rows.map((r) => r.status)).size, rows.length, "one status per row");
  const usage = await lockd(["run", "-h"]);
  for (const { status, when } of rows) {
    assert.match(usage.stdout, new RegExp(`^ +${status}  ${escape(when)}$`, "m"));
  }
  const readme = await Deno.readTextFile(new URL("../../README.md", import.meta.url));
  const readmeRun = tableRows(readme, 5).filter((cells) => cells[3] !== "").map((c) => c[0]);
  assert.deepEqual(readmeRun, ["0", ...rows.map((r) => String(r.status))]);
  const operations = await Deno.readTextFile(
    new URL("../../docs/operations.md", import.meta.url),
  );
  const start = operations.indexOf("## Running a command under a lock");
  const section = operations.slice(start, operations.indexOf("\n## ", start + 1));
  assert.deepEqual(tableRows(section, 2).map((c) => c[0]), rows.map((r) => String(r.status)));
});

Deno.test("exit codes: the usage of lockd observe and README.md list lockd observe's statuses, one row each", async () => {
  const rows = Object.values(OBSERVE_EXIT);
  assert.equal(new Set(rows.map((r) => r.status)).size, rows.length, "one status per row");
  const usage = await lockd(["observe", "-h"]);
  for (const { status, when } of rows) {
    assert.match(usage.stdout, new RegExp(`^ +${status}  ${escape(when)}$`, "m"));
  }
  // docs/operations.md's table is checked by tests/cli/observe_test.ts.
  const readme = await Deno.readTextFile(new URL("../../README.md", import.meta.url));
  const readmeObserve = tableRows(readme, 5).filter((cells) => cells[4] !== "").map((c) => c[0]);
  assert.deepEqual(readmeObserve, rows.map((r) => String(r.status)));
});

/** The rows of the Markdown tables with `columns` columns whose first cell is a number. */
function tableRows(markdown: string, columns: number): string[][] {
  return markdown.split("\n").map((line) => line.split("|").slice(1, -1).map((c) => c.trim()))
    .filter((cells) => cells.length === columns && /^\d+$/.test(cells[0]));
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
