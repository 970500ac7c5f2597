/**
 * The lock kinds and holders' values of protocol version 2 (issues 22 and 23), written once and
 * run by `lock_contract_test.ts` against the service, TCP, TLS and mTLS with version-2 sessions:
 * semaphores (FIFO, limits, slots, tokens, a disagreeing claim), shared locks (batches of
 * readers, writer preference, write generations, downgrade), leases, force-release, waiter
 * removal, wait bounds and lock-delays on them, and values (ACQUIRE's, SET_VALUE, the bound,
 * the audit digest).
 *
 * @module
 */

import assert from "node:assert/strict";
import { parseLockRules } from "../../src/security/lock_rules.ts";
import {
  type Acquire,
  type Acquired,
  type LockMode,
  type ServerMessage,
  WAIT_FOREVER,
} from "../../src/wire/messages.ts";
import { TEST_ACTOR } from "../helpers/start_server.ts";
import {
  acquire,
  auditCount,
  type ContractCase,
  type ContractClient,
  expectError,
  expectQueued,
  LEASE_MS,
  release,
} from "./lock_contract.ts";

const encoder = new TextEncoder();

/** The fields of a version-2 ACQUIRE beyond a plain one. */
interface KindOptions {
  mode?: LockMode;
  limit?: number;
  value?: Uint8Array;
  leaseMs?: number;
  waitMs?: number;
}

function acquireOf(requestId: number, name: string, options: KindOptions = {}): Acquire {
  return {
    type: "acquire",
    requestId,
    name,
    leaseMs: options.leaseMs ?? LEASE_MS,
    waitMs: options.waitMs ?? WAIT_FOREVER,
    mode: options.mode ?? "exclusive",
    limit: options.limit ?? 0,
    value: options.value ?? new Uint8Array(0),
  };
}

/** A version-2 ACQUIRE and its first answer. */
export async function acquireKind(
  client: ContractClient,
  requestId: number,
  name: string,
  options: KindOptions = {},
): Promise<ServerMessage | null> {
  await client.send(acquireOf(requestId, name, options));
  return await client.next();
}

export function grantOf(message: ServerMessage | null, requestId: number): Acquired {
  assert.ok(message?.type === "acquired", `expected ACQUIRED, got ${JSON.stringify(message)}`);
  assert.equal(message.requestId, requestId);
  return message;
}

function errorMessage(message: ServerMessage | null): string {
  return message?.type === "error" ? message.message : "";
}

async function closeAll(...clients: ContractClient[]): Promise<void> {
  for (const client of clients) await client.close();
}

export const KINDS_CONTRACT: readonly ContractCase[] = [{
  name:
    "a semaphore of 3: three owners in distinct slots with growing tokens, the fourth queues FIFO and gets the freed slot",
  async run(server) {
    const clients = await Promise.all(Array.from({ length: 5 }, () => server.open()));
    const grants: Acquired[] = [];
    for (let i = 0; i < 3; i++) {
      grants.push(grantOf(await acquireKind(clients[i], 1, "sem/render", { limit: 3 }), 1));
    }
    assert.deepEqual(grants.map((g) => [g.limit, g.slot, g.mode]), [
      [3, 0, "exclusive"],
      [3, 1, "exclusive"],
      [3, 2, "exclusive"],
    ]);
    assert.ok(grants[0].token < grants[1].token && grants[1].token < grants[2].token);
    // Limit 0 has no opinion: it joins the semaphore, in FIFO order.
    expectQueued(await acquireKind(clients[3], 1, "sem/render", { limit: 0 }), 1, 1);
    expectQueued(await acquireKind(clients[4], 1, "sem/render", { limit: 3 }), 1, 2);
    assert.equal(server.engine.getLock("sem/render")?.holders.length, 3);
    await release(clients[1], 2, "sem/render", grants[1].token);
    const next = grantOf(await clients[3].next(), 1);
    assert.equal(next.slot, 1, "the freed slot");
    assert.ok(next.token > grants[2].token);
    assert.equal(server.engine.getLock("sem/render")?.queueLength, 1);
    await closeAll(...clients);
  },
}, {
  name:
    "a claim that disagrees with the lock's kind or limit gets INVALID_ARGUMENT naming them; nothing changes",
  async run(server) {
    const a = await server.open();
    const b = await server.open();
    grantOf(await acquireKind(a, 1, "sem/x", { limit: 4 }), 1);
    for (
      const [id, options, pattern] of [
        [2, { limit: 5 }, /a semaphore with limit 4.*limit 5/],
        [3, { limit: 1 }, /a semaphore with limit 4.*limit 1/],
        [4, { mode: "shared" as const }, /a semaphore with limit 4/],
      ] as const
    ) {
      const refused = await acquireKind(b, id, "sem/x", options);
      expectError(refused, "INVALID_ARGUMENT", id, "sem/x");
      assert.match(errorMessage(refused), pattern);
    }
    grantOf(await acquireKind(a, 5, "ex/y"), 5);
    const refused = await acquireKind(b, 6, "ex/y", { limit: 2 });
    expectError(refused, "INVALID_ARGUMENT", 6, "ex/y");
    assert.match(errorMessage(refused), /an exclusive lock/);
    await b.send({ ...acquireOf(7, "ex/z"), mode: 7 });
    const badMode = await b.next();
    expectError(badMode, "INVALID_ARGUMENT", 7, "ex/z");
    assert.match(errorMessage(badMode), /mode 7 is neither 0 \(exclusive\) nor 1 \(shared\)/);
    assert.equal(server.engine.getLock("sem/x")?.queueLength, 0);
    assert.equal(server.engine.getLock("ex/z"), undefined);
    await closeAll(a, b);
  },
}, {
  name:
    "shared claims at the head are granted together; a queued writer stops later readers; a reader after a writer carries its token as write generation",
  async run(server) {
    const [r1, r2, w, r3] = await Promise.all(Array.from({ length: 4 }, () => server.open()));
    const g1 = grantOf(await acquireKind(r1, 1, "rw/doc", { mode: "shared" }), 1);
    const g2 = grantOf(await acquireKind(r2, 1, "rw/doc", { mode: "shared" }), 1);
    assert.deepEqual([g1.mode, g2.mode, g1.writeGeneration, g1.limit], ["shared", "shared", 0, 1]);
    expectQueued(await acquireKind(w, 1, "rw/doc"), 1, 1);
    // Writer preference: the reader waits behind the writer though readers own the lock.
    expectQueued(await acquireKind(r3, 1, "rw/doc", { mode: "shared" }), 1, 2);
    await release(r1, 2, "rw/doc", g1.token);
    assert.equal(server.engine.getLock("rw/doc")?.queueLength, 2, "one reader still owns it");
    await release(r2, 2, "rw/doc", g2.token);
    const gw = grantOf(await w.next(), 1);
    assert.equal(gw.mode, "exclusive");
    assert.equal(gw.writeGeneration, 0, "exclusive grants carry 0");
    await release(w, 2, "rw/doc", gw.token);
    const g3 = grantOf(await r3.next(), 1);
    assert.equal(g3.mode, "shared");
    assert.equal(g3.writeGeneration, gw.token, "the last exclusive grant's token");
    assert.ok(g3.token > gw.token);
    await closeAll(r1, r2, w, r3);
  },
}, {
  name:
    "DOWNGRADE makes a writer a reader in place (ACQUIRED, same token); readers waiting at the head join it; a stale token gets NOT_OWNER, a semaphore INVALID_ARGUMENT",
  async run(server) {
    const [w, r, s] = await Promise.all([server.open(), server.open(), server.open()]);
    const gw = grantOf(await acquireKind(w, 1, "rw/down"), 1);
    expectQueued(await acquireKind(r, 1, "rw/down", { mode: "shared" }), 1, 1);
    await w.send({ type: "downgrade", requestId: 2, token: gw.token + 1, name: "rw/down" });
    expectError(await w.next(), "NOT_OWNER", 2, "rw/down");
    await w.send({ type: "downgrade", requestId: 3, token: gw.token, name: "rw/down" });
    const down = grantOf(await w.next(), 3);
    assert.deepEqual(
      [down.token, down.mode, down.writeGeneration, down.limit, down.slot],
      [gw.token, "shared", gw.token, 1, 0],
    );
    assert.notDeepEqual(down.ticket, gw.ticket, "a fresh ticket: it names the mode");
    const gr = grantOf(await r.next(), 1);
    assert.deepEqual([gr.mode, gr.writeGeneration], ["shared", gw.token]);
    assert.deepEqual(server.engine.getLock("rw/down")?.holders.map((h) => h.mode), [
      "shared",
      "shared",
    ]);
    // Already shared: the same answer, nothing changes.
    await w.send({ type: "downgrade", requestId: 4, token: gw.token, name: "rw/down" });
    assert.equal(grantOf(await w.next(), 4).mode, "shared");
    const gs = grantOf(await acquireKind(s, 1, "sem/down", { limit: 2 }), 1);
    await s.send({ type: "downgrade", requestId: 2, token: gs.token, name: "sem/down" });
    const refused = await s.next();
    expectError(refused, "INVALID_ARGUMENT", 2, "sem/down");
    assert.match(errorMessage(refused), /a semaphore with limit 2/);
    const records = await auditCount(server, 4);
    assert.deepEqual(
      records.filter((rec) => rec.event === "downgrade").map((
        rec,
      ) => [rec.token, rec.write_generation]),
      [[gw.token, gw.token]],
    );
    await closeAll(w, r, s);
  },
}, {
  name:
    "a version-1 session only ever owns a lock alone: on a semaphore it gets INVALID_ARGUMENT naming it, on a shared lock it is a writer",
  async run(server) {
    const [a, r] = await Promise.all([server.open(), server.open()]);
    const v1 = await server.open(1);
    grantOf(await acquireKind(a, 1, "v1/sem", { limit: 3 }), 1);
    const refused = await acquire(v1, 1, "v1/sem");
    expectError(refused, "INVALID_ARGUMENT", 1, "v1/sem");
    assert.match(errorMessage(refused), /a semaphore with limit 3.*limit 1/);
    const gr = grantOf(await acquireKind(r, 1, "v1/rw", { mode: "shared" }), 1);
    expectQueued(await acquire(v1, 2, "v1/rw"), 2, 1);
    await release(r, 2, "v1/rw", gr.token);
    const writer = await v1.next();
    assert.ok(writer?.type === "acquired" && writer.requestId === 2);
    assert.deepEqual(server.engine.getLock("v1/rw")?.holders.map((h) => h.mode), ["exclusive"]);
    await closeAll(a, r, v1);
  },
}, {
  name: "a semaphore's queue obeys -max-waiters-per-lock: LIMIT_EXCEEDED, nothing stored",
  config: { waitersPerLockMax: 1 },
  async run(server) {
    const [a, b, c] = await Promise.all([server.open(), server.open(), server.open()]);
    grantOf(await acquireKind(a, 1, "sem/q", { limit: 2 }), 1);
    grantOf(await acquireKind(b, 1, "sem/q", { limit: 2 }), 1);
    expectQueued(await acquireKind(c, 1, "sem/q", { limit: 2 }), 1, 1);
    const d = await server.open();
    expectError(await acquireKind(d, 1, "sem/q", { limit: 2 }), "LIMIT_EXCEEDED", 1, "sem/q");
    assert.equal(server.engine.getLock("sem/q")?.queueLength, 1);
    await closeAll(a, b, c, d);
  },
}, {
  name:
    "shared locks: each reader's lease runs on its own; a removed waiting reader leaves; a rule's lock-delay after an expired reader holds the writer back",
  async run(server) {
    server.service.setLockRules(parseLockRules("shared docs/** lock-delay=1s\n", "t.rules"));
    const [r1, r2, w, r3] = await Promise.all(Array.from({ length: 4 }, () => server.open()));
    const g1 = grantOf(await acquireKind(r1, 1, "docs/a", { mode: "shared", leaseMs: 300 }), 1);
    const g2 = grantOf(await acquireKind(r2, 1, "docs/a", { mode: "shared", leaseMs: 600 }), 1);
    expectQueued(await acquireKind(w, 1, "docs/a", { leaseMs: 5_000 }), 1, 1);
    expectQueued(await acquireKind(r3, 1, "docs/a", { mode: "shared" }), 1, 2);
    assert.equal(
      server.service.kickWaiter("docs/a", remoteOf(server, r3), TEST_ACTOR).status,
      "kicked",
    );
    expectError(await r3.next(), "CLOSED_BY_ADMIN", 0, "docs/a");
    server.advance(300);
    expectError(await r1.next(), "LEASE_EXPIRED", 1, "docs/a");
    assert.deepEqual(server.engine.getLock("docs/a")?.holders.map((h) => h.token), [g2.token]);
    await release(r2, 2, "docs/a", g2.token);
    // r1's expiry started a lock-delay of 1 s: the writer waits for it though nobody owns the lock.
    server.advance(999);
    assert.equal(server.engine.getLock("docs/a")?.holders.length, 0);
    server.advance(1);
    const gw = grantOf(await w.next(), 1);
    assert.ok(gw.token > g2.token && g1.token < g2.token);
    await closeAll(r1, r2, w, r3);
  },
}, {
  name:
    "leases, force-release and waiter removal on a semaphore: an expired slot passes on; force without a token ends every owner",
  async run(server) {
    const [a, b, c, d] = await Promise.all(Array.from({ length: 4 }, () => server.open()));
    const ga = grantOf(await acquireKind(a, 1, "sem/f", { limit: 2, leaseMs: 300 }), 1);
    const gb = grantOf(await acquireKind(b, 1, "sem/f", { limit: 2, leaseMs: 5_000 }), 1);
    expectQueued(await acquireKind(c, 1, "sem/f", { leaseMs: 5_000 }), 1, 1);
    expectQueued(await acquireKind(d, 1, "sem/f", { leaseMs: 5_000 }), 1, 2);
    server.advance(300);
    expectError(await a.next(), "LEASE_EXPIRED", 1, "sem/f");
    const gc = grantOf(await c.next(), 1);
    assert.equal(gc.slot, ga.slot, "the expired owner's slot");
    assert.equal(
      server.service.kickWaiter("sem/f", remoteOf(server, d), TEST_ACTOR).status,
      "kicked",
    );
    expectError(await d.next(), "CLOSED_BY_ADMIN", 0, "sem/f");
    assert.equal(await d.next(), null);
    const forced = server.service.forceRelease("sem/f", TEST_ACTOR);
    assert.equal(forced.status, "released");
    assert.deepEqual(
      forced.status === "released" ? forced.holders.map((h) => h.token) : [],
      [gb.token, gc.token],
    );
    for (const owner of [b, c]) {
      expectError(await owner.next(), "CLOSED_BY_ADMIN", 0, "sem/f");
      assert.equal(await owner.next(), null);
    }
    assert.equal(server.engine.getLock("sem/f"), undefined);
    await closeAll(a);
  },
}, {
  name: "a force-release with a token ends only that owner of a shared lock; the others keep it",
  async run(server) {
    const [a, b] = await Promise.all([server.open(), server.open()]);
    const ga = grantOf(await acquireKind(a, 1, "rw/f", { mode: "shared" }), 1);
    const gb = grantOf(await acquireKind(b, 1, "rw/f", { mode: "shared" }), 1);
    const forced = server.service.forceRelease("rw/f", TEST_ACTOR, gb.token);
    assert.equal(forced.status, "released");
    expectError(await b.next(), "CLOSED_BY_ADMIN", 0, "rw/f");
    assert.deepEqual(server.engine.getLock("rw/f")?.holders.map((h) => h.token), [ga.token]);
    await closeAll(a);
  },
}, {
  name:
    "a queued semaphore claim's wait bound passes: WAIT_TIMEOUT; a try-lock of a full one fails at once",
  async run(server) {
    const [a, b] = await Promise.all([server.open(), server.open()]);
    grantOf(await acquireKind(a, 1, "sem/w", { limit: 1 }), 1);
    expectError(await acquireKind(b, 1, "sem/w", { waitMs: 0 }), "WAIT_TIMEOUT", 1, "sem/w");
    expectQueued(await acquireKind(b, 2, "sem/w", { waitMs: 200 }), 2, 1);
    server.advance(200);
    expectError(await b.next(), "WAIT_TIMEOUT", 2, "sem/w");
    await closeAll(a, b);
  },
}, {
  name:
    "a rule's lock-delay holds a semaphore's slot after a non-graceful end, never after a release",
  async run(server) {
    server.service.setLockRules(parseLockRules("semaphore delay/* 2 lock-delay=1s\n", "t.rules"));
    const [a, b, c] = await Promise.all([server.open(), server.open(), server.open()]);
    const ga = grantOf(await acquireKind(a, 1, "delay/x", { leaseMs: 300 }), 1);
    const gb = grantOf(await acquireKind(b, 1, "delay/x", { leaseMs: 5_000 }), 1);
    assert.equal(ga.limit, 2);
    expectQueued(await acquireKind(c, 1, "delay/x", { leaseMs: 5_000 }), 1, 1);
    server.advance(300);
    expectError(await a.next(), "LEASE_EXPIRED", 1, "delay/x");
    server.advance(999);
    assert.equal(server.engine.getLock("delay/x")?.queueLength, 1, "held back by the lock-delay");
    server.advance(1);
    grantOf(await c.next(), 1);
    await release(b, 2, "delay/x", gb.token);
    assert.equal(server.engine.getLock("delay/x")?.delayedUntilMs, 0, "no delay after a release");
    await closeAll(a, b, c);
  },
}, {
  name:
    "a holder's value: ACQUIRE carries it, SET_VALUE replaces it (VALUE_SET), a stale token gets NOT_OWNER, a long one INVALID_ARGUMENT; audits carry length and SHA-256",
  async run(server) {
    const a = await server.open();
    const first = encoder.encode("10.0.0.7:8080");
    const g = grantOf(await acquireKind(a, 1, "svc/leader", { value: first }), 1);
    assert.deepEqual(server.engine.holderOf("svc/leader")?.value, first);
    const second = encoder.encode("10.0.0.8:8080");
    await a.send({
      type: "set_value",
      requestId: 2,
      token: g.token,
      name: "svc/leader",
      value: second,
    });
    assert.deepEqual(await a.next(), { type: "value_set", requestId: 2, name: "svc/leader" });
    assert.deepEqual(server.engine.holderOf("svc/leader")?.value, second);
    await a.send({
      type: "set_value",
      requestId: 3,
      token: g.token + 1,
      name: "svc/leader",
      value: first,
    });
    expectError(await a.next(), "NOT_OWNER", 3, "svc/leader");
    const long = new Uint8Array(1025);
    await a.send({
      type: "set_value",
      requestId: 4,
      token: g.token,
      name: "svc/leader",
      value: long,
    });
    const tooLong = await a.next();
    expectError(tooLong, "INVALID_ARGUMENT", 4, "svc/leader");
    assert.match(errorMessage(tooLong), /1025 bytes, more than the server's limit of 1024/);
    expectError(await acquireKind(a, 5, "svc/other", { value: long }), "INVALID_ARGUMENT", 5);
    // An empty value clears it.
    await a.send({
      type: "set_value",
      requestId: 6,
      token: g.token,
      name: "svc/leader",
      value: new Uint8Array(0),
    });
    assert.equal((await a.next())?.type, "value_set");
    assert.equal(server.engine.holderOf("svc/leader")?.value, null);
    await release(a, 7, "svc/leader", g.token);
    const records = await auditCount(server, 4);
    const digest = async (bytes: Uint8Array<ArrayBuffer>) =>
      Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes.slice())))
        .map((b) => b.toString(16).padStart(2, "0")).join("");
    assert.deepEqual(
      records.slice(0, 4).map((r) => [r.event, r.value_bytes, r.value_sha256]),
      [
        ["acquire", first.length, await digest(first)],
        ["value_set", second.length, await digest(second)],
        ["value_set", 0, null],
        ["release", undefined, undefined],
      ],
    );
    assert.ok(!JSON.stringify(records).includes("10.0.0"), "the value itself is never audited");
    await a.close();
  },
}, {
  name: "a value ends with its ownership: the next holder starts with its own (or none)",
  async run(server) {
    const [a, b] = await Promise.all([server.open(), server.open()]);
    const ga = grantOf(await acquireKind(a, 1, "svc/v", { value: encoder.encode("a") }), 1);
    expectQueued(await acquireKind(b, 1, "svc/v", { value: encoder.encode("b") }), 1, 1);
    await release(a, 2, "svc/v", ga.token);
    grantOf(await b.next(), 1);
    assert.deepEqual(server.engine.holderOf("svc/v")?.value, encoder.encode("b"));
    await closeAll(a, b);
  },
}];

/** The remote address the server sees for `client` (for a waiter removal). */
function remoteOf(
  server: { engine: { sessionPeer(id: number): { remoteAddr: string } | undefined } },
  client: ContractClient,
): string {
  return server.engine.sessionPeer(client.sessionId)?.remoteAddr ?? "";
}
