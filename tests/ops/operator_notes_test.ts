/**
 * Lines an operator waits for (issue 13.8): a SIGHUP with nothing to reload
 * says so, and an admin API open to the network without a token is warned
 * about at start-up.
 */
import assert from "node:assert/strict";
import { adminExposureWarning } from "../../src/server/http_start.ts";
import { captureDiagnosticLog } from "../log/capture.ts";
import { startTestServer } from "../helpers/start_server.ts";

Deno.test("SIGHUP without an ACL file or TLS logs that there is nothing to reload", async () => {
  using log = captureDiagnosticLog("info", "json");
  await using t = await startTestServer();
  await t.server.reload();
  assert.ok(
    log.records().some((r) =>
      r.message ===
        "SIGHUP: nothing to reload (no -acl-file, no -lock-rules-file and no TLS certificates)"
    ),
    log.lines.join("\n"),
  );
});

Deno.test("an admin API on a non-loopback address without a token is warned about", () => {
  for (const host of ["0.0.0.0", "::", "10.0.3.5", "lockd.example.org"]) {
    assert.match(adminExposureWarning(host, false) ?? "", /without a token.*-admin-token-file/);
    assert.equal(adminExposureWarning(host, true), null, `${host} with a token`);
  }
  for (const host of ["127.0.0.1", "127.1.2.3", "::1", "localhost"]) {
    assert.equal(adminExposureWarning(host, false), null, host);
  }
});

Deno.test("an admin API on loopback without a token starts without the warning", async () => {
  using log = captureDiagnosticLog("info", "json");
  await using _ = await startTestServer({ adminListen: "127.0.0.1:0" });
  assert.ok(log.records().some((r) => r.message === "admin API started"));
  assert.ok(!log.records().some((r) => String(r.message).includes("without a token")));
});
