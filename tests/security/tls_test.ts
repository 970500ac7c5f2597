import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import * as tls from "node:tls";
import { type Client, connect, ConnectionError } from "../../mod.ts";
import { parseHostPort } from "../../src/host_port.ts";
import { TLS_READ_QUEUE_BYTES_MAX } from "../../src/limits.ts";
import { nodeSocketTransport } from "../../src/protocol/node_socket_transport.ts";
import type { Transport } from "../../src/protocol/transport.ts";
import {
  loadClientTls,
  loadServerTls,
  loadServerTlsFromConfig,
  TlsConfigError,
} from "../../src/security/tls.ts";
import {
  type CertName,
  certPath,
  certPem,
  clientTls,
  keyPath,
  keyPem,
  serverTlsConfig,
} from "../fixtures/tls/certs.ts";
import { captureDiagnosticLog } from "../log/capture.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

// The identity rule itself is tested in identity_test.ts (DER) and mtls_identity_test.ts (hostile
// certificates over real connections).

// ---- loading TLS files ----------------------------------------------------

Deno.test("loadServerTls reads the certificate, key and client CA and reports the expiry", async () => {
  const material = await loadServerTls({
    cert: certPath("server"),
    key: keyPath("server"),
    clientCa: certPath("ca"),
  });
  assert.match(material.cert, /BEGIN CERTIFICATE/);
  assert.match(material.key, /PRIVATE KEY/);
  assert.match(material.ca!, /BEGIN CERTIFICATE/);
  assert.equal(
    material.notAfterMs,
    Date.parse(new X509Certificate(certPem("server")).validTo),
  );
  assert.ok(material.notAfterMs > Date.now() + 50 * 365 * 86_400_000, "valid for decades");
});

Deno.test("loadServerTls refuses a key that does not belong to the certificate, naming both files", async () => {
  await assert.rejects(
    loadServerTls({ cert: certPath("server-2"), key: keyPath("server") }),
    (error: unknown) => {
      assert.ok(error instanceof TlsConfigError);
      assert.ok(error.message.includes(keyPath("server")), error.message);
      assert.ok(error.message.includes(certPath("server-2")), error.message);
      assert.match(error.message, /does not belong/);
      return true;
    },
  );
});

Deno.test("loadServerTls refuses a missing file, a file without a certificate and a broken key", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await assert.rejects(
      loadServerTls({ cert: `${dir}/missing.pem`, key: keyPath("server") }),
      /Cannot read -tls-cert file ".*missing\.pem"/,
    );
    await Deno.writeTextFile(`${dir}/junk.pem`, "not a certificate\n");
    await assert.rejects(
      loadServerTls({ cert: `${dir}/junk.pem`, key: keyPath("server") }),
      /holds no PEM certificate/,
    );
    await assert.rejects(
      loadServerTls({ cert: certPath("server"), key: `${dir}/junk.pem` }),
      /holds no usable private key/,
    );
    await Deno.writeTextFile(
      `${dir}/broken.pem`,
      "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    );
    await assert.rejects(
      loadServerTls({
        cert: certPath("server"),
        key: keyPath("server"),
        clientCa: `${dir}/broken.pem`,
      }),
      /Certificate 1 in ".*broken\.pem" cannot be parsed/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("loadServerTlsFromConfig: off without files, refuses half a pair", async () => {
  assert.equal(
    await loadServerTlsFromConfig({ tlsCert: null, tlsKey: null, tlsClientCa: null }),
    null,
  );
  await assert.rejects(
    loadServerTlsFromConfig({ tlsCert: certPath("server"), tlsKey: null, tlsClientCa: null }),
    /-tls-cert and -tls-key go together/,
  );
  await assert.rejects(
    loadServerTlsFromConfig({ tlsCert: null, tlsKey: null, tlsClientCa: certPath("ca") }),
    /-tls-client-ca needs -tls-cert and -tls-key/,
  );
});

Deno.test("loadClientTls: nothing given is plain TCP; a CA alone, or a CA with a client pair", async () => {
  assert.equal(await loadClientTls({}), undefined);
  assert.deepEqual(await loadClientTls({ ca: certPath("ca") }), { ca: certPem("ca") });
  const full = await loadClientTls({
    ca: certPath("ca"),
    cert: certPath("client-uri"),
    key: keyPath("client-uri"),
  });
  assert.deepEqual(full, clientTls("client-uri"));
  await assert.rejects(
    loadClientTls({ cert: certPath("client-uri") }),
    /-cert and -key go together/,
  );
  await assert.rejects(
    loadClientTls({ cert: certPath("client-uri"), key: keyPath("client-dns") }),
    /does not belong/,
  );
  await assert.rejects(loadClientTls({ ca: "/nonexistent/ca.pem" }), /Cannot read -ca file/);
});

// ---- TLS and mTLS listeners -----------------------------------------------

async function connectAs(addr: string, client?: CertName): Promise<Client> {
  return await connect({ addr, tls: clientTls(client), reconnect: false });
}

Deno.test("TLS without client certificates: locks work and every identity is empty", async () => {
  await using t = await startTestServer(serverTlsConfig(false));
  await using a = await connectAs(t.addr);
  await using b = await connectAs(t.addr);
  const lock = await a.acquire("tls/x");
  assert.equal(t.server.context.engine.getLock("tls/x")?.holder?.identity, "");
  const queued = b.acquire("tls/x");
  await eventually(() => t.server.context.engine.getLock("tls/x")?.waiters.length === 1, "queued");
  await lock.release();
  const next = await queued;
  assert.ok(next.token > lock.token);
  await next.release();
  await eventually(() => t.audit.lines.length === 4, "four audit records");
  assert.deepEqual(t.audit.records().map((r) => r.identity), ["", "", "", ""]);
  assert.equal(t.server.context.counters.tlsHandshakeErrors, 0);
  assert.ok(t.server.context.counters.connectionsAccepted >= 2);
});

Deno.test("TLS: a client with a certificate is served without mTLS, and its identity stays empty", async () => {
  await using t = await startTestServer(serverTlsConfig(false));
  await using a = await connectAs(t.addr, "client-uri");
  const lock = await a.acquire("x");
  assert.equal(t.server.context.engine.getLock("x")?.holder?.identity, "");
  await lock.release();
});

const MTLS_IDENTITIES: [CertName, string][] = [
  ["client-uri", "spiffe://example.org/worker"],
  ["client-dns", "worker.example.org"],
  ["client-cn", "cn-only-client"],
];

for (const [client, identity] of MTLS_IDENTITIES) {
  Deno.test(`mTLS: certificate ${client} gives the session identity "${identity}"`, async () => {
    await using t = await startTestServer(serverTlsConfig(true));
    await using c = await connectAs(t.addr, client);
    const lock = await c.acquire("id/check");
    const holder = t.server.context.engine.getLock("id/check")?.holder;
    assert.equal(holder?.identity, identity);
    await lock.release();
    await eventually(() => t.audit.lines.length === 2, "two audit records");
    for (const record of t.audit.records()) assert.equal(record.identity, identity);
  });
}

Deno.test("mTLS: a client without a certificate is refused in the handshake, counted and logged; others are still served", async () => {
  using log = captureDiagnosticLog("info", "json");
  await using t = await startTestServer(serverTlsConfig(true));
  await assert.rejects(connectAs(t.addr), ConnectionError);
  await eventually(() => t.server.context.counters.tlsHandshakeErrors === 1, "handshake error");
  await eventually(
    () => log.records().some((r) => r.message === "TLS handshake failed"),
    "warn line",
  );
  const line = log.records().find((r) => r.message === "TLS handshake failed")!;
  assert.equal(line.level, "WARN");
  assert.match(String(line.remote_addr), /^127\.0\.0\.1:\d+$/);
  assert.match(String(line.reason), /certificate/i);
  assert.equal(t.server.context.connections.size, 0, "no session was started");
  await using good = await connectAs(t.addr, "client-uri");
  const lock = await good.acquire("after");
  await lock.release();
});

Deno.test("mTLS: a certificate signed by another CA is refused with the verification reason", async () => {
  using log = captureDiagnosticLog("warn", "json");
  await using t = await startTestServer(serverTlsConfig(true));
  await assert.rejects(connectAs(t.addr, "other-client"), ConnectionError);
  await eventually(() => t.server.context.counters.tlsHandshakeErrors === 1, "handshake error");
  await eventually(() => log.lines.length > 0, "warn line");
  const line = log.records().find((r) => r.message === "TLS handshake failed")!;
  assert.equal(line.reason, "client certificate rejected: UNABLE_TO_VERIFY_LEAF_SIGNATURE");
  assert.equal(t.server.context.engine.sessionIds().length, 0);
});

Deno.test("mTLS: an expired client certificate from the trusted CA is refused", async () => {
  using log = captureDiagnosticLog("warn", "json");
  await using t = await startTestServer(serverTlsConfig(true));
  await assert.rejects(connectAs(t.addr, "client-expired"), ConnectionError);
  await eventually(() => t.server.context.counters.tlsHandshakeErrors === 1, "handshake error");
  await eventually(() => log.lines.length > 0, "warn line");
  const line = log.records().find((r) => r.message === "TLS handshake failed")!;
  // Deno's node:tls reports every failed verification with this one code.
  assert.equal(line.reason, "client certificate rejected: UNABLE_TO_VERIFY_LEAF_SIGNATURE");
  assert.equal(t.server.context.engine.sessionIds().length, 0);
});

Deno.test("a plaintext client on the TLS listener is refused and counted", async () => {
  await using t = await startTestServer(serverTlsConfig(false));
  // The ERROR frame that says so is tested in wrong_protocol_test.ts.
  await assert.rejects(connect({ addr: t.addr, reconnect: false }), /expects TLS/);
  await eventually(() => t.server.context.counters.tlsHandshakeErrors === 1, "handshake error");
  assert.equal(t.server.context.engine.sessionIds().length, 0);
});

Deno.test("a connection that never starts the TLS handshake is closed after the handshake timeout", async () => {
  await using t = await startTestServer({ ...serverTlsConfig(true), handshakeTimeoutMs: 150 });
  const at = parseHostPort(t.addr);
  const conn = await Deno.connect({ hostname: at.hostname, port: at.port });
  try {
    const started = performance.now();
    const n = await conn.read(new Uint8Array(64)).catch(() => null);
    assert.equal(n, null);
    const elapsedMs = performance.now() - started;
    assert.ok(elapsedMs >= 100 && elapsedMs < 3_000, `closed after ${elapsedMs} ms`);
  } finally {
    conn.close();
  }
  await eventually(() => t.server.context.counters.tlsHandshakeErrors === 1, "counted");
});

Deno.test("shutdown closes connections still in their TLS handshake", async () => {
  const t = await startTestServer(serverTlsConfig(true));
  const at = parseHostPort(t.addr);
  const conn = await Deno.connect({ hostname: at.hostname, port: at.port });
  try {
    await eventually(() => t.server.context.counters.connectionsAccepted === 1, "accepted");
    await t.server.shutdown();
    assert.equal(await conn.read(new Uint8Array(64)).catch(() => null), null);
  } finally {
    conn.close();
  }
});

Deno.test("TLS on IPv6 loopback: remote addresses are bracketed", async () => {
  await using t = await startTestServer({ ...serverTlsConfig(true), listen: "[::1]:0" });
  assert.match(t.addr, /^\[::1\]:\d+$/);
  await using c = await connectAs(t.addr, "client-uri");
  const lock = await c.acquire("v6");
  assert.match(t.server.context.engine.getLock("v6")!.holder!.remoteAddr, /^\[::1\]:\d+$/);
  await lock.release();
});

Deno.test("a start with a key that does not match the certificate fails before anything listens", async () => {
  await assert.rejects(
    startTestServer({ tlsCert: certPath("server-2"), tlsKey: keyPath("server") }),
    TlsConfigError,
  );
});

// ---- certificate reload (SIGHUP) ------------------------------------------

/** Serial number of the certificate the server presents to a new connection. */
async function servedSerial(addr: string): Promise<string> {
  const at = parseHostPort(addr);
  const socket = tls.connect({
    host: at.hostname,
    port: at.port,
    ca: certPem("ca"),
    cert: certPem("client-uri"),
    key: Deno.readTextFileSync(keyPath("client-uri")),
    servername: "localhost",
  });
  try {
    return await new Promise<string>((resolve, reject) => {
      socket.once("secureConnect", () => resolve(socket.getPeerCertificate().serialNumber));
      socket.once("error", reject);
    });
  } finally {
    const closed = new Promise((resolve) => socket.once("close", resolve));
    socket.destroy();
    await closed;
  }
}

function serialOf(name: CertName): string {
  return new X509Certificate(certPem(name)).serialNumber;
}

Deno.test("a SIGHUP reload swaps the server certificate for new connections and keeps sessions", async () => {
  using log = captureDiagnosticLog("info", "json");
  const dir = await Deno.makeTempDir();
  try {
    const cert = `${dir}/server.pem`;
    const key = `${dir}/server-key.pem`;
    await Deno.copyFile(certPath("server"), cert);
    await Deno.copyFile(keyPath("server"), key);
    await using t = await startTestServer({
      tlsCert: cert,
      tlsKey: key,
      tlsClientCa: certPath("ca"),
    });
    await using holder = await connectAs(t.addr, "client-uri");
    const lock = await holder.acquire("kept");
    assert.equal(await servedSerial(t.addr), serialOf("server"));

    await Deno.copyFile(certPath("server-2"), cert);
    await Deno.copyFile(keyPath("server-2"), key);
    await t.server.reload();
    assert.equal(await servedSerial(t.addr), serialOf("server-2"));
    assert.ok(log.records().some((r) => r.message === "TLS certificates reloaded"));

    // The session opened before the reload still owns its lock and can release it.
    assert.equal(lock.lost.aborted, false);
    assert.equal(t.server.context.engine.getLock("kept")?.holder?.token, lock.token);
    await lock.release();
    await using late = await connectAs(t.addr, "client-dns");
    await (await late.acquire("after-reload")).release();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a reload with a broken certificate keeps the old one and logs an error", async () => {
  using log = captureDiagnosticLog("info", "json");
  const dir = await Deno.makeTempDir();
  try {
    const cert = `${dir}/server.pem`;
    const key = `${dir}/server-key.pem`;
    await Deno.copyFile(certPath("server"), cert);
    await Deno.copyFile(keyPath("server"), key);
    await using t = await startTestServer({
      tlsCert: cert,
      tlsKey: key,
      tlsClientCa: certPath("ca"),
    });
    // A new certificate without its new key: the pair does not match.
    await Deno.copyFile(certPath("server-2"), cert);
    await t.server.reload();
    const error = log.records().find((r) =>
      r.message === "TLS reload failed; keeping the old certificates"
    );
    assert.ok(error, log.lines.join("\n"));
    assert.equal(error.level, "ERROR");
    assert.match(String(error.error), /does not belong/);
    assert.equal(await servedSerial(t.addr), serialOf("server"));
    await using c = await connectAs(t.addr, "client-uri");
    await (await c.acquire("still-served")).release();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a reloaded client CA bundle is used from the next handshake", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const ca = `${dir}/clients.pem`;
    await Deno.copyFile(certPath("ca"), ca);
    await using t = await startTestServer({ ...serverTlsConfig(true), tlsClientCa: ca });
    await assert.rejects(connectAs(t.addr, "other-client"), ConnectionError);
    await Deno.writeTextFile(ca, certPem("ca") + certPem("other-ca"));
    await t.server.reload();
    await using other = await connectAs(t.addr, "other-client");
    const lock = await other.acquire("rotated");
    assert.equal(
      t.server.context.engine.getLock("rotated")?.holder?.identity,
      "spiffe://example.org/worker",
    );
    await lock.release();
    await using old = await connectAs(t.addr, "client-uri");
    await (await old.acquire("old-ca")).release();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// ---- the node socket transport --------------------------------------------

/** A node:tls server on port 0 whose first connection becomes a Transport. */
async function transportPair(): Promise<{
  client: Deno.TlsConn;
  transport: Transport;
  socket: tls.TLSSocket;
  close(): Promise<void>;
}> {
  const server = tls.createServer({ cert: certPem("server"), key: keyPem("server") });
  const accepted = Promise.withResolvers<tls.TLSSocket>();
  server.once("secureConnection", (socket: tls.TLSSocket) => accepted.resolve(socket));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  const client = await Deno.connectTls({ hostname: "127.0.0.1", port, caCerts: [certPem("ca")] });
  await client.handshake();
  const socket = await accepted.promise;
  const transport = nodeSocketTransport(socket, `127.0.0.1:${socket.remotePort}`, "");
  return {
    client,
    transport,
    socket,
    async close() {
      transport.close();
      try {
        client.close();
      } catch {
        // already closed
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

Deno.test("node socket transport: bytes read while they arrive come out whole and in order", async () => {
  const pair = await transportPair();
  try {
    const total = 8 * 1024 * 1024;
    const sent = new Uint8Array(total).map((_, i) => (i * 7 + (i >> 12)) & 0xff);
    const writing = (async () => {
      let offset = 0;
      while (offset < total) offset += await pair.client.write(sent.subarray(offset));
    })();
    const received = new Uint8Array(total);
    const buffer = new Uint8Array(4096);
    let offset = 0;
    while (offset < total) {
      const n = await pair.transport.read(buffer);
      assert.notEqual(n, null);
      received.set(buffer.subarray(0, n!), offset);
      offset += n!;
    }
    await writing;
    assert.deepEqual(received, sent);
  } finally {
    await pair.close();
  }
});

Deno.test("node socket transport: a peer that gets more than the read-queue limit ahead is disconnected", async () => {
  const pair = await transportPair();
  try {
    const chunk = new Uint8Array(256 * 1024);
    const writeFailed = (async () => {
      for (let i = 0; i < 64; i++) {
        let offset = 0;
        while (offset < chunk.length) offset += await pair.client.write(chunk.subarray(offset));
      }
    })().then(() => false, () => true);
    // Nobody reads the transport: past the limit the connection is closed, memory stays bounded.
    await eventually(() => pair.socket.destroyed, "the socket is destroyed", 5_000);
    assert.equal(await writeFailed, true, "the sender was cut off");
    await assert.rejects(pair.transport.read(new Uint8Array(16)), /bytes received and not read/);
    assert.ok(TLS_READ_QUEUE_BYTES_MAX < 64 * chunk.length);
  } finally {
    await pair.close();
  }
});

Deno.test("node socket transport: writes resolve with their length, end of stream reads null, close fails pending reads", async () => {
  const pair = await transportPair();
  try {
    const big = new Uint8Array(1024 * 1024).fill(9);
    const wrote = pair.transport.write(big);
    const buffer = new Uint8Array(64 * 1024);
    let got = 0;
    while (got < big.length) {
      const n = await pair.client.read(buffer);
      assert.notEqual(n, null);
      got += n!;
    }
    assert.equal(await wrote, big.length);
    assert.match(pair.transport.remoteAddr, /^127\.0\.0\.1:\d+$/);
    assert.equal(pair.transport.identity, "");

    const pending = pair.transport.read(new Uint8Array(16));
    await pair.client.closeWrite();
    assert.equal(await pending, null);

    const afterClose = pair.transport.read(new Uint8Array(16));
    assert.equal(await afterClose, null, "end of stream stays the end");
    pair.transport.close();
    await assert.rejects(pair.transport.write(new Uint8Array(1)), /closed/);
  } finally {
    await pair.close();
  }
});

Deno.test("node socket transport: close() fails a read in progress", async () => {
  const pair = await transportPair();
  try {
    const pending = pair.transport.read(new Uint8Array(16));
    pair.transport.close();
    await assert.rejects(pending, /closed/);
  } finally {
    await pair.close();
  }
});

Deno.test("/api/info reports the TLS mode the protocol listener really runs", async () => {
  for (
    const [config, expected] of [
      [{}, { tls: false, mtls: false }],
      [serverTlsConfig(false), { tls: true, mtls: false }],
      [serverTlsConfig(true), { tls: true, mtls: true }],
    ] as const
  ) {
    await using t = await startTestServer({ ...config, adminListen: "127.0.0.1:0" });
    const info = await (await fetch(`http://${t.server.adminAddr}/api/info`)).json();
    assert.deepEqual({ tls: info.config.tls, mtls: info.config.mtls }, expected);
  }
});
