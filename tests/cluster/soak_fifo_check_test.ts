/**
 * The milestone-2 soak's FIFO check (bench/soak_m2.ts `checkFifo`) on the records of the
 * full-size run's 13 false breaches (ride/104, term 16204): a waiter the cut-off leader granted
 * after the fault (its ACQUIRED never delivered) came back in the next term with a fresh ACQUIRE
 * and is not ahead any more; one that kept its claim through both terms still is.
 */

import assert from "node:assert/strict";
import {
  M2_SIZES,
  M2Population,
  type SoakContext,
  type WrittenRecord,
} from "../../bench/soak_m2.ts";

function population(breaches: string[]): M2Population {
  const ctx: SoakContext = {
    breach: (what) => breaches.push(what),
    count: () => 0,
    addrs: () => [],
    write: () => Promise.resolve(true),
    lastFault: () => undefined,
  };
  return new M2Population(ctx, M2_SIZES.ci);
}

type Row = [term: number, event: string, client: string, claim?: string, prevTerm?: number];

function written(rows: Row[]): WrittenRecord[] {
  return rows.map(([term, event, client, claim, prevTerm], index) => ({
    record: {
      event,
      lock: "ride/104",
      token: event === "reclaim" ? null : 1,
      term,
      client_name: client,
      ...(claim === undefined ? {} : { claim }),
      ...(prevTerm === undefined ? {} : { prev_term: prevTerm }),
    },
    node: "n",
    wallMs: 1_000 + index,
    index,
    file: "audit-test.jsonl",
  }));
}

/** The snapshot (term 15011): m2-ride-10 ahead of m2-ride-110; the cut at wall time 1000. */
function check(rows: Row[]): string[] {
  const breaches: string[] = [];
  const m2 = population(breaches);
  m2.snapshots.push({
    atMs: 0,
    faultIndex: 0,
    queues: new Map([["ride/104", ["m2-ride-10", "m2-ride-110"]]]),
  });
  m2.checkFifo(written(rows), [{ atMs: 10, atWallMs: 1_000, termBefore: 15011 }]);
  return breaches;
}

Deno.test("soak FIFO check: a claim granted after the cut and re-acquired has no place", () => {
  // audit-n3-7 / audit-n2-3: granted by the cut-off leader (never delivered), no RECLAIM in
  // 16170, then a queued RECLAIM in 16204 of the 16170 claim (a fresh ACQUIRE's).
  const breaches = check([
    [15011, "acquire", "m2-ride-10"],
    [15011, "release", "m2-ride-10"],
    [16170, "reclaim", "m2-ride-110", "queued", 15011],
    [16170, "reclaim", "m2-ride-210", "queued", 15011],
    [16204, "reclaim", "m2-ride-10", "queued", 16170],
    [16204, "reclaim", "m2-ride-210", "queued", 16170],
    [16204, "reclaim", "m2-ride-110", "queued", 16170],
    [16204, "acquire", "m2-ride-110"],
  ]);
  assert.deepEqual(breaches, []);
});

Deno.test("soak FIFO check: a place kept through a double fail-over is still judged", () => {
  const breaches = check([
    [16170, "reclaim", "m2-ride-10", "queued", 15011],
    [16170, "reclaim", "m2-ride-110", "queued", 15011],
    [16204, "reclaim", "m2-ride-10", "queued", 16170],
    [16204, "reclaim", "m2-ride-110", "queued", 16170],
    [16204, "acquire", "m2-ride-110"],
  ]);
  assert.deepEqual(breaches.length, 1);
  assert.deepEqual(
    breaches[0].startsWith("FIFO: ride/104: m2-ride-110 granted before m2-ride-10"),
    true,
  );
});

Deno.test("soak FIFO check: a claim granted in the term between has no place after it", () => {
  const breaches = check([
    [16170, "reclaim", "m2-ride-10", "queued", 15011],
    [16170, "acquire", "m2-ride-10"],
    [16170, "release", "m2-ride-10"],
    [16204, "reclaim", "m2-ride-10", "queued", 16170],
    [16204, "reclaim", "m2-ride-110", "queued", 16170],
    [16204, "acquire", "m2-ride-110"],
  ]);
  assert.deepEqual(breaches, []);
});
