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
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { WAIT_FOREVER } from "../../src/wire/messages.ts";
import { AclParseError, parseAcl } from "../../src/security/acl.ts";
import { compileGlob, GlobError } from "../../src/security/glob.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { startTestServer } from "../helpers/start_server.ts";
import { assertProblem } from "../helpers/problem.ts";

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
    await assertProblem(response, 400, "invalid-lock-name", {
      title: "Invalid lock name",
      detail:
        `Lock name "${NFD}" in the path is refused: lock name is not in Unicode Normalization Form C (NFC)`,
      message: `${method} ${url}`,
    });
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
  await assertProblem(response, 400, "invalid-glob", {
    detail: 'Invalid glob "cafe\u0301/**": pattern is not in Unicode Normalization Form C (NFC)',
  });
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

// ---- invisible format characters (issue 19.6) --------------------------------------------------

/** Names that look like other names: each with the reason the server gives. */
const INVISIBLE: [string, string, string][] = [
  ["RIGHT-TO-LEFT OVERRIDE", "jobs/\u202egol.x", "a bidirectional control character (U+202E)"],
  ["LEFT-TO-RIGHT EMBEDDING", "\u202ajobs", "a bidirectional control character (U+202A)"],
  ["POP DIRECTIONAL FORMATTING", "jobs\u202c", "a bidirectional control character (U+202C)"],
  ["RIGHT-TO-LEFT ISOLATE", "a\u2067b", "a bidirectional control character (U+2067)"],
  ["POP DIRECTIONAL ISOLATE", "a\u2069", "a bidirectional control character (U+2069)"],
  ["ARABIC LETTER MARK", "a\u061cb", "a bidirectional control character (U+061C)"],
  ["RIGHT-TO-LEFT MARK", "a\u200fb", "a bidirectional control character (U+200F)"],
  ["ZERO WIDTH SPACE", "jobs/night\u200bly", "an invisible format character (U+200B)"],
  ["ZERO WIDTH JOINER", "a\u200db", "an invisible format character (U+200D)"],
  ["WORD JOINER", "a\u2060b", "an invisible format character (U+2060)"],
  ["INVISIBLE PLUS", "a\u2064b", "an invisible format character (U+2064)"],
  ["BYTE ORDER MARK", "\ufeffjobs", "an invisible format character (U+FEFF)"],
  ["MONGOLIAN VOWEL SEPARATOR", "a\u180eb", "an invisible format character (U+180E)"],
  ["SOFT HYPHEN", "night\u00adly", "an invisible format character (U+00AD)"],
  ["TAG LATIN SMALL LETTER A", "flag\u{e0061}", "an invisible format character (U+E0061)"],
];

for (const [what, name, reason] of INVISIBLE) {
  Deno.test(`lock names: a name with an invisible character is refused: ${what}`, () => {
    assert.equal(name.normalize("NFC"), name, "the name is NFC: only the new rule refuses it");
    assert.equal(lockNameProblem(name), `lock name contains ${reason}`);
  });
}

Deno.test("lock names: every format character (Unicode Cf) is refused, and nothing else new is", () => {
  const cf = /\p{Cf}/u;
  for (let codePoint = 0x20; codePoint <= 0x10ffff; codePoint++) {
    if (codePoint >= 0xd800 && codePoint <= 0xdfff) continue; // lone surrogates: not Unicode
    if (codePoint >= 0x7f && codePoint <= 0x9f) continue; // control characters: refused already
    const name = `a${String.fromCodePoint(codePoint)}`;
    if (name.normalize("NFC") !== name) continue; // refused as not NFC
    const problem = lockNameProblem(name);
    assert.equal(problem !== null, cf.test(name), `U+${codePoint.toString(16)}: ${problem}`);
  }
});

Deno.test("wire: an ACQUIRE of a name with a bidirectional control or a zero-width space gets INVALID_ARGUMENT", async () => {
  await using t = await startTestServer();
  await using raw = await RawClient.session(t.addr);
  for (const [i, [, name, reason]] of INVISIBLE.entries()) {
    await raw.send({ type: "acquire", requestId: i + 1, name, leaseMs: 0, waitMs: WAIT_FOREVER });
    const refused = await raw.next();
    assert.ok(refused?.type === "error", JSON.stringify(refused));
    assert.equal(refused.code, WIRE_CODES.INVALID_ARGUMENT.code);
    assert.equal(refused.requestId, i + 1);
    assert.equal(refused.name, name);
    assert.equal(refused.message, `lock name contains ${reason}`);
  }
  assert.equal(t.server.context.engine.lockCount, 0);
  // The visible spelling is a lock like any other.
  await raw.send({ type: "acquire", requestId: 99, name: "jobs/nightly", leaseMs: 0, waitMs: 0 });
  assert.equal((await raw.next())?.type, "acquired");
});

Deno.test("admin API: a lock name with an invisible character in a path is a 400 problem that shows it escaped", async () => {
  await using t = await startTestServer({ adminListen: "127.0.0.1:0" });
  const name = "jobs/\u202egol.x";
  const base = `http://${t.server.adminAddr}/api/locks/${encodeURIComponent(name)}`;
  for (
    const [method, url] of [
      ["GET", base],
      ["POST", `${base}/release`],
      ["DELETE", `${base}/waiters/${encodeURIComponent("127.0.0.1:5555")}`],
    ]
  ) {
    const response = await fetch(url, { method });
    await assertProblem(response, 400, "invalid-lock-name", {
      detail:
        'Lock name "jobs/\\u202Egol.x" in the path is refused: lock name contains a bidirectional ' +
        "control character (U+202E)",
      message: `${method} ${url}`,
    });
  }
  const zeroWidth = await fetch(
    `http://${t.server.adminAddr}/api/locks/${encodeURIComponent("night\u200bly")}`,
  );
  await assertProblem(zeroWidth, 400, undefined, {
    detail: /invisible format character \(U\+200B\)/,
  });
});

Deno.test("admin API: ?match= with an invisible character is a 400 invalid-glob problem", async () => {
  await using t = await startTestServer({ adminListen: "127.0.0.1:0" });
  for (
    const [pattern, detail] of [
      [
        "jobs/\u202e**",
        'Invalid glob "jobs/\\u202E**": pattern contains a bidirectional control character ' +
        "(U+202E) at position 6",
      ],
      [
        "**\u200b",
        'Invalid glob "**\\u200B": pattern contains an invisible format character (U+200B) at ' +
        "position 3",
      ],
    ]
  ) {
    const response = await fetch(
      `http://${t.server.adminAddr}/api/locks?match=${encodeURIComponent(pattern)}`,
    );
    await assertProblem(response, 400, "invalid-glob", { detail });
  }
});

Deno.test("globs and ACL rules: an invisible character is refused, escaped or in a class too", () => {
  for (const pattern of ["\\\u202e*", "[\u200b]", "a\u{e0061}", "\u2066**"]) {
    assert.throws(() => compileGlob(pattern), (error: unknown) => {
      assert.ok(error instanceof GlobError);
      assert.match(error.reason, /^pattern contains (a|an) .* \(U\+[0-9A-F]{4,5}\)$/);
      assert.doesNotMatch(error.message, /[\u200b\u202e\u2066\u{e0061}]/u);
      return true;
    });
  }
  assert.throws(
    () => parseAcl(`allow ** public/**\ndeny ** jobs/\u2066**\n`, "team.acl"),
    /^AclParseError: team\.acl:2: bad lock glob: .*bidirectional control character \(U\+2066\)/,
  );
});
