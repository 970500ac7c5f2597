/**
 * What the admin API gained for the operator console (issue 15): paging and
 * sorting of GET /api/locks, GET /api/history, the GET /api/events stream,
 * and the console's files. The browser policy (which web pages are answered)
 * is in console_policy_test.ts; the console itself is driven by a real
 * browser in tests/browser/.
 */

import assert from "node:assert/strict";
import { connect } from "../../mod.ts";
import { EventHub } from "../../src/admin/events.ts";
import type { SnapshotJson } from "../../src/admin/history.ts";
import { ManualScheduler } from "../../src/clock.ts";
import {
  ADMIN_EVENTS_CHECK_MS,
  ADMIN_EVENTS_KEEPALIVE_MS_MAX,
  ADMIN_HISTORY_INTERVAL_MS,
  ADMIN_HISTORY_SNAPSHOTS_MAX,
  ADMIN_LOCKS_LIMIT_MAX,
} from "../../src/limits.ts";
import { startTestServer } from "../helpers/start_server.ts";
import { assertProblem } from "../helpers/problem.ts";
import { http, queue, start } from "./admin_helpers.ts";

// ---- GET /api/locks paging ----------------------------------------------------------

Deno.test("GET /api/locks with sort, offset or limit answers one page and the total", async () => {
  await using t = await start();
  await using a = await connect({ addr: t.addr });
  await using b = await connect({ addr: t.addr });
  await using c = await connect({ addr: t.addr });
  const held = [];
  for (const name of ["q/one", "q/two", "q/three", "other"]) held.push(await a.acquire(name));
  t.scheduler.advance(1_000);
  const late = await b.acquire("q/late");
  const waits = [
    await queue(t, b, "q/two"),
    await queue(t, c, "q/two"),
    await queue(t, c, "q/one"),
  ];
  const page = async (query: string) => {
    const answer = await http(t.server.adminAddr!, "GET", `/api/locks?${query}`);
    assert.equal(answer.status, 200, answer.text);
    const body = answer.json as { locks: { name: string }[]; total: number };
    assert.deepEqual(Object.keys(body), ["locks", "total"]);
    return `${body.total}: ${body.locks.map((lock) => lock.name).join(" ")}`;
  };
  assert.equal(await page("limit=2"), "5: other q/late");
  assert.equal(await page("limit=2&offset=2"), "5: q/one q/three");
  assert.equal(await page("offset=4"), "5: q/two");
  assert.equal(await page("sort=-name&limit=1"), "5: q/two");
  assert.equal(await page("sort=-waiters&limit=3"), "5: q/two q/one other", "longest queue first");
  assert.equal(await page("sort=-held_for&limit=2"), "5: other q/one", "longest held first");
  assert.equal(await page("sort=held_for&limit=1"), "5: q/late", "shortest held first");
  assert.equal(
    await page(`match=${encodeURIComponent("q/*")}&sort=-waiters&limit=2`),
    "4: q/two q/one",
  );
  assert.equal(await page("offset=99"), "5: ");
  // Items are the same Lock objects as without paging.
  const full = await http(t.server.adminAddr!, "GET", "/api/locks?match=q%2Ftwo");
  const paged = await http(t.server.adminAddr!, "GET", "/api/locks?match=q%2Ftwo&limit=1");
  assert.deepEqual(
    (paged.json as { locks: unknown[] }).locks,
    (full.json as { locks: unknown[] }).locks,
  );
  for (const lock of [...held, late]) await lock.release();
  for (const wait of waits) await (await wait.granted).release();
});

Deno.test("?waiters_limit= keeps the head of each queue and adds waiters_total, in lists, pages and one lock", async () => {
  await using t = await start();
  await using a = await connect({ addr: t.addr });
  await using b = await connect({ addr: t.addr });
  await using c = await connect({ addr: t.addr });
  const lock = await a.acquire("long");
  const first = await queue(t, b, "long");
  const second = await queue(t, c, "long");
  const addr = t.server.adminAddr!;
  const one = (await http(addr, "GET", "/api/locks/long?waiters_limit=1")).json as Record<
    string,
    unknown
  >;
  assert.deepEqual(Object.keys(one), ["name", "holder", "waiters", "waiters_total"]);
  assert.deepEqual(
    (one.waiters as { remote_addr: string }[]).map((w) => w.remote_addr),
    [first.remoteAddr],
    "the head of the queue",
  );
  assert.equal(one.waiters_total, 2);
  for (const path of ["/api/locks?waiters_limit=0", "/api/locks?limit=5&waiters_limit=0"]) {
    const listed = (await http(addr, "GET", path)).json as {
      locks: { waiters: unknown[]; waiters_total: number }[];
    };
    assert.deepEqual(listed.locks.map((l) => [l.waiters.length, l.waiters_total]), [[0, 2]], path);
  }
  // Without it, the spec's shape: the whole queue, no waiters_total.
  const full = (await http(addr, "GET", "/api/locks/long")).json as Record<string, unknown>;
  assert.deepEqual(Object.keys(full), ["name", "holder", "waiters"]);
  assert.equal((full.waiters as unknown[]).length, 2);
  const bad = await http(addr, "GET", "/api/locks/long?waiters_limit=-1");
  await assertProblem(bad, 400, "invalid-query", {
    title: "Invalid query parameter",
    detail: 'waiters_limit="-1" is not a whole number of at least 0',
  });
  await lock.release();
  await (await first.granted).release();
  await (await second.granted).release();
});

const BAD_QUERIES: [string, string][] = [
  [
    "sort=owner",
    'sort="owner" is not one of name, held_for, waiters (a leading - sorts descending)',
  ],
  ["sort=", 'sort="" is not one of name, held_for, waiters (a leading - sorts descending)'],
  ["offset=-1", 'offset="-1" is not a whole number of at least 0'],
  ["offset=1.5", 'offset="1.5" is not a whole number of at least 0'],
  ["limit=0", `limit="0" is not a whole number from 1 to ${ADMIN_LOCKS_LIMIT_MAX}`],
  [
    `limit=${ADMIN_LOCKS_LIMIT_MAX + 1}`,
    `limit="${ADMIN_LOCKS_LIMIT_MAX + 1}" is not a whole number from 1 to ${ADMIN_LOCKS_LIMIT_MAX}`,
  ],
  ["limit=ten", `limit="ten" is not a whole number from 1 to ${ADMIN_LOCKS_LIMIT_MAX}`],
  ["waiters_limit=x", 'waiters_limit="x" is not a whole number of at least 0'],
];

for (const [query, detail] of BAD_QUERIES) {
  Deno.test(`GET /api/locks?${query} is a 400 invalid-query problem`, async () => {
    await using t = await start();
    const answer = await http(t.server.adminAddr!, "GET", `/api/locks?${query}`);
    await assertProblem(answer, 400, "invalid-query", {
      title: "Invalid query parameter",
      detail,
    });
  });
}

// ---- GET /api/history ---------------------------------------------------------------

Deno.test("GET /api/history keeps one snapshot of the counters per second for 15 minutes, oldest first", async () => {
  await using t = await start();
  const history = async () =>
    (await http(t.server.adminAddr!, "GET", "/api/history")).json as {
      interval_ms: number;
      snapshots: SnapshotJson[];
    };
  const first = await history();
  assert.equal(first.interval_ms, ADMIN_HISTORY_INTERVAL_MS);
  assert.deepEqual(first.snapshots, [{
    at: "2026-01-01T00:00:00.000Z",
    uptime_ms: 0,
    acquires_total: 0,
    handoffs_total: 0,
    wait_seconds_sum: 0,
    wait_seconds_count: 0,
    hold_seconds_sum: 0,
    hold_seconds_count: 0,
    locks_held: 0,
    waiters: 0,
    oldest_waiter_ms: 0,
    sessions: 0,
  }]);

  await using a = await connect({ addr: t.addr });
  await using b = await connect({ addr: t.addr });
  const lock = await a.acquire("h");
  const waiting = await queue(t, b, "h");
  t.scheduler.advance(ADMIN_HISTORY_INTERVAL_MS);
  await lock.release();
  t.scheduler.advance(ADMIN_HISTORY_INTERVAL_MS);
  const later = (await history()).snapshots;
  assert.equal(later.length, 3);
  assert.deepEqual(later.map((s) => [s.uptime_ms, s.acquires_total, s.handoffs_total, s.waiters]), [
    [0, 0, 0, 0],
    [1_000, 1, 0, 1],
    [2_000, 2, 1, 0],
  ]);
  assert.equal(later[2].wait_seconds_count, 2);
  assert.equal(later[2].wait_seconds_sum, 1, "the waiter waited one second");
  assert.deepEqual([later[2].hold_seconds_count, later[2].hold_seconds_sum], [1, 1]);
  await (await waiting.granted).release();

  t.scheduler.advance(ADMIN_HISTORY_SNAPSHOTS_MAX * ADMIN_HISTORY_INTERVAL_MS);
  const full = (await history()).snapshots;
  assert.equal(full.length, ADMIN_HISTORY_SNAPSHOTS_MAX);
  assert.equal(full[full.length - 1].uptime_ms, (ADMIN_HISTORY_SNAPSHOTS_MAX + 2) * 1_000);
  assert.equal(full[0].uptime_ms, 3_000, "the oldest ones are gone");
});

Deno.test("GET /api/history: each snapshot says how long the longest current waiter has waited, not only finished waits", async () => {
  await using t = await start();
  const latest = async () =>
    ((await http(t.server.adminAddr!, "GET", "/api/history")).json as {
      snapshots: SnapshotJson[];
    }).snapshots.at(-1)!;
  await using a = await connect({ addr: t.addr });
  await using b = await connect({ addr: t.addr });
  await using c = await connect({ addr: t.addr });
  const lock = await a.acquire("h");
  const other = await a.acquire("other");
  t.scheduler.advance(1_000);
  const first = await queue(t, b, "h"); // queued at 1 s
  t.scheduler.advance(2_000);
  const second = await queue(t, c, "other"); // queued at 3 s
  t.scheduler.advance(ADMIN_HISTORY_INTERVAL_MS); // the snapshot at 4 s
  const during = await latest();
  assert.deepEqual([during.uptime_ms, during.waiters, during.wait_seconds_count], [4_000, 2, 2]);
  assert.equal(during.oldest_waiter_ms, 3_000, "the waiter of h, queued for 3 s, still waiting");
  // The oldest waiter is granted: the next oldest is now the longest waiting.
  await lock.release();
  await first.granted;
  t.scheduler.advance(ADMIN_HISTORY_INTERVAL_MS);
  assert.equal((await latest()).oldest_waiter_ms, 2_000);
  await other.release();
  await second.granted;
  t.scheduler.advance(ADMIN_HISTORY_INTERVAL_MS);
  const after = await latest();
  assert.deepEqual([after.waiters, after.oldest_waiter_ms], [0, 0]);
});

// ---- GET /api/events ----------------------------------------------------------------

interface ServerEvent {
  event: string;
  data: unknown;
}

/** Reads an event stream block by block (comments included, as `event: ":"`). */
class EventReader {
  readonly #reader: ReadableStreamDefaultReader<string>;
  #buffer = "";

  constructor(response: Response) {
    this.#reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  }

  /** The next block, or null at the end of the stream; fails after `timeoutMs`. */
  async next(timeoutMs = 5_000): Promise<ServerEvent | null> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error("no event in time")), timeoutMs);
    });
    try {
      for (;;) {
        const end = this.#buffer.indexOf("\n\n");
        if (end >= 0) {
          const block = this.#buffer.slice(0, end);
          this.#buffer = this.#buffer.slice(end + 2);
          if (block.startsWith("retry:")) continue;
          if (block.startsWith(":")) return { event: ":", data: block };
          const [eventLine, dataLine] = block.split("\n");
          return { event: eventLine.slice(7), data: JSON.parse(dataLine.slice(6)) };
        }
        const { value, done } = await Promise.race([this.#reader.read(), timeout]);
        if (done) return null;
        this.#buffer += value;
      }
    } finally {
      clearTimeout(timer);
    }
  }

  async cancel(): Promise<void> {
    await this.#reader.cancel();
  }
}

async function openEvents(addr: string): Promise<EventReader> {
  const response = await fetch(`http://${addr}/api/events`);
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), "text/event-stream; charset=utf-8");
  assert.equal(response.headers.get("cache-control"), "no-store");
  return new EventReader(response);
}

Deno.test("GET /api/events sends the state at once, then a state event after each change, snapshots, and keep-alive comments", async () => {
  await using t = await start();
  const events = await openEvents(t.server.adminAddr!);
  try {
    assert.deepEqual(await events.next(), {
      event: "state",
      data: { version: 0, locks: 0, held: 0, waiters: 0, sessions: 0 },
    });
    await using client = await connect({ addr: t.addr });
    // A lease longer than the time the test moves on (the client heartbeats on real time).
    const lock = await client.acquire("e", { leaseMs: 60_000 });
    t.scheduler.advance(ADMIN_EVENTS_CHECK_MS);
    const changed = await events.next();
    assert.equal(changed?.event, "state");
    const { version, ...counts } = changed?.data as { version: number };
    assert.ok(version > 0, "the version grew");
    assert.deepEqual(counts, { locks: 1, held: 1, waiters: 0, sessions: 1 });
    // Nothing changed: no event at the next checks; a snapshot each second.
    t.scheduler.advance(ADMIN_HISTORY_INTERVAL_MS - ADMIN_EVENTS_CHECK_MS);
    const snapshot = await events.next();
    assert.equal(snapshot?.event, "snapshot");
    assert.equal((snapshot?.data as SnapshotJson).acquires_total, 1);
    // Silence past the keep-alive interval (15 s) brings a comment (with a snapshot each second).
    for (let s = 0; s < ADMIN_EVENTS_KEEPALIVE_MS_MAX / 1_000; s++) {
      t.scheduler.advance(1_000);
      assert.equal((await events.next())?.event, "snapshot");
    }
    await lock.release();
    t.scheduler.advance(ADMIN_EVENTS_CHECK_MS);
    assert.equal((await events.next())?.event, "state");
  } finally {
    await events.cancel();
  }
});

Deno.test("an event stream of a quiet server sends a comment before the idle timeout would close it", async () => {
  // Real time: the guard's idle timer is the point. Idle timeout 1 s → a comment every 333 ms.
  await using t = await startTestServer({ adminListen: "127.0.0.1:0", httpIdleTimeoutMs: 1_000 });
  const events = await openEvents(t.server.adminAddr!);
  try {
    assert.equal((await events.next())?.event, "state");
    const startedMs = performance.now();
    let comments = 0;
    while (performance.now() - startedMs < 2_500) {
      const block = await events.next(2_000);
      assert.notEqual(block, null, "the stream is still open");
      if (block?.event === ":") comments++;
    }
    assert.ok(comments >= 3, `${comments} comments in 2.5 s`);
    assert.equal(t.server.context.counters.http.admin.dropped.idle_timeout, 0);
  } finally {
    await events.cancel();
  }
});

Deno.test("event streams count in the connection cap, at most half of it; shutdown ends them", async () => {
  const scheduler = new ManualScheduler();
  const t = await startTestServer(
    { adminListen: "127.0.0.1:0", httpConnectionsMax: 4 },
    { scheduler },
  );
  const addr = t.server.adminAddr!;
  const first = await openEvents(addr);
  const second = await openEvents(addr);
  try {
    assert.equal(t.server.context.counters.http.admin.open, 2, "two connections open");
    const third = await http(addr, "GET", "/api/events");
    await assertProblem(third, 503, "too-many-streams", {
      title: "Too many event streams",
      detail: "The admin API has 2 event streams open; close one or poll",
    });
    // Requests still get through beside the streams.
    assert.equal((await http(addr, "GET", "/api/info")).status, 200);
    assert.equal((await first.next())?.event, "state");
    assert.equal((await second.next())?.event, "state");
    // Shutdown does not wait for the streams: it ends them.
    await t.server.shutdown();
    assert.equal(await first.next(), null);
    assert.equal(await second.next(), null);
  } finally {
    await t.server.shutdown();
  }
});

Deno.test("an event stream whose reader does not read is ended once its buffer is full", async () => {
  const scheduler = new ManualScheduler();
  const engine = {
    viewVersion: 0,
    lockCount: 0,
    stats: { locksHeld: 0, waiters: 0, sessionsOpen: 0 },
  } as unknown as ConstructorParameters<typeof EventHub>[0]["engine"];
  const hub = new EventHub({
    engine,
    scheduler,
    checkMs: ADMIN_EVENTS_CHECK_MS,
    keepAliveMs: ADMIN_EVENTS_KEEPALIVE_MS_MAX,
    streamsMax: 4,
    connectionsMax: 8,
    bufferBytesMax: 1_024,
  });
  const response = hub.open();
  assert.equal(hub.size, 1);
  const snapshot = { at: "2026-01-01T00:00:00.000Z", uptime_ms: 0 } as SnapshotJson;
  let sent = 0;
  while (hub.size === 1 && sent < 100) {
    hub.snapshot(snapshot);
    sent++;
  }
  assert.equal(hub.size, 0, "the stream was ended");
  // What was buffered is still delivered, then the stream ends.
  const text = await response.text();
  assert.ok(text.length <= 1_024, `${text.length} bytes buffered at most`);
  assert.equal(text.split("event: snapshot").length - 1, sent - 1, "every event but the last");
  hub.close();
});
