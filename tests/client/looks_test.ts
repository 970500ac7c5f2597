/**
 * Lock kinds, holders' values, query and observe in the TypeScript client (issues 22 and 23):
 * against a real server (what the client asks for and what it makes of the answers), and against
 * scripted servers (re-watching after a reconnect, coalescing, and every look frame checked: a
 * misfit closes the connection as a protocol error, never an uncaught exception).
 */
import assert from "node:assert/strict";
import { connect, LockdError } from "../../mod.ts";
import type { AcquireOptions, LockInfo, ServerProtocolError } from "../../mod.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";
import { GOOD_WELCOME_V2, type HostileConn, HostileServer } from "../helpers/hostile_server.ts";
import { LOOK_MISFITS, lookScenario } from "../helpers/hostile_scenarios_looks.ts";
import type { ClientMessage, LockState, Message } from "../../src/wire/messages.ts";

const text = (bytes: Uint8Array | undefined) => new TextDecoder().decode(bytes);
const LEADER = "service/leader";
const TOKEN = 1_795_426_718_504_001;

Deno.test("a follower queries and observes the leader's published address; the value changes and the end has its reason", async () => {
  await using t = await startTestServer();
  await using leader = await connect({ addr: t.addr });
  await using follower = await connect({ addr: t.addr });
  const lock = await leader.acquire(LEADER, { leaseMs: 5_000, value: "127.0.0.1:8080" });
  assert.equal(text(lock.value), "127.0.0.1:8080");
  const state = await follower.query(LEADER);
  assert.equal(state.holder?.token, lock.token);
  assert.equal(text(state.holder?.value), "127.0.0.1:8080");
  assert.equal(state.kind, "exclusive");
  const seen: LockInfo[] = [];
  for await (const s of follower.observe(LEADER)) {
    seen.push(s);
    if (s.event === "state") await lock.setValue("127.0.0.1:8081");
    else if (s.event === "value") await lock.release();
    else if (s.event === "ended") break; // leaving the loop ends the watch (UNWATCH)
  }
  assert.deepEqual(
    seen.map((s) => [s.event, s.reason, text(s.holder?.value)]),
    [["state", null, "127.0.0.1:8080"], ["value", null, "127.0.0.1:8081"], [
      "ended",
      "graceful",
      "",
    ]],
  );
  assert.equal((await follower.query(LEADER)).holder, null);
  assert.equal(follower.protocolErrors, 0);
});

Deno.test("a semaphore grants slots with their own tokens; a shared grant carries the writer's token as write generation", async () => {
  await using t = await startTestServer();
  await using one = await connect({ addr: t.addr });
  await using two = await connect({ addr: t.addr });
  const a = await one.acquire("jobs/render", { limit: 2, waitMs: 2_000 });
  const b = await two.acquire("jobs/render", { limit: 2, waitMs: 2_000 });
  assert.deepEqual([a.slot, b.slot].sort(), [0, 1]);
  assert.deepEqual([a.limit, b.limit, a.mode], [2, 2, "exclusive"]);
  assert.ok(b.token > a.token);
  const writer = await one.acquire("reports/daily", { waitMs: 2_000 });
  const reading = two.acquire("reports/daily", { mode: "shared", waitMs: 5_000 });
  await writer.release();
  const reader = await reading;
  assert.deepEqual([reader.mode, reader.writeGeneration], ["shared", writer.token]);
  const state = await one.query("jobs/render");
  assert.deepEqual([state.kind, state.limit, state.owners], ["semaphore", 2, 2]);
});

Deno.test("setValue with a value longer than the server takes is refused before anything is sent; arguments are checked", async () => {
  await using t = await startTestServer({ lockValueBytesMax: 8 });
  await using client = await connect({ addr: t.addr });
  await assert.rejects(
    client.acquire("a", { value: "x".repeat(9) }),
    (e) => e instanceof LockdError && e.codeName === "INVALID_ARGUMENT",
  );
  const lock = await client.acquire("a", { value: "12345678" });
  await assert.rejects(lock.setValue("123456789"), /longer than the server's 8/);
  for (const bad of [{ mode: "read" }, { limit: -1 }, { limit: 1.5 }, { value: 7 }]) {
    await assert.rejects(
      client.acquire("b", bad as unknown as AcquireOptions),
      (e) => e instanceof RangeError || e instanceof TypeError,
    );
  }
  await lock.release();
  await assert.rejects(lock.setValue("x"), /released/);
  // A name or pattern the wire cannot carry is refused when asked, never on a later reconnect.
  await assert.rejects(client.query("x".repeat(70_000)), RangeError);
  await assert.rejects(client.observe("y".repeat(70_000)).next(), RangeError);
});

/** A scripted version-2 server whose `request` answers WATCH, QUERY and the rest. */
function scripted(request: (conn: HostileConn, message: ClientMessage) => void): HostileServer {
  return new HostileServer({
    versions: [2],
    hello: (conn) => conn.send({ ...GOOD_WELCOME_V2, reclaimWindowMs: 0, sessionId: conn.index }),
    request: (conn, message) => {
      if (message.type === "heartbeat") {
        conn.send({ type: "heartbeat_ack", requestId: message.requestId, renewed: 0 });
      } else request(conn, message);
    },
  });
}

function held(
  requestId: number,
  name: string,
  event: LockState["event"] = "state",
  token = TOKEN,
): LockState {
  return {
    type: "lock_state",
    requestId,
    event,
    reason: "none",
    kind: "exclusive",
    limit: 1,
    queueLength: 0,
    owners: 1,
    name,
    holders: [{
      token,
      heldMs: 1_000,
      leaseMs: 10_000,
      mode: "exclusive",
      slot: 0,
      identity: "",
      clientName: "api@host-1:4242",
      value: new TextEncoder().encode("10.0.0.7:8080"),
    }],
  };
}

Deno.test("after a reconnect observe watches again, and a lock gone meanwhile reads kind none", async () => {
  await using server = scripted((conn, message) => {
    track(server, conn);
    if (message.type !== "watch") return;
    if (conn.index === 1) {
      conn.send(held(message.requestId, "service/a"), held(message.requestId, "service/b"), {
        type: "watching",
        requestId: message.requestId,
        locks: 2,
      });
    } else {
      conn.send(held(message.requestId, "service/a", "state", TOKEN + 7), {
        type: "watching",
        requestId: message.requestId,
        locks: 1,
      });
    }
  });
  await using client = await connect({ addr: server.addr });
  await using states = client.observe("service/*");
  const first = [(await states.next()).value, (await states.next()).value];
  assert.deepEqual(first.map((s) => s.name), ["service/a", "service/b"]);
  await eventually(() => states.watching, "WATCHING");
  (await connectionOf(server, 1)).close(); // the first connection drops
  const after = [(await states.next()).value, (await states.next()).value];
  assert.deepEqual(
    after.map((s) => [s.name, s.kind, s.holder?.token ?? null]),
    [["service/a", "exclusive", TOKEN + 7], ["service/b", "none", null]],
  );
  assert.equal(states.watchesSent, 2);
});

/** The connection of a scripted server by index (kept by the server's script via a hello hook). */
const connections = new WeakMap<HostileServer, Map<number, HostileConn>>();
async function connectionOf(server: HostileServer, index: number): Promise<HostileConn> {
  await eventually(() => connections.get(server)?.has(index) ?? false, `connection ${index}`);
  return connections.get(server)!.get(index)!;
}
function track(server: HostileServer, conn: HostileConn): void {
  if (!connections.has(server)) connections.set(server, new Map());
  connections.get(server)!.set(conn.index, conn);
}

Deno.test("a slow reader gets the latest state of each lock, not a backlog; closing the client ends the iteration", async () => {
  await using server = scripted((conn, message) => {
    if (message.type !== "watch") return;
    const frames: Message[] = [{ type: "watching", requestId: message.requestId, locks: 0 }];
    for (let i = 0; i < 50; i++) {
      frames.push(held(message.requestId, "service/a", "granted", TOKEN + i));
      frames.push(held(message.requestId, "service/b", "granted", TOKEN + i));
    }
    conn.send(...frames);
  });
  const client = await connect({ addr: server.addr });
  const states = client.observe("service/*");
  await eventually(() => states.watching, "WATCHING");
  await new Promise((resolve) => setTimeout(resolve, 50)); // every frame read
  const a = (await states.next()).value;
  const b = (await states.next()).value;
  assert.deepEqual([[a.name, a.holder?.token], [b.name, b.holder?.token]], [
    ["service/a", TOKEN + 49],
    ["service/b", TOKEN + 49],
  ]);
  const waiting = states.next();
  await client.close();
  assert.deepEqual(await waiting, { value: undefined, done: true });
});

Deno.test("a refused WATCH or one that matches too many locks rejects the iteration; an aborted signal ends it", async () => {
  await using server = scripted((conn, message) => {
    if (message.type === "watch" && message.pattern === "secret/**") {
      conn.send({
        type: "error",
        requestId: message.requestId,
        code: 0x04,
        name: "",
        message: "no",
      });
    } else if (message.type === "watch" && message.pattern === "**") {
      conn.send({ type: "watch_ended", requestId: message.requestId, reason: "too_many_locks" });
    } else if (message.type === "watch") {
      conn.send({ type: "watching", requestId: message.requestId, locks: 0 });
    } else if (message.type === "unwatch") {
      conn.send({ type: "watch_ended", requestId: message.requestId, reason: "unwatched" });
    }
  });
  await using client = await connect({ addr: server.addr });
  await assert.rejects(
    client.observe("secret/**").next(),
    (e) => e instanceof LockdError && e.codeName === "ACL_DENIED",
  );
  await assert.rejects(
    client.observe("**").next(),
    (e) => e instanceof LockdError && e.codeName === "LIMIT_EXCEEDED",
  );
  const abort = new AbortController();
  const states = client.observe("service/leader", { signal: abort.signal });
  const next = states.next();
  await eventually(() => states.watching, "WATCHING");
  abort.abort();
  assert.deepEqual(await next, { value: undefined, done: true });
  await eventually(() => server.sent("unwatch").length === 1, "UNWATCH sent");
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(client.protocolErrors, 0);
});

for (const misfit of LOOK_MISFITS) {
  Deno.test(`hostile server, looks: ${misfit.name} is a protocol error: the connection closes and the client goes on`, async () => {
    await using server = new HostileServer(lookScenario(misfit));
    const errors: ServerProtocolError[] = [];
    await using client = await connect({
      addr: server.addr,
      onProtocolError: (e) => errors.push(e),
    });
    if (misfit.answers === "watch") {
      await using states = client.observe("service/*");
      await eventually(() => server.sent("watch").length === 2, "the WATCH sent again");
      await eventually(() => states.watching, "watching on the next connection");
    } else if (misfit.answers === "query") {
      const state = await client.query("service/leader"); // asked again on the next connection
      assert.equal(state.holder?.token, TOKEN);
      assert.equal(server.sent("query").length, 2);
    } else {
      const lock = await client.acquire("reports/daily");
      await assert.rejects(lock.downgrade(), /connection ended first/);
      assert.equal(lock.mode, "exclusive");
      assert.equal(lock.state, "lost"); // a protocol error is not carried over
    }
    assert.equal(client.protocolErrors, 1);
    assert.equal(errors.length, 1);
    assert.match(errors[0].message, /broke the protocol: .+; the connection was closed$/);
  });
}

Deno.test("a version-1 server gets plain locks only: kinds, values and looks are refused locally", async () => {
  await using server = new HostileServer({
    versions: [1],
    request: (conn, message) => {
      if (message.type === "acquire") {
        conn.send({
          type: "acquired",
          requestId: message.requestId,
          name: message.name,
          token: TOKEN,
          leaseMs: 10_000,
        });
      } else if (message.type === "heartbeat") {
        conn.send({ type: "heartbeat_ack", requestId: message.requestId, renewed: 1 });
      } else if (message.type === "release") {
        conn.send({ type: "released", requestId: message.requestId, name: message.name });
      }
    },
  });
  await using client = await connect({ addr: server.addr });
  assert.equal(client.protocolVersion, 1);
  await assert.rejects(
    client.acquire("r", { mode: "shared" }),
    /shared lock needs protocol version 2/,
  );
  await assert.rejects(client.acquire("s", { limit: 8 }), /semaphore needs protocol version 2/);
  await assert.rejects(client.acquire("v", { value: "x" }), /takes no lock values/);
  await assert.rejects(client.query(LEADER), /version 1/);
  await assert.rejects(client.observe(LEADER).next(), /version 1/);
  const plain = await client.acquire("p");
  assert.deepEqual([plain.mode, plain.limit, plain.slot], ["exclusive", 1, 0]);
  await assert.rejects(plain.setValue(""), /version 1/); // SET_VALUE is a version-2 message
  await plain.release();
});

Deno.test("a writer downgrades in place: a waiting reader is granted beside it; a semaphore refuses", async () => {
  await using t = await startTestServer();
  await using one = await connect({ addr: t.addr });
  await using two = await connect({ addr: t.addr });
  const writer = await one.acquire("reports/weekly");
  const reading = two.acquire("reports/weekly", { mode: "shared", waitMs: 5_000 });
  await eventually(async () => (await one.query("reports/weekly")).queueLength === 1, "queued");
  await writer.downgrade();
  assert.deepEqual([writer.mode, writer.writeGeneration, writer.state], [
    "shared",
    writer.token,
    "held",
  ]);
  const reader = await reading;
  assert.deepEqual([reader.mode, reader.writeGeneration], ["shared", writer.token]);
  await writer.downgrade(); // shared already: nothing to do
  const render = await one.acquire("jobs/render-x", { limit: 3 });
  await assert.rejects(
    render.downgrade(),
    (e) => e instanceof LockdError && e.codeName === "INVALID_ARGUMENT",
  );
  assert.deepEqual(
    [(await two.query("reports/weekly")).kind, (await two.query("reports/weekly")).owners],
    ["shared", 2],
  );
  assert.equal(one.protocolErrors, 0);
});
