/**
 * Which web pages the admin API answers now that it serves a console
 * (issue 15): the console's own same-origin requests, and nothing from any
 * other page (cross-site request forgery), with the token and the Host check
 * as before. Then the console's files: embedded, served without a token
 * under a strict Content-Security-Policy, and gone with -admin-console=false.
 */

import assert from "node:assert/strict";
import { connect } from "../../mod.ts";
import { browserVerdict } from "../../src/admin/browser_policy.ts";
import { CONSOLE_ASSETS, CONSOLE_CSP } from "../../src/admin/console_assets.ts";
import { serveConfigFromArgs } from "../../src/cli/serve.ts";
import { rawRequest } from "../helpers/raw_http.ts";
import { http, start } from "./admin_helpers.ts";

const HOST = "127.0.0.1:7401";

/** [what, headers besides Host, verdict] */
const VERDICTS: [string, Record<string, string>, ReturnType<typeof browserVerdict>][] = [
  ["curl, lockd admin, server-side clients (neither header)", {}, "no_page"],
  ["an address typed into the address bar", { "sec-fetch-site": "none" }, "typed"],
  [
    "the console's own fetch (GET: no Origin)",
    { "sec-fetch-site": "same-origin" },
    "same_origin",
  ],
  [
    "the console's own POST",
    { origin: `http://${HOST}`, "sec-fetch-site": "same-origin" },
    "same_origin",
  ],
  [
    "the console behind a TLS proxy (https origin, same host and port)",
    { origin: `https://${HOST}`, "sec-fetch-site": "same-origin" },
    "same_origin",
  ],
  [
    "an old browser's POST from the console (Origin only)",
    { origin: `http://${HOST}` },
    "same_origin",
  ],
  [
    "a form POST from another site",
    { origin: "https://evil.example", "sec-fetch-site": "cross-site" },
    "foreign",
  ],
  ["another site, Origin only (old browser)", { origin: "https://evil.example" }, "foreign"],
  ["another site, Sec-Fetch-Site only", { "sec-fetch-site": "cross-site" }, "foreign"],
  [
    "another web app on localhost (same site, other port)",
    { origin: "http://127.0.0.1:3000", "sec-fetch-site": "same-site" },
    "foreign",
  ],
  ["same-site without Origin (a GET from a sibling)", { "sec-fetch-site": "same-site" }, "foreign"],
  [
    "a sandboxed frame or data: URL (Origin null)",
    { origin: "null", "sec-fetch-site": "cross-site" },
    "foreign",
  ],
  ["Origin null alone", { origin: "null" }, "foreign"],
  [
    "the right host on another port",
    { origin: "http://127.0.0.1:7402", "sec-fetch-site": "same-origin" },
    "foreign",
  ],
  [
    "a matching Origin that contradicts Sec-Fetch-Site",
    { origin: `http://${HOST}`, "sec-fetch-site": "cross-site" },
    "foreign",
  ],
  [
    "an Origin with a path (not an origin)",
    { origin: `http://${HOST}/x`, "sec-fetch-site": "same-origin" },
    "foreign",
  ],
  ["an Origin of another scheme", { origin: `ftp://${HOST}` }, "foreign"],
  ["an unknown Sec-Fetch-Site value", { "sec-fetch-site": "maybe" }, "foreign"],
];

for (const [what, headers, verdict] of VERDICTS) {
  Deno.test(`browser policy: ${what} → ${verdict}`, () => {
    const request = new Request(`http://${HOST}/api/locks/x/release`, {
      method: "POST",
      headers: { host: HOST, ...headers },
    });
    assert.equal(browserVerdict(request), verdict);
  });
}

Deno.test("browser policy: an Origin without a Host header is foreign (browsers always send Host)", () => {
  const request = new Request(`http://${HOST}/api/info`, { headers: { origin: `http://${HOST}` } });
  request.headers.delete("host");
  assert.equal(browserVerdict(request), "foreign");
});

Deno.test("the console's same-origin actions are answered; other pages' stay 403, with the token checked as before", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/token`, "s3cret\n");
    await using t = await start({ adminTokenFile: `${dir}/token` });
    const addr = t.server.adminAddr!;
    await using client = await connect({ addr: t.addr, reconnect: false });
    const bearer = { authorization: "Bearer s3cret" };
    const own = { origin: `http://${addr}`, "sec-fetch-site": "same-origin" };

    // A page of another site, even with the token (it cannot have it, but the rule stands alone).
    await client.acquire("csrf/a");
    const pages: Record<string, string>[] = [
      { origin: "https://evil.example", "sec-fetch-site": "cross-site" },
      { origin: "null" },
      { origin: `http://localhost:1`, "sec-fetch-site": "same-site" },
    ];
    for (const headers of pages) {
      const answer = await http(addr, "POST", "/api/locks/csrf%2Fa/release", {
        ...bearer,
        ...headers,
        "content-type": "application/x-www-form-urlencoded",
      });
      assert.equal(answer.status, 403, JSON.stringify(headers));
    }
    assert.notEqual(t.server.context.engine.getLock("csrf/a")?.holder, null, "still held");
    // The console itself: without the token 401, with it 200.
    assert.equal((await http(addr, "POST", "/api/locks/csrf%2Fa/release", own)).status, 401);
    const released = await http(addr, "POST", "/api/locks/csrf%2Fa/release", { ...bearer, ...own });
    assert.equal(released.status, 200, released.text);
    assert.equal(released.headers.get("cache-control"), "no-store");
    assert.equal(t.audit.records().filter((r) => r.event === "force_release").length, 1);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("with -admin-console=false no web page is answered, its own origin neither, and no console is served", async () => {
  await using t = await start({ adminConsole: false });
  const addr = t.server.adminAddr!;
  const own = { origin: `http://${addr}`, "sec-fetch-site": "same-origin" };
  assert.equal((await http(addr, "GET", "/api/info", own)).status, 403);
  assert.equal(
    (await http(addr, "GET", "/api/info", { "sec-fetch-site": "same-origin" })).status,
    403,
  );
  assert.equal((await http(addr, "GET", "/api/info", { "sec-fetch-site": "none" })).status, 200);
  assert.equal((await http(addr, "GET", "/api/info")).status, 200);
  for (const path of CONSOLE_ASSETS.keys()) {
    const answer = await http(addr, "GET", path);
    assert.equal(answer.status, 404, path);
  }
  assert.equal(serveConfigFromArgs(["-admin-console=false"]).adminConsole, false);
  assert.equal(serveConfigFromArgs([]).adminConsole, true);
});

Deno.test("the console's files are the files of src/admin/console/, served with a strict CSP and without a token", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/token`, "s3cret\n");
    await using t = await start({ adminTokenFile: `${dir}/token` });
    const addr = t.server.adminAddr!;
    const files = new Set<string>();
    for (const [path, asset] of CONSOLE_ASSETS) {
      const answer = await http(addr, "GET", path, { "sec-fetch-site": "same-origin" });
      assert.equal(answer.status, 200, path);
      const onDisk = await Deno.readTextFile(
        new URL(`../../src/admin/console/${asset.file}`, import.meta.url),
      );
      assert.equal(answer.text, onDisk, `${path} is ${asset.file}`);
      assert.equal(answer.headers.get("content-type"), asset.contentType);
      assert.equal(answer.headers.get("content-security-policy"), CONSOLE_CSP);
      assert.equal(answer.headers.get("x-frame-options"), "DENY");
      assert.equal(answer.headers.get("x-content-type-options"), "nosniff");
      files.add(asset.file);
    }
    // Every file of the directory is served (nothing left out of the embedding).
    for await (const entry of Deno.readDir(new URL("../../src/admin/console/", import.meta.url))) {
      assert.ok(files.has(entry.name), `${entry.name} is served`);
    }
    assert.match(CONSOLE_CSP, /script-src 'self';/);
    assert.match(CONSOLE_CSP, /frame-ancestors 'none'/);
    assert.match(CONSOLE_CSP, /require-trusted-types-for 'script'/);
    assert.doesNotMatch(CONSOLE_CSP, /unsafe/);
    // The data still needs the token.
    assert.equal(
      (await http(addr, "GET", "/api/info", { "sec-fetch-site": "same-origin" })).status,
      401,
    );
    assert.equal((await http(addr, "HEAD", "/")).status, 200);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the console page opens from a link on another site, but other sites cannot fetch or frame its files", async () => {
  await using t = await start();
  const addr = t.server.adminAddr!;
  const crossSite = { "sec-fetch-site": "cross-site" };
  const navigate = { ...crossSite, "sec-fetch-mode": "navigate", "sec-fetch-dest": "document" };
  assert.equal((await http(addr, "GET", "/", navigate)).status, 200);
  assert.equal(
    (await http(addr, "GET", "/", {
      ...crossSite,
      "sec-fetch-mode": "navigate",
      "sec-fetch-dest": "iframe",
    })).status,
    403,
  );
  assert.equal(
    (await http(addr, "GET", "/ui/console.js", {
      ...crossSite,
      "sec-fetch-mode": "no-cors",
      "sec-fetch-dest": "script",
    }))
      .status,
    403,
  );
  assert.equal(
    (await http(addr, "GET", "/", {
      origin: "https://evil.example",
      ...crossSite,
      "sec-fetch-mode": "cors",
    })).status,
    403,
  );
  // The data is not a navigation target from elsewhere.
  assert.equal((await http(addr, "GET", "/api/locks", navigate)).status, 403);
  // The Host check comes first, for the files too (DNS rebinding).
  const rebound = await rawRequest(
    addr,
    "GET / HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
  );
  assert.equal(rebound.status, 421);
});

Deno.test("the console's files are in the module graph of main.ts, so deno compile embeds them", async () => {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", "main.ts"],
    cwd: new URL("../../", import.meta.url),
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(output.success, new TextDecoder().decode(output.stderr));
  const graph = JSON.parse(new TextDecoder().decode(output.stdout)) as {
    modules: { specifier: string }[];
  };
  const specifiers = new Set(graph.modules.map((module) => module.specifier));
  for (const asset of CONSOLE_ASSETS.values()) {
    const url = new URL(`../../src/admin/console/${asset.file}`, import.meta.url).href;
    assert.ok(specifiers.has(url), `${asset.file} is in the graph`);
  }
});
