/**
 * `-lock-rules-file` on a real server (issue 22 item 4): a broken file stops the start naming the
 * flag and `file:line`; SIGHUP reloads it like the ACL (a broken file keeps the old rules, each
 * file on its own, the last signal wins); a version-1 client meets the rules over TCP.
 */

import assert from "node:assert/strict";
import { connect, LockdError } from "../../mod.ts";
import { LockRulesParseError } from "../../src/security/lock_rules.ts";
import { captureDiagnosticLog } from "../log/capture.ts";
import { writeAcl } from "../helpers/acl_file.ts";
import { startTestServer } from "../helpers/start_server.ts";

async function withDir(run: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "lockd-rules-" });
  try {
    await run(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("lock rules: a broken file stops the start, naming the flag and file:line: reason", async () => {
  await withDir(async (dir) => {
    const path = await writeAcl(dir, "shared reports/**\nsemaphore jobs/* 1\n", "lock.rules");
    await assert.rejects(startTestServer({ lockRulesFile: path }), (error: unknown) => {
      assert.ok(error instanceof Error && error.cause instanceof LockRulesParseError);
      assert.equal(
        error.cause.message,
        `${path}:2: limit "1" is not a whole number from 2 to 65536 (a semaphore of 1 is an ` +
          "exclusive lock: write exclusive)",
      );
      assert.equal(
        error.message,
        `Cannot use the lock rules file (-lock-rules-file): ${error.cause.message}. Fix the ` +
          `line named (docs/operations.md, "Lock rules"), or give -lock-rules-file the right path.`,
      );
      return true;
    });
    await assert.rejects(
      startTestServer({ lockRulesFile: `${dir}/missing` }),
      /^StartError: Cannot use the lock rules file \(-lock-rules-file\): .*missing:0: cannot read/,
    );
  });
});

Deno.test("lock rules: SIGHUP reloads the file; a broken one keeps the old rules; a broken ACL does not stop new rules", async () => {
  await withDir(async (dir) => {
    using log = captureDiagnosticLog("info", "json");
    const rulesPath = await writeAcl(dir, "semaphore render/* 3\n", "lock.rules");
    const aclPath = await writeAcl(dir, "allow ** **\n");
    await using t = await startTestServer({ lockRulesFile: rulesPath, aclFile: aclPath });
    const service = t.server.context.service;
    assert.equal(service.lockRules.ruleFor("render/a")?.limit, 3);

    await writeAcl(dir, "semaphore render/* 8\nshared reports/**\n", "lock.rules");
    await t.server.reload();
    assert.equal(service.lockRules.ruleFor("render/a")?.limit, 8);
    assert.ok(
      log.records().some((r) =>
        r.message === "lock rules reloaded" && r.lock_rules_file === rulesPath && r.rules === 2
      ),
    );

    await writeAcl(dir, "semaphore render/* 4\nmutex x\n", "lock.rules");
    await t.server.reload();
    assert.equal(service.lockRules.ruleFor("render/a")?.limit, 8, "the old rules stay");
    const failed = log.records().find((r) =>
      r.message === "lock rules reload failed; keeping the old rules"
    );
    assert.equal(
      failed?.error,
      `${rulesPath}:2: unknown verb "mutex" (expected semaphore, shared, exclusive or lock-delay)`,
    );
    assert.equal(failed?.level, "ERROR");

    // The ACL breaks, the rules are fixed: the rules reload on their own.
    await writeAcl(dir, "permit ** **\n");
    await writeAcl(dir, "shared render/**\n", "lock.rules");
    await t.server.reload();
    assert.equal(service.lockRules.ruleFor("render/a")?.kind, "shared");
    assert.equal(service.acl.ruleCount, 1, "the old ACL stays");
  });
});

Deno.test("lock rules: two reloads in quick succession: the last signal wins for the rules file too", async () => {
  await withDir(async (dir) => {
    const path = await writeAcl(dir, "shared old/**\n", "lock.rules");
    let gate: PromiseWithResolvers<void> | null = null;
    const reads: string[] = [];
    const readFile = async (file: string) => {
      const bytes = await Deno.readFile(file);
      reads.push(file);
      if (gate !== null) await gate.promise;
      return bytes;
    };
    await using t = await startTestServer({ lockRulesFile: path }, { readFile });
    gate = Promise.withResolvers<void>();
    await writeAcl(dir, "shared middle/**\n", "lock.rules");
    const first = t.server.reload();
    await writeAcl(dir, "shared new/**\n", "lock.rules");
    const second = t.server.reload();
    const held = gate;
    gate = null;
    held.resolve();
    await Promise.all([first, second]);
    const rules = t.server.context.service.lockRules;
    assert.equal(rules.ruleFor("new/x")?.kind, "shared");
    assert.equal(rules.ruleFor("middle/x"), null);
    assert.equal(reads.length, 3, "the start, the first reload and one more");
  });
});

Deno.test("lock rules: a version-1 client over TCP is refused a semaphore's name with INVALID_ARGUMENT and takes a shared rule's name as a writer", async () => {
  await withDir(async (dir) => {
    const path = await writeAcl(dir, "semaphore render/* 3\nshared reports/**\n", "lock.rules");
    await using t = await startTestServer({ lockRulesFile: path });
    await using client = await connect({ addr: t.addr, reconnect: false });
    await assert.rejects(client.acquire("render/a"), (error: unknown) => {
      assert.ok(error instanceof LockdError);
      assert.equal(error.codeName, "INVALID_ARGUMENT");
      assert.match(error.message, /a semaphore with limit 3 by a server rule/);
      return true;
    });
    const lock = await client.acquire("reports/q1");
    assert.equal(t.server.context.engine.getLock("reports/q1")?.kind, "shared");
    await lock.release();
  });
});
