/**
 * The admin API with lock kinds and values (issue 22 item 6, issue 23 item 1): the Lock object of
 * a plain exclusive lock keeps the spec's shape exactly; shared and semaphore locks add `kind`,
 * `limit` and `holders` (with `holder` the oldest owner); holder records show mode, slot, write
 * generation and the value as text and base64; lock-delays and reservations show when they end;
 * a force-release ends every owner (one audit record and one ERROR 0x02 each), or with
 * `?token=T` the one owner holding T.
 */

import assert from "node:assert/strict";
import type { Peer } from "../../src/core/types.ts";
import { lockJson, valueJson } from "../../src/admin/views.ts";
import { parseLockRules } from "../../src/security/lock_rules.ts";
import type { ClaimOptions } from "../../src/service/claim_options.ts";
import { FramePort, settle } from "../service/service_harness.ts";
import { http, START, start, START_WALL_MS } from "./admin_helpers.ts";
import { problemText } from "../helpers/problem.ts";

const encoder = new TextEncoder();

type Server = Awaited<ReturnType<typeof start>>;

/** Sessions of the server's own service, with ports that keep their frames. */
function sessions(t: Server) {
  const service = t.server.context.service;
  let port = 45_000;
  return {
    open(clientName = ""): { peer: Peer; port: FramePort } {
      const framePort = new FramePort();
      const peer = service.openSession("", `127.0.0.1:${port++}`, framePort, clientName);
      if ("code" in peer) throw new Error(peer.message);
      return { peer, port: framePort };
    },
    acquire(peer: Peer, name: string, claim: Partial<ClaimOptions> = {}, leaseMs = 15_000) {
      service.acquire(peer, 1, name, leaseMs, null, {
        mode: claim.mode ?? "exclusive",
        limit: claim.limit ?? 1,
        value: claim.value ?? null,
      });
    },
  };
}

async function getLock(t: Server, name: string): Promise<unknown> {
  await settle();
  const answer = await http(t.server.adminAddr!, "GET", `/api/locks/${encodeURIComponent(name)}`);
  assert.equal(answer.status, 200, answer.text);
  return answer.json;
}

Deno.test("admin kinds: a plain exclusive lock keeps exactly the spec's shape (no kind, no holders)", async () => {
  await using t = await start();
  const s = sessions(t);
  const a = s.open("a");
  s.acquire(a.peer, "plain");
  const token = t.server.context.engine.holderOf("plain")!.token;
  assert.deepEqual(await getLock(t, "plain"), {
    name: "plain",
    holder: {
      identity: "",
      remote_addr: a.peer.remoteAddr,
      since: START,
      lease_ms: 15_000,
      token,
      client_name: "a",
      session: a.peer.sessionId,
      held_for_ms: 0,
    },
    waiters: [],
  });
});

Deno.test("admin kinds: a semaphore shows kind, limit and every holder with its slot; holder is the oldest", async () => {
  await using t = await start();
  const s = sessions(t);
  const [a, b, c] = [s.open("a"), s.open("b"), s.open("c")];
  s.acquire(a.peer, "render", { limit: 2 });
  t.scheduler.advance(1_000);
  s.acquire(b.peer, "render", { limit: 2 });
  s.acquire(c.peer, "render", { limit: 0 });
  const [first, second] = t.server.context.engine.holdersOf("render");
  const holder = (peer: Peer, token: number, slot: number, heldForMs: number, since: string) => ({
    identity: "",
    remote_addr: peer.remoteAddr,
    since,
    lease_ms: 15_000,
    token,
    client_name: peer === a.peer ? "a" : "b",
    session: peer.sessionId,
    held_for_ms: heldForMs,
    mode: "exclusive",
    slot,
  });
  const later = new Date(START_WALL_MS + 1_000).toISOString();
  const oldest = holder(a.peer, first.token, 0, 1_000, START);
  const lock = await getLock(t, "render") as Record<string, unknown>;
  assert.deepEqual(lock, {
    name: "render",
    holder: oldest,
    waiters: [{
      identity: "",
      remote_addr: c.peer.remoteAddr,
      queued_at: later,
      client_name: "c",
      session: c.peer.sessionId,
      waiting_for_ms: 0,
    }],
    kind: "semaphore",
    limit: 2,
    holders: [oldest, holder(b.peer, second.token, 1, 0, later)],
  });
  // The list has the same objects, with waiters_total where asked for.
  const list = await http(t.server.adminAddr!, "GET", "/api/locks?waiters_limit=0");
  assert.deepEqual(list.json, {
    locks: [{ ...lock, waiters: [], waiters_total: 1 }].map((
      { kind, limit, holders, ...rest },
    ) => ({
      ...rest,
      kind,
      limit,
      holders,
    })),
  });
});

Deno.test("admin kinds: a shared lock shows readers' mode and write generation; values as text and base64", async () => {
  await using t = await start();
  const s = sessions(t);
  const [writer, r1, r2] = [s.open("w"), s.open("r1"), s.open("r2")];
  s.acquire(writer.peer, "doc");
  const writeToken = t.server.context.engine.holderOf("doc")!.token;
  t.server.context.service.release(writer.peer, 2, "doc", writeToken);
  s.acquire(r1.peer, "doc", { mode: "shared", value: encoder.encode("héllo\u202e") });
  s.acquire(r2.peer, "doc", { mode: "shared", value: new Uint8Array([0xff, 0x00, 0x41]) });
  const lock = await getLock(t, "doc") as {
    kind: string;
    limit: number;
    write_generation: number;
    holder: Record<string, unknown>;
    holders: Record<string, unknown>[];
  };
  assert.equal(lock.kind, "shared");
  assert.equal(lock.limit, 1);
  // The lock was dropped when idle: its write generation is not remembered (0: unknown).
  assert.equal(lock.write_generation, 0);
  assert.deepEqual(lock.holders.map((h) => [h.client_name, h.mode, h.slot, h.write_generation]), [
    ["r1", "shared", undefined, 0],
    ["r2", "shared", undefined, 0],
  ]);
  assert.deepEqual(lock.holder, lock.holders[0]);
  assert.deepEqual(
    lock.holders.map(({ value, value_base64, value_bytes }) => ({
      value,
      value_base64,
      value_bytes,
    })),
    [
      { value: "héllo\u202e", value_base64: "aMOpbGxv4oCu", value_bytes: 9 },
      { value: null, value_base64: "/wBB", value_bytes: 3 },
    ],
  );
  // Field order: the spec's, lockd's, then those of kinds and values.
  assert.deepEqual(Object.keys(lock.holders[0]), [
    "identity",
    "remote_addr",
    "since",
    "lease_ms",
    "token",
    "client_name",
    "session",
    "held_for_ms",
    "mode",
    "write_generation",
    "value",
    "value_base64",
    "value_bytes",
  ]);
});

Deno.test("admin kinds: a value on a plain exclusive holder adds only the value fields", async () => {
  await using t = await start();
  const s = sessions(t);
  const leader = s.open("leader");
  s.acquire(leader.peer, "election", { value: encoder.encode("10.0.0.7:8080") });
  const lock = await getLock(t, "election") as { holder: Record<string, unknown> };
  assert.deepEqual(Object.keys(lock).sort(), ["holder", "name", "waiters"]);
  assert.equal(lock.holder.value, "10.0.0.7:8080");
  assert.equal(lock.holder.value_base64, "MTAuMC4wLjc6ODA4MA==");
  assert.equal(lock.holder.value_bytes, 13);
  assert.equal(lock.holder.mode, undefined);
});

Deno.test("admin kinds: force-release without a token ends every owner: one force_release record and one ERROR 0x02 each, then the waiter is granted", async () => {
  await using t = await start();
  const s = sessions(t);
  const [a, b, c] = [s.open("a"), s.open("b"), s.open("c")];
  s.acquire(a.peer, "render", { limit: 2 });
  s.acquire(b.peer, "render", { limit: 2 });
  s.acquire(c.peer, "render", { limit: 2 });
  const [first, second] = t.server.context.engine.holdersOf("render");
  await settle();
  const auditBefore = t.audit.lines.length;
  const answer = await http(t.server.adminAddr!, "POST", "/api/locks/render/release");
  assert.equal(answer.status, 200, answer.text);
  const after = answer.json as { holder: { session: number }; holders: unknown[] };
  assert.equal(after.holder.session, c.peer.sessionId, "the waiter got a slot");
  assert.equal(after.holders.length, 1);
  await settle();
  const records = t.audit.records().slice(auditBefore);
  assert.deepEqual(records.map((r) => [r.event, r.token, r.session, r.reason ?? null]), [
    ["force_release", first.token, a.peer.sessionId, null],
    ["force_release", second.token, b.peer.sessionId, null],
    // Owners end oldest first; the slot the first one frees goes to the waiter at once.
    ["release", first.token, a.peer.sessionId, "force"],
    ["acquire", t.server.context.engine.holderOf("render")!.token, c.peer.sessionId, null],
    ["release", second.token, b.peer.sessionId, "force"],
  ]);
  for (const owner of [a, b]) {
    assert.ok(owner.port.closed);
    const last = owner.port.frames.at(-1);
    assert.equal(last?.type, "error");
    assert.equal(last?.type === "error" ? last.code : 0, 0x02);
  }
});

Deno.test("admin kinds: force-release with ?token=T ends that one owner; a token no owner holds is 409 naming the owners' tokens", async () => {
  await using t = await start();
  const s = sessions(t);
  const [a, b] = [s.open("a"), s.open("b")];
  s.acquire(a.peer, "render", { limit: 3 });
  s.acquire(b.peer, "render", { limit: 3 });
  const [first, second] = t.server.context.engine.holdersOf("render");
  const stale = await http(t.server.adminAddr!, "POST", "/api/locks/render/release?token=7");
  assert.equal(stale.status, 409);
  assert.equal(
    stale.text,
    problemText(
      "holder-changed",
      "Lock holder changed",
      409,
      `Lock "render" has no owner with token 7 (its 2 owners hold tokens ${first.token}, ${second.token}); nothing was released`,
    ),
  );
  const answer = await http(
    t.server.adminAddr!,
    "POST",
    `/api/locks/render/release?token=${second.token}`,
  );
  assert.equal(answer.status, 200);
  const after = answer.json as { holders: { token: number }[] };
  assert.deepEqual(after.holders.map((h) => h.token), [first.token]);
  assert.ok(b.port.closed);
  assert.ok(!a.port.closed);
  await settle();
  assert.deepEqual(
    t.audit.records().filter((r) => r.event === "force_release").map((r) => r.token),
    [second.token],
  );
});

Deno.test("admin kinds: a lock under a lock-delay shows delayed_until; its force-release is 409 saying why nobody owns it", async () => {
  await using t = await start();
  t.server.context.service.setLockRules(parseLockRules("exclusive pay/** lock-delay=5s", "x"));
  const s = sessions(t);
  const [a, b] = [s.open("a"), s.open("b")];
  s.acquire(a.peer, "pay/eu");
  s.acquire(b.peer, "pay/eu");
  assert.equal(
    (await http(t.server.adminAddr!, "POST", "/api/locks/pay%2Feu/release")).status,
    200,
  );
  t.scheduler.advance(1_500);
  const lock = await getLock(t, "pay/eu") as Record<string, unknown>;
  assert.equal(lock.holder, null);
  assert.equal(lock.delayed_until, new Date(START_WALL_MS + 5_000).toISOString());
  assert.equal(lock.delay_left_ms, 3_500);
  assert.equal(lock.kind, undefined, "an exclusive lock: no kind fields");
  const refused = await http(t.server.adminAddr!, "POST", "/api/locks/pay%2Feu/release");
  assert.equal(
    refused.text,
    problemText(
      "lock-has-no-owner",
      "Lock has no owner",
      409,
      'Cannot force-release lock "pay/eu": it has 1 waiter(s) but no owner (a lock-delay after a ' +
        "non-graceful end holds grants back for 3500 ms more)",
    ),
  );
  t.scheduler.advance(3_500);
  const granted = await getLock(t, "pay/eu") as { holder: { session: number } };
  assert.equal(granted.holder.session, b.peer.sessionId);
  assert.equal((granted as Record<string, unknown>).delayed_until, undefined);
});

Deno.test("admin kinds: lockJson shows a reservation's end in wall time and what is left of it", () => {
  const json = lockJson({
    name: "x",
    kind: "exclusive",
    limit: 1,
    holder: null,
    holders: [],
    waiters: [],
    queueLength: 0,
    writeGeneration: 0,
    delayedUntilMs: 0,
    reservedUntilMs: 12_000,
  }, { monoMs: 10_000, wallMs: START_WALL_MS });
  assert.deepEqual(json, {
    name: "x",
    holder: null,
    waiters: [],
    reserved_until: new Date(START_WALL_MS + 2_000).toISOString(),
    reservation_left_ms: 2_000,
  });
});

Deno.test("admin kinds: valueJson gives exact bytes as base64 and text only for valid UTF-8", () => {
  assert.deepEqual(valueJson(new Uint8Array()), { value: "", value_base64: "", value_bytes: 0 });
  assert.deepEqual(valueJson(encoder.encode("<b>x</b>")), {
    value: "<b>x</b>",
    value_base64: "PGI+eDwvYj4=",
    value_bytes: 8,
  });
  // An overlong encoding of "/" is not UTF-8: no text, the bytes as they are.
  assert.deepEqual(valueJson(new Uint8Array([0xc0, 0xaf])), {
    value: null,
    value_base64: "wK8=",
    value_bytes: 2,
  });
});
