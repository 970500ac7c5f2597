/**
 * Live-server fuzz: hundreds of connections send random and mutated frames to
 * a real server while a well-behaved client keeps acquiring and releasing.
 * Afterwards the server has counted the bad frames, holds no session but the
 * good client's, and every lock is idle. The PRNG is seeded; a failure prints
 * the seed (LOCKD_FUZZ_SEED=<n> replays it).
 *
 * (The codec-level property "no input makes the reader buffer more than one
 * frame" is in tests/protocol/codec_test.ts.)
 */

import assert from "node:assert/strict";
import { connect } from "../../mod.ts";
import { FrameWriter } from "../../src/wire/frame.ts";
import type { ClientMessage } from "../../src/wire/messages.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

const CONNECTIONS = 300;
const CONCURRENCY = 30;
const READ_WAIT_MS = 150;

/** Small, fast, seedable PRNG (mulberry32). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function validMessages(rand: () => number): ClientMessage[] {
  const name = ["a", "fuzz/x", "fuzz/y", "é/锁", ""][Math.floor(rand() * 5)];
  const id = 1 + Math.floor(rand() * 1000);
  const all: ClientMessage[] = [
    { type: "hello", version: 1, clientName: "fuzz" },
    { type: "acquire", requestId: id, name, leaseMs: Math.floor(rand() * 5000), waitMs: 0 },
    { type: "release", requestId: id, name, token: Math.floor(rand() * 100) },
    { type: "heartbeat", requestId: id },
  ];
  const out: ClientMessage[] = [];
  for (let i = 0, n = 1 + Math.floor(rand() * 4); i < n; i++) {
    out.push(all[Math.floor(rand() * all.length)]);
  }
  return out;
}

function encode(messages: ClientMessage[]): Uint8Array {
  const w = new FrameWriter();
  for (const m of messages) w.push(m);
  return w.take();
}

/** One hostile input: random bytes, or valid frames after HELLO with bytes flipped, cut or inserted. */
function hostileBytes(rand: () => number): Uint8Array {
  const kind = Math.floor(rand() * 5);
  if (kind === 0) {
    return Uint8Array.from({ length: Math.floor(rand() * 64) }, () => Math.floor(rand() * 256));
  }
  const hello = encode([{ type: "hello", version: 1, clientName: "fuzz" }]);
  const body = encode(validMessages(rand));
  const bytes = new Uint8Array(kind === 1 ? body.byteLength : hello.byteLength + body.byteLength);
  if (kind === 1) bytes.set(body);
  else {
    bytes.set(hello);
    bytes.set(body, hello.byteLength);
  }
  const start = kind === 1 ? 0 : hello.byteLength;
  const span = bytes.byteLength - start;
  switch (kind) {
    case 2: // flip a few bytes after HELLO
      for (let i = 0, n = 1 + Math.floor(rand() * 3); i < n; i++) {
        bytes[start + Math.floor(rand() * span)] = Math.floor(rand() * 256);
      }
      return bytes;
    case 3: { // a huge or zero length prefix after HELLO
      const view = new DataView(bytes.buffer);
      view.setUint32(start, rand() < 0.5 ? 0 : 0x7fff_ffff);
      return bytes;
    }
    default: // cut short, then an unknown type byte
      return Uint8Array.from([
        ...bytes.subarray(0, start + Math.floor(rand() * span)),
        0,
        0,
        0,
        1,
        0xee,
      ]);
  }
}

async function hostileConnection(addr: string, rand: () => number): Promise<void> {
  const [hostname, port] = addr.split(":");
  const conn = await Deno.connect({ hostname, port: Number(port) });
  const buf = new Uint8Array(4096);
  let reading: Promise<number | null> | null = null;
  try {
    const bytes = hostileBytes(rand);
    // Sometimes in pieces, to reach the partial-frame paths.
    const cut = Math.floor(rand() * bytes.byteLength);
    for (const part of [bytes.subarray(0, cut), bytes.subarray(cut)]) {
      if (part.byteLength > 0) await conn.write(part);
    }
    // Read what the server answers until it closes or a short while passes.
    const until = performance.now() + READ_WAIT_MS;
    while (performance.now() < until) {
      reading ??= conn.read(buf).catch(() => null);
      let timer: ReturnType<typeof setTimeout> | undefined;
      const r = await Promise.race([
        reading,
        new Promise<"wait">((resolve) => (timer = setTimeout(() => resolve("wait"), 20))),
      ]);
      clearTimeout(timer);
      if (r === "wait") continue;
      reading = null;
      if (r === null) break;
    }
  } catch {
    // reset by the server: fine
  } finally {
    try {
      conn.close();
    } catch { /* closed */ }
    await reading;
  }
}

Deno.test("a live server survives hostile frames on many connections and keeps serving a good client", async () => {
  const seed = Number(Deno.env.get("LOCKD_FUZZ_SEED") ?? Date.now() % 1_000_000);
  const rand = prng(seed);
  await using ts = await startTestServer({ handshakeTimeoutMs: 2_000 });
  const { engine, counters } = ts.server.context;

  const good = await connect({ addr: ts.addr, clientName: "good" });
  let goodCycles = 0;
  let fuzzing = true;
  const goodLoop = (async () => {
    let lastToken = 0;
    for (let i = 0; fuzzing && i < 100_000; i++) {
      const lock = await good.acquire("good/lock", { leaseMs: 5_000, waitMs: 2_000 });
      assert.ok(lock.token > lastToken, "tokens grow");
      lastToken = lock.token;
      await lock.release();
      goodCycles++;
    }
  })();

  try {
    const started = performance.now();
    let next = 0;
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
      while (next < CONNECTIONS && performance.now() - started < 20_000) {
        next++;
        await hostileConnection(ts.addr, rand);
      }
    }));
    const cyclesDuringFuzz = goodCycles;
    fuzzing = false;
    await goodLoop;
    assert.ok(cyclesDuringFuzz > 0, `the good client made no progress (seed ${seed})`);

    const errors = [...counters.protocolErrors.values()].reduce((a, b) => a + b, 0);
    assert.ok(errors > 0, `no protocol errors counted (seed ${seed})`);
    await eventually(() => engine.stats.sessionsOpen === 1, "only the good session is left");
    engine.assertInvariants();
    assert.equal(engine.stats.locksHeld, 0, `locks left held (seed ${seed})`);
    assert.equal(engine.stats.waiters, 0);
    assert.equal(engine.lockCount, 0, "every lock is idle (not stored)");
  } catch (error) {
    console.error(`live fuzz failed with LOCKD_FUZZ_SEED=${seed}`);
    throw error;
  } finally {
    fuzzing = false;
    await goodLoop.catch(() => {});
    await good.close();
  }
  await eventually(() => engine.stats.sessionsOpen === 0, "the good session closed");
});
