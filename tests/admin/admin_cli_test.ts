import { defaultClientName } from "../../src/client/client_name.ts";
import assert from "node:assert/strict";
import { connect, type LockLostError } from "../../mod.ts";
import { adminCommand } from "../../src/cli/admin.ts";
import type { TestServer } from "../helpers/start_server.ts";
import { http, queue, START, start } from "./admin_helpers.ts";

/** Runs `lockd admin ARGS` in-process and captures what it prints. */
async function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const code = await adminCommand(args, {
    stdout: (text) => stdout += text,
    stderr: (text) => stderr += text,
  });
  return { code, stdout, stderr };
}

function holder(t: TestServer, name: string): string {
  return t.server.context.engine.getLock(name)!.holder!.remoteAddr;
}

/** Pads like the CLI's tables: every column but the last is as wide as its widest cell plus two. */
function table(rows: string[][]): string {
  const widths = rows[0].map((_, c) => Math.max(...rows.map((row) => [...row[c]].length)));
  return rows.map((row) =>
    row.map((cell, c) => c === row.length - 1 ? cell : cell.padEnd(widths[c] + 2)).join("") + "\n"
  ).join("");
}

Deno.test("lockd admin info prints aligned key/value lines", async () => {
  await using t = await start({ ioTimeoutMs: 9_000 });
  const result = await run(["-admin", t.server.adminAddr!, "info"]);
  assert.equal(result.stderr, "");
  assert.equal(result.code, 0);
  assert.equal(
    result.stdout,
    [
      `version        ${t.server.context.version}`,
      "uptime         0s",
      `listen         ${t.addr}`,
      `ops_listen     ${t.server.opsAddr}`,
      "tls            false",
      "mtls           false",
      "acl_file       (none)",
      "audit_log      - (standard output)",
      "io_timeout_ms  9000",
      "locks          0",
      "sessions       0",
      "",
    ].join("\n"),
  );
});

Deno.test("lockd admin -json prints the API's JSON, with the flag before or after the subcommand", async () => {
  await using t = await start();
  await using client = await connect({ addr: t.addr });
  const lock = await client.acquire("jobs/a");
  const api = await http(t.server.adminAddr!, "GET", "/api/locks");
  const before = await run(["-admin", t.server.adminAddr!, "-json", "locks"]);
  const after = await run(["locks", "-json", "-admin", t.server.adminAddr!]);
  assert.equal(before.code, 0);
  assert.equal(before.stdout, `${api.text}\n`);
  assert.equal(after.stdout, before.stdout);
  const info = await run(["-admin", t.server.adminAddr!, "info", "-json"]);
  assert.equal(JSON.parse(info.stdout).sessions, 1);
  await lock.release();
});

Deno.test("lockd admin locks prints a table; -match filters", async () => {
  await using t = await start();
  await using a = await connect({ addr: t.addr });
  await using b = await connect({ addr: t.addr });
  const nightly = await a.acquire("jobs/nightly", { leaseMs: 60_000 });
  const other = await a.acquire("other");
  const waiting = await queue(t, b, "jobs/nightly");
  const admin = t.server.adminAddr!;
  const all = await run(["-admin", admin, "locks"]);
  assert.equal(all.code, 0);
  assert.equal(
    all.stdout,
    table([
      ["NAME", "HOLDER", "TOKEN", "SINCE", "WAITERS"],
      ["jobs/nightly", holder(t, "jobs/nightly"), String(nightly.token), START, "1"],
      ["other", holder(t, "other"), String(other.token), START, "0"],
    ]),
  );
  const matched = await run(["locks", "-match", "jobs/*", "-admin", admin]);
  assert.equal(
    matched.stdout,
    table([
      ["NAME", "HOLDER", "TOKEN", "SINCE", "WAITERS"],
      ["jobs/nightly", holder(t, "jobs/nightly"), String(nightly.token), START, "1"],
    ]),
  );
  const none = await run(["-admin", admin, "locks", "-match", "nothing/**"]);
  assert.equal(none.stdout, "NAME  HOLDER  TOKEN  SINCE  WAITERS\n");
  await nightly.release();
  await (await waiting.granted).release();
  await other.release();
});

Deno.test("lockd admin show prints the holder block and the waiters in FIFO order, with client names, sessions and durations", async () => {
  await using t = await start();
  await using a = await connect({ addr: t.addr, clientName: "nightly-runner" });
  await using b = await connect({ addr: t.addr });
  await using c = await connect({ addr: t.addr, clientName: "report-worker" });
  const lock = await a.acquire("jobs/nightly", { leaseMs: 60_000 });
  const first = await queue(t, b, "jobs/nightly");
  t.scheduler.advance(1_500);
  const second = await queue(t, c, "jobs/nightly");
  t.scheduler.advance(500);
  const result = await run(["-admin", t.server.adminAddr!, "show", "jobs/nightly"]);
  assert.equal(result.code, 0);
  const api = (await http(t.server.adminAddr!, "GET", "/api/locks/jobs%2Fnightly")).json as {
    holder: { session: number };
    waiters: { session: number }[];
  };
  assert.equal(
    result.stdout,
    [
      "name      jobs/nightly",
      `holder    ${holder(t, "jobs/nightly")}`,
      "client    nightly-runner",
      `session   ${api.holder.session}`,
      "identity  (none)",
      `since     ${START} (held for 2s)`,
      "lease_ms  60000",
      `token     ${lock.token}`,
      "waiters   2",
      "", // a blank line before the waiters table
      "",
    ].join("\n") +
      table([
        ["#", "REMOTE_ADDR", "CLIENT", "SESSION", "IDENTITY", "QUEUED_AT", "WAITING"],
        [
          "1",
          first.remoteAddr,
          defaultClientName(`lockd-ts/${t.server.context.version}`),
          String(api.waiters[0].session),
          "-",
          START,
          "2s",
        ],
        [
          "2",
          second.remoteAddr,
          "report-worker",
          String(api.waiters[1].session),
          "-",
          "2026-01-01T00:00:01.500Z",
          "0.5s",
        ],
      ]),
  );
  await lock.release();
  await (await first.granted).release();
  await (await second.granted).release();
});

Deno.test("lockd admin release force-releases and names the new holder; kick removes a waiter", async () => {
  await using t = await start();
  await using a = await connect({ addr: t.addr, reconnect: false });
  await using b = await connect({ addr: t.addr });
  await using c = await connect({ addr: t.addr, reconnect: false });
  const admin = t.server.adminAddr!;
  const lock = await a.acquire("name with space");
  const lost = new Promise<LockLostError>((resolve) =>
    lock.lost.addEventListener("abort", () => resolve(lock.lost.reason), { once: true })
  );
  const next = await queue(t, b, "name with space");
  const kicked = await queue(t, c, "name with space");

  const kick = await run(["-admin", admin, "kick", "name with space", kicked.remoteAddr]);
  assert.equal(kick.code, 0);
  assert.match(
    kick.stdout,
    new RegExp(
      `^removed waiter ${kicked.remoteAddr.replace(/[.[\]]/g, "\\$&")} from lock "name with ` +
        `space"; a standard client reconnects and joins the tail of the queue again`,
    ),
  );
  await assert.rejects(kicked.granted);

  const release = await run(["-admin", admin, "release", "name with space"]);
  assert.equal(release.code, 0, release.stderr);
  const nextLock = await next.granted;
  assert.equal(
    release.stdout,
    `released lock "name with space"; new holder ${next.remoteAddr} with token ${nextLock.token}, 0 waiting\n`,
  );
  assert.equal((await lost).reason, "force");
  assert.deepEqual(
    t.audit.records().filter((r) => r.actor !== undefined).map((r) => r.event),
    ["kick_waiter", "force_release"],
  );
  const idle = await run(["-admin", admin, "release", "name with space"]);
  assert.equal(idle.stdout, `released lock "name with space"; it is now idle\n`);
});

Deno.test("lockd admin prints HTTP errors as one line on stderr and exits 1", async () => {
  await using t = await start();
  const admin = t.server.adminAddr!;
  const cases: { args: string[]; stderr: string }[] = [
    {
      args: ["show", "missing/lock"],
      stderr: 'lockd admin: 404 Lock not found: Lock "missing/lock" has no owner and no waiters\n',
    },
    {
      args: ["locks", "-match", "[z-a]"],
      stderr:
        'lockd admin: 400 Invalid glob: Invalid glob "[z-a]": reversed range "z-a" in character class at position 2\n',
    },
    {
      args: ["kick", "missing", "127.0.0.1:1"],
      stderr: 'lockd admin: 404 Lock not found: Lock "missing" has no owner and no waiters\n',
    },
  ];
  for (const c of cases) {
    const result = await run(["-admin", admin, ...c.args]);
    assert.equal(result.code, 1, c.args.join(" "));
    assert.equal(result.stdout, "");
    assert.equal(result.stderr, c.stderr);
  }
});

Deno.test("lockd admin sends the token from -token-file; without it the API answers 401", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const tokenFile = `${dir}/admin.token`;
    await Deno.writeTextFile(tokenFile, "tok-123\n");
    await using t = await start({ adminTokenFile: tokenFile });
    const admin = t.server.adminAddr!;
    const denied = await run(["-admin", admin, "info"]);
    assert.equal(denied.code, 1);
    assert.equal(
      denied.stderr,
      "lockd admin: 401 Unauthorized: The admin API requires the header Authorization: Bearer " +
        "<token> with the token from -admin-token-file\n",
    );
    const allowed = await run(["-admin", admin, "-token-file", tokenFile, "-json", "info"]);
    assert.equal(allowed.code, 0, allowed.stderr);
    assert.equal(JSON.parse(allowed.stdout).version, t.server.context.version);
    const emptyFile = `${dir}/empty`;
    await Deno.writeTextFile(emptyFile, "\n");
    const empty = await run(["-admin", admin, "-token-file", emptyFile, "info"]);
    assert.equal(empty.code, 1);
    assert.equal(
      empty.stderr,
      `lockd admin: the token file "${emptyFile}" (-token-file) is empty\n`,
    );
    const missing = await run(["-admin", admin, "-token-file", `${dir}/nope`, "info"]);
    assert.equal(missing.code, 1);
    assert.match(
      missing.stderr,
      /^lockd admin: cannot read the token file ".*nope" \(-token-file\): .+\n$/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("lockd admin reports an unreachable admin API in one line and exits 1", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const addr = `127.0.0.1:${listener.addr.port}`;
  listener.close();
  const result = await run(["-admin", addr, "info"]);
  assert.equal(result.code, 1);
  assert.equal(result.stdout, "");
  assert.match(
    result.stderr,
    new RegExp(`^lockd admin: cannot reach the admin API at ${addr}: .+\\n$`),
  );
  assert.equal(result.stderr.split("\n").length, 2, result.stderr);
});

Deno.test("lockd admin usage errors exit 2; -h prints the usage and exits 0", async () => {
  const cases: { args: string[]; first: string }[] = [
    { args: [], first: "lockd admin: missing subcommand" },
    { args: ["frobnicate"], first: 'lockd admin: unknown subcommand "frobnicate"' },
    { args: ["show"], first: "lockd admin: show takes 1 argument, got 0" },
    { args: ["kick", "x"], first: "lockd admin: kick takes 2 arguments, got 1" },
    { args: ["info", "extra"], first: "lockd admin: info takes no arguments, got 1" },
    {
      args: ["show", "x", "-match", "*"],
      first: "lockd admin: -match only applies to the locks subcommand",
    },
    { args: ["-bogus", "info"], first: "lockd admin: flag provided but not defined: -bogus" },
    {
      args: ["-admin", "nohost", "info"],
      first: 'lockd admin: -admin: "nohost" is not a host:port address (IPv6 as [::1]:7400)',
    },
  ];
  for (const c of cases) {
    const result = await run(c.args);
    assert.equal(result.code, 2, c.args.join(" "));
    assert.equal(result.stdout, "");
    assert.equal(result.stderr.split("\n")[0], c.first);
    assert.match(result.stderr, /Usage:\n {2}lockd admin/);
  }
  const help = await run(["-h"]);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /^Usage:\n {2}lockd admin \[flags\] info/);
  assert.equal(help.stderr, "");
});
