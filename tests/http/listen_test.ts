/**
 * The HTTP connection guard (src/http/listen.ts) on real sockets with a
 * manual scheduler: header and idle timeouts, the connection cap with
 * eviction, refused heads, pipelining, half-close, and the peer address the
 * handler sees.
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { parseHostPort } from "../../src/host_port.ts";
import {
  type HttpLimits,
  type HttpListener,
  type HttpListenOptions,
  listenHttp,
} from "../../src/http/listen.ts";
import { HTTP_PROBE_CONNECTIONS_RESERVED } from "../../src/limits.ts";
import { ServerCounters } from "../../src/counters.ts";
import { eventually } from "../helpers/start_server.ts";
import { RawHttp } from "../helpers/raw_http.ts";
import { assertProblem } from "../helpers/problem.ts";

const LIMITS: HttpLimits = {
  headerTimeoutMs: 10_000,
  idleTimeoutMs: 90_000,
  connectionsMax: 4,
  headBytesMax: 1024,
  bodyBytesMax: 64,
};

interface Harness extends AsyncDisposable {
  listener: HttpListener;
  addr: string;
  clock: ManualScheduler;
  counters: ServerCounters;
  /** Peer addresses the handler saw, in order. */
  peers: string[];
  /** Writes to the open `/stream` response. */
  stream: ReadableStreamDefaultController<Uint8Array> | null;
}

function harness(
  limits: Partial<HttpLimits> = {},
  extra: Pick<HttpListenOptions, "priority" | "localPeer"> = {},
): Harness {
  const clock = new ManualScheduler();
  const counters = new ServerCounters();
  const h = { clock, counters, peers: [] as string[], stream: null } as unknown as Harness;
  h.listener = listenHttp(
    parseHostPort("127.0.0.1:0"),
    {
      name: "admin",
      limits: { ...LIMITS, ...limits },
      counters,
      scheduler: clock,
      // Every test client is on loopback: unless a test says otherwise, none counts as local.
      localPeer: () => false,
      ...extra,
    },
    (request, remoteAddr) => {
      h.peers.push(remoteAddr);
      const url = new URL(request.url);
      if (url.pathname === "/stream") {
        const body = new ReadableStream<Uint8Array>({ start: (c) => void (h.stream = c) });
        return Promise.resolve(
          new Response(body, { headers: { "content-type": "text/event-stream" } }),
        );
      }
      const forged = request.headers.get("x-lockd-peer") ?? "";
      return Promise.resolve(new Response(`${request.method} ${url.pathname} ${forged}`));
    },
  );
  h.addr = h.listener.addr;
  h[Symbol.asyncDispose] = async () => {
    try {
      h.stream?.close();
    } catch {
      // Already closed.
    }
    await h.listener.close();
  };
  return h;
}

const get = (path: string, extra = "") => `GET ${path} HTTP/1.1\r\nHost: lockd\r\n${extra}\r\n`;

Deno.test("a connection that sends nothing is closed at the header timeout, not before", async () => {
  await using h = harness();
  using client = await RawHttp.connect(h.addr);
  await eventually(() => h.counters.http.admin.open === 1, "connection accepted");
  h.clock.advance(LIMITS.headerTimeoutMs - 1);
  assert.equal(await client.closedWithin(50), false);
  h.clock.advance(1);
  assert.equal(await client.closedWithin(2_000), true);
  assert.equal(h.counters.http.admin.dropped.header_timeout, 1);
  assert.equal(h.counters.http.admin.open, 0);
});

Deno.test("a slowloris head (a byte now and then) is closed at the header timeout", async () => {
  await using h = harness();
  using client = await RawHttp.connect(h.addr);
  const head = get("/slow");
  for (let i = 0; i < 9; i++) {
    await client.send(head[i]);
    await eventually(() => true, "tick");
    h.clock.advance(1_000);
  }
  h.clock.advance(1_000);
  assert.equal(await client.closedWithin(2_000), true);
  assert.equal(h.counters.http.admin.dropped.header_timeout, 1);
  assert.deepEqual(h.peers, [], "the handler never saw the request");
});

Deno.test("keep-alive: later requests have their own deadline; a connection idle for the idle timeout is closed", async () => {
  await using h = harness();
  using client = await RawHttp.connect(h.addr);
  await client.send(get("/a"));
  assert.equal((await client.response()).body, "GET /a ");
  // Long after the first head's deadline, a second request is still served.
  h.clock.advance(60_000);
  await client.send(get("/b"));
  assert.equal((await client.response()).body, "GET /b ");
  h.clock.advance(LIMITS.idleTimeoutMs - 1);
  assert.equal(await client.closedWithin(50), false);
  h.clock.advance(1);
  assert.equal(await client.closedWithin(2_000), true);
  assert.equal(h.counters.http.admin.dropped.idle_timeout, 1);
  assert.equal(h.counters.http.admin.dropped.header_timeout, 0);
});

Deno.test("a streaming response that sends a comment every 15 s outlives the idle timeout", async () => {
  await using h = harness();
  using client = await RawHttp.connect(h.addr);
  await client.send(get("/stream"));
  await eventually(() => h.stream !== null, "stream started");
  let received = "";
  const reader = (async () => {
    // Reads the head and the chunks as they come.
    const buffer = new Uint8Array(4096);
    let seen = "";
    for (;;) {
      const n = await client.conn.read(buffer).catch(() => null);
      if (n === null) return seen;
      seen += new TextDecoder().decode(buffer.subarray(0, n));
      received = seen;
    }
  })();
  for (let i = 0; i < 10; i++) {
    h.stream!.enqueue(new TextEncoder().encode(`: keep-alive ${i}\n\n`));
    await eventually(() => received.includes(`keep-alive ${i}`), `comment ${i}`);
    h.clock.advance(15_000);
  }
  assert.equal(h.counters.http.admin.open, 1, "150 s of comments kept the connection");
  h.clock.advance(LIMITS.idleTimeoutMs);
  assert.match(await reader, /keep-alive 9/);
  assert.equal(h.counters.http.admin.dropped.idle_timeout, 1);
});

Deno.test("at the cap, the least recently active connection not serving a request is closed for a new one", async () => {
  await using h = harness({ connectionsMax: 3 });
  // Issue 19 item 2: a keep-alive connection idle between requests is evictable; its last
  // activity is the end of its last response. A connection that never completed a request
  // counts from its accept (the bytes of a slowloris head do not make it younger).
  using served = await RawHttp.connect(h.addr);
  await served.send(get("/a"));
  await served.response();
  using idle1 = await RawHttp.connect(h.addr);
  await eventually(() => h.counters.http.admin.open === 2, "two open");
  using half = await RawHttp.connect(h.addr);
  await half.send("GET /half");
  await eventually(() => h.counters.http.admin.open === 3, "three open");
  await half.send(" HTTP/1.1\r\n"); // more bytes of the head: no younger for that

  using fresh1 = await RawHttp.connect(h.addr);
  assert.equal(await served.closedWithin(2_000), true, "the idle keep-alive connection went first");
  assert.equal(h.counters.http.admin.dropped.evicted, 1);
  // (No closedWithin on idle1 here: its read would still be pending when the answer comes.)
  using fresh2 = await RawHttp.connect(h.addr);
  // One that never sent a request is told why.
  const told = await idle1.response();
  await assertProblem(told, 503, undefined, {
    detail: /closed for a newer one before it completed a request/,
  });
  assert.equal(await idle1.closedWithin(2_000), true);
  using fresh3 = await RawHttp.connect(h.addr);
  assert.equal((await half.response()).status, 503, "the slowloris head came next");
  for (const c of [fresh1, fresh2, fresh3]) {
    await c.send(get("/fresh"));
    assert.equal((await c.response()).body, "GET /fresh ");
  }
  assert.equal(h.counters.http.admin.dropped.evicted, 3);
  assert.equal(h.counters.http.admin.open, 3);
});

Deno.test("at the cap, a connection serving a request is not closed, an idle one is, least recently active first", async () => {
  await using h = harness({ connectionsMax: 3 });
  using streaming = await RawHttp.connect(h.addr);
  await streaming.send(get("/stream"));
  await eventually(() => h.stream !== null, "stream started");
  using older = await RawHttp.connect(h.addr);
  using newer = await RawHttp.connect(h.addr);
  await older.send(get("/1"));
  await older.response();
  await newer.send(get("/2"));
  await newer.response();
  // `older` was active again last: `newer` is now the least recently active.
  await older.send(get("/3"));
  await older.response();
  using incoming = await RawHttp.connect(h.addr);
  assert.equal(await newer.closedWithin(2_000), true);
  assert.equal(await older.closedWithin(50), false);
  assert.equal(await streaming.closedWithin(50), false, "the stream is serving a request");
  await incoming.send(get("/4"));
  assert.equal((await incoming.response()).body, "GET /4 ");
});

Deno.test("at the cap with every connection serving a request, a new one gets 503 unless its request is a probe", async () => {
  let streams = 0;
  await using h = harness({ connectionsMax: 2 }, {
    priority: (head) => head.method === "GET" && head.target === "/healthz",
  });
  const busy = [await RawHttp.connect(h.addr), await RawHttp.connect(h.addr)];
  try {
    for (const c of busy) {
      h.stream = null;
      await c.send(get("/stream"));
      await eventually(() => h.stream !== null, "stream started");
      streams++;
    }
    {
      using probe = await RawHttp.connect(h.addr);
      await probe.send(get("/healthz"));
      assert.equal((await probe.response()).body, "GET /healthz ", "a probe finds room");
    }
    // (An idle probe connection would be closed for the next newcomer: it has gone.)
    await eventually(() => h.counters.http.admin.open === 2, "the probe's connection closed");
    using other = await RawHttp.connect(h.addr);
    await other.send(get("/api/locks"));
    const answer = await other.response();
    await assertProblem(answer, 503, "too-many-connections");
    assert.equal(await other.closedWithin(2_000), true);
    assert.equal(h.counters.http.admin.dropped.limit, 1);
    assert.equal(streams, 2);
  } finally {
    for (const c of busy) c.close();
  }
});

Deno.test("with the reserved slots full of silent newcomers as well, one more gets 503 at once", async () => {
  await using h = harness({ connectionsMax: 1 }, { priority: () => true });
  using busy = await RawHttp.connect(h.addr);
  await busy.send(get("/stream"));
  await eventually(() => h.stream !== null, "stream started");
  const silent: RawHttp[] = [];
  try {
    for (let i = 0; i < HTTP_PROBE_CONNECTIONS_RESERVED; i++) {
      silent.push(await RawHttp.connect(h.addr));
      await eventually(() => h.counters.http.admin.open === 2 + i, `${2 + i} open`);
    }
    // A newcomer from elsewhere closes the oldest silent one (told with a 503) and takes its place.
    using next = await RawHttp.connect(h.addr);
    assert.equal((await silent[0].response()).status, 503);
    await next.send(get("/healthz"));
    assert.equal((await next.response()).body, "GET /healthz ");
    assert.equal(h.counters.http.admin.dropped.evicted, 1);
  } finally {
    for (const c of silent) c.close();
  }
});

Deno.test("a local connection is never closed for a remote newcomer before its first request, and finds a reserved slot", async () => {
  const localPorts = new Set<number>();
  await using h = harness({ connectionsMax: 2 }, {
    localPeer: (peer) => localPorts.has(peer.port),
  });
  const connectLocal = async () => {
    const c = await RawHttp.connect(h.addr);
    localPorts.add((c.conn.localAddr as Deno.NetAddr).port);
    return c;
  };
  using local = await connectLocal();
  await eventually(() => h.counters.http.admin.open === 1, "one open");
  using remote1 = await RawHttp.connect(h.addr);
  await eventually(() => h.counters.http.admin.open === 2, "two open");
  using remote2 = await RawHttp.connect(h.addr);
  // remote1 (fresh, remote) went; the older local connection stayed.
  assert.equal((await remote1.response()).status, 503);
  await local.send(get("/healthz"));
  assert.equal((await local.response()).body, "GET /healthz ");
  await remote2.send(get("/stream"));
  await eventually(() => h.stream !== null, "stream started");
  // Both slots serve requests now (the local one idle again: make it busy too).
  h.stream = null;
  await local.send(get("/stream"));
  await eventually(() => h.stream !== null, "second stream started");
  // No priority function: a remote request in a reserved slot gets 503; a local one is served.
  using remote3 = await RawHttp.connect(h.addr);
  await remote3.send(get("/x"));
  assert.equal((await remote3.response()).status, 503);
  using local2 = await connectLocal();
  await local2.send(get("/y"));
  assert.equal((await local2.response()).body, "GET /y ");
});

Deno.test("by default a loopback peer is local: it is served in a reserved slot whatever its request", async () => {
  await using h = harness({ connectionsMax: 1 }, { localPeer: undefined });
  using busy = await RawHttp.connect(h.addr);
  await busy.send(get("/stream"));
  await eventually(() => h.stream !== null, "stream started");
  using local = await RawHttp.connect(h.addr);
  await local.send(get("/not-a-probe"));
  assert.equal((await local.response()).body, "GET /not-a-probe ");
  assert.equal(h.counters.http.admin.dropped.limit, 0);
});

const REFUSED: [string, string, number, RegExp][] = [
  [
    "a head longer than the limit",
    `GET /${"a".repeat(2048)} HTTP/1.1\r\n`,
    431,
    /longer than 1024/,
  ],
  ["a chunked body", get("/", "Transfer-Encoding: chunked\r\n"), 411, /Content-Length/],
  ["a body over the limit", get("/", "Content-Length: 65\r\n"), 413, /65 bytes; at most 64/],
  [
    "two Content-Length headers",
    get("/", "Content-Length: 1\r\nContent-Length: 1\r\n"),
    400,
    /More than one Content-Length/,
  ],
  ["a bare LF line end", "GET / HTTP/1.1\nHost: x\r\n\r\n", 400, /CRLF/],
  ["HTTP/1.1 without Host", "GET / HTTP/1.1\r\n\r\n", 400, /must have a Host/],
  ["two Host headers", get("/", "Host: other\r\n"), 400, /More than one Host/],
  ["a folded header", get("/", "X-A: 1\r\n  folded\r\n"), 400, /Folded/],
  ["the HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, /only HTTP\/1\.0 and 1\.1/],
  ["an upgrade", get("/", "Upgrade: websocket\r\nConnection: Upgrade\r\n"), 400, /upgrades/],
];

for (const [name, request, status, detail] of REFUSED) {
  Deno.test(`the guard answers ${name} with ${status} and closes`, async () => {
    await using h = harness();
    using client = await RawHttp.connect(h.addr);
    await client.send(request);
    const answer = await client.response();
    await assertProblem(answer, status, undefined, { detail });
    assert.equal(await client.closedWithin(2_000), true);
    assert.deepEqual(h.peers, []);
    assert.equal(h.counters.http.admin.dropped.invalid_request, 1);
  });
}

Deno.test("pipelined requests with a small body are answered in order; a refused one after them is answered last", async () => {
  await using h = harness();
  using client = await RawHttp.connect(h.addr);
  await client.send(
    get("/one") +
      "POST /two HTTP/1.1\r\nHost: lockd\r\nContent-Length: 5\r\n\r\nhello" +
      "\r\n" + // a stray CRLF between requests is allowed
      get("/three") +
      get("/four", "Transfer-Encoding: chunked\r\n"),
  );
  assert.equal((await client.response()).body, "GET /one ");
  assert.equal((await client.response()).body, "POST /two ");
  assert.equal((await client.response()).body, "GET /three ");
  assert.equal((await client.response()).status, 411);
  assert.equal(await client.closedWithin(2_000), true);
});

Deno.test("the handler sees the client's address; a forged peer header does not get through", async () => {
  await using h = harness();
  using client = await RawHttp.connect(h.addr);
  await client.send(get("/", "x-lockd-peer: 6.6.6.6:666\r\n"));
  const answer = await client.response();
  const local = client.conn.localAddr as Deno.NetAddr;
  assert.deepEqual(h.peers, [`127.0.0.1:${local.port}`]);
  // A header named like the guard's (without its secret suffix) is the client's own header.
  assert.equal(answer.body, "GET / 6.6.6.6:666");
});

Deno.test("a client that half-closes after its request still gets the whole answer", async () => {
  await using h = harness();
  using client = await RawHttp.connect(h.addr);
  await client.send(get("/half-closed"));
  await client.conn.closeWrite();
  assert.equal((await client.response()).body, "GET /half-closed ");
  assert.equal(await client.closedWithin(2_000), true);
});

Deno.test("close() ends idle and half-open connections and lets a request in flight finish", async () => {
  const h = harness();
  using idle = await RawHttp.connect(h.addr);
  using half = await RawHttp.connect(h.addr);
  await half.send("GET /half HTT");
  using served = await RawHttp.connect(h.addr);
  await served.send(get("/x"));
  await served.response();
  await eventually(() => h.counters.http.admin.open === 3, "three open");
  await h.listener.close();
  for (const c of [idle, half, served]) assert.equal(await c.closedWithin(2_000), true);
  assert.equal(h.counters.http.admin.open, 0);
});

Deno.test("socket directories left by a killed lockd are removed; fresh or live ones are kept", async () => {
  const stale = Deno.makeTempDirSync({ prefix: "lockd-admin-" });
  Deno.writeTextFileSync(`${stale}/admin-0.sock`, ""); // not a socket any more: refuses
  const fresh = Deno.makeTempDirSync({ prefix: "lockd-admin-" });
  const hourAgo = new Date(Date.now() - 3_600_000);
  Deno.utimeSync(stale, hourAgo, hourAgo);
  try {
    await using other = harness(); // another running listener, untouched by the sweep
    await using h = harness();
    await h.listener.close(); // waits for the sweep
    assert.throws(() => Deno.statSync(stale), Deno.errors.NotFound);
    assert.ok(Deno.statSync(fresh).isDirectory, "a directory younger than a minute stays");
    // The live listener still serves.
    using client = await RawHttp.connect(other.addr);
    await client.send(get("/still"));
    assert.equal((await client.response()).body, "GET /still ");
  } finally {
    for (const dir of [stale, fresh]) {
      try {
        Deno.removeSync(dir, { recursive: true });
      } catch {
        // Swept.
      }
    }
  }
});
