/**
 * The client's timing semantics in manual time, against a scripted in-memory server: the local
 * lease deadline, heartbeat cadence, the wait bound, the connect timeout, reconnect back-off,
 * and which frames count.
 */
import assert from "node:assert/strict";
import { type Client, connectWith, type Lock } from "../../src/client/client.ts";
import { ConnectionError, LockdError, LockLostError } from "../../src/client/errors.ts";
import { leaseMarginMs, localDeadlineMs } from "../../src/client/timing.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { WIRE_CODES } from "../../src/wire/codes.ts";
import type { Acquire, ClientMessage } from "../../src/wire/messages.ts";
import { FakeNetwork, type FakeServerConn, settle } from "./fake_network.ts";

const ADDR = "127.0.0.1:7400";
const TOKEN = 1_800_000_000_000_000;

/** Moves manual time forward, letting the client's writes and the fake's replies through at every timer. */
async function advance(scheduler: ManualScheduler, ms: number): Promise<void> {
  const endMs = scheduler.monotonicMs() + ms;
  for (;;) {
    await settle();
    const next = scheduler.nextTimerAtMs();
    if (next === undefined || next > endMs) break;
    scheduler.advance(next - scheduler.monotonicMs());
  }
  scheduler.advance(endMs - scheduler.monotonicMs());
  await settle();
}

/** A scripted server that grants every ACQUIRE at once and acknowledges heartbeats while `acking`. */
class Script {
  readonly scheduler = new ManualScheduler();
  readonly net = new FakeNetwork(() => this.scheduler.monotonicMs());
  acking = true;
  granting = true;
  leaseOverrideMs: number | null = null;
  /** Send time (manual clock) of each heartbeat, by request id. */
  readonly heartbeatAtMs = new Map<number, number>();
  /** Heartbeats acknowledged so far. */
  readonly ackedHeartbeats = new Set<number>();
  /** ACQUIREs not answered yet (when `granting` is off). */
  readonly held: { conn: FakeServerConn; acquire: Acquire }[] = [];
  nextToken = TOKEN;

  constructor() {
    this.net.onRequest = (conn, message) => this.#on(conn, message);
  }

  connect(options: { ioTimeoutMs?: number; reconnect?: boolean } = {}): Promise<Client> {
    if (options.ioTimeoutMs !== undefined) this.net.welcome.ioTimeoutMs = options.ioTimeoutMs;
    return connectWith(
      { addr: ADDR, scheduler: this.scheduler, reconnect: options.reconnect ?? false },
      { dial: this.net.dial },
    );
  }

  grant(entry: { conn: FakeServerConn; acquire: Acquire }): void {
    const { acquire } = entry;
    entry.conn.send({
      type: "acquired",
      requestId: acquire.requestId,
      name: acquire.name,
      token: this.nextToken++,
      leaseMs: this.leaseOverrideMs ?? (acquire.leaseMs || 15_000),
    });
  }

  #on(conn: FakeServerConn, message: ClientMessage): void {
    if (message.type === "heartbeat") {
      this.heartbeatAtMs.set(message.requestId, this.scheduler.monotonicMs());
      if (this.acking) {
        this.ackedHeartbeats.add(message.requestId);
        conn.send({ type: "heartbeat_ack", requestId: message.requestId, renewed: 1 });
      }
    } else if (message.type === "acquire") {
      if (this.granting) this.grant({ conn, acquire: message });
      else {
        conn.send({
          type: "queued",
          requestId: message.requestId,
          name: message.name,
          position: 1,
        });
        this.held.push({ conn, acquire: message });
      }
    }
  }

  /** Send time of the newest heartbeat that was acknowledged. */
  lastAckedHeartbeatMs(acksUpToMs: number): number {
    return Math.max(...[...this.heartbeatAtMs.values()].filter((at) => at <= acksUpToMs));
  }
}

/** Watches a promise without awaiting it. */
function track<T>(promise: Promise<T>): { settled: boolean; value?: T; error?: unknown } {
  const state: { settled: boolean; value?: T; error?: unknown } = { settled: false };
  promise.then(
    (value) => Object.assign(state, { settled: true, value }),
    (error) => Object.assign(state, { settled: true, error }),
  );
  return state;
}

function lostReason(lock: Lock): string | undefined {
  return lock.lost.aborted ? (lock.lost.reason as LockLostError).reason : undefined;
}

Deno.test("the margin is max(lease/10, min(50, lease/4)) and the I/O timeout bounds the deadline", () => {
  assert.equal(leaseMarginMs(50), 12.5);
  assert.equal(leaseMarginMs(100), 25);
  assert.equal(leaseMarginMs(200), 50);
  assert.equal(leaseMarginMs(499), 50);
  assert.equal(leaseMarginMs(1_000), 100);
  assert.equal(leaseMarginMs(15_000), 1_500);
  assert.equal(localDeadlineMs(1_000, 1_000, 30_000), 1_900);
  assert.equal(localDeadlineMs(1_000, 60_000, 3_000), 3_700);
});

Deno.test("lost fires with lease_unconfirmed at the last acknowledged heartbeat's send time + lease - margin, and nothing revives it", async () => {
  const s = new Script();
  await using client = await s.connect();
  const lock = await client.acquire("a", { leaseMs: 1_000 });
  await advance(s.scheduler, 5_000);
  assert.equal(lock.lost.aborted, false, "a healthy connection never nears the deadline");
  const heartbeats = [...s.heartbeatAtMs.values()];
  assert.ok(heartbeats.length >= 14, `heartbeats every lease/3: ${heartbeats.length}`);
  assert.ok(heartbeats.every((at, i) => i === 0 || at - heartbeats[i - 1] <= 1_000 / 3 + 1e-9));

  s.acking = false;
  const lastAckedMs = s.lastAckedHeartbeatMs(s.scheduler.monotonicMs());
  const deadlineMs = lastAckedMs + 1_000 - 100;
  await advance(s.scheduler, deadlineMs - 1 - s.scheduler.monotonicMs());
  assert.equal(lock.lost.aborted, false, "1 ms before the deadline");
  await advance(s.scheduler, 1);
  assert.equal(lostReason(lock), "lease_unconfirmed");
  assert.equal((lock.lost.reason as LockLostError).token, lock.token);
  // The server may still count it as owned: the client gives it back.
  const releases = s.net.last.sent("release");
  assert.deepEqual(releases.map((r) => [r.name, r.token]), [["a", lock.token]]);

  // Late acknowledgements of heartbeats sent before the deadline change nothing.
  for (const [requestId] of s.heartbeatAtMs) {
    if (s.ackedHeartbeats.has(requestId)) continue; // a second ACK would break the protocol
    s.net.last.send({ type: "heartbeat_ack", requestId, renewed: 1 });
  }
  await advance(s.scheduler, 10_000);
  assert.equal(lostReason(lock), "lease_unconfirmed");
  await lock.release(); // quiet: already lost
  assert.equal(s.net.last.sent("release").length, 1);
});

Deno.test("a shorter I/O timeout bounds the local deadline and the heartbeat period", async () => {
  const s = new Script();
  await using client = await s.connect({ ioTimeoutMs: 3_000 });
  const lock = await client.acquire("a", { leaseMs: 60_000 });
  const grantedAt = s.scheduler.monotonicMs();
  await advance(s.scheduler, 2_000);
  const times = [...s.heartbeatAtMs.values()];
  assert.deepEqual(times, [grantedAt + 1_000, grantedAt + 2_000]);
  s.acking = false;
  await advance(s.scheduler, 2_000 + 3_000 - 300 - 1 - 2_000);
  assert.equal(lock.lost.aborted, false);
  await advance(s.scheduler, 1);
  assert.equal(lostReason(lock), "lease_unconfirmed");
});

Deno.test("heartbeats cover pending acquires, so a grant after a long wait is confirmed by a recent one", async () => {
  const s = new Script();
  s.granting = false;
  await using client = await s.connect();
  const acquiredAt = s.scheduler.monotonicMs();
  const pending = client.acquire("a", { leaseMs: 300 });
  await advance(s.scheduler, 10_000);
  const times = [...s.heartbeatAtMs.values()];
  assert.ok(times.length >= 99, `every 100 ms while waiting: ${times.length}`);
  s.grant(s.held[0]);
  const lock = await pending;
  // Confirmed by the last acknowledged heartbeat, not by the ACQUIRE sent 10 s ago.
  assert.equal(lock.lost.aborted, false);
  const lastAckedMs = s.lastAckedHeartbeatMs(s.scheduler.monotonicMs());
  assert.ok(lastAckedMs > acquiredAt + 9_800);
  s.acking = false;
  await advance(s.scheduler, lastAckedMs + 300 - 50 - s.scheduler.monotonicMs());
  assert.equal(lostReason(lock), "lease_unconfirmed");
});

Deno.test("a grant that arrives when the lease can no longer be confirmed arrives lost and is given back", async () => {
  const s = new Script();
  s.granting = false;
  s.acking = false;
  await using client = await s.connect();
  const pending = client.acquire("a", { leaseMs: 300 });
  await advance(s.scheduler, 1_000);
  s.grant(s.held[0]);
  const lock = await pending;
  assert.equal(lostReason(lock), "lease_unconfirmed");
  await settle();
  assert.deepEqual(s.net.last.sent("release").map((r) => r.token), [lock.token]);
});

Deno.test("the wait bound holds on the client clock: WAIT_TIMEOUT at waitMs, the claim is cancelled, a late grant is given back", async () => {
  const s = new Script();
  s.granting = false;
  await using client = await s.connect();
  const pending = client.acquire("jobs/slow", { waitMs: 3_000 });
  const outcome = track(pending);
  await advance(s.scheduler, 2_999);
  assert.equal(outcome.settled, false);
  assert.equal(s.net.last.sent("acquire")[0].waitMs, 3_000);
  await advance(s.scheduler, 1);
  const error = outcome.error;
  assert.ok(error instanceof LockdError, String(error));
  assert.equal(error.code, WIRE_CODES.WAIT_TIMEOUT.code);
  assert.equal(error.codeName, "WAIT_TIMEOUT");
  assert.equal(error.lockName, "jobs/slow");
  assert.match(error.message, /Cannot acquire lock "jobs\/slow": wait timed out after 3000 ms/);
  assert.deepEqual(s.net.last.sent("release").map((r) => [r.name, r.token]), [["jobs/slow", 0]]);
  // The server granted before it saw the cancel: the client releases the grant at once.
  s.grant(s.held[0]);
  await settle();
  assert.deepEqual(
    s.net.last.sent("release").map((r) => [r.name, r.token]),
    [["jobs/slow", 0], ["jobs/slow", TOKEN]],
  );
});

Deno.test("connect() gives up after connectTimeoutMs when the server never answers HELLO, and closes the socket", async () => {
  const s = new Script();
  s.net.hello = "silent";
  const connecting = connectWith(
    { addr: ADDR, scheduler: s.scheduler, connectTimeoutMs: 2_000 },
    { dial: s.net.dial },
  );
  const outcome = track(connecting);
  await advance(s.scheduler, 1_999);
  assert.equal(outcome.settled, false);
  await advance(s.scheduler, 1);
  assert.ok(outcome.error instanceof ConnectionError);
  assert.match(
    outcome.error.message,
    /Cannot connect to lockd at 127\.0\.0\.1:7400: no WELCOME within 2000 ms/,
  );
  assert.equal(s.net.last.closedByClient, true);
});

Deno.test("connect() times out after 5 s by default, and a dial that never completes is aborted", async () => {
  const s = new Script();
  let dialSignal: AbortSignal | undefined;
  const connecting = connectWith({ addr: ADDR, scheduler: s.scheduler }, {
    dial: (_target, _events, signal) => {
      dialSignal = signal;
      return new Promise((_, reject) =>
        signal.addEventListener("abort", () => reject(signal.reason))
      );
    },
  });
  const outcome = track(connecting);
  await advance(s.scheduler, 4_999);
  assert.equal(outcome.settled, false);
  await advance(s.scheduler, 1);
  assert.ok(outcome.error instanceof ConnectionError, String(outcome.error));
  assert.match(outcome.error.message, /no WELCOME within 5000 ms/);
  assert.equal(dialSignal?.aborted, true);
});

Deno.test("an AbortSignal stops connect() in progress, and later closes the client", async () => {
  const s = new Script();
  s.net.hello = "silent";
  const controller = new AbortController();
  const connecting = connectWith(
    { addr: ADDR, scheduler: s.scheduler, signal: controller.signal },
    { dial: s.net.dial },
  );
  await settle();
  controller.abort(new Error("shutting down"));
  await assert.rejects(connecting, /shutting down/);
  assert.equal(s.net.last.closedByClient, true);
  assert.equal(s.scheduler.pendingTimers, 0, "the connect timer is gone");

  s.net.hello = "welcome";
  const later = new AbortController();
  const client = await connectWith(
    { addr: ADDR, scheduler: s.scheduler, signal: later.signal },
    { dial: s.net.dial },
  );
  const lock = await client.acquire("a");
  later.abort();
  assert.equal(lostReason(lock), "disconnected");
  assert.equal(s.net.last.closedByClient, true);
  await assert.rejects(client.acquire("b"), /The client is closed/);
  await client.close();
  assert.equal(s.scheduler.pendingTimers, 0);
});

Deno.test("every reconnect attempt is bounded by connectTimeoutMs: a mute server does not stop reconnecting", async () => {
  const s = new Script();
  const client = await connectWith(
    { addr: ADDR, scheduler: s.scheduler, connectTimeoutMs: 1_000 },
    { dial: s.net.dial, random: () => 0.5 },
  );
  s.net.hello = "silent";
  s.net.last.close();
  await advance(s.scheduler, 10_000);
  const mute = s.net.conns.slice(1);
  assert.ok(mute.length >= 4, `attempts: ${mute.length}`);
  assert.ok(mute.slice(0, -1).every((conn) => conn.closedByClient), "each timed out and closed");
  s.net.hello = "welcome";
  await advance(s.scheduler, 10_000);
  assert.ok(client.sessionId > 0, "connected again");
  await client.close();
});

Deno.test("reconnect back-off is full jitter, doubles per failed attempt up to 5 s, and resets only after a WELCOME", async () => {
  const s = new Script();
  const client = await connectWith(
    { addr: ADDR, scheduler: s.scheduler },
    { dial: s.net.dial, random: () => 0.999 },
  );
  // The server accepts TCP and closes before WELCOME: attempts keep backing off.
  s.net.hello = "close";
  const cutAt = s.scheduler.monotonicMs();
  s.net.last.close();
  await advance(s.scheduler, 30_000);
  const times = [cutAt, ...s.net.dialTimesMs.slice(1)];
  const delays = times.slice(1).map((t, i) => Math.round(t - times[i]));
  assert.deepEqual(
    delays.slice(0, 9),
    [50, 100, 200, 400, 799, 1_598, 3_197, 4_995, 4_995],
  );
  // A WELCOME resets it.
  s.net.hello = "welcome";
  await advance(s.scheduler, 5_000);
  assert.ok(client.sessionId > 0);
  const dials = s.net.dialTimesMs.length;
  const cut2 = s.scheduler.monotonicMs();
  s.net.last.close();
  await advance(s.scheduler, 1_000);
  assert.equal(Math.round(s.net.dialTimesMs[dials] - cut2), 50);
  await client.close();
});

Deno.test("100 clients cut off together do not reconnect in the same few milliseconds", async () => {
  const s = new Script();
  const clients: Client[] = [];
  for (let i = 0; i < 100; i++) {
    clients.push(await connectWith({ addr: ADDR, scheduler: s.scheduler }, { dial: s.net.dial }));
  }
  const before = s.net.dialTimesMs.length;
  const cutAt = s.scheduler.monotonicMs();
  for (const conn of [...s.net.conns]) conn.close();
  await advance(s.scheduler, 100);
  const offsets = s.net.dialTimesMs.slice(before).map((t) => t - cutAt).sort((a, b) => a - b);
  assert.equal(offsets.length, 100, "every client reconnected within the first back-off");
  assert.ok(offsets.every((ms) => ms >= 0 && ms < 50), "first attempt waits random(0, 50) ms");
  const spanMs = offsets[99] - offsets[0];
  assert.ok(spanMs >= 25, `spread over ${spanMs} ms`);
  // A uniform spread puts about 10 in any 5 ms; without jitter all 100 would share one.
  let crowd = 0;
  for (let i = 0, j = 0; i < offsets.length; i++) {
    while (offsets[i] - offsets[j] >= 5) j++;
    crowd = Math.max(crowd, i - j + 1);
  }
  assert.ok(crowd <= 40, `${crowd} reconnects within 5 ms`);
  for (const client of clients) await client.close();
});

Deno.test("frames after an ERROR that ends the session are ignored", async () => {
  const s = new Script();
  s.granting = false;
  const client = await s.connect();
  const pending = client.acquire("a");
  await settle();
  const [held] = s.held;
  // SHUTTING_DOWN, then (a server bug) a grant: the grant must not produce a lock.
  s.net.last.send(
    {
      type: "error",
      requestId: 0,
      code: WIRE_CODES.SHUTTING_DOWN.code,
      name: "",
      message: "shutting down",
    },
    {
      type: "acquired",
      requestId: held.acquire.requestId,
      name: "a",
      token: TOKEN,
      leaseMs: 15_000,
    },
  );
  await assert.rejects(pending, ConnectionError);
  assert.equal(s.net.last.closedByClient, true);
  await client.close();

  // CLOSED_BY_ADMIN, then an ACK: the owned lock is lost with reason force all the same.
  s.granting = true;
  const c2 = await s.connect();
  const lock = await c2.acquire("b");
  s.net.last.send(
    {
      type: "error",
      requestId: 0,
      code: WIRE_CODES.CLOSED_BY_ADMIN.code,
      name: "b",
      message: "force-released",
    },
    { type: "heartbeat_ack", requestId: 1, renewed: 1 },
  );
  assert.equal(lostReason(lock), "force");
  await c2.close();
});

Deno.test("replies are matched by request id only: an error for a later request may overtake a grant", async () => {
  const s = new Script();
  s.granting = false;
  await using client = await s.connect();
  const first = client.acquire("a");
  const second = client.acquire("b");
  await settle();
  const [a, b] = s.held;
  s.net.last.send({
    type: "error",
    requestId: b.acquire.requestId,
    code: WIRE_CODES.ACL_DENIED.code,
    name: "b",
    message: "denied",
  });
  await assert.rejects(second, (error: unknown) => {
    assert.ok(error instanceof LockdError);
    assert.equal(error.codeName, "ACL_DENIED");
    return true;
  });
  // (Replies to request ids the client does not know, or a LEASE_EXPIRED naming "a" under
  // another request id, break the protocol: hostile_server_test.ts.)
  s.grant(a);
  const lock = await first;
  assert.equal(lock.lost.aborted, false);
  s.net.last.send({
    type: "error",
    requestId: a.acquire.requestId,
    code: WIRE_CODES.LEASE_EXPIRED.code,
    name: "a",
    message: "expired",
  });
  assert.equal(lostReason(lock), "expired");
});

Deno.test("a connection that answers nothing for the I/O timeout is dropped, and a waiting claim moves to a new one", async () => {
  const s = new Script();
  s.granting = false;
  const client = await connectWith(
    { addr: ADDR, scheduler: s.scheduler },
    { dial: s.net.dial, random: () => 0 },
  );
  const pending = client.acquire("a");
  await settle();
  s.acking = false;
  const silentFrom = s.scheduler.monotonicMs();
  await advance(s.scheduler, 30_000 - 1);
  assert.equal(s.net.conns.length, 1);
  await advance(s.scheduler, 30_000 / 3 + 1);
  assert.equal(s.net.conns[0].closedByClient, true);
  assert.ok(s.scheduler.monotonicMs() - silentFrom <= 30_000 + 10_000);
  s.acking = true;
  await advance(s.scheduler, 10);
  assert.equal(s.net.conns.length, 2);
  assert.deepEqual(s.net.conns[1].sent("acquire").map((m) => m.name), ["a"]);
  s.grant(s.held[1]);
  const lock = await pending;
  assert.equal(lock.lost.aborted, false);
  await client.close();
});

Deno.test("release() resolves on RELEASED, and when the local deadline passes first", async () => {
  const s = new Script();
  await using client = await s.connect();
  const a = await client.acquire("a", { leaseMs: 1_000 });
  const releasing = a.release();
  assert.equal(a.release(), releasing, "the same promise");
  await settle();
  const [release] = s.net.last.sent("release");
  s.net.last.send({ type: "released", requestId: release.requestId, name: "a" });
  await releasing;

  const b = await client.acquire("b", { leaseMs: 1_000 });
  s.acking = false;
  let done = false;
  b.release().then(() => done = true);
  await advance(s.scheduler, 899);
  assert.equal(done, false);
  await advance(s.scheduler, 1);
  assert.equal(done, true);
  assert.equal(b.lost.aborted, false, "lost never fires after release()");
});
