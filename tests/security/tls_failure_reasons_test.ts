/**
 * Issue 19 item 11 (server side): a failed TLS handshake is logged with its reason and counted
 * by reason in `lockd_tls_handshake_failures_total{reason}`, beside the spec's unlabelled
 * `lockd_tls_handshake_errors_total` (unchanged: one per failed handshake). One case per reason
 * of the closed set, each on a real connection.
 */

import assert from "node:assert/strict";
import { connect } from "../../mod.ts";
import { parseHostPort } from "../../src/host_port.ts";
import {
  TLS_HANDSHAKE_FAILURE_REASONS,
  type TlsHandshakeFailureReason,
} from "../../src/counters.ts";
import {
  type CertName,
  certPem,
  hostileClientTls,
  keyPem,
  serverTlsConfig,
} from "../fixtures/tls/certs.ts";
import { http } from "../admin/admin_helpers.ts";
import { captureDiagnosticLog } from "../log/capture.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A TLS client: trusts `ca`, presents `client` when given. */
async function tlsClient(addr: string, ca: CertName, client?: CertName): Promise<void> {
  const tls = client === undefined
    ? { ca: certPem(ca) }
    : { ca: certPem(ca), cert: certPem(client), key: keyPem(client) };
  try {
    const c = await connect({ addr, tls, reconnect: false });
    await c.close();
  } catch {
    // Refused: what the case is about.
  }
}

/** Raw bytes on a TCP connection, then (after `holdMs`) close. */
async function rawBytes(addr: string, bytes: number[], holdMs: number): Promise<void> {
  const at = parseHostPort(addr);
  const conn = await Deno.connect({ hostname: at.hostname, port: at.port });
  try {
    if (bytes.length > 0) await conn.write(new Uint8Array(bytes));
    await sleep(holdMs);
  } finally {
    conn.close();
  }
}

/** The start of a ClientHello record that announces 200 bytes and sends 2. */
const PARTIAL_CLIENT_HELLO = [0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00];

interface Case {
  name: string;
  mtls: boolean;
  reason: TlsHandshakeFailureReason;
  run: (addr: string) => Promise<void>;
}

const CASES: Case[] = [
  {
    name: "mTLS, no client certificate",
    mtls: true,
    reason: "no_client_certificate",
    run: (addr) => tlsClient(addr, "ca"),
  },
  {
    name: "mTLS, a certificate from another CA",
    mtls: true,
    reason: "client_certificate_rejected",
    run: (addr) => tlsClient(addr, "ca", "other-client"),
  },
  {
    name: "mTLS, an expired certificate from the trusted CA",
    mtls: true,
    reason: "client_certificate_rejected",
    run: (addr) => tlsClient(addr, "ca", "client-expired"),
  },
  {
    name: "mTLS, a verified certificate whose names cannot be read",
    mtls: true,
    reason: "client_certificate_unusable",
    run: async (addr) => {
      try {
        const c = await connect({ addr, tls: hostileClientTls("control-dns"), reconnect: false });
        await c.close();
      } catch {
        // Refused.
      }
    },
  },
  {
    name: "a client that trusts another CA refuses the server's certificate",
    mtls: false,
    reason: "server_certificate_rejected",
    run: (addr) => tlsClient(addr, "other-ca"),
  },
  {
    name: "a plaintext lockd client",
    mtls: true,
    reason: "not_tls",
    run: async (addr) => {
      await connect({ addr, reconnect: false }).then((c) => c.close(), () => {});
    },
  },
  {
    name: "an HTTP request",
    mtls: false,
    reason: "not_tls",
    run: (addr) => rawBytes(addr, [...new TextEncoder().encode("GET / HTTP/1.1\r\n\r\n")], 100),
  },
  {
    name: "a connection that sends nothing",
    mtls: true,
    reason: "timeout",
    run: (addr) => rawBytes(addr, [], 600),
  },
  {
    name: "half a ClientHello, then silence (counted once)",
    mtls: true,
    reason: "timeout",
    run: (addr) => rawBytes(addr, PARTIAL_CLIENT_HELLO, 900),
  },
  {
    name: "half a ClientHello, then the client closes",
    mtls: true,
    reason: "closed",
    run: (addr) => rawBytes(addr, PARTIAL_CLIENT_HELLO, 50),
  },
  {
    name: "a malformed handshake record",
    mtls: false,
    reason: "protocol",
    run: (addr) => rawBytes(addr, [0x16, 0x03, 0x01, 0x00, 0x05, 9, 9, 9, 9, 9], 200),
  },
];

for (const c of CASES) {
  Deno.test(`TLS handshake failure reason ${c.reason}: ${c.name}`, async () => {
    using log = captureDiagnosticLog("warn", "json");
    await using t = await startTestServer({
      ...serverTlsConfig(c.mtls),
      handshakeTimeoutMs: 300,
      opsListen: "127.0.0.1:0",
    });
    const counters = t.server.context.counters;
    await c.run(t.addr);
    await eventually(() => counters.tlsHandshakeErrors >= 1, "a failed handshake counted");
    // Long enough for a second report of the same connection to show up (it must not count).
    await sleep(400);
    const expected = Object.fromEntries(
      TLS_HANDSHAKE_FAILURE_REASONS.map((reason) => [reason, reason === c.reason ? 1 : 0]),
    );
    assert.deepEqual({ ...counters.tlsHandshakeFailures }, expected);
    assert.equal(counters.tlsHandshakeErrors, 1, "the spec's total counts one failure");
    const lines = log.records().filter((r) => r.message === "TLS handshake failed");
    assert.equal(lines.length, 1, JSON.stringify(lines));
    assert.equal(lines[0].failure, c.reason);
    assert.match(String(lines[0].remote_addr), /^127\.0\.0\.1:\d+$/);
    assert.ok(String(lines[0].reason).length > 0);
    // Exposed by reason, every reason present; the unlabelled total unchanged in name and value.
    const metrics = (await http(t.server.opsAddr!, "GET", "/metrics")).text;
    for (const reason of TLS_HANDSHAKE_FAILURE_REASONS) {
      const value = reason === c.reason ? 1 : 0;
      assert.ok(
        metrics.includes(`lockd_tls_handshake_failures_total{reason="${reason}"} ${value}\n`),
        `${reason} ${value}`,
      );
    }
    assert.ok(metrics.includes("\nlockd_tls_handshake_errors_total 1\n"));
  });
}
