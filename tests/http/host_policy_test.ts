/**
 * DNS rebinding: the admin API answers only Hosts that name the listener
 * (its bound address, localhost, names from -admin-allowed-hosts), and 421
 * otherwise. Unit cases for the policy, then a real server.
 */

import assert from "node:assert/strict";
import { serveConfigFromArgs } from "../../src/cli/serve.ts";
import { FlagError } from "../../src/cli/flags.ts";
import { HostPolicy, parseAllowedHosts, parseHost } from "../../src/http/host_policy.ts";
import { start } from "../admin/admin_helpers.ts";
import { assertProblem } from "../helpers/problem.ts";
import { rawRequest } from "../helpers/raw_http.ts";

const POLICY_CASES: [
  string,
  { listen: string; bound: string; allowed?: string[] },
  string,
  boolean,
][] = [
  [
    "the bound IPv4 address with its port",
    { listen: "127.0.0.1", bound: "127.0.0.1" },
    "127.0.0.1:7401",
    true,
  ],
  [
    "the bound IPv4 address without a port",
    { listen: "127.0.0.1", bound: "127.0.0.1" },
    "127.0.0.1",
    true,
  ],
  [
    "another port of the bound address (port forwards)",
    { listen: "127.0.0.1", bound: "127.0.0.1" },
    "127.0.0.1:9000",
    true,
  ],
  [
    "a non-canonical spelling of the bound address",
    { listen: "127.0.0.1", bound: "127.0.0.1" },
    "127.1:7401",
    true,
  ],
  ["localhost", { listen: "127.0.0.1", bound: "127.0.0.1" }, "localhost", true],
  [
    "localhost with a port, any case, trailing dot",
    { listen: "127.0.0.1", bound: "127.0.0.1" },
    "LocalHost.:7401",
    true,
  ],
  [
    "a rebinding attacker's name",
    { listen: "127.0.0.1", bound: "127.0.0.1" },
    "evil.example:7401",
    false,
  ],
  [
    "a subdomain of localhost (not localhost itself)",
    { listen: "127.0.0.1", bound: "127.0.0.1" },
    "a.localhost:7401",
    false,
  ],
  [
    "another loopback address",
    { listen: "127.0.0.1", bound: "127.0.0.1" },
    "127.0.0.2:7401",
    false,
  ],
  ["the bound IPv6 address in brackets", { listen: "::1", bound: "::1" }, "[::1]:7401", true],
  [
    "a long spelling of the bound IPv6 address",
    { listen: "::1", bound: "::1" },
    "[0:0:0:0:0:0:0:1]:7401",
    true,
  ],
  ["an IPv4 Host on an IPv6 listener", { listen: "::1", bound: "::1" }, "127.0.0.1:7401", false],
  ["IPv6 without brackets (not a valid Host)", { listen: "::1", bound: "::1" }, "::1", false],
  [
    "any IPv4 literal on a 0.0.0.0 listener",
    { listen: "0.0.0.0", bound: "0.0.0.0" },
    "10.1.2.3:7401",
    true,
  ],
  ["any IPv6 literal on a :: listener", { listen: "::", bound: "::" }, "[2001:db8::7]:7401", true],
  ["a name on a wildcard listener", { listen: "0.0.0.0", bound: "0.0.0.0" }, "evil.example", false],
  [
    "the name given in -admin-listen",
    { listen: "lockd-admin.internal", bound: "10.0.0.5" },
    "LOCKD-ADMIN.internal:7401",
    true,
  ],
  [
    "a name from -admin-allowed-hosts",
    { listen: "127.0.0.1", bound: "127.0.0.1", allowed: ["admin.example.org"] },
    "admin.example.org",
    true,
  ],
  [
    "an IPv6 literal from -admin-allowed-hosts",
    { listen: "127.0.0.1", bound: "127.0.0.1", allowed: ["2001:db8::1"] },
    "[2001:db8:0::1]:80",
    true,
  ],
  ["an empty Host", { listen: "127.0.0.1", bound: "127.0.0.1" }, "", false],
  ["a Host with user info", { listen: "127.0.0.1", bound: "127.0.0.1" }, "x@127.0.0.1", false],
  ["a Host with a path", { listen: "127.0.0.1", bound: "127.0.0.1" }, "127.0.0.1/x", false],
  ["a port out of range", { listen: "127.0.0.1", bound: "127.0.0.1" }, "127.0.0.1:70000", false],
];

for (const [name, listener, host, allowed] of POLICY_CASES) {
  Deno.test(`host policy: ${name} is ${allowed ? "answered" : "refused"}`, () => {
    const policy = new HostPolicy({
      listenHost: listener.listen,
      boundHost: listener.bound,
      allowedHosts: parseAllowedHosts((listener.allowed ?? []).join(",")),
    });
    assert.equal(policy.allows(host), allowed);
  });
}

Deno.test("parseHost canonicalizes names and addresses and keeps the port apart", () => {
  assert.deepEqual(parseHost("Example.ORG.:80"), {
    host: "example.org",
    port: 80,
    isIpLiteral: false,
  });
  assert.deepEqual(parseHost("[::FFFF:127.0.0.1]"), {
    host: "[::ffff:7f00:1]",
    port: null,
    isIpLiteral: true,
  });
  assert.equal(parseHost("a b"), null);
  assert.equal(parseHost("bücher.example"), null, "IDNs must arrive as xn-- names");
});

Deno.test("-admin-allowed-hosts: a comma list of hosts without ports; a bad entry exits 2", () => {
  const config = serveConfigFromArgs([
    "-admin-allowed-hosts",
    " Admin.Example.org, ::1 ,[2001:db8::1],",
  ]);
  assert.deepEqual(config.adminAllowedHosts, ["admin.example.org", "[::1]", "[2001:db8::1]"]);
  assert.deepEqual(serveConfigFromArgs([]).adminAllowedHosts, []);
  assert.throws(
    () => serveConfigFromArgs(["-admin-allowed-hosts", "admin.example.org:7401"]),
    (error: unknown) => error instanceof FlagError && /has a port/.test(error.message),
  );
  assert.throws(
    () => serveConfigFromArgs(["-admin-allowed-hosts", "a/b"]),
    (error: unknown) =>
      error instanceof FlagError && /"a\/b" is not a host name/.test(error.message),
  );
});

Deno.test("the admin API refuses a rebound Host with 421 and answers its own address, localhost and allowed names", async () => {
  await using t = await start({ adminAllowedHosts: ["Admin.Example.org"] });
  const addr = t.server.adminAddr!;
  const port = addr.split(":").pop();
  const get = (host: string | null, target = "/api/info", version = "1.1") =>
    rawRequest(
      addr,
      `GET ${target} HTTP/${version}\r\n${
        host === null ? "" : `Host: ${host}\r\n`
      }Connection: close\r\n\r\n`,
    );

  const refused = await get(`evil.example:${port}`);
  await assertProblem(refused, 421, "host-not-allowed", {
    title: "Host not allowed",
    // Issue 19 item 5: the refused Host is not echoed.
    detail:
      "The request's Host (or target authority) is not an address of this listener, localhost, " +
      "or a name in -admin-allowed-hosts",
  });
  // Refused before anything else: an unknown path and a force-release alike.
  assert.equal((await get("evil.example", "/nope")).status, 421);
  assert.equal((await get("evil.example", "/api/locks")).status, 421);
  // An absolute-form target names the host too, whatever the Host header says.
  assert.equal((await get(addr, "http://evil.example/api/info")).status, 421);

  for (const host of [addr, `localhost:${port}`, "localhost", "admin.example.org:8443"]) {
    const answer = await get(host);
    assert.equal(answer.status, 200, `Host ${host}: ${answer.body}`);
  }
  // HTTP/1.0 without Host (browsers always send one): answered.
  assert.equal((await get(null, "/api/info", "1.0")).status, 200);
  // The Origin refusal still applies to a good Host: another page's Origin is refused, the
  // console's own (the origin of that Host) is answered.
  const fromPage = (origin: string) =>
    rawRequest(
      addr,
      `GET /api/info HTTP/1.1\r\nHost: ${addr}\r\nOrigin: ${origin}\r\nConnection: close\r\n\r\n`,
    );
  assert.equal((await fromPage("http://evil.example")).status, 403);
  assert.equal((await fromPage(`http://localhost:${port}`)).status, 403, "another origin");
  assert.equal((await fromPage(`http://${addr}`)).status, 200);
  // A rebinding page is same-origin to itself: the Host check refuses it first.
  const rebound = await rawRequest(
    addr,
    `GET /api/info HTTP/1.1\r\nHost: evil.example:${port}\r\nOrigin: http://evil.example:${port}\r\n` +
      "Sec-Fetch-Site: same-origin\r\nConnection: close\r\n\r\n",
  );
  assert.equal(rebound.status, 421);
});

Deno.test("an admin API on [::1] answers [::1] and refuses other names", async () => {
  let t;
  try {
    t = await start({ adminListen: "[::1]:0" });
  } catch (error) {
    if (error instanceof Deno.errors.AddrNotAvailable) return; // no IPv6 loopback here
    throw error;
  }
  await using _ = t;
  const addr = t.server.adminAddr!;
  assert.match(addr, /^\[::1\]:\d+$/);
  const get = (host: string) =>
    rawRequest(addr, `GET /api/info HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
  assert.equal((await get(addr)).status, 200);
  assert.equal((await get("localhost")).status, 200);
  assert.equal((await get("127.0.0.1")).status, 421);
  assert.equal((await get("rebound.example")).status, 421);
});
