/**
 * The reclaim window's part of the reclaim rule (src/cluster/reclaim_window.ts), table-tested:
 * which terms' tickets a new leader takes (a τ₋₂ ticket never; a τ₋₁ ticket only after a crash
 * inside the last window and only on locks that term did not write), the window's end, H and the
 * floors, locks granted afresh, and a planned hand-over's early end.
 */

import assert from "node:assert/strict";
import {
  parseHandover,
  parseTerms,
  ReclaimWindow,
  takeoverTerms,
  type TermsRecord,
} from "../../src/cluster/reclaim_window.ts";
import type { ReclaimClaim } from "../../src/service/leadership_gate.ts";

function windowOf(terms: TermsRecord, records: Record<string, [number, number]> = {}) {
  const entries = Object.entries(records);
  return new ReclaimWindow({
    term: 10,
    terms,
    loaded: {
      floors: new Map(entries.map(([name, [, floor]]) => [name, floor])),
      records: new Map(entries.map(([name, [term, floor]]) => [name, { term, floors: [floor] }])),
    },
    endsAtMs: 1_000,
    handover: null,
  });
}

function owned(name: string, term: number, token: number): ReclaimClaim {
  return { kind: "owned", name, term, token, slot: 0 };
}

Deno.test("reclaim window: the served term's tickets are taken; τ₋₁ only after a crash inside its window, on locks it did not write; τ₋₂ never", () => {
  const crashed = windowOf({ served: 7, closed: false, before: 5 }, {
    a: [7, 0],
    b: [5, 0],
    c: [7, 0],
  });
  assert.equal(crashed.check(owned("a", 7, 3), 0), null, "the served term");
  assert.equal(crashed.check(owned("b", 5, 3), 0), null, "τ₋₁, lock last written by τ₋₁");
  assert.equal(crashed.check(owned("c", 5, 3), 0), "term", "τ₋₁, but τ wrote the lock since");
  assert.equal(crashed.check(owned("b", 4, 3), 0), "term", "τ₋₂");
  assert.equal(crashed.leftMs(5, 0), 1_000);
  assert.equal(crashed.leftMs(4, 0), 0);

  const closed = windowOf({ served: 7, closed: true, before: 5 }, { b: [5, 0] });
  assert.equal(closed.check(owned("b", 5, 3), 0), "term", "τ₋₁ after τ closed its window");
  assert.equal(closed.leftMs(5, 0), 0);
  assert.equal(closed.leftMs(7, 0), 1_000);
});

Deno.test("reclaim window: owned claims need the lock in H above its floor, the window open, and no fresh grant of the lock", () => {
  const window = windowOf({ served: 7, closed: true, before: 0 }, { a: [7, 40], b: [7, 0] });
  assert.equal(window.check(owned("a", 7, 40), 0), "floor", "at the floor");
  assert.equal(window.check(owned("a", 7, 41), 0), null);
  assert.equal(window.check(owned("z", 7, 41), 0), "floor", "not in H");
  assert.equal(
    window.check({ kind: "queued", name: "z", term: 7, token: 0, slot: 0 }, 0),
    null,
    "a queued claim needs no record",
  );
  window.ended("a", 50, 0, false);
  assert.equal(window.check(owned("a", 7, 45), 0), "floor", "an ownership ended here above it");
  window.granted("b");
  assert.equal(window.check(owned("b", 7, 41), 0), "regranted");
  assert.equal(window.check(owned("a", 7, 51), 1_000), "window", "past its end");
  window.close();
  assert.equal(window.check(owned("a", 7, 51), 0), "window", "closed early");
});

Deno.test("reclaim window: floors are per slot: a semaphore slot's floor voids that slot's stale holder only; an invalid record voids every slot; a reader's end raises no floor", () => {
  const window = new ReclaimWindow({
    term: 10,
    terms: { served: 7, closed: true, before: 0 },
    loaded: {
      floors: new Map([["sem", 30], ["bad", Number.MAX_SAFE_INTEGER], ["doc", 0]]),
      records: new Map([["sem", { term: 7, floors: [0, 0, 30] }], ["doc", {
        term: 7,
        floors: [0],
      }]]),
    },
    endsAtMs: 1_000,
    handover: null,
  });
  const slot = (name: string, token: number, s: number): ReclaimClaim => ({
    kind: "owned",
    name,
    term: 7,
    token,
    slot: s,
  });
  assert.equal(window.check(slot("sem", 10, 0), 0), null, "slot 0 under slot 2's floor");
  assert.equal(window.check(slot("sem", 11, 1), 0), null, "slot 1 under slot 2's floor");
  assert.equal(window.check(slot("sem", 30, 2), 0), "floor", "slot 2's stale holder");
  assert.equal(window.check(slot("sem", 31, 2), 0), null, "slot 2's successor");
  assert.equal(window.check(slot("bad", 99, 3), 0), "floor", "a record that did not parse");
  window.ended("sem", 12, 1, false);
  assert.equal(window.check(slot("sem", 11, 1), 0), "floor", "an end here in slot 1");
  assert.equal(window.check(slot("sem", 10, 0), 0), null, "slot 0 untouched");
  window.ended("doc", 20, 0, true);
  assert.equal(window.check(slot("doc", 15, 0), 0), null, "an older reader after a reader's end");
});

Deno.test("reclaim window: a planned hand-over's list ends the window once every listed session resumed", () => {
  const window = new ReclaimWindow({
    term: 10,
    terms: { served: 7, closed: true, before: 0 },
    loaded: { floors: new Map(), records: new Map() },
    endsAtMs: 1_000,
    handover: { term: 7, sessions: [1, 2] },
  });
  assert.equal(window.handoverDone, false);
  assert.equal(window.resumed(6, 1), false, "another term's session");
  assert.equal(window.resumed(7, 1), false);
  assert.equal(window.resumed(7, 3), false, "not listed");
  assert.equal(window.resumed(7, 2), true);
  const stale = new ReclaimWindow({
    term: 10,
    terms: { served: 7, closed: true, before: 0 },
    loaded: { floors: new Map(), records: new Map() },
    endsAtMs: 1_000,
    handover: { term: 6, sessions: [] },
  });
  assert.equal(stale.handoverDone, false, "a list of an older term ends nothing");
});

Deno.test("terms and hand-over records from etcd: bad values read as none; a takeover writes what it took over from", () => {
  const none = { served: 0, closed: true, before: 0 };
  for (
    const text of [
      undefined,
      "",
      "{",
      "[]",
      '{"served":3}',
      '{"served":3,"closed":false,"before":3}',
    ]
  ) {
    assert.deepEqual(parseTerms(text), none, String(text));
  }
  assert.deepEqual(parseTerms('{"served":3,"closed":false,"before":2}'), {
    served: 3,
    closed: false,
    before: 2,
  });
  assert.deepEqual(takeoverTerms(9, { served: 3, closed: true, before: 2 }), {
    served: 9,
    closed: false,
    before: 3,
  });
  const mine = { served: 9, closed: false, before: 3 };
  assert.equal(takeoverTerms(9, mine), mine, "a retried takeover keeps its own record");
  assert.equal(parseHandover('{"term":0,"sessions":[]}'), null);
  assert.equal(parseHandover('{"term":4,"sessions":[-1]}'), null);
  assert.deepEqual(parseHandover('{"term":4,"sessions":[1,2]}'), { term: 4, sessions: [1, 2] });
});
