import assert from "node:assert/strict";
import { type Client, connect, LockdError } from "../../mod.ts";
import { AclParseError } from "../../src/security/acl.ts";
import { type CertName, clientTls, serverTlsConfig } from "../fixtures/tls/certs.ts";
import { writeAcl } from "../helpers/acl_file.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";
import { captureDiagnosticLog } from "../log/capture.ts";

const TEAM_A = "spiffe://example.org/team-a/batch";
const WORKER = "spiffe://example.org/worker";

const TEAM_RULES = `# team-a owns its prefix; nobody else gets anything
allow  spiffe://example.org/team-a/**  team-a/**
allow  ""                              public/*
`;

async function withAclDir(run: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir();
  try {
    await run(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function connectAs(addr: string, client?: CertName): Promise<Client> {
  return connect({
    addr,
    tls: client === undefined ? undefined : clientTls(client),
    reconnect: false,
  });
}

/** Asserts that `acquire` is refused with ERROR ACL_DENIED (0x04, not retryable). */
async function assertAclDenied(acquire: Promise<unknown>): Promise<void> {
  await assert.rejects(acquire, (error: unknown) => {
    assert.ok(error instanceof LockdError, String(error));
    assert.equal(error.code, 0x04);
    assert.equal(error.codeName, "ACL_DENIED");
    assert.equal(error.retryable, false);
    return true;
  });
}

Deno.test("ACL: a broken file stops the start with file:line: reason", async () => {
  await withAclDir(async (dir) => {
    const path = await writeAcl(dir, "allow ** a/**\npermit ** b/**\n");
    await assert.rejects(startTestServer({ aclFile: path }), (error: unknown) => {
      // The start error names the flag (issue 13.2); the parse error is its cause, unchanged.
      assert.ok(error instanceof Error && error.cause instanceof AclParseError);
      assert.equal(
        error.cause.message,
        `${path}:2: unknown verb "permit" (expected allow or deny)`,
      );
      assert.ok(error.message.startsWith(`Cannot use the ACL file (-acl-file): ${path}:2: `));
      return true;
    });
    await assert.rejects(startTestServer({ aclFile: `${dir}/missing` }), /missing:0: cannot read/);
  });
});

Deno.test("ACL with mTLS identities: team-a may take team-a/**; another identity is refused and nothing else changes", async () => {
  await withAclDir(async (dir) => {
    using log = captureDiagnosticLog("warn", "json");
    await using t = await startTestServer({
      ...serverTlsConfig(true),
      aclFile: await writeAcl(dir, TEAM_RULES),
    });
    await using teamA = await connectAs(t.addr, "client-team-a");
    await using worker = await connectAs(t.addr, "client-uri");
    const counters = t.server.context.counters;
    const stats = t.server.context.engine.stats;

    const lock = await teamA.acquire("team-a/nightly");
    assert.equal(t.server.context.engine.getLock("team-a/nightly")?.holder?.identity, TEAM_A);
    const acquiresBefore = stats.acquiresTotal;
    const auditBefore = t.audit.lines.length;

    // Refused: the held lock and a free one, neither queued nor granted.
    await assertAclDenied(worker.acquire("team-a/nightly"));
    await assertAclDenied(worker.acquire("team-b/free"));
    assert.equal(counters.aclDenials, 2);
    assert.equal(counters.protocolErrors.get(0x04), 2);
    assert.equal(stats.acquiresTotal, acquiresBefore);
    assert.deepEqual(t.server.context.engine.getLock("team-a/nightly")?.waiters, []);
    assert.equal(t.server.context.engine.getLock("team-b/free"), undefined);
    assert.equal(t.server.context.engine.getLock("team-a/nightly")?.holder?.token, lock.token);

    const denials = t.audit.records().slice(auditBefore);
    assert.deepEqual(
      denials.map((r) => [r.event, r.lock, r.identity, r.token]),
      [
        ["acl_deny", "team-a/nightly", WORKER, null],
        ["acl_deny", "team-b/free", WORKER, null],
      ],
    );
    for (const record of denials) {
      assert.match(String(record.remote_addr), /^127\.0\.0\.1:\d+$/);
      assert.equal(typeof record.session, "number");
    }
    const warn = log.records().find((r) => r.message === "ACL denied acquire");
    assert.equal(warn?.identity, WORKER);

    // The refused session stays open and usable; the holder is untouched.
    assert.equal(worker.sessionId > 0, true);
    assert.equal(lock.lost.aborted, false);
    await lock.release();
  });
});

Deno.test("ACL without mTLS: the empty identity matches only rules written for it", async () => {
  await withAclDir(async (dir) => {
    await using t = await startTestServer({ aclFile: await writeAcl(dir, TEAM_RULES) });
    await using plain = await connectAs(t.addr);
    const lock = await plain.acquire("public/board");
    assert.equal(t.server.context.engine.getLock("public/board")?.holder?.identity, "");
    await assertAclDenied(plain.acquire("public/deep/x"));
    await assertAclDenied(plain.acquire("team-a/x"));
    assert.equal(t.server.context.counters.aclDenials, 2);
    await lock.release();
    await eventually(() => t.audit.lines.length === 4, "audit records");
    assert.deepEqual(
      t.audit.records().map((r) => [r.event, r.identity]),
      [["acquire", ""], ["acl_deny", ""], ["acl_deny", ""], ["release", ""]],
    );
  });
});

Deno.test("ACL reload: a good file replaces the rules, a broken one keeps them, ownerships are never revoked", async () => {
  await withAclDir(async (dir) => {
    using log = captureDiagnosticLog("info", "json");
    const path = await writeAcl(dir, "allow ** old/**\n");
    await using t = await startTestServer({ aclFile: path });
    await using client = await connectAs(t.addr);
    const held = await client.acquire("old/held");
    await assertAclDenied(client.acquire("new/x"));

    // A good file replaces the rules; the ownership granted under the old rules stays.
    await writeAcl(dir, "allow ** new/**\n");
    await t.server.reload();
    assert.ok(log.records().some((r) => r.message === "ACL reloaded" && r.rules === 1));
    const fresh = await client.acquire("new/x");
    await assertAclDenied(client.acquire("old/other"));
    assert.equal(held.lost.aborted, false);
    assert.equal(t.server.context.engine.getLock("old/held")?.holder?.token, held.token);

    // A broken file is refused as a whole: the rules of the last good file stay in force.
    await writeAcl(dir, "allow ** new/**\nallow ** [\n");
    await t.server.reload();
    const failure = log.records().find((r) =>
      r.message === "ACL reload failed; keeping the old rules"
    );
    assert.equal(failure?.level, "ERROR");
    assert.equal(
      failure?.error,
      `${path}:2: bad lock glob: Invalid glob "[": unterminated character class at position 1`,
    );
    const again = await client.acquire("new/y");
    await assertAclDenied(client.acquire("old/other"));

    // The holder under the oldest rules can still release normally.
    await held.release();
    await fresh.release();
    await again.release();
    const releases = t.audit.records().filter((r) => r.event === "release");
    assert.deepEqual(releases.map((r) => [r.lock, r.reason]), [
      ["old/held", "graceful"],
      ["new/x", "graceful"],
      ["new/y", "graceful"],
    ]);
  });
});

Deno.test("ACL: a file with invalid UTF-8 stops the start, and a reload to one keeps the old rules", async () => {
  await withAclDir(async (dir) => {
    using log = captureDiagnosticLog("info", "json");
    const path = `${dir}/acl.txt`;
    // Line 2 holds a Latin-1 é: decoded leniently it would become U+FFFD and the deny would
    // silently stop matching café/**.
    const broken = new Uint8Array([
      ...new TextEncoder().encode("allow ** public/**\ndeny ** caf"),
      0xe9,
      ...new TextEncoder().encode("/**\nallow ** **\n"),
    ]);
    await Deno.writeFile(path, broken);
    await assert.rejects(startTestServer({ aclFile: path }), (error: unknown) => {
      assert.ok(error instanceof Error && error.cause instanceof AclParseError);
      assert.equal(
        error.cause.message,
        `${path}:2: invalid UTF-8: byte 0xe9 at byte 12 of the line`,
      );
      return true;
    });

    await writeAcl(dir, "allow ** public/**\n");
    await using t = await startTestServer({ aclFile: path });
    await using client = await connectAs(t.addr);
    await Deno.writeFile(path, broken);
    await t.server.reload();
    const failure = log.records().find((r) =>
      r.message === "ACL reload failed; keeping the old rules"
    );
    assert.equal(failure?.error, `${path}:2: invalid UTF-8: byte 0xe9 at byte 12 of the line`);
    await (await client.acquire("public/x")).release();
    await assertAclDenied(client.acquire("elsewhere"));
  });
});
