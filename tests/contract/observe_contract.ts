/**
 * Looking at locks without queueing (protocol version 2, issue 23), written once and run by
 * `lock_contract_test.ts` against the service, TCP, TLS and mTLS with version-2 sessions: QUERY
 * (idle, held, a semaphore, a bad name), WATCH of one name and of a glob (snapshot, WATCHING,
 * every event kind with its end reason, coalescing for a reader that has not taken its last
 * frame yet, UNWATCH), its bounds and the ACL's `read` action.
 *
 * @module
 */

import assert from "node:assert/strict";
import { WATCHES_PER_SESSION_MAX } from "../../src/limits.ts";
import { parseAcl } from "../../src/security/acl.ts";
import type { LockState, ServerMessage } from "../../src/wire/messages.ts";
import { TEST_ACTOR } from "../helpers/start_server.ts";
import { acquireKind, grantOf } from "./kinds_contract.ts";
import {
  auditCount,
  type ContractCase,
  type ContractClient,
  expectError,
  expectQueued,
  release,
} from "./lock_contract.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function stateOf(message: ServerMessage | null, requestId: number): LockState {
  assert.ok(message?.type === "lock_state", `expected LOCK_STATE, got ${JSON.stringify(message)}`);
  assert.equal(message.requestId, requestId);
  return message;
}

async function query(client: ContractClient, requestId: number, name: string) {
  await client.send({ type: "query", requestId, name });
  return stateOf(await client.next(), requestId);
}

/** WATCH, its snapshots and WATCHING; returns the snapshots. */
async function watch(
  client: ContractClient,
  requestId: number,
  pattern: string,
): Promise<LockState[]> {
  await client.send({ type: "watch", requestId, pattern });
  const snapshots: LockState[] = [];
  for (;;) {
    const frame = await client.next();
    if (frame?.type === "watching") {
      assert.equal(frame.requestId, requestId);
      assert.equal(frame.locks, snapshots.length);
      return snapshots;
    }
    const state = stateOf(frame, requestId);
    assert.equal(state.event, "state");
    snapshots.push(state);
  }
}

/** The next event of a watch: its kind, reason and the lock's state. */
async function event(client: ContractClient, requestId: number) {
  const state = stateOf(await client.next(), requestId);
  return {
    event: state.event,
    reason: state.reason,
    kind: state.kind,
    tokens: state.holders.map((h) => h.token),
    queue: state.queueLength,
    values: state.holders.map((h) => decoder.decode(h.value)),
  };
}

async function closeAll(...clients: ContractClient[]): Promise<void> {
  for (const client of clients) await client.close();
}

export const OBSERVE_CONTRACT: readonly ContractCase[] = [{
  name:
    "QUERY answers the lock's state without queueing: none when idle; kind, owners, holders with value and identity, queue length",
  async run(server) {
    const [a, b, c, q] = await Promise.all(Array.from({ length: 4 }, () => server.open()));
    const idle = await query(q, 1, "q/lock");
    assert.deepEqual(
      [idle.event, idle.reason, idle.kind, idle.limit, idle.owners, idle.queueLength, idle.holders],
      ["state", "none", "none", 0, 0, 0, []],
    );
    const ga = grantOf(
      await acquireKind(a, 1, "q/lock", { limit: 2, value: encoder.encode("a:1") }),
      1,
    );
    const gb = grantOf(await acquireKind(b, 1, "q/lock", { limit: 2 }), 1);
    expectQueued(await acquireKind(c, 1, "q/lock", { limit: 2 }), 1, 1);
    server.advance(40);
    const held = await query(q, 2, "q/lock");
    assert.deepEqual(
      [held.kind, held.limit, held.owners, held.queueLength, held.name],
      ["semaphore", 2, 2, 1, "q/lock"],
    );
    assert.deepEqual(
      held.holders.map((h) => [h.token, h.slot, h.mode, h.heldMs, decoder.decode(h.value)]),
      [[ga.token, 0, "exclusive", 40, "a:1"], [gb.token, 1, "exclusive", 40, ""]],
    );
    assert.equal(held.holders[0].identity, server.identity);
    assert.equal(held.holders[0].clientName, server.engine.holderOf("q/lock")?.clientName);
    assert.equal(server.engine.getLock("q/lock")?.queueLength, 1, "QUERY queues nothing");
    await q.send({ type: "query", requestId: 3, name: "" });
    expectError(await q.next(), "INVALID_ARGUMENT", 3, "");
    await closeAll(a, b, c, q);
  },
}, {
  name:
    "WATCH of one name: a snapshot and WATCHING, then one event per change: granted, value, queue, ended with its reason",
  async run(server) {
    const [w, a, b] = await Promise.all([server.open(), server.open(), server.open()]);
    const [snapshot] = await watch(w, 7, "svc/leader");
    assert.deepEqual([snapshot.name, snapshot.kind, snapshot.owners], ["svc/leader", "none", 0]);
    const ga = grantOf(
      await acquireKind(a, 1, "svc/leader", { value: encoder.encode("10.0.0.7"), leaseMs: 500 }),
      1,
    );
    assert.deepEqual(await event(w, 7), {
      event: "granted",
      reason: "none",
      kind: "exclusive",
      tokens: [ga.token],
      queue: 0,
      values: ["10.0.0.7"],
    });
    await a.send({
      type: "set_value",
      requestId: 2,
      token: ga.token,
      name: "svc/leader",
      value: encoder.encode("10.0.0.8"),
    });
    assert.equal((await a.next())?.type, "value_set");
    assert.deepEqual((await event(w, 7)).values, ["10.0.0.8"]);
    expectQueued(await acquireKind(b, 1, "svc/leader", { leaseMs: 5_000 }), 1, 1);
    assert.deepEqual(await event(w, 7), {
      event: "queue",
      reason: "none",
      kind: "exclusive",
      tokens: [ga.token],
      queue: 1,
      values: ["10.0.0.8"],
    });
    // The lease runs out: ended (expired), then the waiter's grant.
    server.advance(500);
    expectError(await a.next(), "LEASE_EXPIRED", 1, "svc/leader");
    const gb = grantOf(await b.next(), 1);
    const ended = await event(w, 7);
    assert.deepEqual([ended.event, ended.reason], ["ended", "expired"]);
    const granted = await event(w, 7);
    assert.deepEqual([granted.event, granted.tokens, granted.queue], ["granted", [gb.token], 0]);
    await release(b, 2, "svc/leader", gb.token);
    assert.deepEqual(await event(w, 7), {
      event: "ended",
      reason: "graceful",
      kind: "none",
      tokens: [],
      queue: 0,
      values: [],
    });
    // A force-release is an end of its own.
    const gc = grantOf(await acquireKind(b, 3, "svc/leader"), 3);
    assert.deepEqual((await event(w, 7)).tokens, [gc.token]);
    assert.equal(server.service.forceRelease("svc/leader", TEST_ACTOR).status, "released");
    const forced = await event(w, 7);
    assert.deepEqual([forced.event, forced.reason, forced.kind], ["ended", "force", "none"]);
    await closeAll(w, a, b);
  },
}, {
  name:
    "a watcher that has not taken its last event gets the latest state: changes in between are coalesced, one per lock",
  async run(server) {
    const [w, a] = await Promise.all([server.open(), server.open()]);
    const g = grantOf(await acquireKind(a, 1, "co/x"), 1);
    await watch(w, 3, "co/x");
    // Five changes decided in one turn of the server: the first is on its way, the rest wait
    // as one (the latest).
    await a.send(
      ...[1, 2, 3, 4, 5].map((n) => ({
        type: "set_value" as const,
        requestId: 10 + n,
        token: g.token,
        name: "co/x",
        value: encoder.encode(`v${n}`),
      })),
    );
    const first = await event(w, 3);
    assert.deepEqual([first.event, first.values], ["value", ["v1"]]);
    const latest = await event(w, 3);
    assert.deepEqual([latest.event, latest.values], ["value", ["v5"]]);
    // Nothing else waits: the next frame is the answer to a QUERY sent now.
    const answer = await query(w, 4, "co/x");
    assert.deepEqual(answer.holders.map((h) => decoder.decode(h.value)), ["v5"]);
    for (let i = 0; i < 5; i++) assert.equal((await a.next())?.type, "value_set");
    await closeAll(w, a);
  },
}, {
  name:
    "WATCH of a glob: snapshots of the matching locks by name, a lock that appears or goes is reported; UNWATCH ends it",
  async run(server) {
    const [w, a] = await Promise.all([server.open(), server.open()]);
    const gy = grantOf(await acquireKind(a, 1, "jobs/y"), 1);
    const gx = grantOf(await acquireKind(a, 2, "jobs/x", { mode: "shared" }), 2);
    grantOf(await acquireKind(a, 3, "other/z"), 3);
    const snapshots = await watch(w, 5, "jobs/*");
    assert.deepEqual(snapshots.map((s) => [s.name, s.kind, s.holders[0].token]), [
      ["jobs/x", "shared", gx.token],
      ["jobs/y", "exclusive", gy.token],
    ]);
    const gn = grantOf(await acquireKind(a, 4, "jobs/new"), 4);
    const appeared = stateOf(await w.next(), 5);
    assert.deepEqual([appeared.name, appeared.event, appeared.holders[0].token], [
      "jobs/new",
      "granted",
      gn.token,
    ]);
    await release(a, 6, "jobs/x", gx.token);
    const gone = stateOf(await w.next(), 5);
    assert.deepEqual([gone.name, gone.event, gone.reason, gone.kind], [
      "jobs/x",
      "ended",
      "graceful",
      "none",
    ]);
    await w.send({ type: "unwatch", requestId: 5 });
    assert.deepEqual(await w.next(), { type: "watch_ended", requestId: 5, reason: "unwatched" });
    await release(a, 7, "jobs/y", gy.token);
    // No event after WATCH_ENDED; an UNWATCH of no open watch gets WATCH_ENDED all the same.
    await w.send({ type: "unwatch", requestId: 5 });
    assert.deepEqual(await w.next(), { type: "watch_ended", requestId: 5, reason: "unwatched" });
    await closeAll(w, a);
  },
}, {
  name:
    "watch bounds and refusals: watches per session (LIMIT_EXCEEDED), a bad glob or a reused id (INVALID_ARGUMENT)",
  async run(server) {
    const w = await server.open();
    for (let i = 1; i <= WATCHES_PER_SESSION_MAX; i++) await watch(w, i, `b/${i}`);
    await w.send({ type: "watch", requestId: 100, pattern: "b/more" });
    expectError(await w.next(), "LIMIT_EXCEEDED", 100, "");
    await w.send({ type: "unwatch", requestId: 1 });
    assert.equal((await w.next())?.type, "watch_ended");
    await w.send({ type: "watch", requestId: 2, pattern: "b/again" });
    expectError(await w.next(), "INVALID_ARGUMENT", 2, "");
    await w.send({ type: "watch", requestId: 101, pattern: "b/[" });
    const bad = await w.next();
    expectError(bad, "INVALID_ARGUMENT", 101, "");
    assert.match(bad?.type === "error" ? bad.message : "", /Invalid glob/);
    await watch(w, 102, "b/*");
    await w.close();
  },
}, {
  name:
    "the ACL's read action: a refused QUERY or WATCH of a name gets ACL_DENIED and is audited; a glob leaves unreadable locks out",
  async run(server) {
    server.service.setAcl(parseAcl("deny ** secret/** read\nallow ** **\n", "t.acl"));
    const [w, a] = await Promise.all([server.open(), server.open()]);
    grantOf(await acquireKind(a, 1, "secret/k"), 1);
    await w.send({ type: "query", requestId: 1, name: "secret/k" });
    expectError(await w.next(), "ACL_DENIED", 1, "secret/k");
    await w.send({ type: "watch", requestId: 2, pattern: "secret/k" });
    expectError(await w.next(), "ACL_DENIED", 2, "");
    const records = await auditCount(server, 3);
    assert.deepEqual(
      records.filter((r) => r.event === "acl_deny").map((r) => [r.lock, r.action]),
      [["secret/k", "read"], ["secret/k", "read"]],
    );
    assert.deepEqual((await watch(w, 3, "**")).length, 0, "the secret lock is left out");
    const g = grantOf(await acquireKind(a, 2, "public/p"), 2);
    grantOf(await acquireKind(a, 3, "secret/l"), 3);
    const seen = stateOf(await w.next(), 3);
    assert.deepEqual([seen.name, seen.holders[0].token], ["public/p", g.token]);
    assert.equal((await query(w, 4, "public/p")).owners, 1, "no event of secret/l before it");
    await closeAll(w, a);
  },
}];
