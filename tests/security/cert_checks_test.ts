/**
 * Start-up checks of the server's certificates (issue 13.3): each mistake
 * that makes every client refuse the server stops the start with the file
 * named and what to do; softer findings are warnings.
 */
import assert from "node:assert/strict";
import { runLockd } from "../../bench/lockd_proc.ts";
import { X509Certificate } from "node:crypto";
import { readCertificateProfile } from "../../src/security/cert_checks.ts";
import { loadServerTls, TlsConfigError } from "../../src/security/tls.ts";
import { type CertName, certPath, certPem, keyPath } from "../fixtures/tls/certs.ts";
import { captureDiagnosticLog } from "../log/capture.ts";
import { runBash } from "../helpers/doc_blocks.ts";
import { startTestServer } from "../helpers/start_server.ts";

const DAY_MS = 86_400_000;
const serverNotBefore = Date.parse(new X509Certificate(certPem("server")).validFrom);
const serverNotAfter = Date.parse(new X509Certificate(certPem("server")).validTo);

async function refusal(
  cert: CertName,
  options: { key?: CertName; nowMs?: number; clientCa?: CertName } = {},
): Promise<string> {
  const error = await loadServerTls({
    cert: certPath(cert),
    key: keyPath(options.key ?? cert),
    clientCa: options.clientCa === undefined ? undefined : certPath(options.clientCa),
    nowMs: options.nowMs,
  }).then(() => null, (e) => e);
  assert.ok(error instanceof TlsConfigError, `expected a TlsConfigError, got ${error}`);
  return error.message;
}

Deno.test("cert checks: the test server certificate passes without warnings", async () => {
  const material = await loadServerTls({
    cert: certPath("server"),
    key: keyPath("server"),
    clientCa: certPath("ca"),
    listenHost: "127.0.0.1",
  });
  assert.deepEqual(material.warnings, []);
});

Deno.test("cert checks: a CA used as the server certificate is refused, naming CaUsedAsEndEntity and the fix", async () => {
  const message = await refusal("ca");
  assert.match(message, /"[^"]*ca\.pem" \(-tls-cert\) is a CA certificate/);
  assert.match(message, /CaUsedAsEndEntity/);
  assert.match(message, /basicConstraints=critical,CA:FALSE/);
  assert.match(message, /A TLS recipe/);
});

Deno.test("cert checks: an expired certificate is refused with its end date", async () => {
  const message = await refusal("server", { nowMs: serverNotAfter + DAY_MS });
  assert.match(message, /\(-tls-cert\) expired at .* \(now /);
  assert.match(message, /renewed certificate/);
});

Deno.test("cert checks: a certificate not valid yet is refused, pointing at the clock", async () => {
  const message = await refusal("server", { nowMs: serverNotBefore - DAY_MS });
  assert.match(message, /is not valid before .* \(now /);
  assert.match(message, /clock/);
});

Deno.test("cert checks: a certificate expiring within 14 days is a warning", async () => {
  const material = await loadServerTls({
    cert: certPath("server"),
    key: keyPath("server"),
    nowMs: serverNotAfter - 3 * DAY_MS,
  });
  assert.equal(material.warnings.length, 1);
  assert.match(material.warnings[0], /expires at .* \(in 3 days\)/);
});

Deno.test("cert checks: a key that does not belong to the certificate names both files and the fix", async () => {
  const message = await refusal("server", { key: "server-2" });
  assert.match(message, /does not belong to the certificate/);
  assert.match(message, /openssl pkey -pubout/);
});

Deno.test("cert checks: a client certificate as server certificate: no serverAuth, no DNS/IP SAN", async () => {
  const message = await refusal("client-cn");
  assert.match(message, /extendedKeyUsage without serverAuth/);
  assert.match(message, /no DNS or IP subjectAltName/);
});

Deno.test("cert checks: a -tls-client-ca that is not a CA is refused", async () => {
  const message = await refusal("server", { clientCa: "client-uri" });
  assert.match(message, /\(-tls-client-ca\) is not a CA certificate/);
});

Deno.test("cert checks: a certificate that does not name the listen host is a warning, logged at start", async () => {
  const material = await loadServerTls({
    cert: certPath("server"),
    key: keyPath("server"),
    listenHost: "192.0.2.7",
  });
  assert.equal(material.warnings.length, 1);
  assert.match(material.warnings[0], /does not name the listen address 192\.0\.2\.7/);
  // Wildcard listen addresses say nothing about the name clients dial: no warning.
  for (const listenHost of ["0.0.0.0", "::"]) {
    const quiet = await loadServerTls({
      cert: certPath("server"),
      key: keyPath("server"),
      listenHost,
    });
    assert.deepEqual(quiet.warnings, []);
  }
  using log = captureDiagnosticLog("info", "json");
  await using _ = await startTestServer({
    listen: "127.0.0.1:0",
    tlsCert: certPath("server"),
    tlsKey: keyPath("server"),
  });
  assert.ok(!log.records().some((r) => r.message === "TLS certificate warning"));
});

Deno.test("cert checks: an X.509 v1 certificate is refused", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-cert-v1-" });
  try {
    await runBash(
      `openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
         -keyout v1.key -out v1.csr 2>/dev/null
       openssl x509 -req -in v1.csr -signkey v1.key -days 30 -out v1.crt 2>/dev/null`,
      { cwd: dir },
    );
    const der = new X509Certificate(Deno.readTextFileSync(`${dir}/v1.crt`)).raw;
    assert.equal(readCertificateProfile(new Uint8Array(der)).version, 1);
    const error = await loadServerTls({ cert: `${dir}/v1.crt`, key: `${dir}/v1.key` })
      .then(() => null, (e) => e);
    assert.ok(error instanceof TlsConfigError);
    assert.match(error.message, /X\.509 v1 certificate/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cert checks: lockd serve with a CA as its certificate exits 1 with the reason", async () => {
  // A real process: the reason goes to standard error through the diagnostic log's writer.
  const output = await runLockd([
    "serve",
    "-listen",
    "127.0.0.1:0",
    "-tls-cert",
    certPath("ca"),
    "-tls-key",
    keyPath("ca"),
    "-log-level",
    "error",
    "-data-dir",
    "",
  ]);
  assert.equal(output.code, 1);
  assert.match(
    output.stderr,
    /^lockd: The certificate in .* is a CA certificate/m,
  );
});
