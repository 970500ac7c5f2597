/**
 * The HTTP connection guard (src/http/listen.ts) on real sockets with a
 * manual scheduler: header and idle timeouts, the connection cap with
 * eviction, refused heads, pipelining, half-close, and the peer address the
 * handler sees.
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { parseHostPort } from "../../src/host_port.ts";
import { type HttpLimits, type HttpListener, listenHttp } from "../../src/http/listen.ts";
import { ServerCounters } from "../../src/ops/counters.ts";
import { eventually } from "../helpers/start_server.ts";
import { RawHttp } from "../helpers/raw_http.ts";

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

function harness(limits: Partial<HttpLimits> = {}): Harness {
  const clock = new ManualScheduler();
  const counters = new ServerCounters();
  const h = { clock, counters, peers: [] as string[], stream: null } as unknown as Harness;
  h.listener = listenHttp(
    parseHostPort("127.0.0.1:0"),
    { name: "admin", limits: { ...LIMITS, ...limits }, counters, scheduler: clock },
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

Deno.test("at the cap, the oldest connection without a complete request is closed for a new one", async () => {
  await using h = harness({ connectionsMax: 3 });
  using busy = await RawHttp.connect(h.addr);
  await busy.send(get("/a"));
  await busy.response();
  using idle1 = await RawHttp.connect(h.addr);
  await eventually(() => h.counters.http.admin.open === 2, "two open");
  using idle2 = await RawHttp.connect(h.addr);
  await idle2.send("GET /half");
  await eventually(() => h.counters.http.admin.open === 3, "three open");
  using fresh = await RawHttp.connect(h.addr);
  assert.equal(await idle1.closedWithin(2_000), true, "the oldest idle connection went");
  await fresh.send(get("/fresh"));
  assert.equal((await fresh.response()).body, "GET /fresh ");
  assert.equal(await busy.closedWithin(50), false, "a connection that passed a request stays");
  assert.equal(h.counters.http.admin.dropped.evicted, 1);
  assert.equal(await idle2.closedWithin(50), false, "only one was needed");
});

Deno.test("at the cap with every connection past its first request, a new one gets 503 and is closed", async () => {
  await using h = harness({ connectionsMax: 2 });
  const clients = [await RawHttp.connect(h.addr), await RawHttp.connect(h.addr)];
  try {
    for (const c of clients) {
      await c.send(get("/x"));
      await c.response();
    }
    using extra = await RawHttp.connect(h.addr);
    const answer = await extra.response();
    assert.equal(answer.status, 503);
    assert.equal(answer.headers.get("content-type"), "application/problem+json");
    assert.match(answer.body, /too-many-connections/);
    assert.equal(h.counters.http.admin.dropped.limit, 1);
  } finally {
    for (const c of clients) c.close();
  }
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
    assert.equal(answer.status, status);
    assert.equal(answer.headers.get("content-type"), "application/problem+json");
    assert.match(JSON.parse(answer.body).detail, detail);
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
