/**
 * The client name in HELLO: by default it says program, host and process; whatever it is, it
 * fits the protocol's 256 bytes, cut between two characters.
 */
import assert from "node:assert/strict";
import { connect } from "../../mod.ts";
import {
  boundClientName,
  composeClientName,
  defaultClientName,
} from "../../src/client/client_name.ts";
import { CLIENT_NAME_BYTES_MAX } from "../../src/limits.ts";
import { VERSION } from "../../src/version.ts";
import { startTestServer } from "../helpers/start_server.ts";

const bytes = (text: string) => new TextEncoder().encode(text).length;

Deno.test("client name: <program>@<host>:<pid>, without the host when it cannot be read", () => {
  assert.equal(composeClientName("lockd-ts/1.2.3", "build-7", 4242), "lockd-ts/1.2.3@build-7:4242");
  assert.equal(composeClientName("lockd-run", "", 4242), "lockd-run:4242");
  assert.equal(composeClientName("lockd-run", "h", null), "lockd-run@h");
  // Under `deno test --allow-all` the host name may be read.
  assert.equal(
    defaultClientName("lockd-ts/1.2.3"),
    `lockd-ts/1.2.3@${Deno.hostname()}:${Deno.pid}`,
  );
});

Deno.test("client name: a long host is cut between two characters and the pid stays", () => {
  const host = "ü".repeat(200); // 400 bytes
  const name = composeClientName("lockd-ts/1.2.3", host, 4242);
  assert.ok(bytes(name) <= CLIENT_NAME_BYTES_MAX, `${bytes(name)} bytes`);
  assert.ok(name.startsWith("lockd-ts/1.2.3@üü"));
  assert.ok(name.endsWith("…:4242"), name);
  assert.equal(name.includes("\uFFFD"), false, "no character was split");
});

Deno.test("client name: any name is cut to 256 bytes, never inside a character or a surrogate pair", () => {
  for (const unit of ["a", "é", "€", "😀"]) {
    for (let count = 60; count <= 300; count += 7) {
      const name = unit.repeat(count);
      const bounded = boundClientName(name);
      assert.ok(bytes(bounded) <= CLIENT_NAME_BYTES_MAX);
      if (bytes(name) <= CLIENT_NAME_BYTES_MAX) {
        assert.equal(bounded, name);
      } else {
        assert.ok(bounded.endsWith("…"));
        assert.ok(name.startsWith(bounded.slice(0, -1)), "a prefix of whole characters");
        assert.equal(bounded.isWellFormed(), true);
      }
    }
  }
  assert.equal(boundClientName("a\uD800b"), "a\uFFFDb", "a lone surrogate cannot go as UTF-8");
});

Deno.test("connect() sends lockd-ts/<version>@<host>:<pid> by default, and a chosen name cut to fit", async () => {
  await using t = await startTestServer();
  await using plain = await connect({ addr: t.addr, reconnect: false });
  await using long = await connect({ addr: t.addr, reconnect: false, clientName: "x".repeat(300) });
  await using a = await plain.acquire("name/a");
  await using b = await long.acquire("name/b");
  const holderName = (lock: string) => t.server.context.engine.holderOf(lock)?.clientName;
  assert.equal(holderName(a.name), `lockd-ts/${VERSION}@${Deno.hostname()}:${Deno.pid}`);
  assert.equal(holderName(b.name), "x".repeat(253) + "…");
});
