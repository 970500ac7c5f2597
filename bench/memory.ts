/**
 * `deno task memory`: what the server's state costs in memory, the figures behind the memory
 * budget in docs/operations.md ("Memory") and the defaults of `-max-claims` and
 * `-max-handshakes` in src/limits.ts.
 *
 * - Bytes per stored claim: the engine alone (a claim costs nothing outside it), with short and
 *   longest names, owned and queued, measured as V8 heap after a full GC.
 * - Bytes per connection: a real server in this process, the connections opened by a child
 *   process (so their memory is not counted here): before HELLO, idle sessions, and sessions
 *   that stalled in the middle of a frame.
 *
 * Run with the GC exposed: `deno run -A --v8-flags=--expose-gc bench/memory.ts [-json]`.
 */

import { LockEngine } from "../src/core/engine.ts";
import { TokenIssuer } from "../src/core/tokens.ts";
import type { Instant } from "../src/core/types.ts";
import { startServer } from "../src/server/start.ts";

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) {
  console.error("run with --v8-flags=--expose-gc");
  Deno.exit(2);
}

/** Heap and off-heap bytes (ArrayBuffers live outside the V8 heap) after full collections. */
function usedBytes(): number {
  for (let i = 0; i < 3; i++) gc!();
  const m = Deno.memoryUsage();
  return m.heapUsed + m.external;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const now: Instant = { monoMs: 1_000, wallMs: Date.UTC(2026, 0, 1) };

/** Bytes per claim for `count` claims named by `name(i)`, `perLock` claims per lock. */
function claimBytes(count: number, perLock: number, name: (i: number) => string): number {
  const engine = new LockEngine({
    tokens: new TokenIssuer(0, Number.MAX_SAFE_INTEGER, () => {}),
    sessionsMax: 1_000_000,
    claimsPerSessionMax: 1_000_000,
    waitersPerLockMax: 1_000_000,
  });
  const sessions: number[] = [];
  for (let s = 0; s < perLock; s++) {
    sessions.push(engine.openSession(now, "", `127.0.0.1:${10_000 + s}`, "bench")!.sessionId);
  }
  // The engine keeps each name (once per lock, shared by its claims), so names count. They are
  // decoded from UTF-8 as the frame reader does (flat strings, one byte per character when
  // every character is below U+0100).
  const before = usedBytes();
  const names = Array.from(
    { length: count / perLock },
    (_, i) => decoder.decode(encoder.encode(name(i))),
  );
  let requestId = 1;
  for (const lockName of names) {
    for (const sessionId of sessions) {
      engine.acquire(now, {
        sessionId,
        requestId: requestId++,
        name: lockName,
        leaseMs: 0,
        waitMs: null,
      });
    }
  }
  const after = usedBytes();
  // Keep the engine and the names alive until the reading.
  if (engine.stats.locksHeld !== names.length || names.length === 0) throw new Error("no claims");
  return Math.round((after - before) / count);
}

const ascii = (bytes: number) => (i: number) => `${i}`.padStart(bytes, "x");
// Two-byte JavaScript strings: a name with characters above U+00FF, 1,024 UTF-8 bytes.
const cjk = (i: number) => "锁".repeat(339) + `${i}`.padStart(7, "0");

interface ConnectionFigure {
  mode: string;
  connections: number;
  bytesEach: number;
  /** In the claims modes: claims stored, and bytes per claim with its share of the session. */
  claims?: number;
  bytesPerClaim?: number;
}

/** Opens `count` connections in `mode` from a child process; bytes per connection here. */
async function connectionBytes(mode: string, count: number): Promise<ConnectionFigure> {
  const server = await startServer({
    listen: "127.0.0.1:0",
    shutdownGraceMs: 0,
    dataDir: null,
    logLevel: "error",
    auditLog: "/dev/null",
    sessionsMax: count + 10,
    handshakesMax: count + 10,
    handshakeTimeoutMs: 300_000,
    ioTimeoutMs: 3_600_000,
  });
  const before = usedBytes();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("./memory_clients.ts", import.meta.url).pathname,
      server.addr,
      mode,
      String(count),
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let out = "";
  while (!out.includes("ready\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`clients ended: ${out}`);
    out += value;
  }
  // Let the server read everything the clients sent.
  await new Promise((resolve) => setTimeout(resolve, 500));
  const after = usedBytes();
  const open = server.context.connections.size;
  const claims = server.context.engine.stats.locksHeld;
  await child.stdin.close();
  await child.status;
  await reader.cancel();
  await server.shutdown();
  return {
    mode,
    connections: open,
    bytesEach: Math.round((after - before) / open),
    ...(claims > 0 ? { claims, bytesPerClaim: Math.round((after - before) / claims) } : {}),
  };
}

const claims = {
  owned_30_byte_name: claimBytes(100_000, 1, ascii(30)),
  owned_1024_byte_ascii_name: claimBytes(50_000, 1, ascii(1024)),
  owned_1024_byte_cjk_name: claimBytes(50_000, 1, cjk),
  queued_30_byte_name_4_per_lock: claimBytes(100_000, 4, ascii(30)),
};
const connections = [];
for (const mode of ["prehello", "session", "lock", "partial-header", "partial-large"]) {
  connections.push(await connectionBytes(mode, 1_000));
}
for (const mode of ["claims-30", "claims-1024"]) connections.push(await connectionBytes(mode, 200));
const result = { claims_bytes_each: claims, connections };
if (Deno.args.includes("-json")) {
  console.log(JSON.stringify(result));
} else {
  console.log("bytes per claim (engine, V8 heap after GC):");
  for (const [k, v] of Object.entries(claims)) console.log(`  ${k.padEnd(32)} ${v}`);
  console.log("bytes per connection (server process, heap + external after GC):");
  for (const c of connections) {
    const perClaim = c.bytesPerClaim === undefined
      ? ""
      : `, ${c.bytesPerClaim} per claim of ${c.claims}`;
    console.log(
      `  ${c.mode.padEnd(32)} ${c.bytesEach}  (${c.connections} connections${perClaim})`,
    );
  }
}
