import { defaultClientName } from "../../src/client/client_name.ts";
import assert from "node:assert/strict";
import { connect, LockLostError } from "../../mod.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { AUDIT_RETRY_MS } from "../../src/limits.ts";
import { eventually, startTestServer, type TestServer } from "../helpers/start_server.ts";
import { VERSION } from "../../src/version.ts";
import { assertProblem } from "../helpers/problem.ts";
import { http, queue, START, start, START_WALL_MS } from "./admin_helpers.ts";

function adminAddr(t: TestServer): string {
  return t.server.adminAddr!;
}

function holderAddr(t: TestServer, name: string): string {
  return t.server.context.engine.getLock(name)!.holder!.remoteAddr;
}

function holderSession(t: TestServer, name: string): number {
  return t.server.context.engine.getLock(name)!.holder!.sessionId;
}

/** The client name the TypeScript client sends in HELLO by default: program, host, process. */
const CLIENT = defaultClientName(`lockd-ts/${VERSION}`);

const ACTOR_ADDR = /^127\.0\.0\.1:\d+$/;

// ---- GET /api/info ----------------------------------------------------------

Deno.test("GET /api/info returns exactly the spec's fields with bound addresses and live counts", async () => {
  await using t = await start({ ioTimeoutMs: 12_345 });
  await using client = await connect({ addr: t.addr });
  const lock = await client.acquire("info/one");
  const answer = await http(adminAddr(t), "GET", "/api/info");
  assert.equal(answer.status, 200);
  assert.equal(answer.headers.get("content-type"), "application/json");
  assert.equal(
    answer.text,
    JSON.stringify({
      version: t.server.context.version,
      uptime_ms: 0,
      config: {
        listen: t.addr,
        ops_listen: t.server.opsAddr,
        tls: false,
        mtls: false,
        acl_file: "",
        audit_log: "-",
        io_timeout_ms: 12_345,
      },
      locks: 1,
      sessions: 1,
    }),
  );
  await lock.release();
});

Deno.test("GET /api/info shows an empty ops_listen when the ops server is off, and the ACL path", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const aclFile = `${dir}/acl`;
    await Deno.writeTextFile(aclFile, "allow ** **\n");
    const scheduler = new ManualScheduler(START_WALL_MS);
    await using t = await startTestServer({ adminListen: "127.0.0.1:0", aclFile }, { scheduler });
    assert.equal(t.server.opsAddr, null);
    scheduler.advance(1_500);
    const answer = await http(adminAddr(t), "GET", "/api/info");
    const info = answer.json as { uptime_ms: number; config: Record<string, unknown> };
    assert.equal(info.uptime_ms, 1_500);
    assert.equal(info.config.ops_listen, "");
    assert.equal(info.config.acl_file, aclFile);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the admin API is off without -admin-listen", async () => {
  await using t = await startTestServer();
  assert.equal(t.server.adminAddr, null);
  assert.equal(t.server.opsAddr, null);
});

// ---- GET /api/locks and /api/locks/{name} -----------------------------------

Deno.test("GET /api/locks lists held and queued locks sorted by name, never idle ones", async () => {
  await using t = await start();
  await using a = await connect({ addr: t.addr });
  await using b = await connect({ addr: t.addr });
  assert.equal((await http(adminAddr(t), "GET", "/api/locks")).text, '{"locks":[]}');
  const zeta = await a.acquire("zeta", { leaseMs: 7_000 });
  const alpha = await a.acquire("alpha");
  const waiting = await queue(t, b, "zeta");
  const idle = await a.acquire("idle");
  await idle.release();
  const answer = await http(adminAddr(t), "GET", "/api/locks");
  assert.equal(answer.status, 200);
  const owner = holderAddr(t, "zeta");
  const session = holderSession(t, "zeta");
  assert.equal(
    answer.text,
    JSON.stringify({
      locks: [
        {
          name: "alpha",
          holder: {
            identity: "",
            remote_addr: owner,
            since: START,
            lease_ms: 15_000,
            token: alpha.token,
            client_name: CLIENT,
            session,
            held_for_ms: 0,
          },
          waiters: [],
        },
        {
          name: "zeta",
          holder: {
            identity: "",
            remote_addr: owner,
            since: START,
            lease_ms: 7_000,
            token: zeta.token,
            client_name: CLIENT,
            session,
            held_for_ms: 0,
          },
          waiters: [{
            identity: "",
            remote_addr: waiting.remoteAddr,
            queued_at: START,
            client_name: CLIENT,
            session: waiting.sessionId,
            waiting_for_ms: 0,
          }],
        },
      ],
    }),
  );
  await zeta.release();
  await (await waiting.granted).release();
  await alpha.release();
});

Deno.test("holders and waiters show the client name, the session and how long they have held or waited", async () => {
  await using t = await start();
  await using a = await connect({ addr: t.addr, clientName: "billing-worker/7" });
  await using b = await connect({ addr: t.addr, clientName: "<b>report</b>" });
  const lock = await a.acquire("invoices", { leaseMs: 60_000 });
  t.scheduler.advance(1_000);
  const waiting = await queue(t, b, "invoices");
  t.scheduler.advance(2_500);
  const answer = await http(adminAddr(t), "GET", "/api/locks/invoices");
  const view = answer.json as {
    holder: Record<string, unknown>;
    waiters: Record<string, unknown>[];
  };
  assert.deepEqual(
    [view.holder.client_name, view.holder.session, view.holder.held_for_ms, view.holder.since],
    ["billing-worker/7", holderSession(t, "invoices"), 3_500, START],
  );
  assert.deepEqual(
    [view.waiters[0].client_name, view.waiters[0].session, view.waiters[0].waiting_for_ms],
    ["<b>report</b>", waiting.sessionId, 2_500],
  );
  // The session ids are the audit log's.
  const acquired = t.audit.records().find((r) => r.event === "acquire" && r.lock === "invoices");
  assert.equal(acquired?.session, view.holder.session);
  await lock.release();
  await (await waiting.granted).release();
});

Deno.test("GET /api/locks?match= filters with the glob language, sorted", async () => {
  await using t = await start();
  await using client = await connect({ addr: t.addr });
  const names = ["jobs/b/deep", "other", "jobs/a", "jobsx", "jobs/c"];
  const locks = [];
  for (const name of names) locks.push(await client.acquire(name));
  const namesOf = async (glob: string) => {
    const answer = await http(adminAddr(t), "GET", `/api/locks?match=${encodeURIComponent(glob)}`);
    assert.equal(answer.status, 200, answer.text);
    return (answer.json as { locks: { name: string }[] }).locks.map((lock) => lock.name);
  };
  assert.deepEqual(await namesOf("jobs/*"), ["jobs/a", "jobs/c"]);
  assert.deepEqual(await namesOf("jobs/**"), ["jobs/a", "jobs/b/deep", "jobs/c"]);
  assert.deepEqual(await namesOf("jobs*"), ["jobsx"]);
  assert.deepEqual(await namesOf("**"), ["jobs/a", "jobs/b/deep", "jobs/c", "jobsx", "other"]);
  assert.deepEqual(await namesOf("other"), ["other"]);
  assert.deepEqual(await namesOf("nothing/**"), []);
  for (const lock of locks) await lock.release();
});

Deno.test("GET /api/locks?match= with a bad glob is a 400 problem with the glob error", async () => {
  await using t = await start();
  const answer = await http(
    adminAddr(t),
    "GET",
    `/api/locks?match=${encodeURIComponent("jobs/[a")}`,
  );
  await assertProblem(answer, 400, "invalid-glob", {
    title: "Invalid glob",
    detail: 'Invalid glob "jobs/[a": unterminated character class at position 6',
  });
});

const NAME_CASES: { what: string; name: string; encoded: string }[] = [
  { what: "a slash as %2F", name: "jobs/nightly", encoded: "jobs%2Fnightly" },
  { what: "spaces", name: "my lock name", encoded: "my%20lock%20name" },
  { what: "a percent sign", name: "100%", encoded: "100%25" },
  { what: "UTF-8 text", name: "über/ключ/鍵", encoded: encodeURIComponent("über/ключ/鍵") },
  { what: "an astral emoji", name: "🔒", encoded: "%F0%9F%94%92" },
  { what: "query and fragment characters", name: "a?b#c&d=e", encoded: "a%3Fb%23c%26d%3De" },
];

for (const { what, name, encoded } of NAME_CASES) {
  Deno.test(`GET /api/locks/{name} finds a lock whose name has ${what}`, async () => {
    await using t = await start();
    await using client = await connect({ addr: t.addr });
    const lock = await client.acquire(name);
    assert.equal(encodeURIComponent(name), encoded);
    const answer = await http(adminAddr(t), "GET", `/api/locks/${encoded}`);
    assert.equal(answer.status, 200, answer.text);
    assert.equal(
      answer.text,
      JSON.stringify({
        name,
        holder: {
          identity: "",
          remote_addr: holderAddr(t, name),
          since: START,
          lease_ms: 15_000,
          token: lock.token,
          client_name: CLIENT,
          session: holderSession(t, name),
          held_for_ms: 0,
        },
        waiters: [],
      }),
    );
    await lock.release();
  });
}

Deno.test("a%2Fb is the lock a/b while a/b in the path is an unknown path", async () => {
  await using t = await start();
  await using client = await connect({ addr: t.addr });
  const lock = await client.acquire("a/b");
  const other = await client.acquire("a");
  assert.equal((await http(adminAddr(t), "GET", "/api/locks/a%2Fb")).status, 200);
  const literal = await http(adminAddr(t), "GET", "/api/locks/a/b");
  await assertProblem(literal, 404, "not-found", {
    title: "Not found",
    detail: "No resource at /api/locks/a/b",
  });
  // "a/release" is a route of lock "a", not the lock "a/release".
  const release = await http(adminAddr(t), "GET", "/api/locks/a/release");
  assert.equal(release.status, 405);
  assert.equal(release.headers.get("allow"), "POST");
  await lock.release();
  await other.release();
});

Deno.test("GET /api/locks/{name} of an unknown or idle lock is a 404 problem", async () => {
  await using t = await start();
  await using client = await connect({ addr: t.addr });
  (await client.acquire("was-held")).release();
  await eventually(() => t.server.context.engine.lockCount === 0, "lock released");
  for (const name of ["was-held", "never/seen"]) {
    const answer = await http(adminAddr(t), "GET", `/api/locks/${encodeURIComponent(name)}`);
    await assertProblem(answer, 404, "lock-not-found", {
      title: "Lock not found",
      detail: `Lock "${name}" has no owner and no waiters`,
    });
  }
});

Deno.test("a malformed percent escape in a lock name is a 400 problem", async () => {
  await using t = await start();
  for (
    const [method, path] of [
      ["GET", "/api/locks/%E0%A4%A"],
      ["POST", "/api/locks/%FF/release"],
    ]
  ) {
    const answer = await http(adminAddr(t), method, path);
    const raw = path.split("/")[3];
    await assertProblem(answer, 400, "invalid-path-encoding", {
      title: "Invalid path encoding",
      detail: `The lock name "${raw}" in the path is not valid percent-encoded UTF-8`,
    });
  }
});

// ---- routing errors -----------------------------------------------------------

Deno.test("unknown paths are 404 problems and wrong methods 405 problems with Allow", async () => {
  await using t = await start();
  const cases: { method: string; path: string; status: number; allow?: string; detail: string }[] =
    [
      // `/` is the operator console (tests/admin/console_policy_test.ts).
      { method: "GET", path: "/index.html", status: 404, detail: "No resource at /index.html" },
      { method: "GET", path: "/api/locks/", status: 404, detail: "No resource at /api/locks/" },
      { method: "GET", path: "/api/nope", status: 404, detail: "No resource at /api/nope" },
      { method: "GET", path: "/metrics", status: 404, detail: "No resource at /metrics" },
      {
        method: "POST",
        path: "/api/info",
        status: 405,
        allow: "GET, HEAD",
        detail: "/api/info does not support POST; allowed: GET, HEAD",
      },
      {
        method: "DELETE",
        path: "/api/locks/x",
        status: 405,
        allow: "GET, HEAD",
        detail: "/api/locks/x does not support DELETE; allowed: GET, HEAD",
      },
      {
        method: "GET",
        path: "/api/locks/x/release",
        status: 405,
        allow: "POST",
        detail: "/api/locks/x/release does not support GET; allowed: POST",
      },
      {
        method: "POST",
        path: "/api/locks/x/waiters/1.2.3.4:5",
        status: 405,
        allow: "DELETE",
        detail: "/api/locks/x/waiters/1.2.3.4:5 does not support POST; allowed: DELETE",
      },
    ];
  for (const c of cases) {
    const answer = await http(adminAddr(t), c.method, c.path);
    assert.equal(answer.headers.get("allow"), c.allow ?? null);
    const [slug, title] = c.status === 404
      ? ["not-found", "Not found"]
      : ["method-not-allowed", "Method not allowed"];
    await assertProblem(answer, c.status, slug, {
      title,
      detail: c.detail,
      message: `${c.method} ${c.path}`,
    });
  }
});

Deno.test("HEAD is answered like GET without a body", async () => {
  await using t = await start();
  const answer = await http(adminAddr(t), "HEAD", "/api/locks");
  assert.equal(answer.status, 200);
  assert.equal(answer.text, "");
  assert.equal(answer.headers.get("content-type"), "application/json");
});

Deno.test("requests from web pages (Origin or Sec-Fetch-Site) are refused with 403", async () => {
  await using t = await start();
  await using client = await connect({ addr: t.addr });
  const lock = await client.acquire("csrf");
  const pageHeaders: Record<string, string>[] = [
    { origin: "https://evil.example" },
    { "sec-fetch-site": "cross-site" },
  ];
  for (const headers of pageHeaders) {
    const answer = await http(adminAddr(t), "POST", "/api/locks/csrf/release", headers);
    await assertProblem(answer, 403, "cross-origin-refused");
  }
  // Typed into the address bar: allowed.
  const typed = await http(adminAddr(t), "GET", "/api/locks/csrf", { "sec-fetch-site": "none" });
  assert.equal(typed.status, 200);
  assert.equal(t.server.context.engine.getLock("csrf")?.holder?.token, lock.token);
  await lock.release();
});

// ---- POST /api/locks/{name}/release -------------------------------------------

Deno.test("force-release hands the lock to the head waiter with a larger token; the old owner sees ERROR 0x02", async () => {
  await using t = await start();
  await using owner = await connect({ addr: t.addr, reconnect: false });
  await using w1 = await connect({ addr: t.addr });
  await using w2 = await connect({ addr: t.addr });
  const name = "jobs/nightly";
  const lock = await owner.acquire(name, { leaseMs: 60_000 });
  const ownerAddr = holderAddr(t, name);
  const ownerSession = t.server.context.engine.getLock(name)!.holder!.sessionId;
  const lost = new Promise<LockLostError>((resolve) =>
    lock.lost.addEventListener("abort", () => resolve(lock.lost.reason), { once: true })
  );
  const first = await queue(t, w1, name);
  const second = await queue(t, w2, name);
  t.audit.lines.length = 0;

  const answer = await http(adminAddr(t), "POST", "/api/locks/jobs%2Fnightly/release");
  assert.equal(answer.status, 200, answer.text);
  const next = await first.granted;
  assert.ok(next.token > lock.token, `${next.token} > ${lock.token}`);
  assert.equal(
    answer.text,
    JSON.stringify({
      name,
      holder: {
        identity: "",
        remote_addr: first.remoteAddr,
        since: START,
        lease_ms: 15_000,
        token: next.token,
        client_name: CLIENT,
        session: first.sessionId,
        held_for_ms: 0,
      },
      waiters: [{
        identity: "",
        remote_addr: second.remoteAddr,
        queued_at: START,
        client_name: CLIENT,
        session: second.sessionId,
        waiting_for_ms: 0,
      }],
    }),
  );
  const reason = await lost;
  assert.ok(reason instanceof LockLostError);
  assert.equal(reason.reason, "force");

  const records = t.audit.records();
  assert.deepEqual(records.map((r) => [r.event, r.reason ?? null]), [
    ["force_release", null],
    ["release", "force"],
    ["acquire", null],
  ]);
  const actor = records[0].actor as { remote_addr: string; auth: string };
  assert.match(actor.remote_addr, ACTOR_ADDR);
  assert.deepEqual(records[0], {
    ts: START,
    event: "force_release",
    lock: name,
    token: lock.token,
    identity: "",
    remote_addr: ownerAddr,
    session: ownerSession,
    actor: { remote_addr: actor.remote_addr, auth: "none" },
  });
  assert.equal(records[2].token, next.token);
  assert.equal(t.server.context.engine.stats.releasesTotal.force, 1);
  await next.release();
  await (await second.granted).release();
});

Deno.test("a force-released owner receives ERROR 0x02 naming the lock, then the connection closes", async () => {
  await using t = await start();
  await using raw = await RawClient.session(t.addr);
  await raw.send({ type: "acquire", requestId: 1, name: "raw/lock", leaseMs: 60_000, waitMs: 0 });
  const acquired = await raw.next();
  assert.equal(acquired?.type, "acquired");
  const session = t.server.context.engine.getLock("raw/lock")!.holder!.sessionId;
  t.audit.lines.length = 0;

  const answer = await http(adminAddr(t), "POST", "/api/locks/raw%2Flock/release");
  assert.equal(answer.status, 200);
  assert.equal(answer.text, '{"name":"raw/lock","holder":null,"waiters":[]}');
  const messages = await raw.drainUntilClosed();
  assert.equal(messages.length, 1, JSON.stringify(messages));
  const error = messages[0];
  assert.ok(error.type === "error");
  assert.equal(error.code, 0x02);
  assert.equal(error.name, "raw/lock");
  assert.equal(t.audit.records()[0].session, session);
  // The lock is idle now.
  assert.equal((await http(adminAddr(t), "GET", "/api/locks/raw%2Flock")).status, 404);
});

Deno.test("force-release of an unknown lock is a 404 problem and writes no audit record", async () => {
  await using t = await start();
  const answer = await http(adminAddr(t), "POST", "/api/locks/ghost/release");
  await assertProblem(answer, 404, "lock-not-found", {
    title: "Lock not found",
    detail: 'Lock "ghost" has no owner and no waiters',
  });
  assert.deepEqual(t.audit.lines, []);
});

Deno.test("force-release of a lock with waiters but no owner is a 409 problem", async () => {
  await using t = await start();
  await using owner = await connect({ addr: t.addr });
  await using waiter = await connect({ addr: t.addr });
  const lock = await owner.acquire("paused");
  const queued = await queue(t, waiter, "paused");
  // The audit log fails: grants pause, so the release leaves a queue without an owner.
  t.audit.failing = true;
  const trigger = owner.acquire("trigger"); // its record cannot be written: grants pause
  await eventually(
    () => t.server.context.engine.grantBlock === "audit_unavailable",
    "grants paused",
  );
  const released = lock.release();
  await eventually(
    () => t.server.context.engine.getLock("paused")?.holder === null,
    "owner gone, waiter not granted",
  );
  const view = await http(adminAddr(t), "GET", "/api/locks/paused");
  assert.equal(
    view.text,
    JSON.stringify({
      name: "paused",
      holder: null,
      waiters: [{
        identity: "",
        remote_addr: queued.remoteAddr,
        queued_at: START,
        client_name: CLIENT,
        session: queued.sessionId,
        waiting_for_ms: 0,
      }],
    }),
  );
  const answer = await http(adminAddr(t), "POST", "/api/locks/paused/release");
  await assertProblem(answer, 409, "lock-has-no-owner", {
    title: "Lock has no owner",
    detail: 'Cannot force-release lock "paused": it has 1 waiter(s) but no owner ' +
      "(grants are paused while the audit log cannot be written)",
  });
  t.audit.failing = false;
  t.scheduler.advance(AUDIT_RETRY_MS);
  await released;
  await (await trigger).release();
  await (await queued.granted).release();
});

// ---- DELETE /api/locks/{name}/waiters/{remote_addr} ---------------------------

Deno.test("kicking a waiter answers 204, keeps the queue order and sends it ERROR 0x02", async () => {
  await using t = await start();
  await using owner = await connect({ addr: t.addr });
  await using w1 = await connect({ addr: t.addr });
  await using w3 = await connect({ addr: t.addr });
  const lock = await owner.acquire("queue");
  const first = await queue(t, w1, "queue");
  await using raw = await RawClient.session(t.addr);
  await raw.send({ type: "acquire", requestId: 7, name: "queue", leaseMs: 0, waitMs: 60_000 });
  assert.equal((await raw.next())?.type, "queued");
  const kicked = t.server.context.engine.getLock("queue")!.waiters[1];
  const third = await queue(t, w3, "queue");
  t.audit.lines.length = 0;

  const answer = await http(
    adminAddr(t),
    "DELETE",
    `/api/locks/queue/waiters/${encodeURIComponent(kicked.remoteAddr)}`,
  );
  assert.equal(answer.status, 204);
  assert.equal(answer.text, "");
  const messages = await raw.drainUntilClosed();
  assert.equal(messages.length, 1, JSON.stringify(messages));
  assert.ok(messages[0].type === "error");
  assert.equal(messages[0].code, 0x02);
  assert.equal(messages[0].name, "queue");

  const view = await http(adminAddr(t), "GET", "/api/locks/queue");
  assert.deepEqual(
    (view.json as { waiters: { remote_addr: string }[] }).waiters.map((w) => w.remote_addr),
    [first.remoteAddr, third.remoteAddr],
  );
  const records = t.audit.records();
  assert.equal(records.length, 1);
  const actor = records[0].actor as { remote_addr: string };
  assert.match(actor.remote_addr, ACTOR_ADDR);
  assert.deepEqual(records[0], {
    ts: START,
    event: "kick_waiter",
    lock: "queue",
    token: null,
    identity: "",
    remote_addr: kicked.remoteAddr,
    session: kicked.sessionId,
    actor: { remote_addr: actor.remote_addr, auth: "none" },
  });
  // The remaining queue is granted in order.
  await lock.release();
  const firstLock = await first.granted;
  await firstLock.release();
  await (await third.granted).release();
});

Deno.test("kicking an unknown waiter or a waiter of an unknown lock is a 404 problem", async () => {
  await using t = await start();
  await using owner = await connect({ addr: t.addr });
  const lock = await owner.acquire("held");
  const ownerAddr = encodeURIComponent(holderAddr(t, "held"));
  const cases = [
    {
      path: `/api/locks/held/waiters/${ownerAddr}`,
      slug: "waiter-not-found",
      title: "Waiter not found",
      detail: `Lock "held" has no waiter with remote address "${holderAddr(t, "held")}"`,
    },
    {
      path: "/api/locks/nothing/waiters/127.0.0.1%3A1",
      slug: "lock-not-found",
      title: "Lock not found",
      detail: 'Lock "nothing" has no owner and no waiters',
    },
  ];
  for (const c of cases) {
    const answer = await http(adminAddr(t), "DELETE", c.path);
    await assertProblem(answer, 404, c.slug, { title: c.title, detail: c.detail });
  }
  const bad = await http(adminAddr(t), "DELETE", "/api/locks/held/waiters/%ZZ");
  await assertProblem(bad, 400, "invalid-path-encoding", {
    title: "Invalid path encoding",
    detail: 'The remote address "%ZZ" in the path is not valid percent-encoded UTF-8',
  });
  assert.deepEqual(t.audit.records().map((r) => r.event), ["acquire"]);
  await lock.release();
});

function ipv6Loopback(): boolean {
  try {
    const listener = Deno.listen({ hostname: "::1", port: 0 });
    listener.close();
    return true;
  } catch {
    return false;
  }
}

Deno.test({
  name:
    "an IPv6 waiter is shown as [::1]:port and kicked by its URL-encoded address, brackets raw or escaped",
  ignore: !ipv6Loopback(),
  fn: async () => {
    await using t = await start({ listen: "[::1]:0" });
    assert.match(t.addr, /^\[::1\]:\d+$/);
    await using owner = await connect({ addr: t.addr });
    await using w1 = await connect({ addr: t.addr, reconnect: false });
    await using w2 = await connect({ addr: t.addr, reconnect: false });
    await using w3 = await connect({ addr: t.addr });
    const lock = await owner.acquire("v6");
    assert.match(holderAddr(t, "v6"), /^\[::1\]:\d+$/);
    const a = await queue(t, w1, "v6");
    const b = await queue(t, w2, "v6");
    const c = await queue(t, w3, "v6");
    assert.match(a.remoteAddr, /^\[::1\]:\d+$/);
    const listed = await http(adminAddr(t), "GET", "/api/locks/v6");
    assert.deepEqual(
      (listed.json as { waiters: { remote_addr: string }[] }).waiters.map((w) => w.remote_addr),
      [a.remoteAddr, b.remoteAddr, c.remoteAddr],
    );
    const port = a.remoteAddr.slice(a.remoteAddr.lastIndexOf(":") + 1);
    const escaped = await http(
      adminAddr(t),
      "DELETE",
      `/api/locks/v6/waiters/%5B%3A%3A1%5D%3A${port}`,
    );
    assert.equal(escaped.status, 204, escaped.text);
    const raw = await http(adminAddr(t), "DELETE", `/api/locks/v6/waiters/${b.remoteAddr}`);
    assert.equal(raw.status, 204, raw.text);
    await assert.rejects(a.granted);
    await assert.rejects(b.granted);
    const after = await http(adminAddr(t), "GET", "/api/locks/v6");
    assert.deepEqual(
      (after.json as { waiters: { remote_addr: string }[] }).waiters.map((w) => w.remote_addr),
      [c.remoteAddr],
    );
    await lock.release();
    await (await c.granted).release();
  },
});

// ---- authentication -------------------------------------------------------------

Deno.test("with -admin-token-file every request needs the bearer token; actions record auth token", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const adminTokenFile = `${dir}/admin.token`;
    await Deno.writeTextFile(adminTokenFile, "  s3cret-token\n\n");
    await using t = await start({ adminTokenFile });
    await using client = await connect({ addr: t.addr, reconnect: false });
    const lock = await client.acquire("guarded");
    const unauthorized = {
      title: "Unauthorized",
      detail: "The admin API requires the header Authorization: Bearer <token> with the token " +
        "from -admin-token-file",
    };
    const refusals: [string, string, Record<string, string>][] = [
      ["GET", "/api/info", {}],
      ["GET", "/api/info", { authorization: "Bearer wrong" }],
      ["GET", "/api/info", { authorization: "Bearer s3cret-token-and-more" }],
      ["GET", "/api/info", { authorization: "Basic czNjcmV0LXRva2Vu" }],
      ["GET", "/api/info", { authorization: "s3cret-token" }],
      ["GET", "/no/such/path", {}],
      ["POST", "/api/locks/guarded/release", { authorization: "Bearer  " }],
    ];
    for (const [method, path, headers] of refusals) {
      const answer = await http(adminAddr(t), method, path, headers);
      assert.equal(answer.headers.get("www-authenticate"), 'Bearer realm="lockd-admin"');
      await assertProblem(answer, 401, "unauthorized", {
        ...unauthorized,
        message: `${method} ${path} ${JSON.stringify(headers)}`,
      });
    }
    assert.equal(t.server.context.engine.getLock("guarded")?.holder?.token, lock.token);
    const info = await http(adminAddr(t), "GET", "/api/info", {
      authorization: "Bearer s3cret-token",
    });
    assert.equal(info.status, 200);
    const lowercase = await http(adminAddr(t), "GET", "/api/info", {
      authorization: "bearer s3cret-token",
    });
    assert.equal(lowercase.status, 200);
    const release = await http(adminAddr(t), "POST", "/api/locks/guarded/release", {
      authorization: "Bearer s3cret-token",
    });
    assert.equal(release.status, 200);
    const record = t.audit.records().find((r) => r.event === "force_release")!;
    assert.equal((record.actor as { auth: string }).auth, "token");
    // Probes and metrics need no token.
    const healthz = await http(t.server.opsAddr!, "GET", "/healthz");
    assert.equal(healthz.status, 200);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an empty or missing admin token file stops the start", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const empty = `${dir}/empty.token`;
    await Deno.writeTextFile(empty, " \n\t\n");
    await assert.rejects(
      startTestServer({ adminListen: "127.0.0.1:0", adminTokenFile: empty }),
      (error: Error) => {
        assert.ok(
          error.message.startsWith(
            `Cannot use the admin token file "${empty}" (-admin-token-file): it is empty. Create it`,
          ),
          error.message,
        );
        return true;
      },
    );
    await assert.rejects(
      startTestServer({ adminListen: "127.0.0.1:0", adminTokenFile: `${dir}/missing` }),
      /Cannot use the admin token file ".*missing" \(-admin-token-file\): No such file/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an admin port that is taken stops the start and leaves nothing listening", async () => {
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  await assert.rejects(
    startTestServer({ adminListen: `127.0.0.1:${taken.addr.port}`, opsListen: "127.0.0.1:0" }),
    (error: Error) => {
      assert.ok(error.cause instanceof Deno.errors.AddrInUse);
      assert.match(
        error.message,
        /^Cannot listen on 127\.0\.0\.1:\d+ \(-admin-listen\): the address/,
      );
      return true;
    },
  );
});
