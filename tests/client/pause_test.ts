/**
 * The GC-pause case that fencing literature warns about, with a real pause: a holder stopped
 * with SIGSTOP for more than three leases and resumed with SIGCONT must read `lost` (and
 * `state`) as lost at its first look after waking, before the timer that fires `lost` has run.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { startTestServer } from "../helpers/start_server.ts";

const HOLDER = fileURLToPath(new URL("./fixtures/paused_holder.ts", import.meta.url));
const LEASE_MS = 1_000;

/** Reads stdout line by line. */
async function* lines(stream: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  let buffered = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    buffered += chunk;
    let end;
    while ((end = buffered.indexOf("\n")) >= 0) {
      yield buffered.slice(0, end);
      buffered = buffered.slice(end + 1);
    }
  }
}

async function nextLine(it: AsyncGenerator<string>, timeoutMs: number): Promise<string> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const result = await Promise.race([
      it.next(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no line within ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
    assert.equal(result.done, false, "the holder ended without a line");
    return result.value as string;
  } finally {
    clearTimeout(timer);
  }
}

Deno.test("a holder paused with SIGSTOP for three leases reads lost (lease_unconfirmed) and state lost at its first look after SIGCONT", async () => {
  await using t = await startTestServer();
  const holder = new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-net", HOLDER, t.addr, "pause/holder", String(LEASE_MS)],
    stdin: "null",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const out = lines(holder.stdout);
  try {
    assert.equal(await nextLine(out, 30_000), "held");
    Deno.kill(holder.pid, "SIGSTOP");
    await new Promise((resolve) => setTimeout(resolve, 3 * LEASE_MS + 300));
    Deno.kill(holder.pid, "SIGCONT");
    const reading = JSON.parse(await nextLine(out, 10_000));
    assert.ok(reading.pausedMs > 3 * LEASE_MS, `paused for ${reading.pausedMs} ms`);
    assert.deepEqual(
      { aborted: reading.aborted, state: reading.state, reason: reading.reason },
      { aborted: true, state: "lost", reason: "lease_unconfirmed" },
    );
    assert.equal((await holder.status).code, 0);
  } finally {
    try {
      Deno.kill(holder.pid, "SIGKILL"); // by PID, if it is still there
    } catch {
      // already exited
    }
    await holder.status;
    await out.return(undefined);
  }
});
