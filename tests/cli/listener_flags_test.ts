import assert from "node:assert/strict";
import { FlagError } from "../../src/cli/flags.ts";
import { serveConfigFromArgs } from "../../src/cli/serve.ts";

Deno.test("HTTP and TLS listener flags: defaults, values, and out-of-range values exit 2", () => {
  const defaults = serveConfigFromArgs([]);
  assert.equal(defaults.httpHeaderTimeoutMs, 10_000);
  assert.equal(defaults.httpIdleTimeoutMs, 90_000);
  assert.equal(defaults.httpConnectionsMax, 128);
  assert.equal(defaults.tlsHandshakeRatePerS, 500);
  const set = serveConfigFromArgs([
    "-http-header-timeout",
    "2s",
    "-http-idle-timeout=5m",
    "-max-http-connections",
    "16",
    "-max-tls-handshake-rate",
    "0",
  ]);
  assert.equal(set.httpHeaderTimeoutMs, 2_000);
  assert.equal(set.httpIdleTimeoutMs, 300_000);
  assert.equal(set.httpConnectionsMax, 16);
  assert.equal(set.tlsHandshakeRatePerS, 0, "0 removes the limit");
  for (
    const [args, message] of [
      [["-http-header-timeout", "50ms"], /-http-header-timeout must be between 100ms and 10m/],
      [["-http-header-timeout", "11m"], /-http-header-timeout must be between/],
      [["-http-idle-timeout", "500ms"], /-http-idle-timeout must be between 1s and 1h/],
      [["-http-idle-timeout", "2h"], /-http-idle-timeout must be between/],
      [["-max-http-connections", "0"], /-max-http-connections must be between 1 and 65536/],
      [["-max-tls-handshake-rate", "2000000"], /-max-tls-handshake-rate must be between 0/],
    ] as const
  ) {
    assert.throws(
      () => serveConfigFromArgs([...args]),
      (error: unknown) => error instanceof FlagError && message.test(error.message),
      args.join(" "),
    );
  }
});
