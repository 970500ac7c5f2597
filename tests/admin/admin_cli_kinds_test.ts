/**
 * `lockd admin` with lock kinds and values (issue 22 item 6, issue 23 item 1): `locks` adds a
 * KIND column only when a listed lock is shared or a semaphore; `show` gives kind, limit, every
 * holder (slot or mode, token, value) and a lock-delay; values are printed with control and
 * invisible characters escaped, bytes that are not UTF-8 as base64.
 */

import assert from "node:assert/strict";
import { adminCommand } from "../../src/cli/admin.ts";
import type { Peer } from "../../src/core/types.ts";
import { parseLockRules } from "../../src/security/lock_rules.ts";
import type { ClaimOptions } from "../../src/service/claim_options.ts";
import { FramePort, settle } from "../service/service_harness.ts";
import { START, start } from "./admin_helpers.ts";

async function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const code = await adminCommand(args, {
    stdout: (text) => stdout += text,
    stderr: (text) => stderr += text,
  });
  return { code, stdout, stderr };
}

function table(rows: string[][]): string {
  const widths = rows[0].map((_, c) => Math.max(...rows.map((row) => [...row[c]].length)));
  return rows.map((row) =>
    row.map((cell, c) => c === row.length - 1 ? cell : cell.padEnd(widths[c] + 2)).join("") + "\n"
  ).join("");
}

type Server = Awaited<ReturnType<typeof start>>;

function opener(t: Server) {
  const service = t.server.context.service;
  let port = 47_000;
  return {
    open(clientName: string): Peer {
      const peer = service.openSession("", `127.0.0.1:${port++}`, new FramePort(), clientName);
      if ("code" in peer) throw new Error(peer.message);
      return peer;
    },
    acquire(peer: Peer, name: string, claim: Partial<ClaimOptions>) {
      service.acquire(peer, 1, name, 15_000, null, {
        mode: claim.mode ?? "exclusive",
        limit: claim.limit ?? 1,
        value: claim.value ?? null,
      });
    },
  };
}

const encoder = new TextEncoder();

Deno.test("lockd admin locks: a KIND column with owners (and limit) when a lock is shared or a semaphore; HOLDER is the oldest, +N the others", async () => {
  await using t = await start();
  const s = opener(t);
  const [a, b, c, d] = ["a", "b", "c", "d"].map((n) => s.open(n));
  s.acquire(a, "plain", {});
  s.acquire(b, "render", { limit: 8 });
  s.acquire(c, "render", { limit: 8 });
  s.acquire(d, "reports", { mode: "shared" });
  await settle();
  const engine = t.server.context.engine;
  const result = await run(["-admin", t.server.adminAddr!, "locks"]);
  assert.equal(result.code, 0, result.stderr);
  assert.equal(
    result.stdout,
    table([
      ["NAME", "KIND", "HOLDER", "TOKEN", "SINCE", "WAITERS"],
      ["plain", "exclusive", a.remoteAddr, String(engine.holderOf("plain")!.token), START, "0"],
      [
        "render",
        "semaphore 2/8",
        `${b.remoteAddr} +1`,
        String(engine.holderOf("render")!.token),
        START,
        "0",
      ],
      ["reports", "shared 1", d.remoteAddr, String(engine.holderOf("reports")!.token), START, "0"],
    ]),
  );
});

Deno.test("lockd admin show: kind, limit, every holder with its slot, token and value; values escaped or base64", async () => {
  await using t = await start();
  const s = opener(t);
  const [a, b] = [s.open("a"), s.open("b")];
  s.acquire(a, "render", { limit: 3, value: encoder.encode("job 7\x1b[2J\u202e") });
  t.scheduler.advance(2_000);
  s.acquire(b, "render", { limit: 3, value: new Uint8Array([0xff, 0xfe]) });
  await settle();
  const [first, second] = t.server.context.engine.holdersOf("render");
  const later = new Date(Date.parse(START) + 2_000).toISOString();
  const result = await run(["-admin", t.server.adminAddr!, "show", "render"]);
  assert.equal(result.code, 0, result.stderr);
  assert.equal(
    result.stdout,
    [
      "name      render",
      "kind      semaphore",
      "limit     3",
      `holder    ${a.remoteAddr}`,
      "client    a",
      `session   ${a.sessionId}`,
      "identity  (none)",
      `since     ${START} (held for 2s)`,
      "lease_ms  15000",
      `token     ${first.token}`,
      "value     job 7\\u001B[2J\\u202E",
      "holders   2",
      "waiters   0",
      "",
      "",
    ].join("\n") +
      table([
        ["#", "SLOT", "REMOTE_ADDR", "CLIENT", "SESSION", "TOKEN", "SINCE", "HELD", "VALUE"],
        [
          "1",
          "0",
          a.remoteAddr,
          "a",
          String(a.sessionId),
          String(first.token),
          START,
          "2s",
          "job 7\\u001B[2J\\u202E",
        ],
        [
          "2",
          "1",
          b.remoteAddr,
          "b",
          String(b.sessionId),
          String(second.token),
          later,
          "0s",
          "(2 bytes, not UTF-8) base64://4=",
        ],
      ]),
  );
  assert.ok(
    !result.stdout.includes("\x1b") && !result.stdout.includes("\u202e"),
    "nothing raw reaches the terminal",
  );
});

Deno.test("lockd admin show: a lock under a lock-delay says until when", async () => {
  await using t = await start();
  t.server.context.service.setLockRules(parseLockRules("lock-delay pay/** 5s", "x"));
  const s = opener(t);
  const [a, b] = [s.open("a"), s.open("b")];
  s.acquire(a, "pay/eu", {});
  s.acquire(b, "pay/eu", {});
  const released = await run(["-admin", t.server.adminAddr!, "release", "pay/eu"]);
  assert.equal(released.code, 0, released.stderr);
  const result = await run(["-admin", t.server.adminAddr!, "show", "pay/eu"]);
  assert.equal(
    result.stdout.split("\n").slice(0, 4).join("\n"),
    [
      "name     pay/eu",
      "holder   (none)",
      `delayed  until ${new Date(Date.parse(START) + 5_000).toISOString()} (lock-delay; ` +
      "nothing is granted)",
      "waiters  1",
    ].join("\n"),
  );
});
