/**
 * mTLS mistakes get a clear message on the client side (TypeScript client and `lockd run`): a
 * missing client certificate and one the server does not accept (another CA, expired) are told
 * apart and name what to check, against a real mutual-TLS listener.
 */
import assert from "node:assert/strict";
import { runLockd } from "../../bench/lockd_proc.ts";
import { connect, ConnectionError } from "../../mod.ts";
import {
  certPath,
  certPem,
  clientTls,
  keyPath,
  keyPem,
  serverTlsConfig,
} from "../fixtures/tls/certs.ts";
import { startTestServer } from "../helpers/start_server.ts";

const MISSING =
  /the server requires a client certificate \(mutual TLS\): give tls: \{ cert, key \}/;
const REFUSED =
  /the server did not accept the client certificate(?: \(TLS alert: [^)]+\))?: is it signed by a CA the server trusts \(its -tls-client-ca\)/;

Deno.test("mTLS: without a client certificate the client says the server requires one", async () => {
  await using t = await startTestServer(serverTlsConfig(true));
  await assert.rejects(
    connect({ addr: t.addr, tls: clientTls(), reconnect: false }),
    (e: unknown) => {
      assert.ok(e instanceof ConnectionError);
      assert.match(e.message, MISSING);
      assert.doesNotMatch(e.message, /closed the connection during the handshake/);
      return true;
    },
  );
});

Deno.test("mTLS: a client certificate from another CA, or an expired one, is named as not accepted", async () => {
  await using t = await startTestServer(serverTlsConfig(true));
  const otherCa = { ca: certPem("ca"), cert: certPem("other-client"), key: keyPem("other-client") };
  for (const tls of [otherCa, clientTls("client-expired")]) {
    await assert.rejects(connect({ addr: t.addr, tls, reconnect: false }), (e: unknown) => {
      assert.ok(e instanceof ConnectionError);
      assert.match(e.message, REFUSED);
      return true;
    });
  }
  // A good certificate still gets a session.
  await using client = await connect({
    addr: t.addr,
    tls: clientTls("client-uri"),
    reconnect: false,
  });
  assert.ok(client.sessionId > 0);
});

Deno.test("mTLS: lockd run names the missing -cert/-key, and a certificate the server refuses", async () => {
  await using t = await startTestServer(serverTlsConfig(true));
  const run = (...flags: string[]) =>
    runLockd(["run", "x", "-addr", t.addr, ...flags, "--", "true"]);
  const missing = await run("-ca", certPath("ca"));
  assert.equal(missing.code, 1);
  assert.match(
    missing.stderr,
    /lockd run: .*\(lockd run: -cert FILE -key FILE\)/,
  );
  const refused = await run(
    "-ca",
    certPath("ca"),
    "-cert",
    certPath("other-client"),
    "-key",
    keyPath("other-client"),
  );
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, REFUSED);
});
