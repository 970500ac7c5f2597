/**
 * Audit records of lock kinds and values (issue 22 item 6, issue 23 item 1) written by the
 * LockService from the engine's events: `acquire`/`release` of shared and semaphore locks carry
 * kind, limit, mode and slot (plain exclusive locks' records are unchanged byte for byte), an
 * ownership's value is told by its length and SHA-256 only, SET_VALUE writes `value_set`, a
 * downgrade writes `downgrade`; and `checkRead` refuses, counts and audits reads.
 */

import assert from "node:assert/strict";
import { parseAcl } from "../../src/security/acl.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { captureDiagnosticLog } from "../log/capture.ts";
import { serviceHarness } from "./service_harness.ts";

const encoder = new TextEncoder();
const SHA256_OF_ADDR = "5ebd9537e0e126dbd3ddd1f134faa69fa2b75f8a431c37b8840b823b13f8a220";

/** The fields of each record after `session`, with `ts` and the common ones dropped. */
function tails(records: Record<string, unknown>[]): Record<string, unknown>[] {
  return records.map(({ ts: _ts, lock: _l, identity: _i, remote_addr: _r, session: _s, ...rest }) =>
    rest
  );
}

Deno.test("audit: a semaphore's acquire and release records carry kind, limit, mode and slot", async () => {
  await using h = serviceHarness();
  const [a, b] = [h.open("", "a"), h.open("", "b")];
  h.acquire(a, 1, "render", { limit: 3 });
  h.acquire(b, 1, "render", { limit: 3 });
  const [first, second] = h.engine.view.holdersOf("render");
  h.service.release(a.peer, 2, "render", first.token);
  assert.deepEqual(tails(await h.records()), [
    {
      event: "acquire",
      token: first.token,
      client_name: "a",
      waited_ms: 0,
      kind: "semaphore",
      limit: 3,
      mode: "exclusive",
      slot: 0,
    },
    {
      event: "acquire",
      token: second.token,
      client_name: "b",
      waited_ms: 0,
      kind: "semaphore",
      limit: 3,
      mode: "exclusive",
      slot: 1,
    },
    {
      event: "release",
      token: first.token,
      client_name: "a",
      reason: "graceful",
      held_ms: 0,
      kind: "semaphore",
      limit: 3,
      mode: "exclusive",
      slot: 0,
    },
  ]);
});

Deno.test("audit: a plain exclusive lock's records are exactly the lines of before kinds existed", async () => {
  await using h = serviceHarness();
  const a = h.open("", "a");
  h.acquire(a, 1, "plain");
  const token = h.engine.view.holderOf("plain")!.token;
  h.service.release(a.peer, 2, "plain", token);
  await h.records();
  const addr = a.peer.remoteAddr;
  assert.deepEqual(h.sink.lines.map((line) => line.replace(/^\{"ts":"[^"]+",/, "{")), [
    `{"event":"acquire","lock":"plain","token":${token},"identity":"","remote_addr":"${addr}",` +
    `"session":${a.peer.sessionId},"client_name":"a","waited_ms":0}`,
    `{"event":"release","lock":"plain","token":${token},"identity":"","remote_addr":"${addr}",` +
    `"session":${a.peer.sessionId},"client_name":"a","reason":"graceful","held_ms":0}`,
  ]);
});

Deno.test("audit: shared owners are recorded with kind shared, limit 1, their mode and slot 0; a downgrade writes one downgrade record before the grants it allows", async () => {
  await using h = serviceHarness();
  const [writer, reader] = [h.open("", "w"), h.open("", "r")];
  h.acquire(writer, 1, "doc");
  h.acquire(reader, 1, "doc", { mode: "shared" });
  const token = h.engine.view.holderOf("doc")!.token;
  // The same mode again changes nothing and writes nothing.
  h.service.setMode(writer.peer, 2, "doc", token, "exclusive");
  h.service.setMode(writer.peer, 3, "doc", token, "shared");
  const records = tails(await h.records());
  const readerToken = h.engine.view.holdersOf("doc")[1].token;
  assert.deepEqual(records, [
    // The writer's grant: the lock was plain exclusive then (the reader had not joined).
    { event: "acquire", token, client_name: "w", waited_ms: 0 },
    { event: "downgrade", token, client_name: "w", write_generation: token },
    {
      event: "acquire",
      token: readerToken,
      client_name: "r",
      waited_ms: 0,
      kind: "shared",
      limit: 1,
      mode: "shared",
      slot: 0,
    },
  ]);
  h.service.release(writer.peer, 4, "doc", token);
  const release = tails(await h.records()).at(-1);
  assert.deepEqual(release, {
    event: "release",
    token,
    client_name: "w",
    reason: "graceful",
    held_ms: 0,
    kind: "shared",
    limit: 1,
    mode: "shared",
    slot: 0,
  });
});

Deno.test("audit: a value is told by its length and SHA-256 on acquire and value_set, never by its bytes", async () => {
  await using h = serviceHarness();
  const [leader, follower] = [h.open("", "leader"), h.open("", "follower")];
  h.acquire(leader, 1, "election", { value: encoder.encode("10.0.0.7:8080") });
  const token = h.engine.view.holderOf("election")!.token;
  h.service.setValue(leader.peer, 2, "election", token, encoder.encode("10.0.0.8:9090"));
  h.service.setValue(leader.peer, 3, "election", token, null);
  // A stale token changes nothing and writes nothing.
  h.service.setValue(follower.peer, 1, "election", token, encoder.encode("x"));
  const records = tails(await h.records());
  assert.deepEqual(records, [
    {
      event: "acquire",
      token,
      client_name: "leader",
      waited_ms: 0,
      value_bytes: 13,
      value_sha256: SHA256_OF_ADDR,
    },
    {
      event: "value_set",
      token,
      client_name: "leader",
      value_bytes: 13,
      value_sha256: "59298922825b48cee782271906b8b7679c2491e3c7dd987decf1fbd06ea818e0",
    },
    { event: "value_set", token, client_name: "leader", value_bytes: 0, value_sha256: null },
  ]);
  for (const line of h.sink.lines) assert.doesNotMatch(line, /10\.0\.0\.[78]/);
  assert.equal(follower.port.take().at(-1)?.type, "error", "the stale token is refused");
});

Deno.test("checkRead: the ACL refuses a read with ACL_DENIED, counted, logged and audited as acl_deny with action read; an allowed read costs nothing", async () => {
  using log = captureDiagnosticLog("warn", "json");
  await using h = serviceHarness({
    acl: parseAcl("deny ** secrets/** read\nallow ** **\n", "team.acl"),
  });
  const reader = h.open("spiffe://example.org/worker");
  assert.equal(h.service.checkRead(reader.peer, "jobs/a"), null);
  assert.deepEqual(h.service.checkRead(reader.peer, "secrets/db"), {
    code: "ACL_DENIED",
    message:
      'Cannot read lock "secrets/db": the ACL does not allow identity "spiffe://example.org/worker" to read it',
  });
  assert.equal(WIRE_CODES.ACL_DENIED.retryable, false);
  assert.equal(h.counters.aclReadDenials, 1);
  assert.equal(h.counters.aclDenials, 0, "the spec's counter keeps counting ACQUIREs only");
  const records = await h.records();
  assert.deepEqual(records.map(({ ts: _ts, ...rest }) => rest), [{
    event: "acl_deny",
    lock: "secrets/db",
    token: null,
    identity: "spiffe://example.org/worker",
    remote_addr: reader.peer.remoteAddr,
    session: reader.peer.sessionId,
    action: "read",
  }]);
  const warn = log.records().find((r) => r.message === "ACL denied read");
  assert.equal(warn?.lock, "secrets/db");
  assert.equal(warn?.rule_line, 1);
  // Reading is decided apart from acquiring: the same identity may still take the lock.
  h.acquire(reader, 1, "secrets/db");
  assert.equal(h.engine.view.holderOf("secrets/db")?.sessionId, reader.peer.sessionId);
});
