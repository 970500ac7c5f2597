import assert from "node:assert/strict";
import fc from "fast-check";
import { AclParseError, ALLOW_ALL, loadAclFile, parseAcl } from "../../src/security/acl.ts";
import { firstInvalidUtf8 } from "../../src/security/utf8.ts";
import { ACL_LINE_BYTES_MAX, ACL_RULES_MAX } from "../../src/limits.ts";

const TEAM_ACL = [
  "# lockd ACL for the example cluster",
  "",
  "allow  spiffe://example.org/team-a/**   team-a/**",
  "deny   **                               secrets/**   # nobody, not even team-a",
  "allow  spiffe://example.org/team-a/**   **",
  'allow  ""                               public/*',
  "\tallow\t**\tshared/**",
].join("\n");

const decideCases: {
  name: string;
  identity: string;
  lock: string;
  allowed: boolean;
  line: number | null;
}[] = [
  {
    name: "a team identity may take a lock under its own prefix",
    identity: "spiffe://example.org/team-a/worker",
    lock: "team-a/jobs/nightly",
    allowed: true,
    line: 3,
  },
  {
    name: "the deny before a broader allow wins for a sensitive prefix",
    identity: "spiffe://example.org/team-a/worker",
    lock: "secrets/db",
    allowed: false,
    line: 4,
  },
  {
    name: "the broader allow after the deny applies to other names",
    identity: "spiffe://example.org/team-a/worker",
    lock: "team-b/x",
    allowed: true,
    line: 5,
  },
  {
    name: "another team does not match the team-a identity glob",
    identity: "spiffe://example.org/team-b/worker",
    lock: "team-a/jobs/nightly",
    allowed: false,
    line: null,
  },
  {
    name: "the empty identity matches a quoted empty identity glob",
    identity: "",
    lock: "public/page",
    allowed: true,
    line: 6,
  },
  {
    name: "a star lock glob does not cross a slash for the empty identity",
    identity: "",
    lock: "public/a/b",
    allowed: false,
    line: null,
  },
  {
    name: "a double-star identity glob matches the empty identity",
    identity: "",
    lock: "shared/cache",
    allowed: true,
    line: 7,
  },
  {
    name: "a double-star identity glob matches a SPIFFE identity",
    identity: "spiffe://example.org/team-c/x",
    lock: "shared/cache",
    allowed: true,
    line: 7,
  },
  {
    name: "the deny for everyone also covers the empty identity",
    identity: "",
    lock: "secrets/x",
    allowed: false,
    line: 4,
  },
  {
    name: "no matching rule means deny",
    identity: "",
    lock: "private/x",
    allowed: false,
    line: null,
  },
];

for (const c of decideCases) {
  Deno.test(`acl decide: ${c.name}`, () => {
    const acl = parseAcl(TEAM_ACL, "team.acl");
    const decision = acl.decide(c.identity, c.lock);
    assert.equal(decision.allowed, c.allowed);
    assert.equal(decision.rule?.line ?? null, c.line);
  });
}

Deno.test("acl: a matching rule is reported with its verb, globs as written and line", () => {
  const acl = parseAcl(TEAM_ACL, "team.acl");
  assert.deepEqual(acl.decide("spiffe://example.org/team-a/w", "secrets/db").rule, {
    verb: "deny",
    identityGlob: "**",
    lockGlob: "secrets/**",
    line: 4,
  });
  assert.equal(acl.ruleCount, 5);
});

Deno.test("acl: the first matching rule wins over a later contradicting one", () => {
  const allowFirst = parseAcl("allow ** a/*\ndeny ** a/*\n", "x.acl");
  const denyFirst = parseAcl("deny ** a/*\nallow ** a/*\n", "x.acl");
  assert.deepEqual(allowFirst.decide("id", "a/b"), {
    allowed: true,
    rule: { verb: "allow", identityGlob: "**", lockGlob: "a/*", line: 1 },
  });
  assert.deepEqual(denyFirst.decide("id", "a/b"), {
    allowed: false,
    rule: { verb: "deny", identityGlob: "**", lockGlob: "a/*", line: 1 },
  });
});

Deno.test("acl: a rule matches only when both its identity and lock globs match", () => {
  const acl = parseAcl("allow alice jobs/*\nallow bob **\n", "x.acl");
  assert.equal(acl.decide("alice", "jobs/1").allowed, true);
  assert.equal(acl.decide("alice", "other").allowed, false);
  assert.equal(acl.decide("bob", "jobs/1").rule?.line, 2);
  assert.equal(acl.decide("carol", "jobs/1").allowed, false);
});

interface ExpectedRule {
  verb: string;
  identityGlob: string;
  lockGlob: string;
  line: number;
  /** An identity and a lock name that this rule, and no earlier one, matches. */
  probe: [string, string];
}

const textCases: { name: string; text: string; rules: ExpectedRule[] }[] = [
  { name: "an empty file has no rules", text: "", rules: [] },
  {
    name: "comments and blank lines have no rules",
    text: "# only a comment\n\n   \t\n   # indented comment\n",
    rules: [],
  },
  {
    name: "fields may be separated by tabs and runs of spaces",
    text: "allow\t \tteam-a\t\t jobs/*",
    rules: [
      {
        verb: "allow",
        identityGlob: "team-a",
        lockGlob: "jobs/*",
        line: 1,
        probe: ["team-a", "jobs/x"],
      },
    ],
  },
  {
    name: "a trailing comment after whitespace is dropped",
    text: "deny a b # why: audit says so",
    rules: [{ verb: "deny", identityGlob: "a", lockGlob: "b", line: 1, probe: ["a", "b"] }],
  },
  {
    name: "a hash inside an unquoted field is part of it",
    text: "allow a#1 b#2",
    rules: [{
      verb: "allow",
      identityGlob: "a#1",
      lockGlob: "b#2",
      line: 1,
      probe: ["a#1", "b#2"],
    }],
  },
  {
    name: "a quoted field may contain spaces and a hash",
    text: 'allow "CN=Jane Doe #2" "team a/*"',
    rules: [{
      verb: "allow",
      identityGlob: "CN=Jane Doe #2",
      lockGlob: "team a/*",
      line: 1,
      probe: ["CN=Jane Doe #2", "team a/x"],
    }],
  },
  {
    name: "a quoted empty field is the empty identity",
    text: 'allow "" public/*',
    rules: [
      { verb: "allow", identityGlob: "", lockGlob: "public/*", line: 1, probe: ["", "public/x"] },
    ],
  },
  {
    name: "escaped quote and backslash inside quotes are resolved",
    text: 'allow "say \\"hi\\"" "a\\\\\\\\b"',
    rules: [{
      verb: "allow",
      identityGlob: 'say "hi"',
      lockGlob: "a\\\\b",
      line: 1,
      probe: ['say "hi"', "a\\b"],
    }],
  },
  {
    name: "other backslashes inside quotes are kept for the glob",
    text: 'allow "a\\*" b',
    rules: [{ verb: "allow", identityGlob: "a\\*", lockGlob: "b", line: 1, probe: ["a*", "b"] }],
  },
  {
    name: "backslashes in unquoted fields are kept for the glob",
    text: "allow a\\*b c",
    rules: [{ verb: "allow", identityGlob: "a\\*b", lockGlob: "c", line: 1, probe: ["a*b", "c"] }],
  },
  {
    name: "a quoted field may be followed by a comment after whitespace",
    text: 'allow "" "x"\t# comment',
    rules: [{ verb: "allow", identityGlob: "", lockGlob: "x", line: 1, probe: ["", "x"] }],
  },
  {
    name: "CRLF line endings are accepted and lines still count from one",
    text: "# header\r\nallow a b\r\n\r\ndeny c d\r\n",
    rules: [
      { verb: "allow", identityGlob: "a", lockGlob: "b", line: 2, probe: ["a", "b"] },
      { verb: "deny", identityGlob: "c", lockGlob: "d", line: 4, probe: ["c", "d"] },
    ],
  },
  {
    name: "a byte-order mark at the start is ignored",
    text: "\uFEFFallow a b",
    rules: [{ verb: "allow", identityGlob: "a", lockGlob: "b", line: 1, probe: ["a", "b"] }],
  },
];

for (const c of textCases) {
  Deno.test(`acl parse: ${c.name}`, () => {
    const acl = parseAcl(c.text, "x.acl");
    assert.equal(acl.ruleCount, c.rules.length);
    for (const { probe, ...rule } of c.rules) {
      assert.deepEqual(acl.decide(...probe), { allowed: rule.verb === "allow", rule });
    }
  });
}

const errorCases: { name: string; text: string; message: string; line: number }[] = [
  {
    name: "an unknown verb is rejected",
    text: "# rules\npermit a b",
    message: 'team.acl:2: unknown verb "permit" (expected allow or deny)',
    line: 2,
  },
  {
    name: "verbs are case-sensitive",
    text: "Allow a b",
    message: 'team.acl:1: unknown verb "Allow" (expected allow or deny)',
    line: 1,
  },
  {
    name: "a rule with two fields is rejected",
    text: "allow a",
    message: "team.acl:1: expected 3 fields (allow|deny, identity glob, lock glob), found 2",
    line: 1,
  },
  {
    // Issue 23: a fourth field names the rule's actions; anything else there is refused.
    name: "a fourth field that names no action is rejected",
    text: "allow a b c",
    message: 'team.acl:1: unknown actions "c" (expected acquire, read or acquire,read)',
    line: 1,
  },
  {
    name: "a hash glued to a field does not start a comment and counts as text",
    text: "allow a b#c d",
    message: 'team.acl:1: unknown actions "d" (expected acquire, read or acquire,read)',
    line: 1,
  },
  {
    name: "a rule with five fields is rejected",
    text: "allow a b read x",
    message:
      "team.acl:1: expected at most 4 fields (allow|deny, identity glob, lock glob, actions), found 5",
    line: 1,
  },
  {
    name: "an action named twice is rejected",
    text: "allow a b read,read",
    message: 'team.acl:1: unknown actions "read,read" (expected acquire, read or acquire,read)',
    line: 1,
  },
  {
    name: "an empty action in a list is rejected",
    text: "allow a b read,",
    message: 'team.acl:1: unknown actions "read," (expected acquire, read or acquire,read)',
    line: 1,
  },
  {
    name: "a verb alone is rejected",
    text: "\n\ndeny",
    message: "team.acl:3: expected 3 fields (allow|deny, identity glob, lock glob), found 1",
    line: 3,
  },
  {
    name: "an unterminated quote is rejected with its field number",
    text: 'allow "spiffe://x b',
    message: "team.acl:1: unterminated quote in field 2",
    line: 1,
  },
  {
    name: "an escaped quote at the end does not terminate a quoted field",
    text: 'allow a "b\\"',
    message: "team.acl:1: unterminated quote in field 3",
    line: 1,
  },
  {
    name: "text glued to a closing quote is rejected",
    text: 'allow "a"b c',
    message: "team.acl:1: unexpected text after the closing quote of field 2",
    line: 1,
  },
  {
    name: "a quote inside an unquoted field is rejected",
    text: 'allow a"b c',
    message: "team.acl:1: unexpected '\"' inside unquoted field 2",
    line: 1,
  },
  {
    name: "a bad identity glob is rejected with the glob error",
    text: "allow team-[a jobs/*",
    message:
      'team.acl:1: bad identity glob: Invalid glob "team-[a": unterminated character class at position 6',
    line: 1,
  },
  {
    name: "a bad lock glob is rejected with the glob error",
    text: "deny ** jobs/[z-a]",
    message:
      'team.acl:1: bad lock glob: Invalid glob "jobs/[z-a]": reversed range "z-a" in character class at position 7',
    line: 1,
  },
  {
    name: "an empty class in a lock glob is rejected",
    text: "allow ** []",
    message: 'team.acl:1: bad lock glob: Invalid glob "[]": empty character class at position 1',
    line: 1,
  },
  {
    name: "a trailing lone backslash in a quoted glob is rejected",
    text: 'allow "a\\\\" b',
    message:
      "team.acl:1: bad identity glob: Invalid glob \"a\\\": trailing lone '\\' at position 2",
    line: 1,
  },
  {
    name: "an error after valid rules names its own line",
    text: "allow a b\ndeny c d\n# fine\nallow e",
    message: "team.acl:4: expected 3 fields (allow|deny, identity glob, lock glob), found 2",
    line: 4,
  },
];

for (const c of errorCases) {
  Deno.test(`acl error: ${c.name}`, () => {
    assert.throws(() => parseAcl(c.text, "team.acl"), (err: unknown) => {
      assert.ok(err instanceof AclParseError);
      assert.equal(err.message, c.message);
      assert.equal(err.name, "AclParseError");
      assert.equal(err.fileName, "team.acl");
      assert.equal(err.line, c.line);
      assert.equal(err.message, `${err.fileName}:${err.line}: ${err.reason}`);
      return true;
    });
  });
}

Deno.test("acl: exactly the maximum number of rules is accepted", () => {
  const text = "allow ** a\n".repeat(ACL_RULES_MAX);
  assert.equal(parseAcl(text, "big.acl").ruleCount, ACL_RULES_MAX);
});

Deno.test("acl: one rule over the maximum is rejected on the line of that rule", () => {
  const text = "# many rules\n" + "allow ** a\n".repeat(ACL_RULES_MAX + 1);
  assert.throws(
    () => parseAcl(text, "big.acl"),
    (err: unknown) => {
      assert.ok(err instanceof AclParseError);
      assert.equal(err.message, `big.acl:${ACL_RULES_MAX + 2}: more than 10000 rules`);
      return true;
    },
  );
});

Deno.test("acl: a line of exactly the byte limit is accepted", () => {
  const text = "#" + "x".repeat(ACL_LINE_BYTES_MAX - 1) + "\nallow a b";
  assert.equal(parseAcl(text, "long.acl").ruleCount, 1);
});

Deno.test("acl: a line over the byte limit is rejected, counting UTF-8 bytes", () => {
  // 8190 ASCII bytes + one 3-byte character = 8193 bytes in 8191 UTF-16 units.
  const text = "allow a b\n#" + "x".repeat(ACL_LINE_BYTES_MAX - 3) + "€";
  assert.throws(
    () => parseAcl(text, "long.acl"),
    (err: unknown) => {
      assert.ok(err instanceof AclParseError);
      assert.equal(err.message, "long.acl:2: line is 8193 bytes long, more than the limit of 8192");
      return true;
    },
  );
});

Deno.test("acl: a file without rules denies everything", () => {
  const acl = parseAcl("# nothing allowed yet\n", "empty.acl");
  assert.equal(acl.ruleCount, 0);
  assert.deepEqual(acl.decide("", "a"), { allowed: false, rule: null });
  assert.deepEqual(acl.decide("spiffe://example.org/x", "jobs/1"), { allowed: false, rule: null });
});

Deno.test("acl: ALLOW_ALL allows every identity every lock without a rule", () => {
  assert.equal(ALLOW_ALL.ruleCount, 0);
  for (const [identity, lock] of [["", "a"], ["spiffe://example.org/x", "secrets/db"]]) {
    assert.deepEqual(ALLOW_ALL.decide(identity, lock), { allowed: true, rule: null });
  }
});

Deno.test("acl: loadAclFile parses a file and names it in errors", async () => {
  const path = await Deno.makeTempFile({ suffix: ".acl" });
  try {
    await Deno.writeTextFile(path, 'allow "" public/*\n');
    const acl = await loadAclFile(path);
    assert.equal(acl.decide("", "public/x").allowed, true);
    await Deno.writeTextFile(path, "allow a b\nallow\n");
    await assert.rejects(loadAclFile(path), (err: unknown) => {
      assert.ok(err instanceof AclParseError);
      assert.equal(
        err.message,
        `${path}:2: expected 3 fields (allow|deny, identity glob, lock glob), found 1`,
      );
      return true;
    });
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("acl: loadAclFile turns a read error into an error at line 0", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/missing.acl`;
  try {
    await assert.rejects(loadAclFile(path), (err: unknown) => {
      assert.ok(err instanceof AclParseError);
      assert.equal(err.line, 0);
      assert.equal(err.fileName, path);
      assert.ok(
        err.message.startsWith(`${path}:0: cannot read: `),
        err.message,
      );
      assert.match(err.reason, /No such file or directory/);
      return true;
    });
  } finally {
    await Deno.remove(dir);
  }
});

Deno.test("acl: decide over many rules stays fast", () => {
  const lines = [];
  for (let i = 0; i < ACL_RULES_MAX - 1; i++) {
    lines.push(`allow spiffe://example.org/team-${i}/** team-${i}/**`);
  }
  lines.push("allow ** last/**");
  const acl = parseAcl(lines.join("\n"), "big.acl");
  const started = performance.now();
  for (let i = 0; i < 100; i++) {
    assert.equal(acl.decide("spiffe://x", "last/y").rule?.line, ACL_RULES_MAX);
  }
  const perDecisionMs = (performance.now() - started) / 100;
  assert.ok(perDecisionMs < 5, `${perDecisionMs} ms per decision`);
});

// ---- invalid UTF-8 (issue 9.16) -------------------------------------------------

const INVALID_UTF8_CASES: { name: string; bytes: number[]; line: number; reason: RegExp }[] = [
  {
    name: "a lone continuation byte in a glob",
    // allow ** a/**  |  deny <0x80> secrets/**
    bytes: [...utf8("allow ** a/**\ndeny "), 0x80, ...utf8(" secrets/**\n")],
    line: 2,
    reason: /^invalid UTF-8: byte 0x80 at byte 6 of the line$/,
  },
  {
    name: "a Latin-1 é (0xe9) written by an editor in the wrong encoding",
    bytes: [...utf8("# ok\n# ok\nallow ** caf"), 0xe9, ...utf8("/**\n")],
    line: 3,
    reason: /^invalid UTF-8: byte 0xe9 at byte 13 of the line$/,
  },
  {
    name: "a sequence cut short by the end of the file",
    bytes: [...utf8("allow ** a/"), 0xe2, 0x82],
    line: 1,
    reason: /^invalid UTF-8: byte 0xe2 at byte 12 of the line$/,
  },
  {
    name: "an encoded surrogate (CESU-8)",
    bytes: [...utf8("allow ** x\n\nallow ** "), 0xed, 0xa0, 0x80, ...utf8("\n")],
    line: 3,
    reason: /^invalid UTF-8: byte 0xed at byte 10 of the line$/,
  },
  {
    name: "an overlong encoding of '/'",
    bytes: [...utf8("allow ** a"), 0xc0, 0xaf, ...utf8("**\n")],
    line: 1,
    reason: /^invalid UTF-8: byte 0xc0 at byte 11 of the line$/,
  },
];

function utf8(text: string): number[] {
  return [...new TextEncoder().encode(text)];
}

for (const c of INVALID_UTF8_CASES) {
  Deno.test(`acl: a file with invalid UTF-8 is refused at the line of the first bad byte: ${c.name}`, async () => {
    const path = await Deno.makeTempFile({ suffix: ".acl" });
    try {
      await Deno.writeFile(path, new Uint8Array(c.bytes));
      await assert.rejects(loadAclFile(path), (err: unknown) => {
        assert.ok(err instanceof AclParseError, String(err));
        assert.equal(err.fileName, path);
        assert.equal(err.line, c.line);
        assert.match(err.reason, c.reason);
        assert.equal(err.message, `${path}:${c.line}: ${err.reason}`);
        return true;
      });
    } finally {
      await Deno.remove(path);
    }
  });
}

Deno.test("acl: a file with a UTF-8 byte-order mark and non-ASCII text is read", async () => {
  const path = await Deno.makeTempFile({ suffix: ".acl" });
  try {
    await Deno.writeFile(path, new Uint8Array([0xef, 0xbb, 0xbf, ...utf8("allow ** café/**\n")]));
    const acl = await loadAclFile(path);
    assert.equal(acl.decide("x", "café/menu").allowed, true);
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("firstInvalidUtf8 agrees with the WHATWG decoder on random bytes", () => {
  const fatal = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
  const decodes = (b: Uint8Array) => {
    try {
      fatal.decode(b);
      return true;
    } catch {
      return false;
    }
  };
  const byte = fc.oneof(
    fc.integer({ min: 0, max: 0x7f }),
    fc.integer({ min: 0x80, max: 0xbf }),
    fc.integer({ min: 0xc0, max: 0xff }),
  );
  fc.assert(
    fc.property(
      fc.oneof(
        fc.array(byte, { maxLength: 12 }).map((b) => new Uint8Array(b)),
        fc.string({ unit: "grapheme", maxLength: 8 }).map((s) => new TextEncoder().encode(s)),
      ),
      (bytes) => {
        const at = firstInvalidUtf8(bytes);
        assert.equal(at === -1, decodes(bytes));
        if (at >= 0) assert.ok(decodes(bytes.subarray(0, at)), "the bytes before it decode");
      },
    ),
    { numRuns: 5000 },
  );
});
