/**
 * `lockd admin -wait`: while no node answers for the leader (a fail-over: standbys answer 503
 * `not-leader`, the old leader is gone), a request is asked again until `-wait` has passed, as
 * the clients' first connect is; 10 s by default with several `-admin` addresses, one try with
 * one. A fake fetch plays the nodes.
 */
import assert from "node:assert/strict";
import { adminCommand } from "../../src/cli/admin.ts";

const NOT_LEADER = JSON.stringify({
  type: "https://lockd.dev/problems/not-leader",
  title: "Not the leader",
  status: 503,
});

/** A fetch whose first `refusals` answers are 503 not-leader, then 200 `{"ok":true}`. */
function nodes(refusals: number): { fetch: typeof fetch; calls: () => number } {
  let calls = 0;
  const fetch = (() => {
    calls++;
    return Promise.resolve(
      calls <= refusals
        ? new Response(NOT_LEADER, {
          status: 503,
          headers: { "content-type": "application/problem+json" },
        })
        : new Response('{"ok":true}', { headers: { "content-type": "application/json" } }),
    );
  }) as typeof globalThis.fetch;
  return { fetch, calls: () => calls };
}

async function run(args: string[], fetch: typeof globalThis.fetch) {
  let stdout = "";
  let stderr = "";
  const code = await adminCommand(args, {
    stdout: (text) => stdout += text,
    stderr: (text) => stderr += text,
    fetch,
  });
  return { code, stdout, stderr };
}

Deno.test("lockd admin -wait: asked again while no node answers for the leader, until one does", async () => {
  const fake = nodes(3);
  const result = await run(["-admin", "127.0.0.1:1,127.0.0.1:2", "-json", "info"], fake.fetch);
  assert.equal(result.code, 0, result.stderr);
  assert.equal(result.stdout, '{"ok":true}\n');
  assert.equal(fake.calls(), 4, "two rounds over both nodes");
});

Deno.test("lockd admin -wait: one try with one address by default; -wait 0s ends after one round", async () => {
  const single = nodes(1);
  const result = await run(["-admin", "127.0.0.1:1", "-json", "info"], single.fetch);
  assert.equal(result.code, 1);
  assert.equal(single.calls(), 1);
  const pair = nodes(2);
  const none = await run(
    ["-admin", "127.0.0.1:1,127.0.0.1:2", "-wait", "0s", "-json", "info"],
    pair.fetch,
  );
  assert.equal(none.code, 1);
  assert.equal(pair.calls(), 2);
});

Deno.test("lockd admin -wait: gives up when -wait has passed", async () => {
  const fake = nodes(Infinity);
  const startedMs = performance.now();
  const result = await run(
    ["-admin", "127.0.0.1:1,127.0.0.1:2", "-wait", "1200ms", "-json", "info"],
    fake.fetch,
  );
  const tookMs = performance.now() - startedMs;
  assert.equal(result.code, 1);
  assert.ok(tookMs >= 1_150 && tookMs < 3_000, `${tookMs} ms`);
  assert.ok(fake.calls() >= 4, String(fake.calls()));
});
