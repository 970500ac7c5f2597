/**
 * Issue 9.14: an ACQUIRE frame of exactly the frame limit is a frame like any other (its name is
 * too long to be a lock, so INVALID_ARGUMENT, and the session goes on); one byte more is
 * MALFORMED_FRAME and closes. `lockd_protocol_errors_total` counts ERROR frames that are sent,
 * never one that was decided and then could not be (its session was gone first).
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import type { ServerConfig } from "../../src/config.ts";
import { AUDIT_RETRY_MS, FRAME_BYTES_MAX_DEFAULT, FRAME_BYTES_MAX_MIN } from "../../src/limits.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import type { ServerCounters } from "../../src/counters.ts";
import { certPem, serverTlsConfig } from "../fixtures/tls/certs.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

/** ACQUIRE body bytes besides the name: type 1 + request id 4 + lease 4 + wait 4 + name length 2. */
const ACQUIRE_FIXED_BYTES = 15;

/** An ACQUIRE frame whose body (length prefix excluded) is exactly `frameBytes` long. */
function acquireFrame(requestId: number, frameBytes: number): Uint8Array {
  const nameBytes = frameBytes - ACQUIRE_FIXED_BYTES;
  const frame = new Uint8Array(4 + frameBytes);
  const view = new DataView(frame.buffer);
  view.setUint32(0, frameBytes);
  frame[4] = 0x10; // ACQUIRE
  view.setUint32(5, requestId);
  view.setUint32(9, 0); // lease: the default
  view.setUint32(13, 0); // wait: try-lock
  view.setUint16(17, nameBytes);
  frame.fill(0x78, 19); // "xxx…"
  return frame;
}

function errorsCounted(counters: ServerCounters): Record<string, number> {
  return Object.fromEntries(
    [...counters.protocolErrors].filter(([, n]) => n > 0).map(([code, n]) => [
      `0x${code.toString(16).padStart(2, "0")}`,
      n,
    ]),
  );
}

const transports: {
  name: string;
  config: Partial<ServerConfig>;
  connect: (addr: string) => Promise<RawClient>;
}[] = [
  { name: "TCP", config: {}, connect: (addr) => RawClient.connect(addr) },
  {
    name: "TLS",
    config: serverTlsConfig(false),
    connect: (addr) => RawClient.connectTls(addr, { caCerts: [certPem("ca")] }),
  },
];

for (const transport of transports) {
  for (const frameBytesMax of [FRAME_BYTES_MAX_MIN, 4096, FRAME_BYTES_MAX_DEFAULT]) {
    Deno.test(`${transport.name}, -max-frame-bytes ${frameBytesMax}: ACQUIRE frames of max-1 and max bytes get INVALID_ARGUMENT and the session goes on; max+1 gets MALFORMED_FRAME and closes; the counter counts the ERRORs received`, async () => {
      await using t = await startTestServer({ ...transport.config, frameBytesMax });
      const counters = t.server.context.counters;
      await using raw = await (await transport.connect(t.addr)).hello();
      // Both in one write, then each alone, so a frame that ends a read and one that does not
      // are both seen.
      const pair = new Uint8Array([
        ...acquireFrame(1, frameBytesMax - 1),
        ...acquireFrame(2, frameBytesMax),
      ]);
      await raw.sendBytes(pair);
      await raw.sendBytes(acquireFrame(3, frameBytesMax));
      for (const requestId of [1, 2, 3]) {
        const reply = await raw.next();
        assert.ok(reply?.type === "error", `reply to ${requestId}: ${reply?.type}`);
        assert.equal(reply.code, WIRE_CODES.INVALID_ARGUMENT.code);
        assert.equal(reply.requestId, requestId);
        assert.ok(reply.name.startsWith("xxx") && reply.name.endsWith("…"));
      }
      await raw.send({ type: "heartbeat", requestId: 4 });
      assert.deepEqual(await raw.next(), { type: "heartbeat_ack", requestId: 4, renewed: 0 });
      assert.deepEqual(errorsCounted(counters), { "0x0b": 3 });

      await raw.sendBytes(acquireFrame(5, frameBytesMax + 1));
      const refused = await raw.next();
      assert.ok(refused?.type === "error" && refused.code === WIRE_CODES.MALFORMED_FRAME.code);
      assert.equal(refused.requestId, 0);
      assert.match(refused.message, new RegExp(`length ${frameBytesMax + 1} exceeds the limit`));
      assert.equal(await raw.next(), null, "closed after MALFORMED_FRAME");
      assert.deepEqual(errorsCounted(counters), { "0x0b": 3, "0x01": 1 });
    });
  }
}

Deno.test("an ERROR whose session is gone before its audit record is written is not counted as sent", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer({}, { scheduler });
  const counters = t.server.context.counters;
  const raw = await RawClient.session(t.addr);
  await raw.send({ type: "acquire", requestId: 1, name: "jobs/a", leaseMs: 100, waitMs: 0 });
  assert.equal((await raw.next())?.type, "acquired");
  // The lease runs out while the audit log cannot be written: LEASE_EXPIRED waits for its record.
  t.audit.failing = true;
  scheduler.advance(100);
  await eventually(() => !t.server.context.audit.healthy, "the audit log failed");
  // The client leaves before the record is written: its LEASE_EXPIRED can never be sent.
  await raw[Symbol.asyncDispose]();
  await eventually(() => t.server.context.connections.size === 0, "session closed");
  t.audit.failing = false;
  scheduler.advance(AUDIT_RETRY_MS);
  await eventually(() => t.server.context.audit.healthy, "the audit log recovered");
  assert.ok(t.audit.records().some((r) => r.event === "release" && r.reason === "expired"));
  assert.deepEqual(errorsCounted(counters), {});
});
