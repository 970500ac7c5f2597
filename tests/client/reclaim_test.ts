/**
 * Protocol version 2 in the TypeScript client, against scripted peers on 127.0.0.1:0
 * (tests/helpers/hostile_server.ts; the Python client's tests/test_reclaim.py has the same
 * cases): the fallback to version 1, GOODBYE, the first connect over several addresses, and the
 * reclaim state machine of docs/protocol.md ("Reclaiming after a fail-over"): which endings carry
 * claims over, RESUME and RECLAIM before any new ACQUIRE, a re-confirmation with the claim's own
 * token, CLAIM_VOID, the local deadline while reclaiming, `suspend`, the reclaim window.
 *
 * A "leader" here is a scripted server with a term above 0 that takes reclaims; killing it ends
 * its connections (EOF) and refuses new ones.
 */
import assert from "node:assert/strict";
import { connect, ConnectionError, type Lock, LockdError } from "../../mod.ts";
import type { LockLostError } from "../../src/client/errors.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { encodeFrame } from "../../src/wire/frame.ts";
import { FrameReader } from "../../src/wire/frame_reader.ts";
import type {
  Acquire,
  Acquired,
  ClientMessage,
  Queued,
  Reclaim,
  ServerMessage,
} from "../../src/wire/messages.ts";
import {
  GOOD_WELCOME_V2,
  type HostileConn,
  type HostileScript,
  HostileServer,
} from "../helpers/hostile_server.ts";

const TOKEN = 1_795_426_718_504_001;
const ticket = (first: number) => Uint8Array.from({ length: 16 }, (_, i) => first + i);
const TICKET_A = ticket(1);
const TICKET_B = ticket(101);
const TICKET_Q = ticket(201);
const TICKET_Q2 = ticket(221);
const WINDOW_MS = 5_000;

type Script = (conn: HostileConn, message: ClientMessage) => void;

function granted(m: Acquire | Reclaim, token = TOKEN, t: Uint8Array = TICKET_A): Acquired {
  return {
    type: "acquired",
    requestId: m.requestId,
    name: m.name,
    token,
    leaseMs: m.leaseMs || 15_000,
    ticket: t,
  };
}

function queued(m: Acquire | Reclaim, order: [number, number], t: Uint8Array): Queued {
  return {
    type: "queued",
    requestId: m.requestId,
    name: m.name,
    position: 1,
    orderTerm: order[0],
    orderSeq: order[1],
    ticket: t,
  };
}

function error(requestId: number, code: number, name: string, message: string): ServerMessage {
  return { type: "error", requestId, code, name, message };
}

/** Answers a HEARTBEAT, and a RELEASE of an owned lock (true when it was one of them). */
function acks(conn: HostileConn, m: ClientMessage): boolean {
  if (m.type === "heartbeat") {
    conn.send({ type: "heartbeat_ack", requestId: m.requestId, renewed: 0 });
    return true;
  }
  if (m.type === "release" && m.token !== 0) {
    conn.send({ type: "released", requestId: m.requestId, name: m.name });
    return true;
  }
  return false;
}

/** Term 7: grants every lock but "y", which it queues (order 7/1042); version 1: no tickets. */
const leaderA: Script = (conn, m) => {
  if (acks(conn, m) || m.type !== "acquire") return;
  const v2 = conn.version === 2;
  if (m.name === "y") {
    conn.send(
      v2
        ? queued(m, [7, 1042], TICKET_Q)
        : { type: "queued", requestId: m.requestId, name: m.name, position: 1 },
    );
  } else conn.send(v2 ? granted(m) : { ...granted(m), ticket: undefined });
};

/** A successor that keeps every claim: RESUMED reclaim, owned kept with TICKET_B, queued queued. */
const keeper: Script = (conn, m) => {
  if (acks(conn, m)) return;
  if (m.type === "resume") {
    conn.send({ type: "resumed", requestId: m.requestId, outcome: "reclaim", windowLeftMs: 4_000 });
  } else if (m.type === "reclaim") {
    conn.send({ ...granted(m, m.token, TICKET_B), leaseMs: 10_000 });
  }
};

/** A scripted version-2 server of `term` that takes reclaims for `windowMs`. */
function leader(
  term: number,
  request: Script,
  options: {
    windowMs?: number;
    holdHelloMs?: number;
    versions?: number[];
    valueBytesMax?: number;
  } = {},
): HostileServer {
  const script: HostileScript = {
    versions: options.versions ?? [1, 2],
    hello: (conn) => {
      const welcome = {
        ...GOOD_WELCOME_V2,
        term,
        sessionId: conn.index,
        reclaimWindowMs: options.windowMs ?? WINDOW_MS,
        valueBytesMax: options.valueBytesMax ?? 0,
      };
      if (conn.version === 1) {
        conn.send({ ...welcome, version: 1, term: 0, reclaimWindowMs: 0, valueBytesMax: 0 });
      } else if (options.holdHelloMs) setTimeout(() => conn.send(welcome), options.holdHelloMs);
      else conn.send(welcome);
    },
    request,
  };
  return new HostileServer(script);
}

/** What a server received, HELLO and HEARTBEAT left out (of one connection, if given). */
function requests(server: HostileServer, conn?: number): ClientMessage[] {
  return server.received
    .filter((r) => conn === undefined || r.conn === conn)
    .map((r) => r.message)
    .filter((m) => m.type !== "hello" && m.type !== "heartbeat");
}

/** No RECLAIM, and a RESUME (if any) announcing none: it only names the session that ended. */
function assertNothingReclaimed(server: HostileServer): void {
  assert.deepEqual(server.sent("reclaim"), []);
  assert.ok(server.sent("resume").every((m) => m.claims === 0));
}

function lostReason(lock: Lock): string | undefined {
  return lock.lost.aborted ? (lock.lost.reason as LockLostError).reason : undefined;
}

/** Resolves when `check` holds (polling); fails after `timeoutMs`. */
async function until(check: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`Timed out waiting for: ${what}`);
    await sleep(5);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A loopback address nothing listens on. */
function deadAddr(): string {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const addr = `127.0.0.1:${listener.addr.port}`;
  listener.close();
  return addr;
}

/** A request left running; its outcome (often "the client is closed") is ignored. */
function background<T>(promise: Promise<T>): Promise<T | null> {
  return promise.catch(() => null);
}

// ---- versions, GOODBYE, the first connect ------------------------------------------------

Deno.test("version 2: HELLO asks for 2 and falls back to 1 at a server of before version 2; a version-1 session ends without GOODBYE", async () => {
  await using server = leader(0, leaderA, { versions: [1] });
  const client = await connect({ addr: server.addr });
  assert.equal(client.protocolVersion, 1);
  const lock = await client.acquire("x");
  assert.equal(lock.token, TOKEN);
  await client.close();
  assert.deepEqual(server.sent("hello").map((h) => h.version), [2, 1]);
  assert.equal(lostReason(lock), "disconnected");
  assert.deepEqual(server.sent("goodbye"), []);
});

Deno.test("version 2: the fallback to version 1 stays within the one connect bound", async () => {
  // Each HELLO is answered after 0.4 s: the refusal of version 2, then the WELCOME of version 1
  // would come 0.8 s after the start, past the 0.6 s bound of the one attempt.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const hellos: number[] = [];
  const conns: Deno.Conn[] = [];
  const timers = new Set<ReturnType<typeof setTimeout>>();
  const serving = (async () => {
    for await (const conn of listener) {
      conns.push(conn);
      void (async () => {
        const reader = new FrameReader();
        const buffer = new Uint8Array(4096);
        try {
          for (let n = await conn.read(buffer); n !== null; n = await conn.read(buffer)) {
            reader.push(buffer.subarray(0, n));
            for (let m = reader.next(); m !== null; m = reader.next()) {
              if (m.type !== "hello") continue;
              hellos.push(m.version);
              const answer: ServerMessage = m.version === 2
                ? error(0, WIRE_CODES.UNSUPPORTED_VERSION.code, "", "version 2 is not supported")
                : { ...GOOD_WELCOME_V2, version: 1, term: 0, reclaimWindowMs: 0 };
              const timer = setTimeout(() => {
                timers.delete(timer);
                conn.write(encodeFrame(answer)).catch(() => {});
              }, 400);
              timers.add(timer);
            }
          }
        } catch {
          // closed
        }
      })();
    }
  })();
  try {
    const started = performance.now();
    await assert.rejects(
      connect({ addr: `127.0.0.1:${listener.addr.port}`, connectTimeoutMs: 600 }),
      /no WELCOME within 600 ms/,
    );
    assert.ok(performance.now() - started < 750, "within the one bound");
    assert.deepEqual(hellos, [2, 1]);
  } finally {
    for (const timer of timers) clearTimeout(timer);
    listener.close();
    for (const conn of conns) {
      try {
        conn.close();
      } catch {
        // closed by the client
      }
    }
    await serving.catch(() => {});
  }
});

Deno.test("version 2: close() says GOODBYE after everything else, and the locks are gone", async () => {
  await using server = leader(0, leaderA);
  const client = await connect({ addr: server.addr });
  assert.equal(client.protocolVersion, 2);
  const lock = await client.acquire("x");
  await client.close();
  await until(() => server.sent("goodbye").length === 1, "GOODBYE arrived");
  assert.equal(server.received.at(-1)?.message.type, "goodbye");
  assert.equal(lostReason(lock), "disconnected");
  assert.deepEqual(server.sent("hello").map((h) => h.version), [2]);
});

Deno.test("first connect: over several addresses it goes on until its bound while no node serves yet", async () => {
  const started = performance.now();
  await using server = new HostileServer({
    versions: [1, 2],
    // No leader for 0.8 s (an election after the leader died), then this node serves.
    hello: (conn) =>
      conn.send(
        performance.now() - started < 800
          ? error(0, WIRE_CODES.NOT_LEADER.code, "", "no leader yet")
          : { ...GOOD_WELCOME_V2, sessionId: conn.index },
      ),
    request: leaderA,
  });
  await using client = await connect({ addrs: [deadAddr(), server.addr], connectTimeoutMs: 4_000 });
  assert.ok(performance.now() - started >= 800);
  assert.equal((await client.acquire("x")).token, TOKEN);
  assert.ok(server.connections > 1, "asked again after NOT_LEADER");
});

Deno.test("first connect: over several addresses it fails after its bound when no node serves", async () => {
  await using server = new HostileServer({
    versions: [1, 2],
    hello: (conn) => conn.send(error(0, WIRE_CODES.NOT_LEADER.code, "", "no leader yet")),
  });
  const started = performance.now();
  await assert.rejects(
    connect({ addrs: [deadAddr(), server.addr], connectTimeoutMs: 700 }),
    (e: unknown) => {
      assert.ok(e instanceof ConnectionError || e instanceof LockdError, String(e));
      assert.match(
        (e as Error).message,
        /no leader yet|NOT_LEADER|not the leader|connection refused/,
      );
      return true;
    },
  );
  const elapsedMs = performance.now() - started;
  assert.ok(elapsedMs >= 650 && elapsedMs < 2_000, `${elapsedMs} ms`);
  assert.ok(server.connections > 2, `${server.connections} connections`);
});

Deno.test("first connect: a redirect the client may not follow fails it at once", async () => {
  await using server = new HostileServer({
    versions: [1, 2],
    hello: (conn) => conn.send(error(0, WIRE_CODES.NOT_LEADER.code, "127.0.0.1:1", "standby")),
  });
  const started = performance.now();
  await assert.rejects(
    connect({ addrs: [server.addr, deadAddr()], connectTimeoutMs: 5_000 }),
    /which is not in the address list/,
  );
  assert.ok(performance.now() - started < 1_000);
  assert.equal(server.connections, 1);
});

// ---- carrying claims over ------------------------------------------------------------------

Deno.test("reclaim: after a leader crash an owned lock stays held and is reclaimed with its token, a waiter with its place, before any new ACQUIRE", async () => {
  await using a = leader(7, leaderA);
  await using b = leader(8, (conn, m) => {
    if (acks(conn, m)) return;
    if (m.type === "resume") {
      conn.send({
        type: "resumed",
        requestId: m.requestId,
        outcome: "reclaim",
        windowLeftMs: 4_000,
      });
    } else if (m.type === "reclaim" && m.kind === "owned") {
      conn.send({ ...granted(m, m.token, TICKET_B), leaseMs: 12_000 });
    } else if (m.type === "reclaim") {
      conn.send(queued(m, [m.orderTerm, m.orderSeq], TICKET_Q2), granted(m, TOKEN + 9, TICKET_B));
    } else if (m.type === "acquire") conn.send(granted(m, TOKEN + 10, TICKET_B));
  });
  const client = await connect({ addrs: [a.addr, b.addr] });
  const lock = await client.acquire("x", { leaseMs: 10_000 });
  const waiting = client.acquire("y", { leaseMs: 10_000, waitMs: 60_000 });
  await until(() => a.sent("acquire").some((m) => m.name === "y"), "y sent");
  await sleep(50); // its QUEUED arrives
  a.kill();
  await until(() => client.sessionId === 0 || b.connections > 0, "connection lost");
  assert.equal(lock.state, "held", "held while it is carried over (no event)");
  const late = await client.acquire("z");
  const y = await waiting;
  assert.deepEqual([lock.token, lock.state, lostReason(lock), lock.leaseMs], [
    TOKEN,
    "held",
    undefined,
    12_000,
  ]);
  assert.deepEqual([y.name, y.token, late.token], ["y", TOKEN + 9, TOKEN + 10]);
  await client.close();
  const [resume, owned, waits, acquire] = requests(b, 1);
  assert.deepEqual(resume, { ...resume, type: "resume", prevTerm: 7, prevSessionId: 1, claims: 2 });
  assert.deepEqual(owned, {
    ...owned,
    type: "reclaim",
    kind: "owned",
    token: TOKEN,
    orderTerm: 0,
    orderSeq: 0,
    leaseMs: 10_000,
    waitMs: 0,
    ticket: TICKET_A,
    mode: "exclusive",
    limit: 1,
    slot: 0,
    name: "x",
  });
  assert.ok(waits.type === "reclaim");
  assert.deepEqual(
    [waits.kind, waits.name, waits.token, waits.orderTerm, waits.orderSeq, waits.leaseMs],
    ["queued", "y", 0, 7, 1042, 10_000],
  );
  assert.deepEqual([waits.ticket, waits.limit], [TICKET_Q, 1]);
  assert.ok(waits.waitMs > 50_000 && waits.waitMs <= 60_000, String(waits.waitMs));
  assert.deepEqual([acquire.type, "name" in acquire && acquire.name], ["acquire", "z"]);
  assert.equal(requests(b, 1).at(-1)?.type, "goodbye");
});

Deno.test("reclaim: a double fail-over reclaims with the tickets of the second leader", async () => {
  const reclaimer = (t: Uint8Array): Script => (conn, m) => {
    if (acks(conn, m)) return;
    if (m.type === "resume") {
      conn.send({
        type: "resumed",
        requestId: m.requestId,
        outcome: "reclaim",
        windowLeftMs: 4_000,
      });
    } else if (m.type === "reclaim") conn.send({ ...granted(m, m.token, t), leaseMs: 10_000 });
  };
  await using a = leader(7, leaderA);
  await using b = leader(8, reclaimer(TICKET_B));
  await using c = leader(9, reclaimer(TICKET_Q));
  await using client = await connect({ addrs: [a.addr, b.addr, c.addr] });
  const lock = await client.acquire("x", { leaseMs: 10_000 });
  a.kill();
  await until(() => b.sent("reclaim").length > 0, "reclaimed at B");
  await sleep(50); // B's ACQUIRED arrives
  b.kill();
  await until(() => c.sent("reclaim").length > 0, "reclaimed at C");
  await sleep(50);
  assert.deepEqual([lock.state, lock.token], ["held", TOKEN]);
  const [resume, reclaim] = requests(c, 1);
  assert.ok(resume.type === "resume" && reclaim.type === "reclaim");
  assert.deepEqual([resume.prevTerm, resume.prevSessionId, resume.claims], [8, 1, 1]);
  assert.deepEqual([reclaim.token, reclaim.ticket], [TOKEN, TICKET_B]);
});

Deno.test("reclaim: a value longer than the new leader takes is left behind, not the lock: the RECLAIMs go without it, onValueDropped says so, the lock's value reads empty; a shorter value travels", async () => {
  const long = "v".repeat(40);
  await using a = leader(7, leaderA, { valueBytesMax: 64 });
  await using b = leader(8, (conn, m) => {
    if (acks(conn, m)) return;
    if (m.type === "resume") {
      conn.send({
        type: "resumed",
        requestId: m.requestId,
        outcome: "reclaim",
        windowLeftMs: 4_000,
      });
    } else if (m.type === "reclaim" && m.value.length > 16) {
      // What lockd answers a value over its limit: the claim would be lost for its value.
      conn.send(error(m.requestId, WIRE_CODES.INVALID_ARGUMENT.code, m.name, "value too long"));
    } else if (m.type === "reclaim" && m.kind === "owned") {
      conn.send({ ...granted(m, m.token, TICKET_B), leaseMs: 10_000 });
    } else if (m.type === "reclaim") {
      conn.send(queued(m, [m.orderTerm, m.orderSeq], TICKET_Q2), granted(m, TOKEN + 9, TICKET_B));
    }
  }, { valueBytesMax: 16 });
  const dropped: [string, number, number][] = [];
  await using client = await connect({
    addrs: [a.addr, b.addr],
    onValueDropped: (name, valueBytes, valueBytesMax) => {
      dropped.push([name, valueBytes, valueBytesMax]);
      throw new Error("an application's callback that throws is ignored");
    },
  });
  const lock = await client.acquire("x", { leaseMs: 10_000, value: long });
  const short = await client.acquire("s", { leaseMs: 10_000, value: "addr:1" });
  const waiting = client.acquire("y", { leaseMs: 10_000, waitMs: 60_000, value: long });
  await until(() => a.sent("acquire").some((m) => m.name === "y"), "y sent");
  await sleep(50); // its QUEUED arrives
  assert.equal(new TextDecoder().decode(lock.value), long);
  a.kill();
  const y = await waiting;
  await until(() => b.sent("reclaim").length === 3, "three RECLAIMs at B");
  await sleep(50); // B's answers arrive
  const values = b.sent("reclaim").map((m) => [m.name, new TextDecoder().decode(m.value)]);
  assert.deepEqual(values, [["x", ""], ["s", "addr:1"], ["y", ""]]);
  assert.deepEqual(dropped, [["x", 40, 16], ["y", 40, 16]]);
  assert.deepEqual([lock.state, lock.token, lostReason(lock), lock.value.length], [
    "held",
    TOKEN,
    undefined,
    0,
  ]);
  assert.deepEqual([short.state, new TextDecoder().decode(short.value)], ["held", "addr:1"]);
  assert.deepEqual([y.token, y.value.length], [TOKEN + 9, 0]);
});

Deno.test("reclaim: claims no RESUME can carry rejoin the tail, after the RECLAIMs of the one it carries", async () => {
  await using a = leader(7, leaderA);
  // B takes the RESUME, never answers the queued RECLAIM of "y", grants "z".
  await using b = leader(8, (conn, m) => {
    if (acks(conn, m)) return;
    if (m.type === "resume") {
      conn.send({
        type: "resumed",
        requestId: m.requestId,
        outcome: "reclaim",
        windowLeftMs: 4_000,
      });
    } else if (m.type === "acquire") conn.send(granted(m, TOKEN + 3, TICKET_B));
  });
  await using c = leader(9, (conn, m) => void acks(conn, m));
  await using client = await connect({ addrs: [a.addr, b.addr, c.addr] });
  void background(client.acquire("y", { leaseMs: 10_000 }));
  await until(() => a.sent("acquire").length > 0, "y queued at A");
  await sleep(50);
  a.kill();
  await until(() => b.sent("reclaim").length > 0, "y reclaimed at B");
  const z = await client.acquire("z", { leaseMs: 10_000 });
  b.kill();
  await until(() => requests(c, 1).length >= 3, "at C");
  assert.equal(z.state, "held");
  // One RESUME per connection: the newest lost connection's ("z", ticket of B); the claim still
  // waiting on A's ticket joins the tail, after the RECLAIMs.
  const [resume, reclaim, acquire] = requests(c, 1);
  assert.ok(resume.type === "resume" && reclaim.type === "reclaim");
  assert.deepEqual([resume.prevTerm, resume.claims], [8, 1]);
  assert.deepEqual([reclaim.kind, reclaim.name, reclaim.ticket], ["owned", "z", TICKET_B]);
  assert.deepEqual([acquire.type, "name" in acquire && acquire.name], ["acquire", "y"]);
});

Deno.test("reclaim: a reconnect with nothing to carry over still resumes the session that ended (0 claims)", async () => {
  await using a = leader(7, leaderA);
  await using b = leader(8, leaderA);
  await using client = await connect({ addrs: [a.addr, b.addr] });
  a.kill();
  await until(() => b.connections === 1 && client.sessionId !== 0, "at B");
  assert.equal((await client.acquire("z")).token, TOKEN);
  const [resume, acquire] = requests(b, 1);
  assert.deepEqual(resume, { ...resume, type: "resume", prevTerm: 7, prevSessionId: 1, claims: 0 });
  assert.deepEqual([acquire.type, "name" in acquire && acquire.name], ["acquire", "z"]);
});

Deno.test("reclaim: CLAIM_VOID loses the lock with reason failover, the error as its cause; the session goes on", async () => {
  await using a = leader(7, leaderA);
  await using b = leader(8, (conn, m) => {
    if (acks(conn, m)) return;
    if (m.type === "resume") {
      conn.send({ type: "resumed", requestId: m.requestId, outcome: "none", windowLeftMs: 0 });
    } else if (m.type === "reclaim") {
      conn.send(error(m.requestId, WIRE_CODES.CLAIM_VOID.code, m.name, "another holder"));
    }
  });
  await using client = await connect({ addrs: [a.addr, b.addr] });
  const lock = await client.acquire("x", { leaseMs: 10_000 });
  a.kill();
  await until(() => lock.lost.aborted, "lost");
  const lost = lock.lost.reason as LockLostError;
  assert.equal(lost.reason, "failover");
  assert.match(lost.message, /could not be carried over/);
  assert.ok(lost.cause instanceof LockdError);
  assert.deepEqual([lost.cause.codeName, lost.cause.retryable, lost.cause.lockName], [
    "CLAIM_VOID",
    false,
    "x",
  ]);
  assert.match(lost.cause.message, /another holder/);
  assert.notEqual(client.sessionId, 0, "CLAIM_VOID keeps the session");
  assert.equal(client.protocolErrors, 0);
});

Deno.test("reclaim: a lock whose deadline passes before the reclaim's answer is lost (lease_unconfirmed); a late grant is handed back", async () => {
  const answers: { conn: HostileConn; reclaim: Reclaim }[] = [];
  await using a = leader(7, leaderA);
  await using b = leader(8, (conn, m) => {
    if (acks(conn, m)) return;
    if (m.type === "resume") {
      conn.send({
        type: "resumed",
        requestId: m.requestId,
        outcome: "reclaim",
        windowLeftMs: 4_000,
      });
    } else if (m.type === "reclaim") answers.push({ conn, reclaim: m });
  });
  await using client = await connect({ addrs: [a.addr, b.addr] });
  const lock = await client.acquire("x", { leaseMs: 400 });
  a.kill();
  await until(() => lock.lost.aborted, "lost");
  assert.equal(lostReason(lock), "lease_unconfirmed");
  await until(() => answers.length > 0, "the RECLAIM went out before the deadline");
  const { conn, reclaim } = answers[0];
  conn.send({ ...granted(reclaim, reclaim.token, TICKET_B), leaseMs: 400 });
  await until(
    () => b.sent("release").some((m) => m.token === TOKEN),
    "the late re-confirmation was handed back",
  );
  assert.equal(lostReason(lock), "lease_unconfirmed", "never revived");
  assert.equal(client.protocolErrors, 0);
});

Deno.test("reclaim: a lock lost before the next connection is not reclaimed", async () => {
  await using a = leader(7, leaderA);
  await using b = leader(8, (conn, m) => void acks(conn, m), { holdHelloMs: 600 });
  await using client = await connect({ addrs: [a.addr, b.addr] });
  const lock = await client.acquire("x", { leaseMs: 300 });
  a.kill();
  await until(() => lock.lost.aborted, "lost before B answers the HELLO");
  assert.equal(lostReason(lock), "lease_unconfirmed");
  await until(() => client.sessionId !== 0, "at B");
  await sleep(50);
  assertNothingReclaimed(b);
});

Deno.test("reclaim: a suspend lock is suspended past its deadline and held again when reclaimed (suspend and resume events)", async () => {
  const answers: { conn: HostileConn; reclaim: Reclaim }[] = [];
  await using a = leader(7, leaderA);
  await using b = leader(8, (conn, m) => {
    if (acks(conn, m)) return;
    if (m.type === "resume") {
      conn.send({
        type: "resumed",
        requestId: m.requestId,
        outcome: "reclaim",
        windowLeftMs: 4_000,
      });
    } else if (m.type === "reclaim") answers.push({ conn, reclaim: m });
  });
  await using client = await connect({ addrs: [a.addr, b.addr] });
  const lock = await client.acquire("x", { leaseMs: 400, suspend: true });
  const heard: string[] = [];
  lock.addEventListener("suspend", () => heard.push("suspend"));
  lock.addEventListener("resume", () => heard.push("resume"));
  assert.equal(lock.suspended, false);
  a.kill();
  await until(() => lock.suspended, "suspended at its deadline");
  assert.deepEqual([heard, lock.state, lock.lost.aborted], [["suspend"], "suspended", false]);
  await until(() => answers.length > 0, "RECLAIM sent");
  const { conn, reclaim } = answers[0];
  assert.deepEqual([reclaim.kind, reclaim.token], ["owned", TOKEN]);
  conn.send({ ...granted(reclaim, reclaim.token, TICKET_B), leaseMs: 400 });
  await until(() => !lock.suspended, "held again");
  assert.deepEqual([heard, lock.state, lock.token], [["suspend", "resume"], "held", TOKEN]);
  await sleep(600); // held as any lock: heartbeats keep it
  assert.equal(lock.state, "held");
  await lock.release();
  assert.equal(lock.state, "released");
});

Deno.test("reclaim: a suspended lock is lost with failover on CLAIM_VOID", async () => {
  const answers: { conn: HostileConn; reclaim: Reclaim }[] = [];
  await using a = leader(7, leaderA);
  await using b = leader(8, (conn, m) => {
    if (acks(conn, m)) return;
    if (m.type === "resume") {
      conn.send({
        type: "resumed",
        requestId: m.requestId,
        outcome: "reclaim",
        windowLeftMs: 4_000,
      });
    } else if (m.type === "reclaim") answers.push({ conn, reclaim: m });
  });
  await using client = await connect({ addrs: [a.addr, b.addr] });
  const lock = await client.acquire("x", { leaseMs: 300, suspend: true });
  a.kill();
  await until(() => lock.suspended && answers.length > 0, "suspended, RECLAIM sent");
  const { conn, reclaim } = answers[0];
  conn.send(error(reclaim.requestId, WIRE_CODES.CLAIM_VOID.code, "x", "floor"));
  await until(() => lock.lost.aborted, "lost");
  assert.deepEqual([lostReason(lock), lock.suspended, lock.state], ["failover", false, "lost"]);
});

Deno.test("reclaim: a suspended lock is lost with failover when the reclaim window ends", async () => {
  await using a = leader(7, leaderA, { windowMs: 900 });
  await using b = leader(8, (conn, m) => void acks(conn, m));
  await using client = await connect({ addrs: [a.addr, b.addr] });
  const lock = await client.acquire("x", { leaseMs: 300, suspend: true });
  a.kill();
  const killedMs = performance.now();
  await until(() => lock.suspended, "suspended");
  await until(() => lock.lost.aborted, "lost");
  assert.equal(lostReason(lock), "failover");
  assert.ok(performance.now() - killedMs >= 850, "not before A's reclaimWindowMs");
  assert.ok(b.sent("reclaim").length > 0);
});

Deno.test("reclaim: a claim whose RELEASE was sent is never reclaimed", async () => {
  await using a = leader(7, (conn, m) => {
    if (m.type !== "release") leaderA(conn, m); // RELEASE: no answer, the leader dies first
  });
  await using b = leader(8, keeper);
  await using client = await connect({ addrs: [a.addr, b.addr] });
  const kept = await client.acquire("kept", { leaseMs: 10_000 });
  const gone = await client.acquire("gone", { leaseMs: 10_000 });
  const releasing = gone.release();
  await until(() => a.sent("release").length > 0, "RELEASE sent");
  assert.equal(gone.state, "releasing");
  a.kill();
  await releasing; // the session is gone, and so is the ownership
  assert.equal(gone.state, "released");
  await until(() => b.sent("reclaim").length > 0, "reclaims sent");
  await sleep(50);
  assert.equal(kept.state, "held");
  assert.deepEqual(b.sent("reclaim").map((m) => m.name), ["kept"]);
  assert.equal(b.sent("resume")[0].claims, 1);
});

Deno.test("reclaim: a lock released while carried over is done at once, then reclaimed and handed back", async () => {
  await using a = leader(7, leaderA);
  await using b = leader(8, keeper, { holdHelloMs: 300 });
  await using client = await connect({ addrs: [a.addr, b.addr] });
  const gone = await client.acquire("gone", { leaseMs: 10_000 });
  a.kill();
  await until(() => client.sessionId === 0, "connection lost");
  await gone.release(); // no connection to send RELEASE on: done at once
  assert.deepEqual([gone.state, gone.lost.aborted], ["released", false]);
  await until(
    () => b.sent("release").some((m) => m.token === TOKEN),
    "reclaimed, then released",
  );
  assert.deepEqual(b.sent("reclaim").map((m) => m.name), ["gone"]);
});

/**
 * A successor that owns what it keeps, per connection, as the server does: a kept owned RECLAIM
 * (or `void` when its name is listed: CLAIM_VOID) makes the session the owner, a RELEASE ends it,
 * and an ACQUIRE of a lock the session owns gets DUPLICATE_CLAIM.
 */
function owningSuccessor(voids: string[] = []): Script {
  const owned = new Map<number, Set<string>>();
  return (conn, m) => {
    const mine = owned.get(conn.index) ?? new Set<string>();
    owned.set(conn.index, mine);
    if (m.type === "release" && m.token !== 0) mine.delete(m.name);
    if (acks(conn, m)) return;
    if (m.type === "resume") {
      conn.send({
        type: "resumed",
        requestId: m.requestId,
        outcome: "reclaim",
        windowLeftMs: 4_000,
      });
    } else if (m.type === "reclaim" && voids.includes(m.name)) {
      conn.send(error(m.requestId, WIRE_CODES.CLAIM_VOID.code, m.name, "void"));
    } else if (m.type === "reclaim") {
      mine.add(m.name);
      conn.send({ ...granted(m, m.token, TICKET_B), leaseMs: 10_000 });
    } else if (m.type === "acquire" && mine.has(m.name)) {
      const text = `Cannot acquire lock "${m.name}": this session already owns it`;
      conn.send(error(m.requestId, WIRE_CODES.DUPLICATE_CLAIM.code, m.name, text));
    } else if (m.type === "acquire") {
      mine.add(m.name);
      conn.send(granted(m, TOKEN + 10, TICKET_B));
    }
  };
}

Deno.test("reclaim: a lock released while carried over and acquired again: the ACQUIRE waits until the RECLAIM hands it back (no DUPLICATE_CLAIM)", async () => {
  await using a = leader(7, leaderA);
  await using b = leader(8, owningSuccessor(), { holdHelloMs: 300 });
  await using client = await connect({ addrs: [a.addr, b.addr] });
  const gone = await client.acquire("x", { leaseMs: 10_000 });
  a.kill();
  await until(() => client.sessionId === 0, "connection lost");
  await gone.release(); // done at once: its RECLAIM hands it back
  const again = await client.acquire("x", { leaseMs: 10_000 });
  assert.deepEqual([again.token, again.state, gone.state], [TOKEN + 10, "held", "released"]);
  const order = requests(b, 1).map((m) =>
    m.type === "release" ? `release ${m.token}` : "name" in m ? `${m.type} ${m.name}` : m.type
  );
  assert.deepEqual(order, ["resume", "reclaim x", `release ${TOKEN}`, "acquire x"]);
  assert.equal(client.protocolErrors, 0);
});

Deno.test("reclaim: an ACQUIRE held back for a lock let go of goes out at once when its RECLAIM is void; one of another name is not held", async () => {
  await using a = leader(7, leaderA);
  await using b = leader(8, owningSuccessor(["x"]), { holdHelloMs: 300 });
  await using client = await connect({ addrs: [a.addr, b.addr] });
  const gone = await client.acquire("x", { leaseMs: 10_000 });
  a.kill();
  await until(() => client.sessionId === 0, "connection lost");
  await gone.release();
  const [again, other] = await Promise.all([
    client.acquire("x", { leaseMs: 10_000 }),
    client.acquire("w", { leaseMs: 10_000 }),
  ]);
  assert.deepEqual([again.state, other.state, gone.state], ["held", "held", "released"]);
  const order = requests(b, 1).map((m) => "name" in m ? `${m.type} ${m.name}` : m.type);
  // "w" goes out with the RECLAIMs; "x" only after CLAIM_VOID answered its RECLAIM.
  assert.deepEqual(order, ["resume", "reclaim x", "acquire w", "acquire x"]);
  assert.equal(client.protocolErrors, 0);
});

Deno.test("reclaim: release() while the lock's RECLAIM is in flight waits for its answer, then releases", async () => {
  const answers: { conn: HostileConn; reclaim: Reclaim }[] = [];
  await using a = leader(7, leaderA);
  await using b = leader(8, (conn, m) => {
    if (acks(conn, m)) return;
    if (m.type === "resume") {
      conn.send({
        type: "resumed",
        requestId: m.requestId,
        outcome: "reclaim",
        windowLeftMs: 4_000,
      });
    } else if (m.type === "reclaim") answers.push({ conn, reclaim: m });
  });
  await using client = await connect({ addrs: [a.addr, b.addr] });
  const lock = await client.acquire("x", { leaseMs: 10_000 });
  a.kill();
  await until(() => answers.length > 0, "RECLAIM sent");
  let released = false;
  const releasing = lock.release().then(() => released = true);
  await sleep(50);
  assert.equal(released, false, "waits for the RECLAIM's answer");
  assert.equal(lock.state, "releasing");
  assert.deepEqual(b.sent("release"), [], "no RELEASE before it");
  const { conn, reclaim } = answers[0];
  conn.send({ ...granted(reclaim, reclaim.token, TICKET_B), leaseMs: 10_000 });
  await releasing; // on RELEASED
  assert.equal(lock.state, "released");
  assert.deepEqual(b.sent("release").map((m) => [m.name, m.token]), [["x", TOKEN]]);
  assert.deepEqual([client.protocolErrors, lock.lost.aborted], [0, false]);
});

Deno.test("reclaim: NOT_LEADER after WELCOME keeps the locks and follows the named leader at once", async () => {
  await using b = leader(8, keeper);
  await using a = leader(7, (conn, m) => {
    if (m.type === "acquire" && m.name === "x") conn.send(granted(m));
    else if (m.type === "acquire") {
      conn.send(error(0, WIRE_CODES.NOT_LEADER.code, b.addr, "this node hands over"));
    }
  });
  await using client = await connect({ addrs: [a.addr, b.addr] });
  const lock = await client.acquire("x", { leaseMs: 10_000 });
  void background(client.acquire("hand-over"));
  await until(() => b.sent("reclaim").length > 0, "reclaimed");
  await sleep(50);
  assert.deepEqual([lock.state, lock.lost.aborted], ["held", false]);
});

for (
  const [code, reason] of [["CLOSED_BY_ADMIN", "force"], ["IO_TIMEOUT", "io_timeout"]] as const
) {
  Deno.test(`reclaim: ${code} ends the locks (force or io_timeout) without a reclaim: ${reason}`, async () => {
    await using a = leader(7, (conn, m) => {
      if (m.type === "acquire" && m.name === "x") conn.send(granted(m));
      else if (m.type === "acquire" && m.name === "end") {
        conn.send(error(0, WIRE_CODES[code].code, "x", "ended by the server"));
      }
    });
    await using b = leader(8, leaderA);
    await using client = await connect({ addrs: [a.addr, b.addr] });
    const lock = await client.acquire("x", { leaseMs: 10_000 });
    void background(client.acquire("end"));
    await until(() => lock.lost.aborted, "lost");
    assert.equal(lostReason(lock), reason);
    await until(() => a.connections + b.connections > 1 && client.sessionId !== 0, "reconnected");
    await sleep(50);
    assertNothingReclaimed(a);
    assertNothingReclaimed(b);
  });
}

Deno.test("reclaim: without reclaim (option), a fail-over loses the locks and the waiter joins the tail", async () => {
  await using a = leader(7, leaderA);
  await using b = leader(8, leaderA);
  await using client = await connect({ addrs: [a.addr, b.addr], reclaim: false });
  assert.equal(client.protocolVersion, 2);
  const lock = await client.acquire("x", { leaseMs: 10_000 });
  void background(client.acquire("y", { leaseMs: 10_000 }));
  await until(() => a.sent("acquire").some((m) => m.name === "y"), "y at A");
  await sleep(50);
  a.kill();
  await until(() => lock.lost.aborted, "lost");
  assert.equal(lostReason(lock), "disconnected");
  await until(() => b.sent("acquire").some((m) => m.name === "y"), "y at B");
  assertNothingReclaimed(b);
});

Deno.test("reclaim: a new leader of before version 2 gets no reclaims; the lock is lost (failover)", async () => {
  await using a = leader(7, leaderA);
  await using b = leader(0, leaderA, { versions: [1] });
  await using client = await connect({ addrs: [a.addr, b.addr] });
  const lock = await client.acquire("x", { leaseMs: 10_000 });
  void background(client.acquire("y", { leaseMs: 10_000 }));
  await until(() => a.sent("acquire").some((m) => m.name === "y"), "y at A");
  await sleep(50);
  a.kill();
  await until(() => lock.lost.aborted, "lost");
  assert.deepEqual([lostReason(lock), client.protocolVersion], ["failover", 1]);
  await until(() => b.sent("acquire").some((m) => m.name === "y"), "y at B, at the tail");
  assertNothingReclaimed(b);
});

Deno.test("reclaim: a silent connection is given up, kept open until RESUMED, and its suspend lock moves", async () => {
  await using server = new HostileServer({
    versions: [1, 2],
    hello: (conn) =>
      conn.send({
        ...GOOD_WELCOME_V2,
        sessionId: conn.index,
        ioTimeoutMs: 600,
        reclaimWindowMs: WINDOW_MS,
      }),
    request: (conn, m) => {
      if (conn.index === 1) {
        if (m.type === "acquire") conn.send(granted(m)); // then nothing more: it went silent
        return;
      }
      if (acks(conn, m)) return;
      if (m.type === "resume") {
        conn.send({
          type: "resumed",
          requestId: m.requestId,
          outcome: "moved",
          windowLeftMs: 4_000,
        });
      } else if (m.type === "reclaim") conn.send(granted(m, m.token, TICKET_B));
    },
  });
  await using client = await connect({ addr: server.addr });
  const lock = await client.acquire("x", { leaseMs: 10_000, suspend: true });
  const heard: string[] = [];
  lock.addEventListener("suspend", () => heard.push("suspend"));
  lock.addEventListener("resume", () => heard.push("resume"));
  await until(() => heard.length === 2, "suspended, then moved and held again");
  assert.deepEqual([heard, lock.state, lock.token], [["suspend", "resume"], "held", TOKEN]);
  await until(() => server.sent("goodbye").length === 1, "GOODBYE on the old connection");
  // Kept open (unread) while the new connection resumed; then GOODBYE.
  const order = server.received.map((r) => `${r.conn}:${r.message.type}`);
  assert.ok(order.indexOf("2:reclaim") < order.indexOf("1:goodbye"), order.join(" "));
  const resume = server.sent("resume")[0];
  assert.deepEqual([resume.prevTerm, resume.prevSessionId, resume.claims], [0, 1, 1]);
});

Deno.test("reclaim: on a single node (term 0) an end of stream loses the locks", async () => {
  await using server = leader(0, leaderA);
  await using client = await connect({ addr: server.addr });
  const lock = await client.acquire("x", { leaseMs: 10_000 });
  server.kill();
  await until(() => lock.lost.aborted, "lost");
  assert.equal(lostReason(lock), "disconnected");
});
