/**
 * The relations between the bounds of src/limits.ts and the flags of src/config.ts, asserted
 * the way TigerBeetle asserts its constants: a change to one number that breaks another's
 * reason fails here, not in production.
 */

import assert from "node:assert/strict";
import { TIMER_DELAY_MS_MAX } from "../src/clock.ts";
import { CONFIG_FLAGS, DEFAULT_CONFIG, validateConfig } from "../src/config.ts";
import { clockTokenFloor } from "../src/core/tokens.ts";
import * as limits from "../src/limits.ts";
import { encodeFrame, FRAME_HEADER_BYTES } from "../src/wire/frame.ts";
import { type Message, PROTOCOL_VERSION } from "../src/wire/messages.ts";
import { VERSION } from "../src/version.ts";

const NAME = "n".repeat(limits.LOCK_NAME_BYTES_MAX);
const U32_MAX = 0xffff_ffff;

/** Frame length as the length prefix counts it (type byte and payload). */
function frameBytes(message: Message): number {
  return encodeFrame(message).byteLength - FRAME_HEADER_BYTES;
}

Deno.test("limits: every X_DEFAULT lies within its X_MIN and X_MAX", () => {
  const values = limits as unknown as Record<string, number>;
  const checked: string[] = [];
  for (const [name, value] of Object.entries(values)) {
    if (!name.endsWith("_DEFAULT")) continue;
    const base = name.slice(0, -"_DEFAULT".length);
    if (`${base}_MIN` in values) {
      assert.ok(value >= values[`${base}_MIN`], `${name} >= ${base}_MIN`);
    }
    if (`${base}_MAX` in values) {
      assert.ok(value <= values[`${base}_MAX`], `${name} <= ${base}_MAX`);
    }
    checked.push(name);
  }
  assert.ok(checked.length >= 10, `${checked.length} defaults checked`);
  for (const [name, value] of Object.entries(values)) {
    if (!name.endsWith("_MIN")) continue;
    const max = values[`${name.slice(0, -"_MIN".length)}_MAX`];
    if (max !== undefined) assert.ok(value <= max, `${name} <= its _MAX`);
  }
});

Deno.test("limits: the largest frame the server sends is exactly SERVER_FRAME_BYTES_MAX and fits the smallest frame limit", () => {
  const longest = "m".repeat(limits.ERROR_MESSAGE_BYTES_MAX + 500);
  const error = frameBytes({
    type: "error",
    requestId: U32_MAX,
    code: 1,
    name: NAME,
    message: longest,
  });
  assert.equal(error, limits.SERVER_FRAME_BYTES_MAX, "an ERROR with a longest name and message");
  const others: Message[] = [
    {
      type: "welcome",
      version: PROTOCOL_VERSION,
      serverVersion: VERSION,
      sessionId: Number.MAX_SAFE_INTEGER,
      ioTimeoutMs: U32_MAX,
      leaseDefaultMs: U32_MAX,
      leaseMaxMs: U32_MAX,
    },
    { type: "queued", requestId: U32_MAX, name: NAME, position: U32_MAX },
    {
      type: "acquired",
      requestId: U32_MAX,
      name: NAME,
      token: limits.TOKEN_MAX,
      leaseMs: U32_MAX,
    },
    { type: "released", requestId: U32_MAX, name: NAME },
    { type: "heartbeat_ack", requestId: U32_MAX, renewed: U32_MAX },
  ];
  for (const message of others) {
    assert.ok(frameBytes(message) <= limits.SERVER_FRAME_BYTES_MAX, message.type);
  }
  assert.ok(limits.SERVER_FRAME_BYTES_MAX <= limits.FRAME_BYTES_MAX_MIN);
});

Deno.test("limits: every valid request fits the smallest frame limit, so no frame limit refuses one", () => {
  const requests: Message[] = [
    {
      type: "hello",
      version: PROTOCOL_VERSION,
      clientName: "c".repeat(limits.CLIENT_NAME_BYTES_MAX),
    },
    { type: "acquire", requestId: U32_MAX, name: NAME, leaseMs: U32_MAX, waitMs: U32_MAX },
    { type: "release", requestId: U32_MAX, name: NAME, token: limits.TOKEN_MAX },
    { type: "heartbeat", requestId: U32_MAX },
  ];
  for (const message of requests) {
    assert.ok(frameBytes(message) <= limits.FRAME_BYTES_MAX_MIN, message.type);
    assert.ok(frameBytes(message) <= limits.REQUEST_FRAME_BYTES_MAX, message.type);
  }
  // The largest requests are exactly that long, and a reader keeps a buffer for one of them.
  assert.equal(frameBytes(requests[1]), limits.REQUEST_FRAME_BYTES_MAX);
  assert.equal(
    limits.FRAME_READER_RETAINED_BYTES_MAX,
    FRAME_HEADER_BYTES + limits.REQUEST_FRAME_BYTES_MAX,
  );
});

Deno.test("limits: memory bounds hold together (claims, handshakes, the ration of large frames)", () => {
  assert.ok(limits.CLAIMS_PER_SESSION_MAX_DEFAULT <= limits.CLAIMS_MAX_DEFAULT);
  assert.ok(limits.WAITERS_PER_LOCK_MAX_DEFAULT <= limits.CLAIMS_MAX_DEFAULT);
  assert.ok(limits.HANDSHAKES_MAX_DEFAULT <= limits.SESSIONS_MAX_DEFAULT);
  // The ration holds many frames of the largest size at once.
  assert.ok(limits.PARTIAL_FRAME_BYTES_TOTAL_MAX >= 256 * limits.FRAME_BYTES_MAX_MAX);
  // A stalled frame is cut down long before its session would time out.
  assert.ok(limits.PARTIAL_FRAME_STALL_MS < limits.IO_TIMEOUT_MS_DEFAULT);
  assert.ok(limits.SESSION_WRITER_RETAINED_BYTES_MAX >= limits.SESSION_WRITER_BYTES_MIN);
});

Deno.test("limits: one largest frame fits a session's write buffer and a busy session's read buffer", () => {
  assert.ok(limits.FRAME_BYTES_MAX_MAX + FRAME_HEADER_BYTES <= limits.WRITE_BUFFER_BYTES_MAX);
  assert.ok(limits.READ_BUFFER_BYTES_MIN <= limits.READ_BUFFER_BYTES_MAX);
  assert.ok(limits.READ_BUFFER_BYTES_MAX >= limits.FRAME_BYTES_MAX_MAX);
});

Deno.test("limits: a longest value fits a LOCK_STATE and a RECLAIM in the frames clients read; a watch batch is a small part of a session's write buffer", () => {
  const value = new Uint8Array(limits.LOCK_VALUE_BYTES_MAX_MAX);
  const name = "n".repeat(limits.LOCK_NAME_BYTES_MAX);
  const clientName = "c".repeat(limits.CLIENT_NAME_BYTES_MAX);
  const state = encodeFrame({
    type: "lock_state",
    requestId: 1,
    event: "state",
    reason: "none",
    kind: "exclusive",
    limit: 1,
    queueLength: 0,
    owners: 1,
    name,
    holders: [{
      token: 1,
      heldMs: 0,
      leaseMs: 0,
      mode: "exclusive",
      slot: 0,
      identity: "i".repeat(4096),
      clientName,
      value,
    }],
  }, 2);
  assert.ok(state.length <= limits.FRAME_BYTES_MAX_MAX, `${state.length}`);
  assert.ok(limits.LOCK_VALUE_BYTES_MAX_DEFAULT <= limits.LOCK_VALUE_BYTES_MAX_MAX);
  assert.ok(
    limits.WATCH_BATCH_BYTES_MAX + limits.FRAME_BYTES_MAX_MAX <= limits.WRITE_BUFFER_BYTES_MAX / 4,
  );
  // The changes that may wait for one slow watcher (one per lock and watch) are no more than the
  // claims the server may store.
  assert.ok(
    limits.LOCKS_PER_WATCH_MAX * limits.WATCHES_PER_SESSION_MAX <= limits.CLAIMS_MAX_DEFAULT,
  );
  // Watch events never take most of the server's time, and never none of it.
  assert.ok(limits.WATCH_FANOUT_TIME_SHARE > 0 && limits.WATCH_FANOUT_TIME_SHARE <= 0.5);
  // A turn of a fan-out tells some sessions, and fewer than one watch may match locks.
  assert.ok(
    Number.isInteger(limits.WATCH_FANOUT_SESSIONS_PER_TURN) &&
      limits.WATCH_FANOUT_SESSIONS_PER_TURN >= 1 &&
      limits.WATCH_FANOUT_SESSIONS_PER_TURN < limits.LOCKS_PER_WATCH_MAX,
  );
});

Deno.test("limits: a heartbeat every lease/3 keeps even the shortest lease before its client-side deadline", () => {
  // The client's margin before its local deadline (docs/protocol.md, "Writing a client").
  const margin = (leaseMs: number) =>
    Math.max(leaseMs / 10, Math.min(limits.LEASE_MARGIN_MS_MIN, leaseMs / 4));
  for (const leaseMs of [limits.LEASE_MS_MIN, limits.LEASE_MS_DEFAULT, limits.LEASE_MS_MAX_MAX]) {
    const heartbeatEveryMs = Math.min(leaseMs, limits.IO_TIMEOUT_MS_MIN) / 3;
    assert.ok(heartbeatEveryMs < leaseMs - margin(leaseMs), `lease ${leaseMs} ms`);
  }
  // A heartbeat every io_timeout/3 keeps a silent-but-alive session open at the shortest timeout.
  assert.ok(limits.IO_TIMEOUT_MS_MIN / 3 >= 1);
});

Deno.test("limits: durations fit their wire fields (u32 ms) and one timer", () => {
  assert.ok(limits.LEASE_MS_MAX_MAX < U32_MAX, "ACQUIRED and WELCOME carry leases as u32");
  assert.ok(limits.IO_TIMEOUT_MS_MAX <= U32_MAX, "WELCOME carries the I/O timeout as u32");
  for (const row of CONFIG_FLAGS) {
    if (row.kind === "duration") {
      assert.ok(row.max !== undefined, `-${row.flag} has a maximum`);
      assert.ok(row.max <= TIMER_DELAY_MS_MAX, `-${row.flag} fits one setTimeout`);
    }
  }
});

Deno.test("limits: the default shutdown fits the systemd unit's 30 s stop timeout", () => {
  const worstMs = limits.SHUTDOWN_GRACE_MS_DEFAULT + limits.SESSIONS_CLOSE_MS_MAX +
    limits.AUDIT_CLOSE_TIMEOUT_MS;
  assert.ok(worstMs < 30_000, `${worstMs} ms`);
});

Deno.test("limits: fencing tokens from the clock floor stay below TOKEN_MAX for centuries", () => {
  assert.ok(clockTokenFloor(Date.UTC(2250, 0, 1)) + limits.TOKENS_PER_BLOCK < limits.TOKEN_MAX);
  assert.ok(limits.TOKEN_RETRY_MS_MIN < limits.TOKEN_RETRY_MS_MAX);
});

Deno.test("limits: an ACL line holds two longest globs quoted and fully escaped", () => {
  assert.ok(limits.ACL_LINE_BYTES_MAX >= 2 * (2 * limits.GLOB_BYTES_MAX + 2) + "allow  ".length);
  assert.ok(limits.HTTP_HEAD_BYTES_MAX >= 3 * limits.GLOB_BYTES_MAX + 1024, "?match= encoded");
});

Deno.test("config: every flag's default is valid and within the flag's bounds", () => {
  validateConfig(DEFAULT_CONFIG);
  for (const row of CONFIG_FLAGS) {
    assert.ok(row.key in DEFAULT_CONFIG, `-${row.flag} sets a config field`);
    const value = DEFAULT_CONFIG[row.key];
    if (row.kind === "bool") assert.equal(typeof value, "boolean", `-${row.flag} is a boolean`);
    if (row.kind === "string" || row.kind === "bool") continue;
    assert.ok((value as number) >= (row.min ?? 0), `-${row.flag} default >= min`);
    if (row.max !== undefined) assert.ok((value as number) <= row.max, `-${row.flag} <= max`);
  }
  const flags = CONFIG_FLAGS.map((row) => row.flag);
  assert.equal(new Set(flags).size, flags.length, "no flag twice");
});
