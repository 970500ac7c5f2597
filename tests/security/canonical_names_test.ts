/**
 * Lock names and globs must be in Unicode Normalization Form C (NFC): one
 * spelling per name, so a look-alike spelling (e + U+0301 for é) can neither
 * hold a second lock with the "same" name nor slip past an ACL rule written
 * in the usual (NFC) spelling. Checked on the wire, in the admin API paths,
 * in `?match=` and in ACL files.
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { lockNameProblem } from "../../src/core/lock_name.ts";
import { WIRE_CODES } from "../../src/protocol/codes.ts";
import { WAIT_FOREVER } from "../../src/protocol/messages.ts";
import { AclParseError, parseAcl } from "../../src/security/acl.ts";
import { compileGlob, GlobError } from "../../src/security/glob.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { startTestServer } from "../helpers/start_server.ts";

const NFC = "caf\u00e9/menu"; // é as one code point
const NFD = "cafe\u0301/menu"; // e + COMBINING ACUTE ACCENT

const NOT_NFC: [string, string][] = [
  ["a decomposed é", NFD],
  ["ANGSTROM SIGN, whose NFC is U+00C5", "\u212b"],
  ["Hangul jamo that compose to one syllable", "\u1100\u1161"],
  ["combining marks in non-canonical order", "q\u0307\u0323"],
];

Deno.test("lock names: NFC names are accepted", () => {
  for (const name of [NFC, "ascii/only", "\u00c5ngstr\u00f6m", "\uac00", "q\u0323\u0307", "🔒"]) {
    assert.equal(lockNameProblem(name), null, JSON.stringify(name));
  }
});

for (const [what, name] of NOT_NFC) {
  Deno.test(`lock names: a name that is not NFC is refused: ${what}`, () => {
    assert.notEqual(name.normalize("NFC"), name);
    assert.equal(lockNameProblem(name), "lock name is not in Unicode Normalization Form C (NFC)");
  });
}

Deno.test("lock names: the NFC check agrees with String.prototype.normalize on random text", () => {
  fc.assert(
    fc.property(
      fc.string({ unit: "grapheme-composite", minLength: 1, maxLength: 12 }),
      fc.constantFrom("NFC", "NFD", "NFKD", "none"),
      (text, form) => {
        const name = form === "none" ? text : text.normalize(form);
        const problem = lockNameProblem(name);
        if (name.normalize("NFC") !== name) {
          assert.equal(problem, "lock name is not in Unicode Normalization Form C (NFC)");
        } else if (problem !== null) {
          assert.doesNotMatch(problem, /NFC/);
        }
      },
    ),
    { numRuns: 3000 },
  );
});

Deno.test("wire: an ACQUIRE of a name that is not NFC gets INVALID_ARGUMENT; its NFC spelling is granted", async () => {
  await using t = await startTestServer();
  await using raw = await RawClient.session(t.addr);
  await raw.send({ type: "acquire", requestId: 1, name: NFD, leaseMs: 0, waitMs: WAIT_FOREVER });
  const refused = await raw.next();
  assert.equal(refused?.type, "error");
  assert.ok(refused?.type === "error");
  assert.equal(refused.code, WIRE_CODES.INVALID_ARGUMENT.code);
  assert.equal(refused.requestId, 1);
  assert.match(refused.message, /not in Unicode Normalization Form C/);
  assert.equal(t.server.context.engine.getLock(NFD), undefined);

  await raw.send({ type: "acquire", requestId: 2, name: NFC, leaseMs: 0, waitMs: WAIT_FOREVER });
  const granted = await raw.next();
  assert.equal(granted?.type, "acquired");
});

Deno.test("admin API: a lock name that is not NFC in a path is a 400 problem", async () => {
  await using t = await startTestServer({ adminListen: "127.0.0.1:0" });
  const base = `http://${t.server.adminAddr}/api/locks/${encodeURIComponent(NFD)}`;
  for (
    const [method, url] of [
      ["GET", base],
      ["POST", `${base}/release`],
      ["DELETE", `${base}/waiters/${encodeURIComponent("127.0.0.1:5555")}`],
    ]
  ) {
    const response = await fetch(url, { method });
    const body = await response.json();
    assert.equal(response.status, 400, `${method} ${url}`);
    assert.equal(response.headers.get("content-type"), "application/problem+json");
    assert.equal(body.type, "https://lockd.dev/problems/invalid-lock-name");
    assert.equal(body.title, "Invalid lock name");
    assert.equal(
      body.detail,
      `Lock name "${NFD}" in the path is refused: lock name is not in Unicode Normalization Form C (NFC)`,
    );
  }
  // The NFC spelling is a valid name: an idle lock is still a 404.
  const idle = await fetch(
    `http://${t.server.adminAddr}/api/locks/${encodeURIComponent(NFC)}`,
  );
  assert.equal(idle.status, 404);
  await idle.body?.cancel();
});

Deno.test("admin API: ?match= with a glob that is not NFC is a 400 invalid-glob problem", async () => {
  await using t = await startTestServer({ adminListen: "127.0.0.1:0" });
  const response = await fetch(
    `http://${t.server.adminAddr}/api/locks?match=${encodeURIComponent("cafe\u0301/**")}`,
  );
  const body = await response.json();
  assert.equal(response.status, 400);
  assert.equal(body.type, "https://lockd.dev/problems/invalid-glob");
  assert.equal(
    body.detail,
    'Invalid glob "cafe\u0301/**": pattern is not in Unicode Normalization Form C (NFC)',
  );
});

Deno.test("globs: a pattern that is not NFC is refused; escapes and classes count too", () => {
  for (const pattern of ["cafe\u0301/**", "[e\u0301]", "\\\u212b*"]) {
    assert.throws(() => compileGlob(pattern), (error: unknown) => {
      assert.ok(error instanceof GlobError);
      assert.equal(error.reason, "pattern is not in Unicode Normalization Form C (NFC)");
      return true;
    });
  }
  assert.ok(compileGlob("caf\u00e9/**").matches(NFC));
});

Deno.test("ACL: a rule whose glob is not NFC is refused with file:line", () => {
  // Saved by an editor in NFD, this deny would never match the NFC name café/menu.
  const text = `allow ** public/**\ndeny ** cafe\u0301/**\nallow ** **\n`;
  assert.throws(() => parseAcl(text, "team.acl"), (error: unknown) => {
    assert.ok(error instanceof AclParseError);
    assert.equal(error.line, 2);
    assert.equal(
      error.message,
      'team.acl:2: bad lock glob: Invalid glob "cafe\u0301/**": pattern is not in Unicode Normalization Form C (NFC)',
    );
    return true;
  });
  assert.throws(
    () => parseAcl(`allow "Cafe\u0301 Agent" **\n`, "team.acl"),
    /team\.acl:1: bad identity glob: .*not in Unicode Normalization Form C/,
  );
});
