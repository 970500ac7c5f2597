/**
 * Child process of bench/memory.ts: opens N connections to ADDR in one MODE, prints "ready",
 * and holds them until its standard input closes.
 *
 * - prehello: connected, nothing sent
 * - session: HELLO, WELCOME read, then idle
 * - partial-header: HELLO, then the 4-byte header of a 65,536-byte frame and 16 bytes of it
 * - partial-large: HELLO, then 65,000 bytes of a 65,536-byte frame (sent in one write)
 * - claims-30, claims-1024: HELLO, then 100 locks acquired (names of 30 or 1,024 bytes)
 * - lock: HELLO, then one lock acquired (a 30-byte name), as each session of the bench's
 *   scenario 3 (10,000 idle sessions holding a lock)
 */

import { FrameWriter } from "../src/wire/frame.ts";
import { FrameReader } from "../src/wire/frame_reader.ts";
import { PROTOCOL_VERSION } from "../src/wire/messages.ts";

const [addr, mode, countText] = Deno.args;
const count = Number(countText);
const i = addr.lastIndexOf(":");
const hostname = addr.slice(0, i);
const port = Number(addr.slice(i + 1));

const writer = new FrameWriter();
writer.push({ type: "hello", version: PROTOCOL_VERSION, clientName: "memory" });
const hello = writer.take();

function partial(bytes: number): Uint8Array {
  const frame = new Uint8Array(4 + bytes);
  new DataView(frame.buffer).setUint32(0, 65_536);
  frame[4] = 0x10;
  return frame;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let done = 0;
  while (done < bytes.length) done += await conn.write(bytes.subarray(done));
}

const CLAIMS_EACH = 100;
const conns: Deno.TcpConn[] = [];
const scratch = new Uint8Array(4096);
for (let n = 0; n < count; n++) {
  const conn = await Deno.connect({ hostname, port });
  conns.push(conn);
  if (mode === "prehello") continue;
  await writeAll(conn, hello);
  await conn.read(scratch); // WELCOME
  if (mode === "partial-header") await writeAll(conn, partial(16));
  if (mode === "partial-large") await writeAll(conn, partial(65_000));
  if (mode.startsWith("claims-") || mode === "lock") {
    const nameBytes = mode === "lock" ? 30 : Number(mode.slice("claims-".length));
    const claims = mode === "lock" ? 1 : CLAIMS_EACH;
    for (let k = 0; k < claims; k++) {
      writer.push({
        type: "acquire",
        requestId: k + 1,
        name: `${n}/${k}/`.padEnd(nameBytes, "x"),
        leaseMs: 3_600_000,
        waitMs: 0,
      });
    }
    await writeAll(conn, writer.take());
    // Every ACQUIRED has to arrive.
    const reader = new FrameReader();
    let acquired = 0;
    while (acquired < claims) {
      const r = await conn.read(scratch);
      if (r === null) throw new Error("closed");
      reader.push(scratch.subarray(0, r));
      for (let m = reader.next(); m !== null; m = reader.next()) {
        if (m.type !== "acquired") throw new Error(`got ${m.type}`);
        acquired++;
      }
    }
  }
}
console.log("ready");
// Hold the connections until the parent closes our standard input.
for await (const _ of Deno.stdin.readable) { /* wait */ }
for (const conn of conns) conn.close();
