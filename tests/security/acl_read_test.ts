/**
 * Issue 23 item 4: the ACL's verb for reading (QUERY and WATCH) beside acquiring. A rule's
 * optional fourth field names its actions; a rule without one decides both, so files written
 * before actions existed keep their meaning and decide reading the same way.
 */

import assert from "node:assert/strict";
import { type AclAction, ALLOW_ALL, parseAcl } from "../../src/security/acl.ts";

const RULES = [
  "deny   **            secrets/**        read", // 1: nobody reads secrets ...
  "allow  ops/**        secrets/**", // 2: ... but ops may still take them
  "allow  **            status/**         read", // 3: everyone may watch status/
  "deny   **            status/**         acquire", // 4: nobody takes status/ locks
  "allow  team-a/**     team-a/**", // 5: team-a takes and reads its own prefix
  "allow  **            public/**         acquire,read", // 6: both, spelled out
  "allow  **            ro/**             read,acquire", // 7: either order
].join("\n");

const cases: {
  name: string;
  identity: string;
  lock: string;
  action: AclAction;
  allowed: boolean;
  line: number | null;
}[] = [
  {
    name: "a read-only deny refuses reading, for every identity",
    identity: "ops/alice",
    lock: "secrets/db",
    action: "read",
    allowed: false,
    line: 1,
  },
  {
    name: "a read-only rule is passed over for an ACQUIRE: the next matching rule decides",
    identity: "ops/alice",
    lock: "secrets/db",
    action: "acquire",
    allowed: true,
    line: 2,
  },
  {
    name: "an acquire-only deny does not stop a read allowed earlier",
    identity: "team-b/x",
    lock: "status/leader",
    action: "read",
    allowed: true,
    line: 3,
  },
  {
    name: "an acquire-only deny refuses the ACQUIRE that a read-only allow above passed over",
    identity: "team-b/x",
    lock: "status/leader",
    action: "acquire",
    allowed: false,
    line: 4,
  },
  {
    name: "a rule without actions decides reading as it decides acquiring",
    identity: "team-a/svc",
    lock: "team-a/leader",
    action: "read",
    allowed: true,
    line: 5,
  },
  {
    name: "acquire,read names both",
    identity: "",
    lock: "public/x",
    action: "read",
    allowed: true,
    line: 6,
  },
  {
    name: "read,acquire is the same list",
    identity: "",
    lock: "ro/x",
    action: "acquire",
    allowed: true,
    line: 7,
  },
  {
    name: "no rule decides reading: denied, as for acquiring",
    identity: "team-b/x",
    lock: "team-a/leader",
    action: "read",
    allowed: false,
    line: null,
  },
];

for (const c of cases) {
  Deno.test(`acl read: ${c.name}`, () => {
    const decision = parseAcl(RULES, "team.acl").decide(c.identity, c.lock, c.action);
    assert.equal(decision.allowed, c.allowed);
    assert.equal(decision.rule?.line ?? null, c.line);
  });
}

Deno.test("acl read: decide without an action decides ACQUIRE (every caller before issue 23)", () => {
  const acl = parseAcl(RULES, "team.acl");
  assert.equal(acl.decide("ops/alice", "secrets/db").rule?.line, 2);
  assert.equal(acl.decide("team-b/x", "status/leader").rule?.line, 4);
});

Deno.test("acl read: a rule that names actions reports them; one that names none has no actions field", () => {
  const acl = parseAcl("allow a b read\nallow c d\n", "x.acl");
  assert.deepEqual(acl.decide("a", "b", "read").rule, {
    verb: "allow",
    identityGlob: "a",
    lockGlob: "b",
    actions: ["read"],
    line: 1,
  });
  assert.deepEqual(acl.decide("c", "d", "read").rule, {
    verb: "allow",
    identityGlob: "c",
    lockGlob: "d",
    line: 2,
  });
  // The list is given back in the canonical order, whatever order the file wrote.
  assert.deepEqual(
    parseAcl("allow a b read,acquire\n", "x.acl").decide("a", "b").rule?.actions,
    ["acquire", "read"],
  );
});

Deno.test("acl read: a quoted action is an action, a trailing comment after it is dropped", () => {
  const acl = parseAcl('allow "" "x" "read"   # read only\n', "x.acl");
  assert.equal(acl.decide("", "x", "read").allowed, true);
  assert.equal(acl.decide("", "x", "acquire").allowed, false);
});

Deno.test("acl read: without an ACL file everyone may read everything", () => {
  assert.equal(ALLOW_ALL.decide("anyone", "secrets/db", "read").allowed, true);
});
