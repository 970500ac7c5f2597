import assert from "node:assert/strict";
import fc from "fast-check";
import { connect } from "../../mod.ts";
import { startTestServer } from "../helpers/start_server.ts";
import { assertProblem } from "../helpers/problem.ts";

/** Statuses the admin API may answer; anything else (a 500 above all) is a defect. */
const DEFINED_STATUSES = new Set([200, 204, 400, 401, 403, 404, 405, 409]);

const SEGMENTS = [
  "api",
  "locks",
  "info",
  "release",
  "waiters",
  "held",
  "a%2Fb",
  "%ZZ",
  "%",
  "%E2%82",
  "%F0%9F%94%92",
  "..",
  ".",
  "",
  "[::1]:1",
  "%5B%3A%3A1%5D%3A1",
  "x".repeat(2000),
  "%00",
  "%0A",
  "?match=[",
  "?match=**",
  "?match=a%5Cb",
];

Deno.test("random admin requests get only defined statuses with problem+json errors, never a 500", async () => {
  await using t = await startTestServer({ adminListen: "127.0.0.1:0" });
  await using client = await connect({ addr: t.addr });
  const held = await client.acquire("held");
  const admin = t.server.adminAddr!;
  const methods = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"];
  let requests = 0;
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom(...methods),
      fc.oneof(
        // Shapes of real routes with hostile parts...
        fc.tuple(
          fc.constantFrom(
            "/api/locks/$",
            "/api/locks/$/release",
            "/api/locks/$/waiters/$",
            "/api/locks?match=$",
            "/api/info?$",
            "/api/locks/$/$",
          ),
          fc.oneof(fc.constantFrom(...SEGMENTS), fc.string({ maxLength: 12 })),
          fc.oneof(fc.constantFrom(...SEGMENTS), fc.string({ maxLength: 12 })),
        ).map(([shape, a, b]) => shape.replace("$", a).replace("$", b)),
        // ...and random paths.
        fc.array(fc.oneof(fc.constantFrom(...SEGMENTS), fc.string({ maxLength: 12 })), {
          maxLength: 6,
        }).map((segments) => "/" + segments.join("/")),
      ),
      fc.option(fc.string({ maxLength: 64 })),
      async (method, rawPath, body) => {
        const path = rawPath.replaceAll("#", "%23");
        let url: URL;
        try {
          url = new URL(`http://${admin}${path}`);
        } catch {
          return; // not a URL a client could send
        }
        requests++;
        const response = await fetch(url, {
          method,
          body: method === "GET" || method === "HEAD" ? undefined : body ?? undefined,
        });
        const text = await response.text();
        assert.ok(
          DEFINED_STATUSES.has(response.status),
          `${method} ${path} → ${response.status} ${text}`,
        );
        if (response.status >= 400 && method !== "HEAD") {
          const { status, headers } = response;
          await assertProblem({ status, headers, text }, status);
          assert.doesNotMatch(text, /at .*\.ts:\d+/, "no stack trace");
        }
      },
    ),
    { numRuns: 400, seed: Number(Deno.env.get("LOCKD_FUZZ_SEED") ?? 4242) },
  );
  assert.ok(requests > 300, `${requests} requests sent`);
  // The lock survived everything except an explicit release path, which the fuzz may hit.
  await held.release();
});
