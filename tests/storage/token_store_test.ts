import assert from "node:assert/strict";
import { join } from "node:path";
import { clockTokenFloor } from "../../src/core/tokens.ts";
import { openTokenIssuer, readHighWater, TOKEN_FILE_NAME } from "../../src/storage/token_store.ts";

Deno.test("a reopened data dir continues above every token issued before", () => {
  const dir = Deno.makeTempDirSync();
  try {
    // Wall clock 0: the clock floor is 0, so the file alone decides.
    const first = openTokenIssuer(dir, 0, 10);
    const issued = Array.from({ length: 25 }, () => first.next());
    assert.deepEqual(issued.slice(0, 3), [1, 2, 3]);
    assert.equal(readHighWater(dir), 30, "the third block is durable before token 21");
    const second = openTokenIssuer(dir, 0, 10);
    const next = second.next();
    assert.ok(next > Math.max(...issued), `${next} > ${Math.max(...issued)}`);
    assert.equal(next, 31);
    assert.equal(readHighWater(dir), 40);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("the clock floor keeps tokens growing when the token file is lost or old", () => {
  const dir = Deno.makeTempDirSync();
  try {
    const first = openTokenIssuer(dir, 5_000, 10);
    const before = first.next();
    assert.equal(before, clockTokenFloor(5_000) + 1);
    Deno.removeSync(join(dir, TOKEN_FILE_NAME));
    const afterLoss = openTokenIssuer(dir, 6_000, 10).next();
    assert.ok(afterLoss > before, `${afterLoss} > ${before}`);
    // A file ahead of the clock wins.
    Deno.writeTextFileSync(join(dir, TOKEN_FILE_NAME), "lockd-tokens 1\nhigh_water 9000000000\n");
    assert.equal(openTokenIssuer(dir, 6_000, 10).next(), 9_000_000_001);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("a corrupt token file stops the start instead of guessing", () => {
  const dir = Deno.makeTempDirSync();
  try {
    Deno.writeTextFileSync(join(dir, TOKEN_FILE_NAME), "garbage");
    assert.throws(() => openTokenIssuer(dir, Date.now()), /not a lockd token file/);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("without a data dir tokens start at a clock floor so a restart still grows", () => {
  const before = openTokenIssuer(null, 1_000_000);
  assert.equal(before.next(), clockTokenFloor(1_000_000) + 1);
  const later = openTokenIssuer(null, 1_000_001);
  assert.ok(later.next() > before.lastIssued);
  assert.ok(clockTokenFloor(Date.UTC(2255, 0, 1)) < Number.MAX_SAFE_INTEGER);
});
