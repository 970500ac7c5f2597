/**
 * A holder's value (issue 23 item 1, the engine's part): carried by ACQUIRE, replaced by its
 * holder with its token, ended with the ownership, bounded by `valueBytesMax`.
 */

import assert from "node:assert/strict";
import { bytes, harness, text } from "./engine_harness.ts";

Deno.test("an ACQUIRE's value becomes the holder's value at its grant, also after waiting", () => {
  const h = harness();
  const [a, b] = [h.open(), h.open()];
  assert.deepEqual(h.acquire(a, "leader", { value: bytes("10.0.0.1:80") }), [
    "granted s1 leader token=1 lease=10000 waited=0 value=10.0.0.1:80",
  ]);
  assert.deepEqual(h.acquire(b, "leader", { value: bytes("10.0.0.2:80") }), [
    "queued s2 leader pos=1",
  ]);
  assert.equal(text(h.engine.view.getLock("leader")!.holder!.value), "10.0.0.1:80");
  assert.deepEqual(h.release(a, "leader", 1), [
    "ended s1 leader token=1 graceful held=0",
    "granted s2 leader token=2 lease=10000 waited=0 value=10.0.0.2:80",
  ], "the value ended with its ownership; the next holder brings its own");
});

Deno.test("setValue replaces the holder's value; a stale token, a waiter or a stranger gets not_owner", () => {
  const h = harness();
  const [a, b, c] = [h.open(), h.open(), h.open()];
  h.acquire(a, "leader");
  h.acquire(b, "leader");
  const setValue = (peer: typeof a, token: number, value: string | null) =>
    h.step(() =>
      h.engine.setValue(h.now(), {
        sessionId: peer.sessionId,
        requestId: 5,
        name: "leader",
        token,
        value: value === null ? null : bytes(value),
      })
    );
  const version = h.engine.viewVersion;
  assert.deepEqual(setValue(a, 1, "v1"), ["value s1 leader token=1 v1"]);
  assert.ok(h.engine.viewVersion > version, "a value change is a change of the lock's view");
  assert.deepEqual(setValue(a, 9, "v2"), ["rejected s1 leader not_owner"]);
  assert.deepEqual(setValue(b, 0, "v2"), ["rejected s2 leader not_owner"]);
  assert.deepEqual(setValue(c, 1, "v2"), ["rejected s3 leader not_owner"]);
  assert.equal(text(h.engine.view.holderOf("leader")!.value), "v1");
  assert.deepEqual(setValue(a, 1, ""), ["value s1 leader token=1 -"], "an empty value is none");
  assert.equal(h.engine.view.holderOf("leader")!.value, null);
  h.release(a, "leader", 1);
  assert.deepEqual(setValue(a, 1, "late"), ["rejected s1 leader not_owner"], "ended with it");
});

Deno.test("values over valueBytesMax are refused INVALID_ARGUMENT, on ACQUIRE and on setValue", () => {
  const h = harness({ valueBytesMax: 8 });
  const a = h.open();
  const problemOf = (events: ReturnType<typeof h.engine.acquire>) => {
    const [event] = events;
    return event.type === "rejected" && event.rejection.reason === "invalid_argument"
      ? event.rejection.problem
      : event.type;
  };
  const acquire = (value: string) =>
    problemOf(h.engine.acquire(h.now(), {
      sessionId: a.sessionId,
      requestId: 1,
      name: "k",
      leaseMs: 0,
      waitMs: null,
      value: bytes(value),
    }));
  assert.equal(
    acquire("123456789"),
    'Cannot acquire lock "k": its value is 9 bytes, more than the server\'s limit of 8',
  );
  assert.equal(h.engine.view.lockCount, 0);
  assert.equal(acquire("12345678"), "granted");
  assert.equal(
    problemOf(h.engine.setValue(h.now(), {
      sessionId: a.sessionId,
      requestId: 2,
      name: "k",
      token: 1,
      value: bytes("123456789"),
    })),
    'Cannot set the value of lock "k": its value is 9 bytes, more than the server\'s limit of 8',
  );
  h.engine.assertInvariants();
});

Deno.test("the engine keeps its own copy of a value", () => {
  const h = harness();
  const a = h.open();
  const buffer = bytes("mine");
  h.acquire(a, "k", { value: buffer });
  buffer[0] = 0x21;
  assert.equal(text(h.engine.view.holderOf("k")!.value), "mine");
});
