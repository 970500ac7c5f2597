/**
 * The TLS recipe of docs/operations.md ("A TLS recipe") works as written: its
 * shell block runs with openssl in a scratch directory, and the files it makes
 * serve a real mutual-TLS server whose clients get the identities the recipe
 * promises.
 */
import assert from "node:assert/strict";
import { connect } from "../../mod.ts";
import { markedBlock, readRepoFile, runBash } from "../helpers/doc_blocks.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

/** The recipe with its two names set to what a loopback test dials. */
function recipeForLoopback(): string {
  const recipe = markedBlock(readRepoFile("docs/operations.md"), "tls-recipe");
  assert.equal(recipe.lang, "sh");
  const script = recipe.body
    .replace(/^SERVER_DNS=.*$/m, "SERVER_DNS=localhost")
    .replace(/^SERVER_IP=.*$/m, "SERVER_IP=127.0.0.1");
  assert.match(script, /^SERVER_DNS=localhost$/m, "the recipe sets SERVER_DNS on its own line");
  assert.match(script, /^SERVER_IP=127\.0\.0\.1$/m, "the recipe sets SERVER_IP on its own line");
  return script;
}

Deno.test("TLS recipe: the files it makes serve mutual TLS with the promised identities", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-tls-recipe-" });
  try {
    const { stdout } = await runBash(recipeForLoopback(), { cwd: dir });
    assert.match(stdout, /server\.crt: OK/);
    const read = (name: string) => Deno.readTextFileSync(`${dir}/${name}`);
    const keyMode = Deno.statSync(`${dir}/ca.key`).mode! & 0o777;
    assert.equal(keyMode & 0o077, 0, `ca.key mode ${keyMode.toString(8)}: keys for the owner only`);

    await using t = await startTestServer({
      tlsCert: `${dir}/server.crt`,
      tlsKey: `${dir}/server.key`,
      tlsClientCa: `${dir}/ca.crt`,
    });
    assert.equal(t.server.context.counters.tlsHandshakeErrors, 0);
    for (
      const [client, identity] of [
        ["worker", "spiffe://example.org/worker"],
        ["batch", "batch.example.org"],
      ]
    ) {
      // Dial by the DNS name (SERVER_DNS) and by the address (SERVER_IP): both are in the SAN.
      for (const host of ["localhost", "127.0.0.1"]) {
        const port = t.addr.slice(t.addr.lastIndexOf(":") + 1);
        await using c = await connect({
          addr: `${host}:${port}`,
          tls: { ca: read("ca.crt"), cert: read(`${client}.crt`), key: read(`${client}.key`) },
          reconnect: false,
        });
        const lock = await c.acquire(`recipe/${client}`);
        assert.equal(
          t.server.context.engine.getLock(`recipe/${client}`)?.holder?.identity,
          identity,
        );
        await lock.release();
      }
    }
    await eventually(() => t.audit.lines.length === 8, "eight audit records");
    assert.equal(t.server.context.counters.tlsHandshakeErrors, 0);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("TLS rotation check of the runbook shows the certificate and does not count a failed handshake on mTLS", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-tls-check-" });
  try {
    await runBash(recipeForLoopback(), { cwd: dir });
    await using t = await startTestServer({
      tlsCert: `${dir}/server.crt`,
      tlsKey: `${dir}/server.key`,
      tlsClientCa: `${dir}/ca.crt`,
    });
    const check = markedBlock(readRepoFile("docs/operations.md"), "tls-rotation-check");
    const script = check.body.replace("lockd.example.org:7400", t.addr);
    assert.notEqual(script, check.body, "the check dials lockd.example.org:7400");
    const { stdout } = await runBash(script, { cwd: dir });
    const serial = await runBash("openssl x509 -noout -serial -in server.crt", { cwd: dir });
    assert.ok(stdout.startsWith(serial.stdout), `${stdout} shows ${serial.stdout}`);
    assert.match(stdout, /^notAfter=/m);
    // The handshake must complete; give the server a moment to count a failure if there was one.
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(t.server.context.counters.tlsHandshakeErrors, 0);
    // What the runbook warns about: the same check without a client certificate counts one.
    await runBash(`set +o pipefail\n${script.replace(/ -cert worker\.crt -key worker\.key/, "")}`, {
      cwd: dir,
    });
    await eventually(
      () => t.server.context.counters.tlsHandshakeErrors === 1,
      "one failed handshake",
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
