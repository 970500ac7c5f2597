/**
 * The wrong protocol on either side says so (issue 13.3): a plaintext client
 * on the TLS listener is told that TLS is expected (an ERROR frame, not a TLS
 * alert it would read as a 352 MB frame length), a plaintext client that
 * meets any TLS server reports "server expects TLS", and a TLS client on the
 * plain listener reports "server does not speak TLS".
 */
import assert from "node:assert/strict";
import { runLockd } from "../../bench/lockd_proc.ts";
import * as tls from "node:tls";
import { connect, ConnectionError, LockdError, WrongProtocolError } from "../../mod.ts";
import { parseHostPort } from "../../src/host_port.ts";
import { certPem, clientTls, keyPem, serverTlsConfig } from "../fixtures/tls/certs.ts";
import { captureDiagnosticLog } from "../log/capture.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

Deno.test("wrong protocol: a plaintext HELLO on the TLS listener gets an ERROR frame saying TLS is expected", async () => {
  using log = captureDiagnosticLog("warn", "json");
  await using t = await startTestServer(serverTlsConfig(true));
  const error = await connect({ addr: t.addr, reconnect: false }).then(() => null, (e) => e);
  assert.ok(error instanceof LockdError, `got ${error}`);
  assert.equal(error.code, 0x01);
  assert.match(error.message, /This listener expects TLS/);
  await eventually(() => t.server.context.counters.tlsHandshakeErrors === 1, "counted");
  assert.equal(t.server.context.counters.protocolErrors.get(0x01), 1);
  const line = log.records().find((r) => r.message === "TLS handshake failed");
  assert.match(String(line?.reason), /plaintext lockd frame on the TLS listener/);
  assert.equal(t.server.context.engine.sessionIds().length, 0);
});

Deno.test("wrong protocol: an HTTP request on the TLS listener is closed and logged with its first bytes", async () => {
  using log = captureDiagnosticLog("warn", "json");
  await using t = await startTestServer(serverTlsConfig(false));
  const at = parseHostPort(t.addr);
  const conn = await Deno.connect({ hostname: at.hostname, port: at.port });
  try {
    await conn.write(new TextEncoder().encode("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    assert.equal(await conn.read(new Uint8Array(64)).catch(() => null), null);
  } finally {
    conn.close();
  }
  await eventually(() => t.server.context.counters.tlsHandshakeErrors === 1, "counted");
  const line = log.records().find((r) => r.message === "TLS handshake failed");
  assert.equal(line?.reason, "not TLS (first bytes 47 45 54 20)");
});

Deno.test("wrong protocol: a TLS client on the TLS listener is still served after the first-byte check", async () => {
  await using t = await startTestServer(serverTlsConfig(true));
  await using c = await connect({ addr: t.addr, tls: clientTls("client-uri"), reconnect: false });
  const lock = await c.acquire("wrong-protocol/ok");
  await lock.release();
  assert.equal(t.server.context.counters.tlsHandshakeErrors, 0);
});

Deno.test("wrong protocol: a plaintext client meeting another TLS server reports that the server expects TLS", async () => {
  // Any TLS server (an older lockd, a TLS proxy) answers a plaintext HELLO with a TLS alert.
  const server = tls.createServer({ cert: certPem("server"), key: keyPem("server") });
  server.on("tlsClientError", () => {});
  await new Promise<void>((resolve) => server.listen({ host: "127.0.0.1", port: 0 }, resolve));
  try {
    const { port } = server.address() as { port: number };
    const error = await connect({ addr: `127.0.0.1:${port}`, reconnect: false })
      .then(() => null, (e) => e);
    assert.ok(error instanceof ConnectionError, `got ${error}`);
    assert.match(error.message, /the server expects TLS/);
    assert.doesNotMatch(error.message, /352518912|exceeds/);
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});

Deno.test("wrong protocol: a TLS client on the plain listener reports that the server does not speak TLS", async () => {
  await using t = await startTestServer();
  const error = await connect({ addr: t.addr, tls: clientTls(), reconnect: false })
    .then(() => null, (e) => e);
  assert.ok(error instanceof ConnectionError, `got ${error}`);
  assert.match(error.message, /the server does not speak TLS/);
});

/** Connects once and returns the error, and how long it took to come. */
async function connectError(addr: string): Promise<{ error: unknown; tookMs: number }> {
  const startedMs = performance.now();
  const error = await connect({ addr, reconnect: false, connectTimeoutMs: 5_000 })
    .then(async (client) => {
      await client.close();
      return null;
    }, (e) => e);
  return { error, tookMs: performance.now() - startedMs };
}

Deno.test("wrong protocol: a client given lockd's ops or admin port is told at once that it answered HTTP, and which flag it wants", async () => {
  await using t = await startTestServer({ adminListen: "127.0.0.1:0", opsListen: "127.0.0.1:0" });
  for (const addr of [t.server.opsAddr!, t.server.adminAddr!]) {
    const { error, tookMs } = await connectError(addr);
    assert.ok(error instanceof WrongProtocolError, `${addr}: got ${error}`);
    assert.ok(error instanceof ConnectionError, "a ConnectionError, as before");
    assert.equal(error.protocol, "http");
    assert.equal(error.addr, addr);
    assert.equal(
      error.message,
      `Cannot connect to lockd at ${addr}: it answered with HTTP ("HTTP/1.1 400 Bad request"), ` +
        `not the lockd protocol: is it lockd's -ops-listen or -admin-listen port? A lock client ` +
        `(lockd run -addr, connect()) takes the address of lockd serve's -listen (default port ` +
        `7400)`,
    );
    assert.ok(tookMs < 1_000, `${addr}: told after ${tookMs.toFixed(0)} ms (the timeout is 5 s)`);
  }
});

Deno.test("wrong protocol: any HTTP server, and a server that answers other bytes, are told apart at once", async () => {
  const web = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    () => new Response("hello"),
  );
  const junk = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const answering = (async () => {
    for await (const conn of junk) {
      await conn.write(new Uint8Array([0xff, 0xfe, 0x41, 0x42, 0x43])).catch(() => {});
      conn.close();
    }
  })();
  try {
    const http = await connectError(`127.0.0.1:${web.addr.port}`);
    assert.ok(http.error instanceof WrongProtocolError, `got ${http.error}`);
    assert.equal(http.error.protocol, "http");
    assert.match(http.error.message, /it answered with HTTP \("HTTP\/1\.1 400 Bad Request"\)/);
    assert.ok(http.tookMs < 1_000, `told after ${http.tookMs.toFixed(0)} ms`);

    const other = await connectError(`127.0.0.1:${junk.addr.port}`);
    assert.ok(other.error instanceof WrongProtocolError, `got ${other.error}`);
    assert.equal(other.error.protocol, "unknown");
    assert.match(other.error.message, /not a lockd frame \(first bytes ff fe 41 42\)/);
  } finally {
    await web.shutdown();
    junk.close();
    await answering.catch(() => {});
  }
});

Deno.test("wrong protocol: lockd run -addr at the ops port exits 1 within a second, saying which address it takes", async () => {
  await using t = await startTestServer({ opsListen: "127.0.0.1:0" });
  const startedMs = performance.now();
  const output = await runLockd(["run", "x", "-addr", t.server.opsAddr!, "--", "true"], {
    permissions: ["--allow-net", "--allow-read", "--allow-run"],
  });
  const tookMs = performance.now() - startedMs;
  const stderr = output.stderr;
  assert.equal(output.code, 1, stderr);
  assert.match(
    stderr,
    /^lockd run: Cannot connect to lockd at .*: it answered with HTTP .* is it lockd's -ops-listen or -admin-listen port\? .*-listen/,
  );
  assert.doesNotMatch(stderr, /no WELCOME/);
  // Deno's start-up included; the old answer came after the 5 s connect timeout.
  assert.ok(tookMs < 4_000, `exited after ${tookMs.toFixed(0)} ms`);
});
