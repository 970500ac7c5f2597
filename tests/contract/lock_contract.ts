/**
 * The lock contract, written once: FIFO order, fencing tokens, leases and heartbeats, try-lock,
 * wait bounds, cancel, force-release, waiter removal, duplicate claims, limits, I/O timeouts and
 * disconnects. `lock_contract_test.ts` runs every case against every transport: the engine
 * through the LockService (no sockets), plain TCP, TLS and mutual TLS. Each case speaks frames
 * (what any client sends and receives) and moves the server's manual clock; none sleeps.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { ServerConfig } from "../../src/config.ts";
import type { LockEngineView } from "../../src/core/lock_queries.ts";
import type { LockService } from "../../src/service/lock_service.ts";
import { WIRE_CODES, type WireCodeName } from "../../src/wire/codes.ts";
import { type ClientMessage, type ServerMessage, WAIT_FOREVER } from "../../src/wire/messages.ts";
import { eventually, TEST_ACTOR } from "../helpers/start_server.ts";

/** One session of the server under test, after HELLO/WELCOME. */
export interface ContractClient {
  /** WELCOME's session id. */
  readonly sessionId: number;
  /** The protocol version the session speaks. */
  readonly version: number;
  /** Sends requests (one write on a socket). */
  send(...messages: ClientMessage[]): Promise<void>;
  /** The next frame from the server; null once the server has closed the session. */
  next(): Promise<ServerMessage | null>;
  /** Ends the session from the client's side (a clean close; version 2: GOODBYE first). */
  close(): Promise<void>;
  /** Ends the connection without a word (version 2: without GOODBYE; version 1: as `close`). */
  drop(): Promise<void>;
}

/** A server under test with a manual clock. */
export interface ContractServer {
  /** The identity the server sees for every session of this transport ("" without mTLS). */
  readonly identity: string;
  /** Read-only view of the engine, to check what the server holds. */
  readonly engine: LockEngineView;
  /** Operator actions go through the service, as the admin API does. */
  readonly service: LockService;
  /** Opens a session (HELLO done), at the transport's protocol version or at `version`. */
  open(version?: number): Promise<ContractClient>;
  /** Opens a connection whose HELLO is refused; returns the refusal. */
  openRefused(): Promise<ServerMessage | null>;
  /** Moves the server's clock, running every deadline that falls due. */
  advance(ms: number): void;
  /** The audit records written so far. */
  auditRecords(): Record<string, unknown>[];
  close(): Promise<void>;
}

/** A way to reach the server: the service directly, TCP, TLS, mTLS; at one protocol version. */
export interface ContractTransport {
  readonly name: string;
  readonly version: number;
  start(config: Partial<ServerConfig>): Promise<ContractServer>;
}

export interface ContractCase {
  readonly name: string;
  readonly config?: Partial<ServerConfig>;
  run(server: ContractServer): Promise<void>;
}

// ---- helpers ------------------------------------------------------------------

export const LEASE_MS = 1_000;

/** ACQUIRE and its first answer. */
export async function acquire(
  client: ContractClient,
  requestId: number,
  name: string,
  { leaseMs = LEASE_MS, waitMs = WAIT_FOREVER }: { leaseMs?: number; waitMs?: number } = {},
): Promise<ServerMessage | null> {
  await client.send({ type: "acquire", requestId, name, leaseMs, waitMs });
  return await client.next();
}

export async function release(
  client: ContractClient,
  requestId: number,
  name: string,
  token: number,
): Promise<ServerMessage | null> {
  await client.send({ type: "release", requestId, name, token });
  return await client.next();
}

export function expectAcquired(
  message: ServerMessage | null,
  requestId: number,
  name: string,
): number {
  assert.ok(message?.type === "acquired", `expected ACQUIRED, got ${JSON.stringify(message)}`);
  assert.equal(message.requestId, requestId);
  assert.equal(message.name, name);
  return message.token;
}

export function expectError(
  message: ServerMessage | null,
  code: WireCodeName,
  requestId: number,
  name?: string,
): void {
  assert.ok(message?.type === "error", `expected ERROR ${code}, got ${JSON.stringify(message)}`);
  assert.equal(message.code, WIRE_CODES[code].code, `${code}: ${message.message}`);
  assert.equal(message.requestId, requestId);
  if (name !== undefined) assert.equal(message.name, name);
}

export function expectQueued(
  message: ServerMessage | null,
  requestId: number,
  position: number,
): void {
  assert.ok(message?.type === "queued", `expected QUEUED, got ${JSON.stringify(message)}`);
  assert.equal(message.requestId, requestId);
  assert.equal(message.position, position);
}

/** Waits until the audit log holds `count` records (writes are asynchronous). */
export async function auditCount(server: ContractServer, count: number) {
  await eventually(() => server.auditRecords().length >= count, `${count} audit records`);
  return server.auditRecords();
}

// ---- the contract -------------------------------------------------------------

export const LOCK_CONTRACT: readonly ContractCase[] = [{
  name: "contending sessions get the lock once each, in FIFO order, with growing tokens",
  async run(server) {
    const clients = await Promise.all(Array.from({ length: 5 }, () => server.open()));
    const tokens = [expectAcquired(await acquire(clients[0], 1, "shared"), 1, "shared")];
    for (let i = 1; i < 5; i++) expectQueued(await acquire(clients[i], 1, "shared"), 1, i);
    assert.equal(server.engine.getLock("shared")?.waiters.length, 4);
    for (let i = 0; i < 4; i++) {
      assert.deepEqual(await release(clients[i], 2, "shared", tokens[i]), {
        type: "released",
        requestId: 2,
        name: "shared",
      });
      tokens.push(expectAcquired(await clients[i + 1].next(), 1, "shared"));
      assert.ok(tokens[i + 1] > tokens[i], `token ${tokens[i + 1]} > ${tokens[i]}`);
    }
    await release(clients[4], 2, "shared", tokens[4]);
    assert.equal(server.engine.lockCount, 0, "an idle lock is not stored");
    const records = await auditCount(server, 10);
    assert.deepEqual(
      records.map((r) => [r.event, r.token, r.identity]),
      tokens.flatMap((token) => [
        ["acquire", token, server.identity],
        ["release", token, server.identity],
      ]),
    );
    for (const client of clients) await client.close();
  },
}, {
  name: "every grant's token is larger than every earlier one, across locks and sessions",
  async run(server) {
    const a = await server.open();
    const b = await server.open();
    let last = 0;
    for (let round = 0; round < 3; round++) {
      for (const [client, name] of [[a, "t/x"], [b, "t/y"]] as const) {
        const token = expectAcquired(await acquire(client, 1, name), 1, name);
        assert.ok(token > last, `${token} > ${last}`);
        last = token;
        await release(client, 2, name, token);
      }
    }
    await a.close();
    await b.close();
  },
}, {
  name:
    "a holder that does not heartbeat loses the lock at its lease; the next waiter gets a larger token",
  async run(server) {
    const holder = await server.open();
    const waiter = await server.open();
    const token = expectAcquired(await acquire(holder, 1, "lease", { leaseMs: 300 }), 1, "lease");
    expectQueued(await acquire(waiter, 1, "lease", { leaseMs: 5_000 }), 1, 1);
    server.advance(299);
    assert.equal(server.engine.getLock("lease")?.holder?.token, token, "held until the lease ends");
    server.advance(1);
    expectError(await holder.next(), "LEASE_EXPIRED", 1, "lease");
    const next = expectAcquired(await waiter.next(), 1, "lease");
    assert.ok(next > token);
    const records = await auditCount(server, 3);
    assert.deepEqual(records.slice(0, 3).map((r) => [r.event, r.token, r.reason ?? ""]), [
      ["acquire", token, ""],
      ["release", token, "expired"],
      ["acquire", next, ""],
    ]);
    // The session stays open after LEASE_EXPIRED.
    await holder.send({ type: "heartbeat", requestId: 2 });
    assert.deepEqual(await holder.next(), { type: "heartbeat_ack", requestId: 2, renewed: 0 });
    await holder.close();
    await waiter.close();
  },
}, {
  name: "a heartbeat renews every ownership of the session for a full lease",
  async run(server) {
    const holder = await server.open();
    expectAcquired(await acquire(holder, 1, "hb/a", { leaseMs: 400 }), 1, "hb/a");
    expectAcquired(await acquire(holder, 2, "hb/b", { leaseMs: 400 }), 2, "hb/b");
    server.advance(300);
    await holder.send({ type: "heartbeat", requestId: 3 });
    assert.deepEqual(await holder.next(), { type: "heartbeat_ack", requestId: 3, renewed: 2 });
    server.advance(399);
    assert.equal(server.engine.stats.locksHeld, 2, "renewed at 300 ms: held until 700 ms");
    server.advance(1);
    const ends = [await holder.next(), await holder.next()];
    for (const end of ends) {
      expectError(end, "LEASE_EXPIRED", end?.type === "error" ? end.requestId : 0);
    }
    assert.deepEqual(ends.map((e) => e?.type === "error" && e.name).sort(), ["hb/a", "hb/b"]);
    await holder.close();
  },
}, {
  name: "a try-lock of a held lock fails at once with WAIT_TIMEOUT; of a free lock it is granted",
  async run(server) {
    const a = await server.open();
    const b = await server.open();
    const token = expectAcquired(await acquire(a, 1, "try"), 1, "try");
    expectError(await acquire(b, 1, "try", { waitMs: 0 }), "WAIT_TIMEOUT", 1, "try");
    assert.deepEqual(server.engine.getLock("try")?.waiters, [], "nothing queued");
    await release(a, 2, "try", token);
    const next = expectAcquired(await acquire(b, 2, "try", { waitMs: 0 }), 2, "try");
    assert.ok(next > token);
    await a.close();
    await b.close();
  },
}, {
  name: "a wait bound ends the wait with WAIT_TIMEOUT when it passes and leaves the queue",
  async run(server) {
    const a = await server.open();
    const b = await server.open();
    const c = await server.open();
    expectAcquired(await acquire(a, 1, "bound", { leaseMs: 60_000 }), 1, "bound");
    expectQueued(await acquire(b, 1, "bound", { waitMs: 250 }), 1, 1);
    expectQueued(await acquire(c, 1, "bound"), 1, 2);
    server.advance(249);
    assert.equal(server.engine.getLock("bound")?.waiters.length, 2);
    server.advance(1);
    expectError(await b.next(), "WAIT_TIMEOUT", 1, "bound");
    assert.equal(server.engine.getLock("bound")?.waiters.length, 1, "c is still waiting");
    await a.close();
    expectAcquired(await c.next(), 1, "bound");
    await b.close();
    await c.close();
  },
}, {
  name:
    "RELEASE with token 0 cancels a queued claim (CANCELLED, then RELEASED); the others keep their order",
  async run(server) {
    const [a, b, c] = [await server.open(), await server.open(), await server.open()];
    const token = expectAcquired(await acquire(a, 1, "cancel"), 1, "cancel");
    expectQueued(await acquire(b, 1, "cancel"), 1, 1);
    expectQueued(await acquire(c, 1, "cancel"), 1, 2);
    await b.send({ type: "release", requestId: 2, name: "cancel", token: 0 });
    expectError(await b.next(), "CANCELLED", 1, "cancel");
    assert.deepEqual(await b.next(), { type: "released", requestId: 2, name: "cancel" });
    await release(a, 2, "cancel", token);
    expectAcquired(await c.next(), 1, "cancel");
    for (const client of [a, b, c]) await client.close();
  },
}, {
  name:
    "a RELEASE with a wrong token, or of a lock not owned, is refused with NOT_OWNER and changes nothing",
  async run(server) {
    const a = await server.open();
    const b = await server.open();
    const token = expectAcquired(await acquire(a, 1, "own"), 1, "own");
    expectError(await release(a, 2, "own", token + 1), "NOT_OWNER", 2, "own");
    expectError(await release(b, 1, "own", token), "NOT_OWNER", 1, "own");
    expectError(await release(b, 2, "never", 1), "NOT_OWNER", 2, "never");
    assert.equal(server.engine.getLock("own")?.holder?.token, token);
    await a.close();
    await b.close();
  },
}, {
  name:
    "a second ACQUIRE of a lock the session owns or waits for is a duplicate claim and changes nothing",
  async run(server) {
    const a = await server.open();
    const b = await server.open();
    expectAcquired(await acquire(a, 1, "dup"), 1, "dup");
    expectQueued(await acquire(b, 1, "dup"), 1, 1);
    expectError(await acquire(a, 2, "dup"), "DUPLICATE_CLAIM", 2, "dup");
    expectError(await acquire(b, 2, "dup"), "DUPLICATE_CLAIM", 2, "dup");
    assert.equal(server.engine.getLock("dup")?.waiters.length, 1);
    await a.close();
    await b.close();
  },
}, {
  name:
    "force-release: the owner gets CLOSED_BY_ADMIN and is closed; the head waiter gets a larger token",
  async run(server) {
    const owner = await server.open();
    const waiter = await server.open();
    const token = expectAcquired(await acquire(owner, 1, "force"), 1, "force");
    expectAcquired(await acquire(owner, 2, "force/other"), 2, "force/other");
    expectQueued(await acquire(waiter, 1, "force"), 1, 1);
    assert.equal(server.service.forceRelease("force", TEST_ACTOR).status, "released");
    expectError(await owner.next(), "CLOSED_BY_ADMIN", 0, "force");
    assert.equal(await owner.next(), null, "the owner's session is closed");
    assert.ok(expectAcquired(await waiter.next(), 1, "force") > token);
    assert.equal(server.engine.getLock("force/other"), undefined, "all its ownerships ended");
    const records = await auditCount(server, 6);
    assert.deepEqual(
      records.filter((r) => r.lock === "force").map((r) => [r.event, r.reason ?? ""]),
      [["acquire", ""], ["force_release", ""], ["release", "force"], ["acquire", ""]],
    );
    assert.equal(
      server.service.forceRelease("force/idle", TEST_ACTOR).status,
      "lock_not_found",
    );
    await waiter.close();
  },
}, {
  name: "removing a waiter closes its session with CLOSED_BY_ADMIN and keeps the order of the rest",
  async run(server) {
    const [owner, w1, w2, w3] = [
      await server.open(),
      await server.open(),
      await server.open(),
      await server.open(),
    ];
    const token = expectAcquired(await acquire(owner, 1, "kick"), 1, "kick");
    for (const [i, w] of [w1, w2, w3].entries()) {
      expectQueued(await acquire(w, 1, "kick"), 1, i + 1);
    }
    const [, second] = server.engine.getLock("kick")!.waiters;
    assert.equal(
      server.service.kickWaiter("kick", second.remoteAddr, TEST_ACTOR).status,
      "kicked",
    );
    expectError(await w2.next(), "CLOSED_BY_ADMIN", 0, "kick");
    assert.equal(await w2.next(), null);
    assert.equal(server.engine.getLock("kick")?.waiters.length, 2);
    assert.equal(
      server.service.kickWaiter("kick", second.remoteAddr, TEST_ACTOR).status,
      "waiter_not_found",
    );
    await release(owner, 2, "kick", token);
    const t1 = expectAcquired(await w1.next(), 1, "kick");
    await release(w1, 2, "kick", t1);
    expectAcquired(await w3.next(), 1, "kick");
    for (const client of [owner, w1, w3]) await client.close();
  },
}, {
  name:
    "limits: claims per session and waiters per lock refuse with LIMIT_EXCEEDED and store nothing",
  config: { claimsPerSessionMax: 2, waitersPerLockMax: 1 },
  async run(server) {
    const [a, b, c] = [await server.open(), await server.open(), await server.open()];
    expectAcquired(await acquire(a, 1, "lim/x"), 1, "lim/x");
    expectAcquired(await acquire(a, 2, "lim/y"), 2, "lim/y");
    expectError(await acquire(a, 3, "lim/z"), "LIMIT_EXCEEDED", 3, "lim/z");
    expectQueued(await acquire(b, 1, "lim/x"), 1, 1);
    expectError(await acquire(c, 1, "lim/x"), "LIMIT_EXCEEDED", 1, "lim/x");
    assert.equal(server.engine.getLock("lim/z"), undefined);
    assert.equal(server.engine.getLock("lim/x")?.waiters.length, 1);
    for (const client of [a, b, c]) await client.close();
  },
}, {
  name: "limits: a HELLO beyond the session limit is refused with LIMIT_EXCEEDED",
  config: { sessionsMax: 2 },
  async run(server) {
    const a = await server.open();
    const b = await server.open();
    const refusal = await server.openRefused();
    expectError(refusal, "LIMIT_EXCEEDED", 0);
    await a.close();
    await b.close();
  },
}, {
  name: "a lock name the server refuses gets INVALID_ARGUMENT and nothing is stored",
  async run(server) {
    const a = await server.open();
    for (const [i, name] of ["", "..", "a\u0000b", "x".repeat(1025), "e\u0301"].entries()) {
      expectError(await acquire(a, i + 1, name), "INVALID_ARGUMENT", i + 1);
    }
    assert.equal(server.engine.lockCount, 0);
    await a.close();
  },
}, {
  name:
    "a silent session is closed at the I/O timeout: IO_TIMEOUT, its ownership ends io_timeout, the waiter is granted",
  config: { ioTimeoutMs: 2_000 },
  async run(server) {
    const silent = await server.open();
    const waiter = await server.open();
    const token = expectAcquired(await acquire(silent, 1, "io", { leaseMs: 60_000 }), 1, "io");
    expectQueued(await acquire(waiter, 1, "io", { leaseMs: 60_000 }), 1, 1);
    server.advance(1_500);
    await waiter.send({ type: "heartbeat", requestId: 2 });
    assert.deepEqual(await waiter.next(), { type: "heartbeat_ack", requestId: 2, renewed: 0 });
    server.advance(500);
    expectError(await silent.next(), "IO_TIMEOUT", 0);
    assert.equal(await silent.next(), null);
    assert.ok(expectAcquired(await waiter.next(), 1, "io") > token);
    const records = await auditCount(server, 3);
    assert.deepEqual(records[1].reason, "io_timeout");
    await waiter.close();
  },
}, {
  name: "a session that closes cleanly ends its ownerships as graceful and leaves its queues",
  async run(server) {
    const [leaver, other, next] = [await server.open(), await server.open(), await server.open()];
    const token = expectAcquired(await acquire(leaver, 1, "bye/held"), 1, "bye/held");
    expectAcquired(await acquire(other, 1, "bye/wanted"), 1, "bye/wanted");
    expectQueued(await acquire(leaver, 2, "bye/wanted"), 2, 1);
    expectQueued(await acquire(next, 1, "bye/held"), 1, 1);
    await leaver.close();
    assert.ok(expectAcquired(await next.next(), 1, "bye/held") > token);
    assert.deepEqual(server.engine.getLock("bye/wanted")?.waiters, []);
    const records = await auditCount(server, 4);
    assert.deepEqual(
      records.filter((r) => r.lock === "bye/held").map((r) => [r.event, r.reason ?? ""]),
      [["acquire", ""], ["release", "graceful"], ["acquire", ""]],
    );
    await other.close();
    await next.close();
  },
}];
