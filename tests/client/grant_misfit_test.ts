/**
 * grantMisfit's write-generation rule (src/client/look_checks.ts): a shared grant's generation is
 * below its token, but an owned RECLAIM's answer may carry the token itself (a downgraded owner's
 * generation is its own token, and its reclaim carries it over).
 */

import assert from "node:assert/strict";
import { grantMisfit } from "../../src/client/look_checks.ts";
import type { Acquired } from "../../src/wire/messages.ts";

const shared = (token: number, writeGeneration: number): Acquired => ({
  type: "acquired",
  requestId: 1,
  name: "doc",
  token,
  leaseMs: 1_000,
  mode: "shared",
  limit: 1,
  slot: 0,
  writeGeneration,
});

Deno.test("grantMisfit: a shared grant's write generation is below its token; an owned RECLAIM's answer may equal it, never pass it", () => {
  const acquire = { mode: "shared" as const, limit: 0, slot: null };
  const reclaim = { mode: "shared" as const, limit: 1, slot: 0 };
  assert.equal(grantMisfit(shared(9, 7), acquire), null);
  assert.match(grantMisfit(shared(9, 9), acquire) ?? "", /not below its own token 9/);
  assert.equal(grantMisfit(shared(9, 9), reclaim), null, "a downgraded owner's reclaim");
  assert.match(grantMisfit(shared(9, 10), reclaim) ?? "", /not below its own token 9/);
});
