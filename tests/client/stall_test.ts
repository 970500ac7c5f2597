/**
 * A holder behind a path that stops forwarding in both directions without closing: its `lost`
 * must fire before the server grants the lock to the next waiter, within lease + 100 ms of the
 * send time of its last acknowledged heartbeat, and no frame arriving late revives it.
 *
 * Real sockets and real time on purpose (the point is what a stalled TCP path does); the
 * server runs in this process, so the client's and the server's readings of the monotonic
 * clock are the same clock.
 */
import assert from "node:assert/strict";
import { connect, connectWith } from "../../src/client/client.ts";
import type { LockLostError } from "../../src/client/errors.ts";
import { leaseMarginMs } from "../../src/client/timing.ts";
import { type Dial, nodeSocketDial } from "../../src/client/transport.ts";
import { type Scheduler, systemScheduler } from "../../src/clock.ts";
import { FrameReader } from "../../src/wire/frame_reader.ts";
import { ChaosProxy } from "../helpers/chaos_proxy.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

const ROUNDS = 25;
const LEASE_MS = 200;
const LEASE_MARGIN_MS = leaseMarginMs(LEASE_MS);

/**
 * The server's wall clock is the monotonic clock plus the time origin, so the instant the
 * engine records for a grant (`sinceWallMs`) is a reading of the clock the client's timers use.
 */
const sharedClock: Scheduler = {
  ...systemScheduler,
  monotonicMs: () => performance.now(),
  wallMs: () => performance.timeOrigin + performance.now(),
};

/**
 * Event-loop stalls of this process, from a 5 ms interval timer: how much later than due each
 * tick ran. Timer lateness that a stall explains is not the client's.
 */
class LagProbe implements Disposable {
  static readonly PERIOD_MS = 5;
  readonly #ticks: { atMs: number; lateMs: number }[] = [];
  readonly #handle: ReturnType<typeof setInterval>;

  constructor() {
    let lastMs = performance.now();
    this.#handle = setInterval(() => {
      const nowMs = performance.now();
      this.#ticks.push({ atMs: nowMs, lateMs: Math.max(0, nowMs - lastMs - LagProbe.PERIOD_MS) });
      lastMs = nowMs;
    }, LagProbe.PERIOD_MS);
  }

  /** The longest stall that overlaps [fromMs, toMs]. */
  maxBetween(fromMs: number, toMs: number): number {
    let maxMs = 0;
    for (const tick of this.#ticks) {
      const stalledFromMs = tick.atMs - tick.lateMs;
      if (tick.atMs >= fromMs && stalledFromMs <= toMs) maxMs = Math.max(maxMs, tick.lateMs);
    }
    return maxMs;
  }

  [Symbol.dispose](): void {
    clearInterval(this.#handle);
  }
}

/** What crossed the holder's socket, with `performance.now()` times. */
interface Trace {
  heartbeatSentAtMs: Map<number, number>;
  /** Send time of the last ACQUIRE. */
  acquireSentAtMs: number;
  /** Request ids of HEARTBEAT_ACKs, with arrival times. */
  acks: { requestId: number; atMs: number }[];
  /** Server frames by type, with arrival times. */
  arrivals: { type: string; code?: number; atMs: number }[];
  /** RELEASE frames the holder sent (name, token). */
  releases: { name: string; token: number; atMs: number }[];
}

/** The real transport, with every frame in both directions decoded and timed. */
function tracingDial(trace: Trace): Dial {
  return (target, events, signal) => {
    const fromServer = new FrameReader();
    return nodeSocketDial(systemScheduler)(target, {
      onData(bytes) {
        fromServer.push(bytes.slice());
        const atMs = performance.now();
        for (let m = fromServer.next(); m !== null; m = fromServer.next()) {
          if (m.type === "heartbeat_ack") trace.acks.push({ requestId: m.requestId, atMs });
          trace.arrivals.push({
            type: m.type,
            code: m.type === "error" ? m.code : undefined,
            atMs,
          });
        }
        events.onData(bytes);
      },
      onClose: events.onClose,
    }, signal).then((socket) => {
      const toServer = new FrameReader();
      return {
        write(bytes) {
          const atMs = performance.now();
          toServer.push(bytes.slice());
          for (let m = toServer.next(); m !== null; m = toServer.next()) {
            if (m.type === "heartbeat") trace.heartbeatSentAtMs.set(m.requestId, atMs);
            if (m.type === "acquire") trace.acquireSentAtMs = atMs;
            if (m.type === "release") {
              trace.releases.push({ name: m.name, token: m.token, atMs });
            }
          }
          socket.write(bytes);
        },
        close: () => socket.close(),
      };
    });
  };
}

Deno.test("a holder behind a stalled path reports lost before the server grants the next waiter, within lease + 100 ms of its last acknowledged heartbeat, and late frames do not revive it", async () => {
  await using t = await startTestServer({}, { scheduler: sharedClock });
  await using waiter = await connect({ addr: t.addr });
  const margins: number[] = [];
  using lag = new LagProbe();
  let maxStallMs = 0;
  let stallExcusedRounds = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const name = `stall/${round}`;
    const trace: Trace = {
      heartbeatSentAtMs: new Map(),
      acquireSentAtMs: NaN,
      acks: [],
      arrivals: [],
      releases: [],
    };
    await using proxy = new ChaosProxy(t.addr);
    await using holder = await connectWith(
      { addr: proxy.addr, reconnect: false },
      { dial: tracingDial(trace) },
    );
    const lock = await holder.acquire(name, { leaseMs: LEASE_MS });
    let lostAtMs = NaN;
    const lost = new Promise<void>((resolve) =>
      lock.lost.addEventListener("abort", () => {
        lostAtMs = performance.now();
        resolve();
      })
    );
    const next = waiter.acquire(name, { leaseMs: 5_000 });
    await eventually(() => t.server.context.engine.getLock(name)?.waiters.length === 1, "queued");
    // Stall at a different point of the heartbeat cycle each round.
    await new Promise((resolve) => setTimeout(resolve, Math.random() * LEASE_MS / 3));
    proxy.hold();
    await lost;
    const nextLock = await next;

    assert.equal((lock.lost.reason as LockLostError).reason, "lease_unconfirmed");
    // The grant, as the server's clock read it: the one instant of that engine operation.
    const owner = t.server.context.engine.getLock(name)?.holder;
    assert.ok(owner && owner.token === nextLock.token, "the next waiter holds it");
    const grantedAtMs = owner.sinceWallMs - performance.timeOrigin;
    // No later than lease + 100 ms after the send time of the last acknowledged heartbeat
    // (or of the ACQUIRE, when the path stalled before the first heartbeat was answered).
    const ackedBeforeLoss = trace.acks.filter((ack) => ack.atMs <= lostAtMs);
    const lastAcked = ackedBeforeLoss.at(-1);
    const confirmedAtMs = Math.max(
      trace.acquireSentAtMs,
      lastAcked === undefined ? -Infinity : trace.heartbeatSentAtMs.get(lastAcked.requestId)!,
    );
    // The bound is on the client's logic: a stall of the whole process (the machine is
    // shared; it delays the server's timers as much) is measured and reported, not hidden.
    const stalledMs = lag.maxBetween(confirmedAtMs, lostAtMs);
    // Client and server share this process's event loop here (in production they do not): a
    // stall longer than the client's safety margin leaves both deadlines overdue at once, and
    // which callback runs first is then the runtime's choice. Only such a stall may excuse a
    // loss reported after the grant; it is reported.
    const excusedByStall = stalledMs >= LEASE_MARGIN_MS;
    assert.ok(
      lostAtMs < grantedAtMs || excusedByStall,
      `round ${round}: lost at ${lostAtMs.toFixed(1)} ms, granted at ${grantedAtMs} ms ` +
        `(the event loop stalled ${stalledMs.toFixed(1)} ms meanwhile)`,
    );
    if (lostAtMs >= grantedAtMs) stallExcusedRounds++;
    assert.ok(
      lostAtMs <= confirmedAtMs + LEASE_MS + 100 + stalledMs,
      `round ${round}: lost ${(lostAtMs - confirmedAtMs).toFixed(1)} ms after the heartbeat ` +
        `(the event loop stalled ${stalledMs.toFixed(1)} ms meanwhile)`,
    );
    maxStallMs = Math.max(maxStallMs, stalledMs);
    margins.push(grantedAtMs - lostAtMs);

    // Late frames: what the stalled path kept arrives now (heartbeats reach the server,
    // its LEASE_EXPIRED and ACKs reach the holder). None revives the ownership.
    const arrivedBefore = trace.arrivals.length;
    await proxy.resume();
    await eventually(
      () => trace.arrivals.slice(arrivedBefore).some((a) => a.code === 0x05),
      "the late LEASE_EXPIRED reached the holder",
    );
    await eventually(
      () => trace.arrivals.slice(arrivedBefore).some((a) => a.type === "heartbeat_ack"),
      "late heartbeat acknowledgements reached the holder",
    );
    assert.equal((lock.lost.reason as LockLostError).reason, "lease_unconfirmed");
    await lock.release(); // a lost lock: nothing to send
    assert.deepEqual(
      trace.releases.map((r) => [r.name, r.token]),
      [[name, lock.token]],
      "the one RELEASE is the give-back sent when the deadline passed",
    );
    assert.equal(await holder.tryAcquire(name), null, "the next owner still holds it");
    await nextLock.release();
  }
  margins.sort((a, b) => a - b);
  console.log(
    `lost before grant by (ms): min ${margins[0].toFixed(1)}, median ${
      margins[margins.length >> 1].toFixed(1)
    }; longest event-loop stall: ${maxStallMs.toFixed(1)} ms; rounds where a stall of the ` +
      `shared event loop over the margin let the grant's timer run first: ${stallExcusedRounds}`,
  );
});
