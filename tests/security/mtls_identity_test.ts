/**
 * mTLS identities from hostile certificates, over real connections: SAN values
 * that a text-splitting parser would read as extra entries (commas, colons,
 * `URI:`, quotes) must not forge an identity, and names that differ only in
 * case where case does not matter (DNS names, URI scheme and host) must give
 * the one canonical identity the ACL is written against.
 */
import assert from "node:assert/strict";
import { type Client, connect, ConnectionError, LockdError } from "../../mod.ts";
import { type HostileCertName, hostileClientTls, serverTlsConfig } from "../fixtures/tls/certs.ts";
import { writeAcl } from "../helpers/acl_file.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";
import { captureDiagnosticLog } from "../log/capture.ts";

const ADMIN = "spiffe://example.org/admin";

/** The ACL reserves admin/** for the admin SPIFFE ID and lets everyone log who they are under who/**. */
const RULES = `allow  ${ADMIN}           admin/**
allow  worker.example.org   workers/**
allow  **                   who/**
`;

function connectAs(addr: string, cert: HostileCertName): Promise<Client> {
  return connect({ addr, tls: hostileClientTls(cert), reconnect: false });
}

const CASES: { cert: HostileCertName; identity: string; admin: boolean; why: string }[] = [
  {
    cert: "forged-dns",
    identity: "evil.example.org, uri:spiffe://example.org/admin",
    admin: false,
    why: "a DNS SAN whose value contains ', URI:spiffe://example.org/admin' is one DNS name",
  },
  {
    cert: "forged-email",
    identity: "mallory.example.org",
    admin: false,
    why: "an e-mail SAN whose value contains '\", URI:...' is never an identity, nor a URI",
  },
  {
    cert: "forged-quoted",
    identity: '"evil", uri:spiffe://example.org/admin',
    admin: false,
    why: "a DNS SAN that starts with a quoted string stays one DNS name",
  },
  {
    cert: "upper-uri",
    identity: ADMIN,
    admin: true,
    why: "the scheme and host of a URI SAN are case-insensitive",
  },
  {
    cert: "path-case-uri",
    identity: "spiffe://example.org/Admin",
    admin: false,
    why: "the path of a URI SAN keeps its case",
  },
  {
    cert: "upper-dns",
    identity: "worker.example.org",
    admin: false,
    why: "DNS SANs are case-insensitive",
  },
];

for (const c of CASES) {
  Deno.test(`mTLS identity: ${c.why} (${c.cert} → "${c.identity}")`, async () => {
    const dir = await Deno.makeTempDir();
    try {
      await using t = await startTestServer({
        ...serverTlsConfig(true),
        aclFile: await writeAcl(dir, RULES),
      });
      await using client = await connectAs(t.addr, c.cert);
      const who = await client.acquire("who/am-i");
      assert.equal(t.server.context.engine.getLock("who/am-i")?.holder?.identity, c.identity);
      await who.release();

      const admin = client.acquire("admin/switch");
      if (c.admin) {
        await (await admin).release();
      } else {
        await assert.rejects(admin, (error: unknown) => {
          assert.ok(error instanceof LockdError, String(error));
          assert.equal(error.codeName, "ACL_DENIED");
          return true;
        });
        assert.equal(t.server.context.engine.getLock("admin/switch"), undefined);
      }
      if (c.cert === "upper-dns") {
        // A rule written in lower case matches the upper-case DNS name.
        await (await client.acquire("workers/1")).release();
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  });
}

const REFUSED: { cert: HostileCertName; reason: RegExp; why: string }[] = [
  {
    cert: "control-dns",
    reason: /identity "bad\\u0001name\.example\.org" contains a control character/,
    why: "a DNS SAN with a control character",
  },
  {
    cert: "utf8-dns",
    reason: /DNS subject alternative name that is not 7-bit ASCII/,
    why: "a DNS SAN that is not 7-bit ASCII",
  },
];

for (const c of REFUSED) {
  Deno.test(`mTLS identity: a verified certificate with ${c.why} is refused, counted and logged; others are still served`, async () => {
    using log = captureDiagnosticLog("warn", "json");
    await using t = await startTestServer(serverTlsConfig(true));
    await assert.rejects(connectAs(t.addr, c.cert), ConnectionError);
    await eventually(() => t.server.context.counters.tlsHandshakeErrors === 1, "counted");
    const line = log.records().find((r) => r.message === "TLS handshake failed");
    assert.match(String(line?.reason), c.reason);
    assert.equal(t.server.context.engine.sessionIds().length, 0, "no session was started");
    await using good = await connectAs(t.addr, "upper-uri");
    await (await good.acquire("after")).release();
  });
}
