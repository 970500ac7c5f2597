/**
 * Issue 19 item 5: every answer of the admin listener carries `X-Content-Type-Options: nosniff`
 * and `Cache-Control: no-store` (401, 403, 421 and the listener's own answers included); a 421
 * does not echo the Host; event streams never take the only connection; force-release takes the
 * precondition `?token=T`.
 */

import assert from "node:assert/strict";
import { connect, LockLostError } from "../../mod.ts";
import { eventually } from "../helpers/start_server.ts";
import { RawHttp, rawRequest, type RawResponse } from "../helpers/raw_http.ts";
import { assertProblem } from "../helpers/problem.ts";
import { http, queue, start } from "./admin_helpers.ts";

const TOKEN = "answers-test-token";

function assertAnswerHeaders(
  what: string,
  headers: { get(name: string): string | null | undefined },
) {
  assert.equal(headers.get("x-content-type-options"), "nosniff", `${what}: nosniff`);
  assert.equal(headers.get("cache-control"), "no-store", `${what}: no-store`);
}

Deno.test("every answer of the admin listener carries nosniff and no-store, whatever its status", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/token`, TOKEN);
    await using t = await start({ adminTokenFile: `${dir}/token` });
    const addr = t.server.adminAddr!;
    const auth = `Authorization: Bearer ${TOKEN}\r\n`;
    const raw = (head: string) => rawRequest(addr, `${head}\r\nConnection: close\r\n\r\n`);
    const cases: [string, number, () => Promise<RawResponse>][] = [
      ["200", 200, () => raw(`GET /api/info HTTP/1.1\r\nHost: ${addr}\r\n${auth.trimEnd()}`)],
      ["401", 401, () => raw(`GET /api/info HTTP/1.1\r\nHost: ${addr}`)],
      [
        "403",
        403,
        () => raw(`GET /api/info HTTP/1.1\r\nHost: ${addr}\r\n${auth}Origin: http://evil.example`),
      ],
      ["421", 421, () => raw(`GET /api/info HTTP/1.1\r\nHost: evil.example`)],
      ["404", 404, () => raw(`GET /nope HTTP/1.1\r\nHost: ${addr}\r\n${auth.trimEnd()}`)],
      ["405", 405, () => raw(`PUT /api/info HTTP/1.1\r\nHost: ${addr}\r\n${auth.trimEnd()}`)],
      [
        "404 lock",
        404,
        () => raw(`GET /api/locks/ghost HTTP/1.1\r\nHost: ${addr}\r\n${auth.trimEnd()}`),
      ],
      ["400 (the listener's own)", 400, () => raw(`GET / HTTP/1.1\r\nHost: a\r\nHost: b`)],
      [
        "413 (the listener's own)",
        413,
        () => raw(`POST /api/info HTTP/1.1\r\nHost: ${addr}\r\nContent-Length: 5000`),
      ],
      [
        "431 (the listener's own)",
        431,
        () => raw(`GET /${"a".repeat(40_000)} HTTP/1.1\r\nHost: x`),
      ],
    ];
    for (const [what, status, request] of cases) {
      const answer = await request();
      assert.equal(answer.status, status, `${what}: ${answer.body}`);
      assertAnswerHeaders(what, answer.headers);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a connection closed at the cap gets the listener's 503 with nosniff and no-store", async () => {
  await using t = await start({ httpConnectionsMax: 1 });
  const addr = t.server.adminAddr!;
  using silent = await RawHttp.connect(addr);
  await eventually(() => t.server.context.counters.http.admin.open === 1, "one open");
  using newcomer = await RawHttp.connect(addr);
  const told = await silent.response();
  assert.equal(told.status, 503);
  assert.match(told.body, /too-many-connections/);
  assertAnswerHeaders("503 at the cap", told.headers);
  await newcomer.send(`GET /api/info HTTP/1.1\r\nHost: ${addr}\r\n\r\n`);
  assert.equal((await newcomer.response()).status, 200);
});

Deno.test("a 421 does not echo the Host it refuses", async () => {
  await using t = await start();
  const addr = t.server.adminAddr!;
  const evil = "evil.example<script>";
  const answer = await rawRequest(
    addr,
    `GET /api/info HTTP/1.1\r\nHost: ${evil}\r\nConnection: close\r\n\r\n`,
  );
  assert.ok(!answer.body.includes("evil"), answer.body);
  await assertProblem(answer, 421, "host-not-allowed", {
    title: "Host not allowed",
    detail:
      "The request's Host (or target authority) is not an address of this listener, localhost, " +
      "or a name in -admin-allowed-hosts",
  });
});

// ---- event streams and small caps ------------------------------------------------------

for (const [cap, streamsAllowed] of [[1, 0], [2, 1], [3, 1], [4, 2]] as const) {
  Deno.test(`-max-http-connections ${cap}: ${streamsAllowed} event stream(s), and requests still find a connection`, async () => {
    await using t = await start({ httpConnectionsMax: cap });
    const addr = t.server.adminAddr!;
    const streams: RawHttp[] = [];
    try {
      for (let i = 0; i < streamsAllowed; i++) {
        const stream = await RawHttp.connect(addr);
        streams.push(stream);
        await stream.send(`GET /api/events HTTP/1.1\r\nHost: ${addr}\r\n\r\n`);
        assert.match(await readHead(stream), /^HTTP\/1\.1 200/);
      }
      const refused = await http(addr, "GET", "/api/events");
      assertAnswerHeaders("503 too-many-streams", refused.headers);
      await assertProblem(refused, 503, "too-many-streams", {
        title: "Too many event streams",
        detail: cap === 1
          ? "Event streams are off: they take at most half of the admin listener's connections, " +
            "and -max-http-connections 1 leaves none; poll instead"
          : `The admin API has ${streamsAllowed} event streams open; close one or poll`,
      });
      assert.equal((await http(addr, "GET", "/api/info")).status, 200);
    } finally {
      for (const c of streams) c.close();
    }
  });
}

// ---- force-release ?token=T ------------------------------------------------------------

Deno.test("force-release ?token=T releases the holder with that token only; another holder is a 409 and nothing is audited", async () => {
  await using t = await start();
  const addr = t.server.adminAddr!;
  await using owner = await connect({ addr: t.addr, reconnect: false });
  await using waiter = await connect({ addr: t.addr });
  const lock = await owner.acquire("jobs/nightly", { leaseMs: 60_000 });
  const queued = await queue(t, waiter, "jobs/nightly");
  t.audit.lines.length = 0;

  // The dialog was opened on an earlier holder: refused, nothing changes.
  const stale = await http(
    addr,
    "POST",
    `/api/locks/jobs%2Fnightly/release?token=${lock.token - 1}`,
  );
  await assertProblem(stale, 409, "holder-changed", {
    title: "Lock holder changed",
    detail:
      `Lock "jobs/nightly" is held with token ${lock.token}, not ${lock.token - 1}: its holder ` +
      "changed; nothing was released",
  });
  assertAnswerHeaders("409", stale.headers);
  assert.deepEqual(t.audit.lines, []);
  assert.equal(lock.lost.aborted, false);
  assert.equal(t.server.context.engine.getLock("jobs/nightly")!.holder!.token, lock.token);

  // The current holder's token: released, and the waiter gets the lock.
  const lost = new Promise<LockLostError>((resolve) =>
    lock.lost.addEventListener("abort", () => resolve(lock.lost.reason), { once: true })
  );
  const current = await http(addr, "POST", `/api/locks/jobs%2Fnightly/release?token=${lock.token}`);
  assert.equal(current.status, 200, current.text);
  const next = await queued.granted;
  assert.ok(next.token > lock.token);
  assert.equal((await lost).reason, "force");
  assert.deepEqual(t.audit.records().map((r) => r.event), ["force_release", "release", "acquire"]);

  // The same dialog confirmed twice: the second click finds the next holder and is refused.
  const twice = await http(addr, "POST", `/api/locks/jobs%2Fnightly/release?token=${lock.token}`);
  assert.equal(twice.status, 409);
  assert.equal(t.server.context.engine.getLock("jobs/nightly")!.holder!.token, next.token);
  await next.release();
  // An idle lock stays a 404 with or without the precondition.
  assert.equal(
    (await http(addr, "POST", `/api/locks/jobs%2Fnightly/release?token=${next.token}`)).status,
    404,
  );
});

Deno.test("force-release with a ?token= that is no fencing token is a 400 and releases nothing", async () => {
  await using t = await start();
  const addr = t.server.adminAddr!;
  await using owner = await connect({ addr: t.addr });
  const lock = await owner.acquire("t");
  t.audit.lines.length = 0;
  const bad: [string, string][] = [
    ["abc", 'token="abc" is not a fencing token (a whole number from 1 to 9007199254740991)'],
    ["", 'token="" is not a fencing token (a whole number from 1 to 9007199254740991)'],
    ["0", 'token="0" is not a fencing token (a whole number from 1 to 9007199254740991)'],
    ["-1", 'token="-1" is not a fencing token (a whole number from 1 to 9007199254740991)'],
    ["1.5", 'token="1.5" is not a fencing token (a whole number from 1 to 9007199254740991)'],
    [
      "9007199254740992",
      'token="9007199254740992" is not a fencing token (a whole number from 1 to 9007199254740991)',
    ],
  ];
  for (const [text, detail] of bad) {
    const answer = await http(
      addr,
      "POST",
      `/api/locks/t/release?token=${encodeURIComponent(text)}`,
    );
    await assertProblem(answer, 400, "invalid-query", {
      title: "Invalid query parameter",
      detail,
      message: text,
    });
  }
  const twice = await http(
    addr,
    "POST",
    `/api/locks/t/release?token=${lock.token}&token=${lock.token}`,
  );
  await assertProblem(twice, 400, "invalid-query", {
    title: "Invalid query parameter",
    detail: "token is given more than once",
  });
  assert.deepEqual(t.audit.lines, []);
  assert.equal(lock.lost.aborted, false);
  await lock.release();
});

Deno.test("LockService.forceRelease checks the expected token and releases in one call", async () => {
  await using t = await start();
  await using owner = await connect({ addr: t.addr });
  const lock = await owner.acquire("svc");
  const service = t.server.context.service;
  const actor = { remote_addr: "127.0.0.1:1", auth: "none" } as const;
  const refused = service.forceRelease("svc", actor, lock.token + 1);
  assert.equal(refused.status, "holder_changed");
  assert.equal(refused.status === "holder_changed" && refused.holder.token, lock.token);
  assert.equal(service.forceRelease("svc", actor, lock.token).status, "released");
});

/** Reads up to the end of a response head (for answers that stream and never end). */
async function readHead(client: RawHttp): Promise<string> {
  const buffer = new Uint8Array(4096);
  let text = "";
  while (!text.includes("\r\n\r\n")) {
    const n = await client.conn.read(buffer);
    if (n === null) break;
    text += new TextDecoder().decode(buffer.subarray(0, n));
  }
  return text;
}
