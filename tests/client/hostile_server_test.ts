/**
 * The TypeScript client against servers that lie (docs/reliability.md, hostile input): replies
 * that do not fit their request, WELCOMEs out of bounds, NOT_LEADERs naming no address or an
 * address outside the list. Each is a protocol error or a failed node: the connection closes,
 * it is counted and reported, and the client goes on; never a wrong grant, an uncaught
 * exception, a frozen reconnect loop or a heartbeat storm. Real sockets on 127.0.0.1 port 0
 * (tests/helpers/hostile_server.ts), and manual time where the point is a count over time.
 */
import assert from "node:assert/strict";
import { connect, ConnectionError, LockdError, ServerProtocolError } from "../../mod.ts";
import type { Lock } from "../../mod.ts";
import { connectWith } from "../../src/client/client.ts";
import type { LockLostError } from "../../src/client/errors.ts";
import { parseLeaderAddress, redirectVerdict } from "../../src/client/redirect.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import type { Acquire, ServerMessage } from "../../src/wire/messages.ts";
import { certPem, clientTls, keyPem, serverTlsConfig } from "../fixtures/tls/certs.ts";
import { GOOD_WELCOME, HostileServer } from "../helpers/hostile_server.ts";
import {
  BAD_LEADERS,
  BAD_WELCOMES,
  error,
  grant,
  MISFITS,
  TOKEN,
} from "../helpers/hostile_scenarios.ts";
import { startTestServer } from "../helpers/start_server.ts";
import { FakeNetwork, settle } from "./fake_network.ts";

function lostReason(lock: Lock): string | undefined {
  return lock.lost.aborted ? (lock.lost.reason as LockLostError).reason : undefined;
}

/** Resolves when `check` holds (polling); fails after `timeoutMs`. */
async function until(check: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`Timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

// ---- replies that do not fit their request ----------------------------------------------

for (const misfit of MISFITS) {
  Deno.test(`hostile server: ${misfit.name} is a protocol error: the connection closes, it is counted and reported, nothing is granted wrongly`, async () => {
    let own: Acquire | null = null;
    await using server = new HostileServer({
      request: (conn, message) => {
        if (message.type !== "acquire") return;
        if (message.name === "own") {
          own = message;
          conn.send(grant(message));
        } else conn.send(...misfit.frames(message, own!));
      },
    });
    const reported: ServerProtocolError[] = [];
    await using client = await connect({
      addr: server.addr,
      reconnect: false,
      onProtocolError: (e) => reported.push(e),
    });
    const owned = await client.acquire("own", { leaseMs: 60_000 });
    const outcome = await client.acquire("a").then(
      (lock) => ({ lock, error: null }),
      (error: unknown) => ({ lock: null, error }),
    );
    if (misfit.grantsFirst) {
      assert.equal(outcome.lock?.name, "a");
      assert.equal(outcome.lock?.token, TOKEN, "the first, correct grant");
      await until(() => outcome.lock!.lost.aborted, "the lock is lost");
      assert.equal(lostReason(outcome.lock!), "disconnected");
    } else {
      assert.ok(outcome.error instanceof ConnectionError, String(outcome.error));
      assert.equal(outcome.lock, null, "no grant came of it");
    }
    assert.equal(lostReason(owned), "disconnected", "the session is over");
    assert.equal(client.protocolErrors, 1);
    assert.equal(reported.length, 1);
    assert.ok(reported[0] instanceof ServerProtocolError);
    assert.ok(reported[0] instanceof ConnectionError, "a connection error, for catch-alls");
    assert.equal(reported[0].addr, server.addr);
    assert.match(reported[0].message, /broke the protocol: .+; the connection was closed$/);
  });
}

Deno.test("hostile server: a grant that arrived before its ACQUIRE was sent is not taken for it", async () => {
  // The frames come with WELCOME, before the client has sent anything: they answer nothing.
  await using server = new HostileServer({
    hello: (conn) =>
      conn.send(
        { ...GOOD_WELCOME },
        ...[1, 2, 3, 4].map((requestId): ServerMessage => ({
          type: "acquired",
          requestId,
          name: "a",
          token: TOKEN,
          leaseMs: 15_000,
        })),
      ),
  });
  const reported: ServerProtocolError[] = [];
  await using client = await connect({
    addr: server.addr,
    reconnect: false,
    onProtocolError: (e) => reported.push(e),
  });
  await assert.rejects(client.acquire("a"), ConnectionError);
  assert.equal(client.protocolErrors, 1);
  assert.match(reported[0].message, /never sent or had its last answer to already/);
});

Deno.test("hostile server: a second HEARTBEAT_ACK for an acknowledged heartbeat closes the connection", async () => {
  const scheduler = new ManualScheduler();
  const net = new FakeNetwork(() => scheduler.monotonicMs());
  const acks: number[] = [];
  net.onRequest = (conn, message) => {
    if (message.type === "heartbeat") {
      acks.push(message.requestId);
      conn.send({ type: "heartbeat_ack", requestId: message.requestId, renewed: 0 });
    }
  };
  const client = await connectWith(
    { addr: "127.0.0.1:7400", scheduler, reconnect: false },
    { dial: net.dial },
  );
  scheduler.advance(10_000); // a heartbeat every 10 s (I/O timeout 30 s)
  await settle();
  assert.equal(acks.length, 1);
  assert.equal(client.protocolErrors, 0);
  net.last.send({ type: "heartbeat_ack", requestId: acks[0], renewed: 0 });
  await settle();
  assert.equal(client.protocolErrors, 1);
  assert.equal(net.last.closedByClient, true);
  await client.close();
});

// ---- WELCOME out of bounds ------------------------------------------------------------------

for (const [what, fields, message] of BAD_WELCOMES) {
  Deno.test(`hostile server: a WELCOME with ${what} fails connect() with a ServerProtocolError, and no heartbeat is sent`, async () => {
    await using server = new HostileServer({
      hello: (conn) => conn.send({ ...GOOD_WELCOME, ...fields }),
    });
    await assert.rejects(
      connect({ addr: server.addr, reconnect: false, connectTimeoutMs: 2_000 }),
      (error: unknown) => {
        assert.ok(error instanceof ServerProtocolError, String(error));
        assert.match(error.message, message);
        return true;
      },
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.deepEqual(server.sent("heartbeat"), []);
  });
}

Deno.test("hostile server: WELCOMEs with ioTimeoutMs 0 on reconnect cause no heartbeat storm and no reconnect storm", async () => {
  const scheduler = new ManualScheduler();
  const net = new FakeNetwork(() => scheduler.monotonicMs());
  const client = await connectWith(
    { addr: "127.0.0.1:7400", scheduler },
    { dial: net.dial, random: () => 0.5 },
  );
  let heartbeats = 0;
  net.onRequest = (_conn, message) => {
    if (message.type === "heartbeat") heartbeats++;
  };
  net.welcome = { ...net.welcome, ioTimeoutMs: 0 };
  net.last.close(); // the good session ends; every later WELCOME is out of bounds
  for (let ms = 0; ms < 4_000; ms += 10) {
    scheduler.advance(10);
    await settle();
  }
  assert.equal(heartbeats, 0);
  // Back-off: random 0.5 × min(5000, 50 × 2^n) → 25, 50, 100, ... ms between attempts.
  assert.ok(net.conns.length <= 9, `${net.conns.length} connections in 4 s`);
  await client.close();
});

Deno.test("hostile server: a node that welcomes and then breaks the protocol is redialled with growing back-off", async () => {
  const scheduler = new ManualScheduler();
  const net = new FakeNetwork(() => scheduler.monotonicMs());
  net.onRequest = (conn, message) => {
    if (message.type === "acquire") conn.send({ ...grant(message), name: "not-" + message.name });
  };
  const client = await connectWith(
    { addr: "127.0.0.1:7400", scheduler },
    { dial: net.dial, random: () => 0.5 },
  );
  const pending = client.acquire("a");
  pending.catch(() => {});
  for (let ms = 0; ms < 10_000; ms += 10) {
    scheduler.advance(10);
    await settle();
  }
  // 25, 50, 100, 200, 400, 800, 1600, 2500, 2500, ... ms: about 10 connections, not hundreds.
  assert.ok(net.conns.length <= 12, `${net.conns.length} connections in 10 s`);
  assert.equal(client.protocolErrors, net.conns.length);
  await client.close();
  await assert.rejects(pending, ConnectionError);
});

// ---- NOT_LEADER: bad names and the trust model of redirects -------------------------------

Deno.test("redirects: a leader address is a host:port of a DNS name, IPv4 or bracketed IPv6 and a port 1..65535", () => {
  for (const bad of BAD_LEADERS) assert.equal(parseLeaderAddress(bad), null, bad);
  assert.equal(parseLeaderAddress("Node-2.Example.org:7400"), "node-2.example.org:7400");
  assert.equal(parseLeaderAddress("10.0.0.7:7400"), "10.0.0.7:7400");
  assert.equal(parseLeaderAddress("[2001:DB8::7]:7400"), "[2001:db8::7]:7400");
  const list = ["10.0.0.7:7400", "Node-2.example.org:7400"];
  assert.deepEqual(redirectVerdict("node-2.EXAMPLE.org:7400", list, false), {
    follow: true,
    addr: "Node-2.example.org:7400",
  });
  assert.deepEqual(redirectVerdict("10.0.0.8:7400", list, false), {
    follow: false,
    why: "outside_list",
  });
  assert.deepEqual(redirectVerdict("10.0.0.8:7400", list, true), {
    follow: true,
    addr: "10.0.0.8:7400",
  });
  assert.deepEqual(redirectVerdict("", list, true), { follow: false, why: "no_leader" });
  assert.deepEqual(redirectVerdict("evil", list, true), { follow: false, why: "invalid" });
});

Deno.test("hostile server: a NOT_LEADER at HELLO naming no address fails that node with a typed error, never an uncaught exception", async () => {
  for (const name of BAD_LEADERS) {
    await using standby = new HostileServer({
      hello: (conn) => conn.send(error(0, WIRE_CODES.NOT_LEADER.code, name)),
    });
    await assert.rejects(connect({ addr: standby.addr, reconnect: false }), (e: unknown) => {
      assert.ok(e instanceof ServerProtocolError, `${JSON.stringify(name)}: ${e}`);
      assert.match(e.message, /not a host:port address \(that node counts as failed\)/);
      assert.ok(e.cause instanceof LockdError && e.cause.codeName === "NOT_LEADER");
      assert.ok(!e.message.includes("\u0000") && !e.message.includes("\u202e"), "quoted, not raw");
      return true;
    });
  }
});

Deno.test("hostile server: with a bad NOT_LEADER at HELLO the next address of the list is tried", async () => {
  await using good = new HostileServer({
    request: (c, m) => m.type === "acquire" && c.send(grant(m)),
  });
  for (const name of ["evil", "evil:99999", "[::1"]) {
    await using standby = new HostileServer({
      hello: (conn) => conn.send(error(0, WIRE_CODES.NOT_LEADER.code, name)),
    });
    await using client = await connect({ addrs: [standby.addr, good.addr], reconnect: false });
    const lock = await client.acquire("x");
    assert.equal(lock.token, TOKEN);
  }
});

Deno.test("hostile server: a bad NOT_LEADER after WELCOME loses the lock (failover) and the client dials the next node of its list", async () => {
  await using bad = new HostileServer({
    request: (conn, message) => {
      if (message.type !== "acquire") return;
      if (message.name === "own") conn.send(grant(message));
      else conn.send(error(0, WIRE_CODES.NOT_LEADER.code, "evil:99999"));
    },
  });
  await using good = new HostileServer({
    versions: [1, 2], // one connection: no fallback to version 1
    request: (c, m) => m.type === "acquire" && c.send(grant(m, TOKEN + 7)),
  });
  const reported: ServerProtocolError[] = [];
  await using client = await connect({
    addrs: [bad.addr, good.addr],
    onProtocolError: (e) => reported.push(e),
  });
  const own = await client.acquire("own");
  const lock = await client.acquire("x"); // answered by NOT_LEADER, then by the good node
  assert.equal(lostReason(own), "failover");
  assert.equal(lock.token, TOKEN + 7);
  assert.equal(good.connections, 1);
  assert.equal(client.protocolErrors, 1);
  assert.match(reported[0].message, /naming "evil:99999" as the leader/);
});

Deno.test("redirects without TLS: a NOT_LEADER naming an address outside the list is not followed; one in the list is followed at once", async () => {
  await using leader = new HostileServer({
    versions: [1, 2], // one connection: no fallback to version 1
    request: (c, m) => m.type === "acquire" && c.send(grant(m)),
  });
  await using silent = new HostileServer({ hello: () => {} }); // accepts, never answers
  await using standby = new HostileServer({
    hello: (conn) => conn.send(error(0, WIRE_CODES.NOT_LEADER.code, leader.addr)),
  });
  await assert.rejects(
    connect({ addrs: [standby.addr], reconnect: false }),
    (e: unknown) => {
      assert.ok(e instanceof ConnectionError && !(e instanceof ServerProtocolError), String(e));
      assert.match(e.message, /which is not in the address list; without TLS/);
      return true;
    },
  );
  assert.equal(leader.connections, 0, "never dialled");
  // Listed (after a node that never answers): the redirect goes there first.
  await using client = await connect({
    addrs: [standby.addr, silent.addr, leader.addr],
    reconnect: false,
  });
  assert.equal((await client.acquire("x")).token, TOKEN);
  assert.equal(leader.connections, 1);
  assert.equal(silent.connections, 0, "the redirect went before the list");
});

Deno.test("redirects with TLS: a NOT_LEADER naming an address outside the list is followed, and that node must present a certificate from the CA", async () => {
  await using real = await startTestServer(serverTlsConfig(false));
  const realPort = real.addr.split(":").at(-1);
  const tlsServer = { cert: certPem("server"), key: keyPem("server") };
  await using standby = new HostileServer({
    hello: (conn) => conn.send(error(0, WIRE_CODES.NOT_LEADER.code, `127.0.0.1:${realPort}`)),
  }, tlsServer);
  await using client = await connect({
    addrs: [standby.addr],
    tls: clientTls(),
    reconnect: false,
  });
  const lock = await client.acquire("tls/redirect");
  assert.equal(real.server.context.engine.holderOf("tls/redirect")?.token, lock.token);
  await lock.release();

  // An impostor named by the standby: its certificate is not from the client's CA.
  await using impostor = new HostileServer({}, {
    cert: certPem("other-client"),
    key: keyPem("other-client"),
  });
  await using liar = new HostileServer({
    hello: (conn) => conn.send(error(0, WIRE_CODES.NOT_LEADER.code, impostor.addr)),
  }, tlsServer);
  await assert.rejects(
    connect({ addrs: [liar.addr], tls: clientTls(), reconnect: false, connectTimeoutMs: 3_000 }),
    ConnectionError,
  );
  assert.deepEqual(impostor.received, [], "no HELLO reached the impostor");
});
