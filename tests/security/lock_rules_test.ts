/**
 * The lock rules file (issue 22 item 4): its grammar, first-match lookup and `file:line: reason`
 * errors, table-driven.
 */

import assert from "node:assert/strict";
import {
  LOCK_DELAY_MS_MAX,
  LOCK_RULE_LINE_BYTES_MAX,
  LOCK_RULES_MAX,
  SEMAPHORE_LIMIT_MAX,
} from "../../src/limits.ts";
import {
  loadLockRulesFile,
  type LockRule,
  LockRulesParseError,
  NO_LOCK_RULES,
  parseLockRules,
} from "../../src/security/lock_rules.ts";

const RULES = [
  "# lock rules of the render farm",
  "",
  "semaphore   jobs/render-*   8                  # at most 8 renders at once",
  "semaphore   jobs/encode-*   4   lock-delay=2s",
  "shared      reports/**",
  "lock-delay  payments/test/** 0                 # exempt from the next line",
  "exclusive   payments/**         lock-delay=5s",
  "lock-delay  leases/**       45s",
  '\tshared\t"my reports/*"\tlock-delay=500ms',
].join("\n");

const lookups: { name: string; lock: string; rule: LockRule | null }[] = [
  {
    name: "a semaphore rule gives its limit and no delay",
    lock: "jobs/render-42",
    rule: { kind: "semaphore", limit: 8, lockDelayMs: 0, lockGlob: "jobs/render-*", line: 3 },
  },
  {
    name: "a semaphore rule with a lock-delay option gives both",
    lock: "jobs/encode-7",
    rule: { kind: "semaphore", limit: 4, lockDelayMs: 2_000, lockGlob: "jobs/encode-*", line: 4 },
  },
  {
    name: "a shared rule is a read/write lock of limit 1",
    lock: "reports/2026/q1",
    rule: { kind: "shared", limit: 1, lockDelayMs: 0, lockGlob: "reports/**", line: 5 },
  },
  {
    name: "the first matching rule decides: a zero lock-delay exempts names from a later rule",
    lock: "payments/test/x",
    rule: { kind: null, limit: 1, lockDelayMs: 0, lockGlob: "payments/test/**", line: 6 },
  },
  {
    name: "an exclusive rule with a lock-delay",
    lock: "payments/eu/ledger",
    rule: { kind: "exclusive", limit: 1, lockDelayMs: 5_000, lockGlob: "payments/**", line: 7 },
  },
  {
    name: "a lock-delay rule leaves the kind to the first claim (kind null)",
    lock: "leases/db",
    rule: { kind: null, limit: 1, lockDelayMs: 45_000, lockGlob: "leases/**", line: 8 },
  },
  {
    name: "tabs, a quoted glob with a space and a sub-second delay",
    lock: "my reports/daily",
    rule: { kind: "shared", limit: 1, lockDelayMs: 500, lockGlob: "my reports/*", line: 9 },
  },
  {
    name: "a name no rule matches has no rule",
    lock: "jobs/render/deep",
    rule: null,
  },
];

for (const c of lookups) {
  Deno.test(`lock rules: ${c.name}`, () => {
    const rules = parseLockRules(RULES, "farm.rules");
    assert.equal(rules.ruleCount, 7);
    assert.deepEqual(rules.ruleFor(c.lock), c.rule);
    // The engine's hook answers the same.
    assert.deepEqual(rules.lookup!(c.lock), c.rule);
  });
}

Deno.test("lock rules: a file without rules, and no file, give the engine no hook", () => {
  const empty = parseLockRules("# nothing yet\n\n", "x.rules");
  assert.equal(empty.ruleCount, 0);
  assert.equal(empty.lookup, null);
  assert.equal(empty.ruleFor("a"), null);
  assert.equal(NO_LOCK_RULES.lookup, null);
  assert.equal(NO_LOCK_RULES.ruleCount, 0);
});

Deno.test("lock rules: a rule is frozen (the engine keeps references to it)", () => {
  const rule = parseLockRules("shared a", "x.rules").ruleFor("a")!;
  assert.ok(Object.isFrozen(rule));
});

const errors: { name: string; text: string; message: string }[] = [
  {
    name: "an unknown verb",
    text: "semaphore a 2\nmutex b",
    message:
      'x.rules:2: unknown verb "mutex" (expected semaphore, shared, exclusive or lock-delay)',
  },
  {
    name: "verbs are case-sensitive",
    text: "Shared a",
    message:
      'x.rules:1: unknown verb "Shared" (expected semaphore, shared, exclusive or lock-delay)',
  },
  {
    name: "a semaphore without a limit",
    text: "semaphore jobs/*",
    message:
      "x.rules:1: expected semaphore, lock glob, limit, [lock-delay=DURATION], found 2 fields",
  },
  {
    name: "a semaphore with a field too many",
    text: "semaphore jobs/* 8 lock-delay=1s extra",
    message:
      "x.rules:1: expected semaphore, lock glob, limit, [lock-delay=DURATION], found 5 fields",
  },
  {
    name: "a shared rule without its glob",
    text: "shared",
    message: "x.rules:1: expected shared, lock glob, [lock-delay=DURATION], found 1 fields",
  },
  {
    name: "an exclusive rule with a limit is not a semaphore",
    text: "exclusive a 8",
    message: 'x.rules:1: unknown option "8" (expected lock-delay=DURATION)',
  },
  {
    name: "a lock-delay rule without its duration",
    text: "lock-delay a",
    message: "x.rules:1: expected lock-delay, lock glob, DURATION, found 2 fields",
  },
  {
    name: "a lock-delay rule takes no option",
    text: "lock-delay a 1s lock-delay=2s",
    message: "x.rules:1: expected lock-delay, lock glob, DURATION, found 4 fields",
  },
  {
    name: "a semaphore of 1 points at exclusive",
    text: "semaphore a 1",
    message:
      `x.rules:1: limit "1" is not a whole number from 2 to ${SEMAPHORE_LIMIT_MAX} (a semaphore of 1 is an exclusive lock: write exclusive)`,
  },
  {
    name: "a semaphore limit that is not a whole number",
    text: "semaphore a 2.5",
    message: `x.rules:1: limit "2.5" is not a whole number from 2 to ${SEMAPHORE_LIMIT_MAX}`,
  },
  {
    name: "a semaphore limit above the maximum",
    text: `semaphore a ${SEMAPHORE_LIMIT_MAX + 1}`,
    message: `x.rules:1: limit "${
      SEMAPHORE_LIMIT_MAX + 1
    }" is not a whole number from 2 to ${SEMAPHORE_LIMIT_MAX}`,
  },
  {
    name: "a negative limit",
    text: "semaphore a -3",
    message: `x.rules:1: limit "-3" is not a whole number from 2 to ${SEMAPHORE_LIMIT_MAX}`,
  },
  {
    name: "a duration without a unit",
    text: "lock-delay a 5",
    message: 'x.rules:1: lock-delay "5" is not a duration like 500ms, 5s or 1m',
  },
  {
    name: "a lock-delay option without a value",
    text: "shared a lock-delay=",
    message: 'x.rules:1: lock-delay "" is not a duration like 500ms, 5s or 1m',
  },
  {
    name: "a lock-delay above the maximum",
    text: "exclusive a lock-delay=5m",
    message: "x.rules:1: lock-delay 5m is longer than the limit of 1m",
  },
  {
    name: "an option with a typo",
    text: "shared a lockdelay=1s",
    message: 'x.rules:1: unknown option "lockdelay=1s" (expected lock-delay=DURATION)',
  },
  {
    name: "a bad glob",
    text: "shared jobs/[a",
    message:
      'x.rules:1: bad lock glob: Invalid glob "jobs/[a": unterminated character class at position 6',
  },
  {
    name: "an unterminated quote (the ACL's quoting)",
    text: 'shared "jobs/*',
    message: "x.rules:1: unterminated quote in field 2",
  },
  {
    name: "text glued to a closing quote",
    text: 'shared "a"b',
    message: "x.rules:1: unexpected text after the closing quote of field 2",
  },
];

for (const c of errors) {
  Deno.test(`lock rules error: ${c.name}`, () => {
    assert.throws(() => parseLockRules(c.text, "x.rules"), (error: unknown) => {
      assert.ok(error instanceof LockRulesParseError, String(error));
      assert.equal(error.message, c.message);
      assert.equal(error.fileName, "x.rules");
      return true;
    });
  });
}

Deno.test("lock rules: exactly the maximum number of rules is accepted, one more is refused on its line", () => {
  const lines = Array.from({ length: LOCK_RULES_MAX }, (_, i) => `shared r${i}`);
  assert.equal(parseLockRules(lines.join("\n"), "x.rules").ruleCount, LOCK_RULES_MAX);
  assert.throws(
    () => parseLockRules([...lines, "shared one-more"].join("\n"), "x.rules"),
    { message: `x.rules:${LOCK_RULES_MAX + 1}: more than ${LOCK_RULES_MAX} rules` },
  );
});

Deno.test("lock rules: a line over the byte limit is refused, counting UTF-8 bytes", () => {
  const glob = "é".repeat(LOCK_RULE_LINE_BYTES_MAX / 2);
  assert.throws(() => parseLockRules(`shared ${glob}`, "x.rules"), {
    message: `x.rules:1: line is ${
      LOCK_RULE_LINE_BYTES_MAX + 7
    } bytes long, more than the limit of ${LOCK_RULE_LINE_BYTES_MAX}`,
  });
});

Deno.test("lock rules: the longest lock-delay is accepted", () => {
  const rule = parseLockRules(`lock-delay a ${LOCK_DELAY_MS_MAX}ms`, "x.rules").ruleFor("a");
  assert.equal(rule?.lockDelayMs, LOCK_DELAY_MS_MAX);
});

Deno.test("lock rules: loadLockRulesFile names the file, refuses bad UTF-8 at its line and an unreadable file at line 0", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-rules-" });
  try {
    const path = `${dir}/lock.rules`;
    await Deno.writeTextFile(path, "shared reports/**\nsemaphore x\n");
    await assert.rejects(loadLockRulesFile(path), {
      message:
        `${path}:2: expected semaphore, lock glob, limit, [lock-delay=DURATION], found 2 fields`,
    });
    await Deno.writeFile(path, new Uint8Array([0x73, 0x68, 0x0a, 0x61, 0xe9, 0x0a]));
    await assert.rejects(loadLockRulesFile(path), {
      message: `${path}:2: invalid UTF-8: byte 0xe9 at byte 2 of the line`,
    });
    await assert.rejects(loadLockRulesFile(`${dir}/missing`), (error: unknown) => {
      assert.ok(error instanceof LockRulesParseError);
      assert.equal(error.line, 0);
      assert.match(error.message, /missing:0: cannot read: /);
      return true;
    });
    await Deno.writeTextFile(path, "\uFEFFsemaphore jobs/* 3\r\n");
    assert.equal((await loadLockRulesFile(path)).ruleFor("jobs/a")?.limit, 3);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
