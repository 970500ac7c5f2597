import assert from "node:assert/strict";
import { connect, LockdError } from "../../mod.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { parseHostPort } from "../../src/host_port.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import { FrameWriter } from "../../src/wire/frame.ts";
import { FrameReader } from "../../src/wire/frame_reader.ts";
import { type Message, PROTOCOL_VERSION } from "../../src/wire/messages.ts";
import { clientTls, serverTlsConfig } from "../fixtures/tls/certs.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";
import { captureDiagnosticLog } from "../log/capture.ts";

Deno.test("a client that says nothing after connecting is closed after the handshake timeout", async () => {
  using log = captureDiagnosticLog("warn", "json");
  const scheduler = new ManualScheduler();
  await using t = await startTestServer({ handshakeTimeoutMs: 100 }, { scheduler });
  await using raw = await RawClient.connect(t.addr);
  await eventually(() => t.server.context.connections.size === 1, "connection accepted");
  scheduler.advance(99);
  assert.equal(t.server.context.counters.protocolErrors.get(0x0d), undefined, "not yet");
  scheduler.advance(1);
  const messages = await raw.drainUntilClosed(3_000);
  assert.deepEqual(messages.map((m) => m.type === "error" && m.code), [
    WIRE_CODES.HANDSHAKE_TIMEOUT.code,
  ]);
  assert.equal(t.server.context.counters.protocolErrors.get(0x0d), 1);
  await eventually(() => t.server.context.connections.size === 0, "connection closed");
  const line = log.records().find((r) => r.message === "handshake timed out");
  assert.match(String(line?.remote_addr), /^127\.0\.0\.1:\d+$/);
});

Deno.test("a client that trickles its HELLO slower than the handshake timeout is closed", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer({ handshakeTimeoutMs: 150 }, { scheduler });
  await using raw = await RawClient.connect(t.addr);
  const writer = new FrameWriter();
  writer.push({ type: "hello", version: PROTOCOL_VERSION, clientName: "slowloris" });
  const hello = writer.take();
  await eventually(() => t.server.context.connections.size === 1, "connection accepted");
  // One byte now, the rest never: the timeout runs from the connection, not from the last byte.
  scheduler.advance(100);
  await raw.sendBytes(hello.subarray(0, 1));
  await raw.sendBytes(hello.subarray(1, 2));
  scheduler.advance(50);
  const messages = await raw.drainUntilClosed(3_000);
  assert.equal(messages.length, 1);
  assert.equal(messages[0].type === "error" && messages[0].code, WIRE_CODES.HANDSHAKE_TIMEOUT.code);
});

Deno.test("over TLS, a client that finishes the TLS handshake but sends no HELLO is closed too", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer(
    { ...serverTlsConfig(true), handshakeTimeoutMs: 150 },
    { scheduler },
  );
  const at = parseHostPort(t.addr);
  const conn = await Deno.connectTls({
    hostname: at.hostname,
    port: at.port,
    ...tlsOf("client-uri"),
  });
  try {
    await conn.handshake();
    await eventually(() => t.server.context.connections.size === 1, "TLS session handed over");
    scheduler.advance(150);
    const reader = new FrameReader();
    const buffer = new Uint8Array(1024);
    const messages: Message[] = [];
    for (;;) {
      const n = await conn.read(buffer).catch(() => null);
      if (n === null) break;
      reader.push(buffer.subarray(0, n));
      for (let m = reader.next(); m !== null; m = reader.next()) messages.push(m);
    }
    assert.equal(messages.length, 1);
    assert.equal(
      messages[0].type === "error" && messages[0].code,
      WIRE_CODES.HANDSHAKE_TIMEOUT.code,
    );
  } finally {
    conn.close();
  }
  assert.equal(t.server.context.counters.tlsHandshakeErrors, 0, "the TLS handshake itself worked");
});

function tlsOf(client: "client-uri"): { caCerts: string[]; cert: string; key: string } {
  const options = clientTls(client);
  return { caCerts: [options.ca], cert: options.cert!, key: options.key! };
}

Deno.test("a flood of connections beyond -max-sessions is refused with LIMIT_EXCEEDED, counted, and existing sessions stay responsive", async () => {
  const SESSIONS_MAX = 4;
  const FLOOD = 40;
  await using t = await startTestServer({
    sessionsMax: SESSIONS_MAX,
    opsListen: "127.0.0.1:0",
  });
  await using holder = await connect({ addr: t.addr, reconnect: false });
  const fillers = await Promise.all(
    Array.from({ length: SESSIONS_MAX - 1 }, () => RawClient.session(t.addr)),
  );
  try {
    const lock = await holder.acquire("busy");
    // The flood: every one completes TCP, says HELLO, and must be turned away.
    const flood = Array.from({ length: FLOOD }, async () => {
      await using raw = await RawClient.connect(t.addr);
      await raw.send({ type: "hello", version: PROTOCOL_VERSION, clientName: "flood" });
      return await raw.drainUntilClosed();
    });
    // Meanwhile an existing session keeps working, promptly.
    const started = performance.now();
    for (let i = 0; i < 5; i++) {
      const other = await holder.acquire(`during-flood/${i}`);
      await other.release();
    }
    const roundTripsMs = performance.now() - started;
    const answers = await Promise.all(flood);
    for (const messages of answers) {
      assert.equal(messages.length, 1);
      const [message] = messages;
      assert.ok(message.type === "error", JSON.stringify(message));
      assert.equal(message.code, WIRE_CODES.LIMIT_EXCEEDED.code);
    }
    assert.ok(roundTripsMs < 2_000, `5 acquire/release round trips took ${roundTripsMs} ms`);
    assert.equal(t.server.context.counters.protocolErrors.get(0x09), FLOOD);
    assert.equal(t.server.context.engine.sessionIds().length, SESSIONS_MAX);
    assert.equal(lock.lost.aborted, false);

    const metrics = await (await fetch(`http://${t.server.opsAddr}/metrics`)).text();
    assert.match(
      metrics,
      new RegExp(`^lockd_protocol_errors_total\\{code="0x09"\\} ${FLOOD}$`, "m"),
    );
    assert.match(metrics, /^lockd_connections_accepted_total \d+$/m);

    // When a session leaves, a new client gets in.
    await fillers.pop()![Symbol.asyncDispose]();
    await eventually(
      () => t.server.context.engine.sessionIds().length === SESSIONS_MAX - 1,
      "a slot is free",
    );
    await using late = await connect({ addr: t.addr, reconnect: false });
    await (await late.acquire("late")).release();
    await lock.release();
  } finally {
    await Promise.all(fillers.map((f) => f[Symbol.asyncDispose]()));
  }
});

Deno.test("the mod.ts client sees the session limit as a retryable LIMIT_EXCEEDED", async () => {
  await using t = await startTestServer({ sessionsMax: 1 });
  await using first = await connect({ addr: t.addr, reconnect: false });
  await assert.rejects(connect({ addr: t.addr, reconnect: false }), (error: unknown) => {
    assert.ok(error instanceof LockdError, String(error));
    assert.equal(error.codeName, "LIMIT_EXCEEDED");
    assert.equal(error.retryable, true);
    return true;
  });
  assert.ok(first.sessionId > 0);
});

Deno.test("hostile lock names stay exact and on one line in the audit and diagnostic logs", async () => {
  using log = captureDiagnosticLog("debug", "text");
  await using t = await startTestServer();
  await using client = await connect({ addr: t.addr, reconnect: false });
  const names = [
    'quote"}{"event":"release',
    "back\\slash",
    "sp ace=1 lock=forged",
    "ünï/😀",
    "\u2028sep",
  ];
  for (const name of names) await (await client.acquire(name)).release();
  // Control characters never become lock names: they are refused before any log or record.
  await assert.rejects(client.acquire("line\nbreak"), (error: unknown) => {
    assert.ok(error instanceof LockdError);
    assert.equal(error.codeName, "INVALID_ARGUMENT");
    return true;
  });
  await eventually(() => t.audit.lines.length === names.length * 2, "audit records");
  assert.deepEqual(
    t.audit.lines.map((line) => JSON.parse(line).lock),
    names.flatMap((name) => [name, name]),
  );
  // Each record parsed above as one JSON line: no name could split or forge a line.
  assert.equal(t.audit.lines.length, names.length * 2);
  // Every diagnostic line is one well-formed line: timestamp, level, part.
  for (const line of log.lines) {
    assert.match(line, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z (DEBUG|INFO|WARN|ERROR) /);
  }
  const acquires = log.lines.filter((line) =>
    line.includes("frame received") && line.includes('type="acquire"')
  );
  for (const name of names) {
    assert.ok(
      acquires.some((line) => line.includes(` lock=${JSON.stringify(name)}`)),
      `lock ${JSON.stringify(name)} is quoted in the debug log`,
    );
  }
});
