/**
 * The reclaim contract of protocol version 2 on a single node, written once and run by
 * `lock_contract_test.ts` against the service, TCP, TLS and mTLS with version-2 sessions:
 * tickets and order keys in ACQUIRED and QUEUED, GOODBYE against a connection that just ends
 * (orphaned: its ownerships stay until their leases end), RESUME (`moved` while the old session
 * is open or orphaned, `none` once it is gone), RECLAIMs kept and void, and the rules of RESUME
 * and RECLAIM.
 *
 * @module
 */

import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../../src/config.ts";
import {
  type Acquired,
  type ClientMessage,
  type Queued,
  type Reclaim,
  type ServerMessage,
  WAIT_FOREVER,
} from "../../src/wire/messages.ts";
import {
  acquire,
  auditCount,
  type ContractCase,
  type ContractClient,
  type ContractServer,
  expectAcquired,
  expectError,
  LEASE_MS,
  release,
} from "./lock_contract.ts";

function acquiredOf(message: ServerMessage | null, requestId: number): Acquired {
  assert.ok(message?.type === "acquired", `expected ACQUIRED, got ${JSON.stringify(message)}`);
  assert.equal(message.requestId, requestId);
  return message;
}

function queuedOf(message: ServerMessage | null, requestId: number): Queued {
  assert.ok(message?.type === "queued", `expected QUEUED, got ${JSON.stringify(message)}`);
  assert.equal(message.requestId, requestId);
  return message;
}

/** A ticket as the server issues them: 16 bytes, never all zero. */
function assertTicket(ticket: Uint8Array | undefined): Uint8Array {
  assert.ok(ticket !== undefined && ticket.length === 16, `a 16-byte ticket: ${ticket}`);
  assert.ok(ticket.some((byte) => byte !== 0), "never the all-zero ticket");
  return ticket;
}

/** The RECLAIM of an ownership its ACQUIRED told. */
function reclaimOwned(requestId: number, granted: Acquired): Reclaim {
  return {
    type: "reclaim",
    requestId,
    kind: "owned",
    token: granted.token,
    orderTerm: 0,
    orderSeq: 0,
    leaseMs: granted.leaseMs,
    waitMs: 0,
    ticket: granted.ticket!,
    mode: "exclusive",
    limit: granted.limit ?? 1,
    slot: granted.slot ?? 0,
    name: granted.name,
    value: new Uint8Array(0),
  };
}

/** The RECLAIM of a waiter its QUEUED told. */
function reclaimQueued(requestId: number, queued: Queued): Reclaim {
  return {
    type: "reclaim",
    requestId,
    kind: "queued",
    token: 0,
    orderTerm: queued.orderTerm!,
    orderSeq: queued.orderSeq!,
    leaseMs: LEASE_MS,
    waitMs: WAIT_FOREVER,
    ticket: queued.ticket!,
    mode: "exclusive",
    limit: 0,
    slot: 0,
    name: queued.name,
    value: new Uint8Array(0),
  };
}

function resume(prevSessionId: number, claims: number, prevTerm = 0): ClientMessage {
  return { type: "resume", requestId: 1, prevTerm, prevSessionId, claims };
}

/** The next `count` frames, by request id (replies to several requests may come in any order). */
async function byRequestId(client: ContractClient, count: number) {
  const frames = new Map<number, ServerMessage>();
  for (let i = 0; i < count; i++) {
    const frame = await client.next();
    assert.ok(frame !== null && "requestId" in frame, `frame ${i}: ${JSON.stringify(frame)}`);
    frames.set(frame.requestId, frame);
  }
  return frames;
}

async function heartbeatRenews(client: ContractClient, requestId: number, renewed: number) {
  await client.send({ type: "heartbeat", requestId });
  assert.deepEqual(await client.next(), { type: "heartbeat_ack", requestId, renewed });
}

function recordsOf(server: ContractServer, event: string) {
  return server.auditRecords().filter((r) => r.event === event);
}

export const RECLAIM_CONTRACT: readonly ContractCase[] = [{
  name: "version 2: ACQUIRED carries a ticket and the claim's kind fields, QUEUED its order key",
  async run(server) {
    const [a, b] = [await server.open(), await server.open()];
    const granted = acquiredOf(await acquire(a, 1, "v2/t"), 1);
    const first = assertTicket(granted.ticket);
    assert.deepEqual(
      [granted.mode, granted.limit, granted.slot, granted.writeGeneration],
      ["exclusive", 1, 0, 0],
    );
    const queued = queuedOf(await acquire(b, 1, "v2/t"), 1);
    assert.equal(queued.position, 1);
    assert.equal(queued.orderTerm, 0, "a single node's term");
    assert.ok(queued.orderSeq! > 0);
    assert.notDeepEqual(assertTicket(queued.ticket), first);
    await release(a, 2, "v2/t", granted.token);
    const next = acquiredOf(await b.next(), 1);
    assert.notDeepEqual(assertTicket(next.ticket), first);
    await a.close();
    await b.close();
  },
}, {
  name: "GOODBYE ends the session's ownerships gracefully and closes it; its waiter is granted",
  async run(server) {
    const [leaver, other, next] = [await server.open(), await server.open(), await server.open()];
    const token = expectAcquired(await acquire(leaver, 1, "bye2/held"), 1, "bye2/held");
    expectAcquired(await acquire(other, 1, "bye2/wanted"), 1, "bye2/wanted");
    queuedOf(await acquire(leaver, 2, "bye2/wanted"), 2);
    queuedOf(await acquire(next, 1, "bye2/held"), 1);
    await leaver.send({ type: "goodbye", requestId: 3 });
    assert.equal(await leaver.next(), null, "GOODBYE has no reply: the server closes");
    assert.ok(expectAcquired(await next.next(), 1, "bye2/held") > token);
    assert.deepEqual(server.engine.getLock("bye2/wanted")?.waiters, []);
    const records = await auditCount(server, 4);
    assert.deepEqual(
      records.filter((r) => r.lock === "bye2/held").map((r) => [r.event, r.reason ?? ""]),
      [["acquire", ""], ["release", "graceful"], ["acquire", ""]],
    );
    await leaver.drop();
    await other.close();
    await next.close();
  },
}, {
  name:
    "a connection that ends without GOODBYE keeps its ownerships until their leases end (expired); its waits leave",
  async run(server) {
    const [gone, waiter, other] = [await server.open(), await server.open(), await server.open()];
    const token = expectAcquired(await acquire(gone, 1, "fin/held"), 1, "fin/held");
    expectAcquired(await acquire(other, 1, "fin/wanted"), 1, "fin/wanted");
    queuedOf(await acquire(gone, 2, "fin/wanted"), 2);
    queuedOf(await acquire(waiter, 1, "fin/held", { leaseMs: 5_000 }), 1);
    await gone.drop();
    assert.deepEqual(server.engine.getLock("fin/wanted")?.waiters, [], "its wait left");
    assert.equal(server.engine.getLock("fin/held")?.holder?.connected, false);
    server.advance(LEASE_MS - 1);
    await waiter.send({ type: "heartbeat", requestId: 2 });
    assert.deepEqual(await waiter.next(), { type: "heartbeat_ack", requestId: 2, renewed: 0 });
    server.advance(1);
    assert.ok(expectAcquired(await waiter.next(), 1, "fin/held") > token);
    const records = await auditCount(server, 4);
    assert.deepEqual(
      records.filter((r) => r.event === "release" && r.lock === "fin/held").map((
        r,
      ) => [r.token, r.reason]),
      [[token, "expired"]],
    );
    await waiter.close();
    await other.close();
  },
}, {
  name:
    "RESUME while the old session is open: its claims move with their tokens and places (moved)",
  async run(server) {
    const [old, other] = [await server.open(), await server.open()];
    const held = acquiredOf(await acquire(old, 1, "mv/held"), 1);
    expectAcquired(await acquire(other, 1, "mv/queue"), 1, "mv/queue");
    const waiting = queuedOf(await acquire(old, 2, "mv/queue"), 2);
    const fresh = await server.open();
    await fresh.send(
      resume(old.sessionId, 2),
      reclaimOwned(2, held),
      reclaimQueued(3, waiting),
    );
    assert.deepEqual(await fresh.next(), {
      type: "resumed",
      requestId: 1,
      outcome: "moved",
      windowLeftMs: DEFAULT_CONFIG.ioTimeoutMs,
    });
    const replies = await byRequestId(fresh, 2);
    const kept = acquiredOf(replies.get(2)!, 2);
    assert.equal(kept.token, held.token, "the same token");
    assert.notDeepEqual(assertTicket(kept.ticket), held.ticket, "a ticket of the new session");
    const place = queuedOf(replies.get(3)!, 3);
    assert.deepEqual(
      [place.position, place.orderTerm, place.orderSeq],
      [1, waiting.orderTerm, waiting.orderSeq],
    );
    assert.equal(await old.next(), null, "the old session is closed");
    assert.equal(server.engine.getLock("mv/held")?.holder?.sessionId, fresh.sessionId);
    await heartbeatRenews(fresh, 4, 1);
    await release(other, 2, "mv/queue", server.engine.getLock("mv/queue")!.holder!.token);
    acquiredOf(await fresh.next(), 3);
    const records = await auditCount(server, 5);
    assert.deepEqual(
      records.filter((r) => r.event === "reclaim").map((r) => [r.lock, r.token, r.claim]),
      [["mv/held", held.token, "owned"], ["mv/queue", null, "queued"]],
    );
    await old.drop();
    await other.close();
    await fresh.close();
  },
}, {
  name:
    "RESUME after the connection ended without GOODBYE: the orphan's ownership moves with its token (moved)",
  async run(server) {
    const [old, waiter] = [await server.open(), await server.open()];
    const held = acquiredOf(await acquire(old, 1, "orph/held"), 1);
    queuedOf(await acquire(waiter, 1, "orph/held", { leaseMs: 5_000 }), 1);
    await old.drop();
    server.advance(LEASE_MS / 2);
    const fresh = await server.open();
    await fresh.send(resume(old.sessionId, 1), reclaimOwned(2, held));
    assert.deepEqual(await fresh.next(), {
      type: "resumed",
      requestId: 1,
      outcome: "moved",
      windowLeftMs: LEASE_MS / 2,
    });
    assert.equal(acquiredOf(await fresh.next(), 2).token, held.token, "the same token");
    const holder = server.engine.getLock("orph/held")?.holder;
    assert.deepEqual([holder?.sessionId, holder?.connected], [fresh.sessionId, true]);
    server.advance(LEASE_MS - 1); // past the orphan's lease: renewed at the move
    await heartbeatRenews(waiter, 2, 0);
    await fresh.close();
    assert.ok(expectAcquired(await waiter.next(), 1, "orph/held") > held.token);
    await auditCount(server, 4);
    assert.deepEqual(
      recordsOf(server, "release").map((r) => [r.token, r.reason]),
      [[held.token, "graceful"]],
    );
    await waiter.close();
  },
}, {
  name: "a moved RESUME releases what its client did not reclaim, and closes the old session",
  async run(server) {
    const old = await server.open();
    const kept = acquiredOf(await acquire(old, 1, "mv2/a"), 1);
    const dropped = expectAcquired(await acquire(old, 2, "mv2/b"), 2, "mv2/b");
    const fresh = await server.open();
    await fresh.send(resume(old.sessionId, 1), reclaimOwned(2, kept));
    assert.equal((await fresh.next())?.type, "resumed");
    assert.equal(acquiredOf(await fresh.next(), 2).token, kept.token);
    assert.equal(await old.next(), null);
    assert.equal(server.engine.getLock("mv2/b"), undefined, "released");
    const records = await auditCount(server, 4);
    assert.deepEqual(
      records.filter((r) => r.lock === "mv2/b").map((r) => [r.event, r.token, r.reason]),
      [["acquire", dropped, undefined], ["release", dropped, "graceful"]],
    );
    await old.drop();
    await fresh.close();
  },
}, {
  name:
    "RESUME once the old session is gone: none; owned claims get CLAIM_VOID, queued ones join the tail",
  async run(server) {
    const [old, other] = [await server.open(), await server.open()];
    const held = acquiredOf(await acquire(old, 1, "none/held"), 1);
    expectAcquired(await acquire(other, 1, "none/q"), 1, "none/q");
    const waiting = queuedOf(await acquire(old, 2, "none/q"), 2);
    await old.close();
    const fresh = await server.open();
    await fresh.send(resume(old.sessionId, 2), reclaimOwned(2, held), reclaimQueued(3, waiting));
    assert.deepEqual(await fresh.next(), {
      type: "resumed",
      requestId: 1,
      outcome: "none",
      windowLeftMs: 0,
    });
    const replies = await byRequestId(fresh, 2);
    expectError(replies.get(2)!, "CLAIM_VOID", 2, "none/held");
    const tail = queuedOf(replies.get(3)!, 3);
    assert.equal(tail.position, 1);
    assert.ok(tail.orderSeq! > waiting.orderSeq!, "a new place at the tail");
    await heartbeatRenews(fresh, 4, 0);
    await auditCount(server, 5);
    assert.deepEqual(
      recordsOf(server, "reclaim_void").map((r) => [r.lock, r.claim, r.reason]),
      [["none/held", "owned", "window"], ["none/q", "queued", "window"]],
    );
    await other.close();
    await fresh.close();
  },
}, {
  name: "a RECLAIM with a forged ticket is void and leaves the old session and its lock alone",
  async run(server) {
    const old = await server.open();
    const held = acquiredOf(await acquire(old, 1, "forge/held"), 1);
    const forged = { ...held, ticket: held.ticket!.map((byte, i) => i === 0 ? byte ^ 1 : byte) };
    const fresh = await server.open();
    await fresh.send(resume(old.sessionId, 1), reclaimOwned(2, forged));
    assert.equal((await fresh.next())?.type, "resumed");
    expectError(await fresh.next(), "CLAIM_VOID", 2, "forge/held");
    assert.equal(server.engine.getLock("forge/held")?.holder?.sessionId, old.sessionId);
    await heartbeatRenews(old, 2, 1);
    await auditCount(server, 2);
    assert.deepEqual(recordsOf(server, "reclaim_void").map((r) => r.reason), ["ticket"]);
    await old.close();
    await fresh.close();
  },
}, {
  name: "a RESUME of a term this server never served gets none and its claims are void",
  async run(server) {
    const fresh = await server.open();
    const claim = reclaimOwned(2, {
      type: "acquired",
      requestId: 1,
      name: "old/term",
      token: 123_456,
      leaseMs: LEASE_MS,
      ticket: new Uint8Array(16).fill(7),
    });
    await fresh.send(resume(1, 1, 7), claim);
    assert.deepEqual(await fresh.next(), {
      type: "resumed",
      requestId: 1,
      outcome: "none",
      windowLeftMs: 0,
    });
    expectError(await fresh.next(), "CLAIM_VOID", 2, "old/term");
    assert.equal(server.engine.getLock("old/term"), undefined);
    await fresh.close();
  },
}, {
  name:
    "RESUME only first, RECLAIM only after it and no more than it announced: else INVALID_ARGUMENT, kept",
  async run(server) {
    const late = await server.open();
    await heartbeatRenews(late, 1, 0);
    await late.send(resume(late.sessionId, 0));
    expectError(await late.next(), "INVALID_ARGUMENT", 1, "");
    const stray = reclaimOwned(3, {
      type: "acquired",
      requestId: 1,
      name: "stray",
      token: 9,
      leaseMs: LEASE_MS,
      ticket: new Uint8Array(16).fill(1),
    });
    await late.send(stray);
    expectError(await late.next(), "INVALID_ARGUMENT", 3, "stray");
    const counted = await server.open();
    await counted.send(resume(late.sessionId, 1), { ...stray, requestId: 2 }, stray);
    assert.equal((await counted.next())?.type, "resumed");
    expectError(await counted.next(), "CLAIM_VOID", 2, "stray");
    expectError(await counted.next(), "INVALID_ARGUMENT", 3, "stray");
    await heartbeatRenews(counted, 4, 0);
    await late.close();
    await counted.close();
  },
}];
