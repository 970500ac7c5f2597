/**
 * TLS connection flood, run as its own process by the benchmark and the TLS
 * fault test so that its CPU is not the server's:
 *
 *   deno run -A bench/tls_flood.ts ADDR MODE RATE DURATION_MS [CONCURRENCY]
 *
 * MODE is one of
 * - `hello`: connect, send a recorded TLS ClientHello, wait for the server's
 *   first flight (or its close, or 1 s), close. The server does the costly
 *   half of a handshake (key exchange, signature) for a few bytes the client
 *   never has to compute: the cheapest way to load a TLS server;
 * - `silent`: connect and send nothing; held until the server closes it (or
 *   the end of the run);
 * - `full`: a complete mutual-TLS handshake with the test client certificate
 *   (`tests/fixtures/tls/client-uri.pem`), HELLO → WELCOME, close.
 *
 * RATE is connections started per second (0: as fast as CONCURRENCY allows;
 * default concurrency 64). Prints one JSON line with the counts at the end.
 *
 * @module
 */

import { PROTOCOL_VERSION } from "../src/wire/messages.ts";
import { BenchConn } from "./bench_client.ts";

const FIXTURES = new URL("../tests/fixtures/tls/", import.meta.url).pathname;

/**
 * A ClientHello as `Deno.connectTls` (rustls) sends it for server name
 * "localhost" (recorded once; its key share is reused by every connection,
 * which the server cannot tell until the client's next flight, never sent).
 */
export async function recordedClientHello(): Promise<Uint8Array> {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const client = Deno.connectTls({
    hostname: "localhost",
    port: listener.addr.port,
    caCerts: [await Deno.readTextFile(`${FIXTURES}ca.pem`)],
  }).then((c) => c.handshake().finally(() => c.close())).catch(() => {});
  const conn = await listener.accept();
  const buffer = new Uint8Array(16 * 1024);
  let length = 0;
  // One TLS record: 5-byte header, then the length it announces.
  while (length < 5 || length < 5 + ((buffer[3] << 8) | buffer[4])) {
    const n = await conn.read(buffer.subarray(length));
    if (n === null) break;
    length += n;
  }
  conn.close();
  listener.close();
  await client;
  return buffer.slice(0, length);
}

export interface FloodResult {
  mode: string;
  started: number;
  /** TCP connected (hello, silent) or session opened (full). */
  succeeded: number;
  failed: number;
  /** Connections the server closed before the end of the run (hello, silent). */
  closedByServer: number;
  elapsedMs: number;
}

export async function flood(
  addr: string,
  mode: "hello" | "silent" | "full",
  ratePerS: number,
  durationMs: number,
  concurrency = 64,
): Promise<FloodResult> {
  const i = addr.lastIndexOf(":");
  const hostname = addr.slice(0, i).replace(/^\[|\]$/g, "");
  const port = Number(addr.slice(i + 1));
  const hello = mode === "hello" ? await recordedClientHello() : null;
  const tls = mode === "full"
    ? {
      ca: await Deno.readTextFile(`${FIXTURES}ca.pem`),
      cert: await Deno.readTextFile(`${FIXTURES}client-uri.pem`),
      key: await Deno.readTextFile(`${FIXTURES}client-uri-key.pem`),
    }
    : undefined;
  const result: FloodResult = {
    mode,
    started: 0,
    succeeded: 0,
    failed: 0,
    closedByServer: 0,
    elapsedMs: 0,
  };
  const t0 = performance.now();
  const endAt = t0 + durationMs;
  let inFlight = 0;
  const open = new Set<Deno.Conn>();
  const one = async () => {
    inFlight++;
    result.started++;
    try {
      if (mode === "full") {
        const c = await BenchConn.connect(addr, tls);
        const welcome = await c.request({
          type: "hello",
          version: PROTOCOL_VERSION,
          clientName: "flood",
        });
        c.close();
        await c.done;
        if (welcome.type === "welcome") result.succeeded++;
        else result.failed++;
        return;
      }
      const conn = await Deno.connect({ hostname, port });
      result.succeeded++;
      open.add(conn);
      try {
        if (hello !== null) await conn.write(hello);
        const buffer = new Uint8Array(16 * 1024);
        const giveUpAt = mode === "hello" ? Math.min(endAt, performance.now() + 1_000) : endAt;
        for (;;) {
          const remaining = giveUpAt - performance.now();
          if (remaining <= 0) break;
          let timer: ReturnType<typeof setTimeout> | undefined;
          const n = await Promise.race([
            conn.read(buffer).catch(() => null),
            new Promise<"timeout">((r) => timer = setTimeout(() => r("timeout"), remaining)),
          ]);
          clearTimeout(timer);
          if (n === "timeout") break;
          if (n === null) {
            result.closedByServer++;
            break;
          }
          // The server's first flight arrived: it has done its costly half; go.
          if (mode === "hello") break;
        }
      } finally {
        open.delete(conn);
        try {
          conn.close();
        } catch {
          // Closed by the server.
        }
      }
    } catch {
      result.failed++;
    } finally {
      inFlight--;
    }
  };
  const tasks = new Set<Promise<void>>();
  const tickMs = 10;
  let due = 0;
  while (performance.now() < endAt) {
    due += ratePerS > 0 ? (ratePerS * tickMs) / 1000 : concurrency;
    while (due >= 1 && inFlight < concurrency) {
      due--;
      const task = one();
      tasks.add(task);
      task.finally(() => tasks.delete(task));
    }
    if (ratePerS > 0) due = Math.min(due, ratePerS); // never burst more than a second's worth
    else due = 0;
    await new Promise((r) => setTimeout(r, tickMs));
  }
  for (const conn of open) {
    try {
      conn.close();
    } catch {
      // Closed.
    }
  }
  await Promise.all(tasks);
  result.elapsedMs = Math.round(performance.now() - t0);
  return result;
}

if (import.meta.main) {
  const [addr, mode, rate, duration, concurrency] = Deno.args;
  const result = await flood(
    addr,
    mode as "hello" | "silent" | "full",
    Number(rate),
    Number(duration),
    concurrency === undefined ? undefined : Number(concurrency),
  );
  console.log(JSON.stringify(result));
}
