import assert from "node:assert/strict";
import { FlagError, type FlagSpec, parseFlags } from "../../src/cli/flags.ts";
import { parseDurationMs } from "../../src/duration.ts";
import { serveConfigFromArgs } from "../../src/cli/serve.ts";

const SPECS: FlagSpec[] = [
  { name: "listen", kind: "string", help: "" },
  { name: "io-timeout", kind: "duration", help: "" },
  { name: "max-sessions", kind: "int", help: "" },
  { name: "json", kind: "bool", help: "" },
];

Deno.test("flags accept -flag value, -flag=value and the -- forms; the last repeat wins", () => {
  for (
    const args of [
      ["-listen", "a:1"],
      ["-listen=a:1"],
      ["--listen", "a:1"],
      ["--listen=a:1"],
      ["-listen", "x:2", "-listen", "a:1"],
    ]
  ) {
    assert.equal(parseFlags(args, SPECS).values.get("listen"), "a:1", args.join(" "));
  }
});

Deno.test("boolean flags take no value; positionals and -- are kept", () => {
  const parsed = parseFlags(["locks", "-json", "x", "--", "-listen", "y"], SPECS);
  assert.equal(parsed.values.get("json"), true);
  assert.deepEqual(parsed.positionals, ["locks", "x"]);
  assert.deepEqual(parsed.afterDoubleDash, ["-listen", "y"]);
  assert.equal(parseFlags(["-json=false"], SPECS).values.get("json"), false);
});

Deno.test("durations are Go-style", () => {
  const cases: [string, number | null][] = [
    ["0", 0],
    ["500ms", 500],
    ["30s", 30_000],
    ["1m30s", 90_000],
    ["2h", 7_200_000],
    ["1.5s", 1_500],
    ["30", null],
    ["s", null],
    ["-1s", null],
    ["10x", null],
  ];
  for (const [text, ms] of cases) assert.equal(parseDurationMs(text), ms, text);
});

Deno.test("bad command lines fail with one clear line", () => {
  const cases: [string[], RegExp][] = [
    [["-bogus"], /^flag provided but not defined: -bogus$/],
    [["-listen"], /^flag needs an argument: -listen$/],
    [["-io-timeout", "soon"], /invalid value "soon" for flag -io-timeout/],
    [["-max-sessions", "-3"], /invalid value "-3" for flag -max-sessions/],
    [["-json=maybe"], /invalid boolean value "maybe"/],
  ];
  for (const [args, message] of cases) {
    assert.throws(() => parseFlags(args, SPECS), (error: unknown) => {
      assert.ok(error instanceof FlagError);
      assert.match(error.message, message);
      return true;
    });
  }
});

Deno.test("serve flags map onto the configuration and are validated", () => {
  const config = serveConfigFromArgs([
    "-listen",
    "[::1]:7500",
    "-io-timeout=10s",
    "-max-lease",
    "1m",
    "-log-format",
    "json",
    "-admin-listen",
    "127.0.0.1:0",
  ]);
  assert.equal(config.listen, "[::1]:7500");
  assert.equal(config.ioTimeoutMs, 10_000);
  assert.equal(config.leaseMaxMs, 60_000);
  assert.equal(config.logFormat, "json");
  assert.equal(config.adminListen, "127.0.0.1:0");
  assert.equal(config.opsListen, null);
  const bad: [string[], RegExp][] = [
    [["-log-level", "loud"], /-log-level: want debug, info, warn, error/],
    [["-listen", "nowhere"], /"nowhere" is not a host:port address/],
    [["-io-timeout", "10ms"], /-io-timeout must be between 100ms and 1h/],
    [["-tls-cert", "a.pem"], /-tls-cert and -tls-key go together/],
    [["-tls-client-ca", "ca.pem"], /needs -tls-cert/],
    [["-default-lease", "10m"], /-default-lease must be between/],
    [["-max-frame-bytes", "100"], /-max-frame-bytes must be between 2058 and 65536/],
    [["extra"], /unexpected argument "extra"/],
  ];
  for (const [args, message] of bad) assert.throws(() => serveConfigFromArgs(args), message);
});

Deno.test("-audit-write-timeout takes a duration between 1ms and 10m (default 1s)", () => {
  assert.equal(serveConfigFromArgs([]).auditWriteTimeoutMs, 1_000);
  assert.equal(serveConfigFromArgs(["-audit-write-timeout", "250ms"]).auditWriteTimeoutMs, 250);
  assert.equal(serveConfigFromArgs(["-audit-write-timeout", "10m"]).auditWriteTimeoutMs, 600_000);
  for (const value of ["0s", "11m"]) {
    assert.throws(
      () => serveConfigFromArgs(["-audit-write-timeout", value]),
      /-audit-write-timeout must be between 1ms and 10m/,
    );
  }
});

Deno.test("every duration flag has a documented maximum and a longer value is refused (issue 9.12)", () => {
  const cases: [string, string, RegExp][] = [
    ["io-timeout", "600h", /^-io-timeout must be between 100ms and 1h$/],
    ["handshake-timeout", "600h", /^-handshake-timeout must be between 10ms and 5m$/],
    ["max-lease", "25h", /^-max-lease must be between 50ms and 24h$/],
    ["default-lease", "25h", /^-default-lease must be between 50ms and 24h$/],
    ["shutdown-grace", "11m", /^-shutdown-grace must be between 0s and 10m$/],
    ["audit-write-timeout", "11m", /^-audit-write-timeout must be between 1ms and 10m$/],
    ["http-header-timeout", "11m", /^-http-header-timeout must be between 100ms and 10m$/],
    ["http-idle-timeout", "2h", /^-http-idle-timeout must be between 1s and 1h$/],
  ];
  for (const [flag, value, message] of cases) {
    assert.throws(() => serveConfigFromArgs([`-${flag}`, value]), (error: unknown) => {
      assert.ok(error instanceof FlagError, flag);
      assert.match(error.message, message);
      return true;
    });
  }
  // The maxima themselves are accepted.
  const config = serveConfigFromArgs([
    "-io-timeout",
    "1h",
    "-max-lease",
    "24h",
    "-default-lease",
    "24h",
  ]);
  assert.deepEqual([config.ioTimeoutMs, config.leaseMaxMs], [3_600_000, 86_400_000]);
});
