/**
 * `lockd observe` (one JSON line per state) and `lockd run`'s lock kinds and value (-shared,
 * -limit, -value, and what the command finds in its environment), against real servers.
 */
import assert from "node:assert/strict";
import { lockdCommand } from "../../bench/lockd_proc.ts";
import { connect } from "../../mod.ts";
import { OBSERVE_EXIT, OBSERVE_FLAGS, observeCommand } from "../../src/cli/observe.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { RECONNECT_PROGRESS_INTERVAL_MS } from "../../src/limits.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

/** Moves the manual clock in steps, letting real sockets (a refused dial) answer in between. */
async function advance(clock: ManualScheduler, ms: number, stepMs = 500): Promise<void> {
  for (let done = 0; done < ms; done += stepMs) {
    clock.advance(Math.min(stepMs, ms - done));
    await new Promise((resolve) => setTimeout(resolve, 15));
  }
}

Deno.test("lockd observe prints one JSON line per state: the snapshot, the grant with its value, the end with its reason", async () => {
  await using t = await startTestServer();
  await using holder = await connect({ addr: t.addr, clientName: "api@host-1:4242" });
  const stop = new AbortController();
  const out: string[] = [];
  const errors: string[] = [];
  const running = observeCommand(["service/*", "-addr", t.addr], {
    stdout: (line) => out.push(line),
    stderr: (line) => errors.push(line),
    signal: stop.signal,
  });
  await new Promise((resolve) => setTimeout(resolve, 50)); // the WATCH is in
  const lock = await holder.acquire("service/leader", { value: "10.0.0.7:8080" });
  await eventually(() => out.length >= 1, "the grant's line");
  await lock.release();
  await eventually(() => out.length >= 2, "the end's line");
  stop.abort();
  assert.equal(await running, OBSERVE_EXIT.done.status, errors.join("\n"));
  const states = out.map((line) => JSON.parse(line));
  assert.equal(states[0].name, "service/leader");
  assert.equal(states[0].event, "granted");
  assert.equal(states[0].holder.value, "10.0.0.7:8080");
  assert.equal(states[0].holder.clientName, "api@host-1:4242");
  assert.equal(states[0].holder.token, lock.token);
  const last = states.at(-1);
  assert.deepEqual([last.event, last.reason, last.holder], ["ended", "graceful", null]);
});

Deno.test("lockd observe -once prints the state of one lock now; a glob with -once is a usage error", async () => {
  await using t = await startTestServer();
  await using holder = await connect({ addr: t.addr });
  const lock = await holder.acquire("service/leader", { value: new Uint8Array([0xff, 0x41]) });
  const out: string[] = [];
  const err: string[] = [];
  const sink = { stdout: (l: string) => out.push(l), stderr: (l: string) => err.push(l) };
  assert.equal(await observeCommand(["service/leader", "-addr", t.addr, "-once"], sink), 0);
  const state = JSON.parse(out[0]);
  assert.equal(state.holder.token, lock.token);
  assert.equal(state.holder.valueBase64, "/0E="); // not UTF-8: the bytes too
  assert.equal(await observeCommand(["idle/lock", "-addr", t.addr, "-once"], sink), 0);
  assert.equal(JSON.parse(out[1]).holder, null);
  assert.equal(await observeCommand(["service/*", "-once", "-addr", t.addr], sink), 2);
  assert.equal(await observeCommand(["a", "b"], sink), 2);
});

Deno.test("lockd observe exits 65 on a glob the server refuses and 1 when nothing listens", async () => {
  await using t = await startTestServer();
  const err: string[] = [];
  const sink = { stdout: () => {}, stderr: (l: string) => err.push(l) };
  assert.equal(await observeCommand(["jobs/[", "-addr", t.addr], sink), 65, err.join("\n"));
  const closed = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const addr = `127.0.0.1:${(closed.addr as Deno.NetAddr).port}`;
  closed.close();
  assert.equal(await observeCommand(["a", "-addr", addr], sink), 1);
});

Deno.test("lockd observe while no node answers prints no state, and one line on standard error every 10 s saying what it tries", async () => {
  const t = await startTestServer();
  const clock = new ManualScheduler();
  const out: string[] = [];
  const errors: string[] = [];
  const stop = new AbortController();
  let status: Promise<number> | null = null;
  try {
    await using holder = await connect({ addr: t.addr });
    status = observeCommand(["progress/*", "-addr", t.addr], {
      stdout: (line) => out.push(line),
      stderr: (line) => errors.push(line),
      signal: stop.signal,
      scheduler: clock,
    });
    await new Promise((resolve) => setTimeout(resolve, 50)); // the WATCH is in
    await holder.acquire("progress/held");
    await eventually(() => out.length === 1, "the grant's line");
    // While the server answers, nothing on standard error.
    await advance(clock, RECONNECT_PROGRESS_INTERVAL_MS);
    assert.deepEqual(errors, []);

    // The server goes away: the client reconnects with back-off, nothing answers, no state is
    // printed, and standard error says so once per 10 s.
    await t.server.shutdown();
    // The server's last word (the lock's end at its shutdown) may still be on its way.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const printed = out.length;
    await advance(clock, RECONNECT_PROGRESS_INTERVAL_MS);
    assert.equal(errors.length, 1, errors.join("\n"));
    const addr = t.addr.replaceAll(".", "\\.");
    const line = new RegExp(
      `^lockd observe: no lockd node answers; trying ${addr} \\(attempt (\\d+); last error: ` +
        `Cannot connect to lockd at ${addr}: connection refused, nothing listens there.*\\); ` +
        `the states printed last may be stale until a fresh snapshot$`,
    );
    const first = Number(line.exec(errors[0])?.[1]);
    assert.ok(first >= 2, `${errors[0]}: several attempts in 10 s`);
    await advance(clock, RECONNECT_PROGRESS_INTERVAL_MS);
    assert.equal(errors.length, 2, errors.join("\n"));
    assert.ok(Number(line.exec(errors[1])?.[1]) > first, errors[1]);
    assert.equal(out.length, printed, "no state line while disconnected");
    stop.abort();
    assert.equal(await status, OBSERVE_EXIT.done.status);
    const before = errors.length;
    await advance(clock, 2 * RECONNECT_PROGRESS_INTERVAL_MS);
    assert.equal(errors.length, before, "stopped: no more lines");
  } finally {
    stop.abort();
    await t.server.shutdown();
    if (status !== null) {
      await advance(clock, 60_000);
      await status;
    }
  }
});

Deno.test("lockd run -limit takes a semaphore slot and -value publishes; the command sees LOCKD_SLOT and LOCKD_VALUE", async () => {
  await using t = await startTestServer();
  await using other = await connect({ addr: t.addr });
  const first = await other.acquire("jobs/render", { limit: 2 });
  const run = lockdCommand([
    "run",
    "jobs/render",
    "-addr",
    t.addr,
    "-limit",
    "2",
    "-value",
    "worker-7",
    "--",
    "sh",
    "-c",
    'echo "$LOCKD_SLOT $LOCKD_VALUE $LOCKD_TOKEN"',
  ]).output();
  const output = await run;
  assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
  const [slot, value, token] = new TextDecoder().decode(output.stdout).trim().split(" ");
  assert.equal(slot, String(1 - first.slot));
  assert.equal(value, "worker-7");
  assert.ok(Number(token) > first.token);
});

Deno.test("lockd run -shared runs beside another reader and gets the write generation", async () => {
  await using t = await startTestServer();
  await using client = await connect({ addr: t.addr });
  await using readerClient = await connect({ addr: t.addr });
  const writer = await client.acquire("reports/daily");
  // Queued behind the writer, as the run's claim will be: both are granted together after it.
  const waiting = readerClient.acquire("reports/daily", { mode: "shared" });
  const run = lockdCommand([
    "run",
    "reports/daily",
    "-shared",
    "-addr",
    t.addr,
    "--",
    "sh",
    "-c",
    'echo "$LOCKD_WRITE_GENERATION"',
  ]).output();
  await eventually(async () => (await client.query("reports/daily")).queueLength === 2, "queued");
  await writer.release();
  const reader = await waiting;
  const output = await run;
  assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
  assert.equal(new TextDecoder().decode(output.stdout).trim(), String(writer.token));
  assert.equal(reader.writeGeneration, writer.token);
});

Deno.test("docs/operations.md lists every lockd observe flag and, one row each, its exit statuses", async () => {
  const doc = await Deno.readTextFile(new URL("../../docs/operations.md", import.meta.url));
  const start = doc.indexOf("## Observing locks (`lockd observe`)");
  const section = doc.slice(start, doc.indexOf("\n## ", start + 1));
  const missing = OBSERVE_FLAGS.filter((flag) => !section.includes(`| \`-${flag.name}\``));
  assert.deepEqual(missing.map((flag) => flag.name), []);
  const statuses = section.split("\n").map((line) => line.split("|").slice(1, -1))
    .filter((cells) => cells.length === 2 && /^\s*\d+\s*$/.test(cells[0]))
    .map((cells) => Number(cells[0]));
  assert.deepEqual(statuses, Object.values(OBSERVE_EXIT).map((row) => row.status));
});
