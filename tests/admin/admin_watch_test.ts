/**
 * `lockd admin locks -watch` and `show NAME -watch` (issue 13.9): redraw as
 * locks change, one request per interval (never two at once), on the
 * watcher's own manual scheduler so the count of requests is exact.
 */
import assert from "node:assert/strict";
import { connect } from "../../mod.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { adminCommand, type AdminIo } from "../../src/cli/admin.ts";
import { eventually } from "../helpers/start_server.ts";
import { start } from "./admin_helpers.ts";

interface Watcher {
  stdout: string[];
  stderr: string[];
  requests: number;
  scheduler: ManualScheduler;
  stop(): Promise<number>;
}

/** Starts `lockd admin ARGS` in watch mode with captured output and a manual scheduler. */
function watch(args: string[], isTerminal: boolean): Watcher {
  const stop = new AbortController();
  const scheduler = new ManualScheduler(Date.UTC(2026, 0, 1));
  const watcher = {
    stdout: [] as string[],
    stderr: [] as string[],
    requests: 0,
    scheduler,
    stop: async () => {
      stop.abort();
      return await done;
    },
  };
  const io: AdminIo = {
    stdout: (text) => watcher.stdout.push(text),
    stderr: (text) => watcher.stderr.push(text),
    isTerminal,
    scheduler,
    signal: stop.signal,
    fetch: (input, init) => {
      watcher.requests++;
      return fetch(input, init);
    },
  };
  const done = adminCommand(args, io);
  return watcher;
}

/** Lets the watcher's request for the current round finish and draw. */
async function round(w: Watcher, frames: number, what: string): Promise<void> {
  await eventually(() => w.stdout.length + w.stderr.length >= frames, what);
}

Deno.test("admin locks -watch on a terminal: redraws every interval, one request each, and shows changes", async () => {
  await using t = await start();
  const admin = t.server.adminAddr!;
  const w = watch(["-admin", admin, "locks", "-watch", "-interval", "1s"], true);
  try {
    await round(w, 1, "first frame");
    assert.equal(w.requests, 1);
    assert.ok(w.stdout[0].startsWith("\x1b[H\x1b[2JEvery 1s: lockd admin locks (admin API "));
    assert.doesNotMatch(w.stdout[0], /jobs\/a/);

    await using client = await connect({ addr: t.addr });
    const lock = await client.acquire("jobs/a");
    w.scheduler.advance(999);
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(w.requests, 1, "nothing before the interval has passed");
    w.scheduler.advance(1);
    await round(w, 2, "second frame");
    assert.equal(w.requests, 2);
    assert.match(w.stdout[1], /^NAME +HOLDER/m);
    assert.match(w.stdout[1], /^jobs\/a /m);

    await lock.release();
    w.scheduler.advance(1_000);
    await round(w, 3, "third frame");
    assert.equal(w.requests, 3);
    assert.doesNotMatch(w.stdout[2], /jobs\/a/);
  } finally {
    assert.equal(await w.stop(), 0);
  }
});

Deno.test("admin show NAME -watch through a pipe: prints the view only when it changes; an idle lock is shown, not an error", async () => {
  await using t = await start();
  const admin = t.server.adminAddr!;
  const w = watch(["-admin", admin, "show", "jobs/b", "-watch", "-interval", "500ms"], false);
  try {
    await round(w, 1, "first view");
    assert.match(w.stdout[0], /^--- 2026-01-01T00:00:00\.000Z\nname +jobs\/b\nholder +\(none\)/);
    w.scheduler.advance(500);
    await eventually(() => w.requests === 2, "second request");
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(w.stdout.length, 1, "the same view is not printed again");

    await using client = await connect({ addr: t.addr });
    const lock = await client.acquire("jobs/b");
    w.scheduler.advance(500);
    await round(w, 2, "changed view");
    assert.match(
      w.stdout[1],
      /^--- 2026-01-01T00:00:01\.000Z\nname +jobs\/b\nholder +127\.0\.0\.1:\d+/,
    );
    assert.equal(w.stderr.length, 0);
    await lock.release();
  } finally {
    assert.equal(await w.stop(), 0);
  }
});

Deno.test("admin locks -watch -json through a pipe: one JSON document per change; a server that goes away is reported and watched again", async () => {
  const t = await start();
  const admin = t.server.adminAddr!;
  const w = watch(["-admin", admin, "-json", "locks", "-watch", "-interval", "200ms"], false);
  try {
    await round(w, 1, "first document");
    assert.deepEqual(JSON.parse(w.stdout[0]), { locks: [] });
    assert.ok(w.stdout[0].endsWith("}\n") && !w.stdout[0].slice(0, -1).includes("\n"));
    await t.server.shutdown();
    w.scheduler.advance(200);
    await eventually(() => w.stderr.length === 1, "the failure reported");
    assert.match(w.stderr[0], /^lockd admin: cannot reach the admin API at .*connection refused/);
    w.scheduler.advance(200);
    await eventually(() => w.requests === 3, "watching goes on");
    assert.equal(w.stderr.length, 1, "the same failure is not repeated");
  } finally {
    assert.equal(await w.stop(), 0);
  }
});

Deno.test("admin show NAME -watch -json through a pipe: held-for and waiting-for growing is no change", async () => {
  await using t = await start();
  await using client = await connect({ addr: t.addr });
  const lock = await client.acquire("jobs/c", { leaseMs: 60_000 });
  const admin = t.server.adminAddr!;
  const w = watch(["-admin", admin, "-json", "show", "jobs/c", "-watch", "-interval", "1s"], false);
  try {
    await round(w, 1, "first document");
    const first = JSON.parse(w.stdout[0]);
    assert.equal(first.holder.token, lock.token);
    assert.equal(first.holder.held_for_ms, undefined);
    t.scheduler.advance(1_000);
    w.scheduler.advance(1_000);
    await eventually(() => w.requests === 2, "second request");
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(w.stdout.length, 1, "the same lock is not printed again");
  } finally {
    assert.equal(await w.stop(), 0);
    await lock.release();
  }
});

Deno.test("admin -watch is refused for other subcommands and -interval without -watch", async () => {
  const io = { stdout: () => {}, stderr: () => {} };
  assert.equal(await adminCommand(["info", "-watch"], io), 2);
  assert.equal(await adminCommand(["locks", "-interval", "1s"], io), 2);
  assert.equal(await adminCommand(["locks", "-watch", "-interval", "10ms"], io), 2);
});
