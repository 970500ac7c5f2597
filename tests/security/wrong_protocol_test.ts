/**
 * The wrong protocol on either side says so (issue 13.3): a plaintext client
 * on the TLS listener is told that TLS is expected (an ERROR frame, not a TLS
 * alert it would read as a 352 MB frame length), a plaintext client that
 * meets any TLS server reports "server expects TLS", and a TLS client on the
 * plain listener reports "server does not speak TLS".
 */
import assert from "node:assert/strict";
import * as tls from "node:tls";
import { connect, ConnectionError, LockdError } from "../../mod.ts";
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
