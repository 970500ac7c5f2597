/**
 * The engine test harness: a manual clock, an engine with small limits, a step that checks the
 * invariants after every call, and one line per event so whole sequences compare at once.
 */

import assert from "node:assert/strict";
import { ManualClock } from "../../src/clock.ts";
import { LockEngine } from "../../src/core/engine.ts";
import { TokenIssuer } from "../../src/core/tokens.ts";
import type {
  AcquireOptions,
  EngineEvent,
  GrantedEvent,
  Instant,
  Peer,
} from "../../src/core/types.ts";

export interface Harness {
  clock: ManualClock;
  engine: LockEngine;
  /** The clock's reading as one instant, as the service passes it. */
  now(): Instant;
  reservations: number[];
  open(addr?: string, identity?: string): Peer;
  /** Runs an engine call, checks the invariants, returns the events in a compact form. */
  step(run: () => EngineEvent[]): string[];
  advance(ms: number): string[];
  /** ACQUIRE through `step`: request id 1, the default lease and no wait bound unless given. */
  acquire(peer: Peer, name: string, options?: Partial<AcquireOptions>): string[];
  /** RELEASE through `step` (token 0 cancels a wait). */
  release(peer: Peer, name: string, token: number): string[];
}

let addrCounter = 0;

export function harness(
  options: Partial<ConstructorParameters<typeof LockEngine>[0]> = {},
): Harness {
  const clock = new ManualClock();
  const reservations: number[] = [];
  const tokens = new TokenIssuer(0, 100, (highWater) => reservations.push(highWater));
  const engine = new LockEngine({
    tokens,
    ioTimeoutMs: 30_000,
    leaseDefaultMs: 10_000,
    leaseMaxMs: 60_000,
    ...options,
  });
  const now = () => ({ monoMs: clock.monotonicMs(), wallMs: clock.wallMs() });
  const step = (run: () => EngineEvent[]) => {
    const events = run().map(describe);
    engine.assertInvariants();
    return events;
  };
  return {
    clock,
    engine,
    now,
    reservations,
    open(addr = `127.0.0.1:${40000 + addrCounter++}`, identity = "") {
      const peer = engine.openSession(now(), identity, addr);
      assert.ok(peer, "session opened");
      return peer;
    },
    step,
    advance(ms) {
      clock.advance(ms);
      return step(() => engine.tick(now()));
    },
    acquire(peer, name, options = {}) {
      return step(() =>
        engine.acquire(now(), {
          sessionId: peer.sessionId,
          requestId: 1,
          name,
          leaseMs: 0,
          waitMs: null,
          ...options,
        })
      );
    },
    release(peer, name, token) {
      return step(() =>
        engine.release(now(), { sessionId: peer.sessionId, requestId: 2, name, token })
      );
    },
  };
}

const decoder = new TextDecoder();
const encoder = new TextEncoder();
export const text = (value: Uint8Array | null) => value === null ? "-" : decoder.decode(value);
export const bytes = (value: string) => encoder.encode(value);

/** What a grant says beyond an exclusive lock's: only what differs from it is shown. */
function grantDetails(event: GrantedEvent): string {
  let details = "";
  if (event.mode === "shared") details += ` shared gen=${event.writeGeneration}`;
  if (event.kind === "semaphore") details += ` sem${event.limit} slot=${event.slot}`;
  if (event.value !== null) details += ` value=${text(event.value)}`;
  if (event.restored) details += " restored";
  return details;
}

/** One line per event: easy to compare whole sequences. */
export function describe(event: EngineEvent): string {
  const s = event.peer.sessionId;
  switch (event.type) {
    case "granted":
      return `granted s${s} ${event.name} token=${event.token} lease=${event.leaseMs} waited=${event.waitedMs}${
        grantDetails(event)
      }`;
    case "queued":
      return `queued s${s} ${event.name} pos=${event.position}${
        event.mode === "shared" ? " shared" : ""
      }${event.restored ? ` restored order=${event.orderTerm}:${event.orderSeq}` : ""}`;
    case "ended":
      return `ended s${s} ${event.name} token=${event.token} ${event.reason} held=${event.heldMs}${
        event.delayedUntilMs !== 0 ? ` delayed=${event.delayedUntilMs}` : ""
      }`;
    case "wait_ended":
      return `wait_ended s${s} ${event.name} ${event.cause}`;
    case "rejected": {
      const r = event.rejection;
      return `rejected s${s} ${event.name} ${r.reason}${
        r.reason === "grants_blocked" ? ":" + r.block : ""
      }`;
    }
    case "session_closed":
      return `closed s${s} ${event.cause}${event.name ? " " + event.name : ""}`;
    case "value_changed":
      return `value s${s} ${event.name} token=${event.token} ${text(event.value)}`;
    case "mode_changed":
      return `mode s${s} ${event.name} token=${event.token} ${event.mode}${
        event.changed ? "" : " unchanged"
      } gen=${event.writeGeneration}`;
    case "claim_moved":
      return `moved s${event.fromSessionId}->s${s} ${event.name} ${event.state} token=${event.token} req=${event.requestId}`;
  }
}

/** mulberry32: small, seeded, well mixed (an LCG's low bits cycle). Returns `random(n)` in [0, n). */
export function seededRandom(seed: number): (n: number) => number {
  return (n: number) => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) % n;
  };
}

interface ModelOwner {
  sessionId: number;
  mode: string;
  slot: number;
  value: string;
}

/**
 * What a watcher knows of every lock from the engine's events alone: owners (token, session,
 * mode, slot, value) and waiting sessions. `check` compares it with the engine's views, so a
 * change that no event reports fails the test.
 */
export class EventModel {
  readonly owners = new Map<string, Map<number, ModelOwner>>();
  readonly waiting = new Map<string, Set<number>>();

  apply(events: EngineEvent[]): void {
    for (const e of events) {
      const owners = this.#owners(e.name);
      const waiting = this.#waiting(e.name);
      switch (e.type) {
        case "granted":
          waiting.delete(e.peer.sessionId);
          owners.set(e.token, {
            sessionId: e.peer.sessionId,
            mode: e.mode,
            slot: e.slot,
            value: text(e.value),
          });
          break;
        case "queued":
          waiting.add(e.peer.sessionId);
          break;
        case "ended":
          owners.delete(e.token);
          break;
        case "wait_ended":
          waiting.delete(e.peer.sessionId);
          break;
        case "value_changed":
          owners.get(e.token)!.value = text(e.value);
          break;
        case "mode_changed":
          owners.get(e.token)!.mode = e.mode;
          break;
        case "claim_moved":
          if (e.state === "owned") owners.get(e.token)!.sessionId = e.peer.sessionId;
          else {
            waiting.delete(e.fromSessionId);
            waiting.add(e.peer.sessionId);
          }
          break;
      }
    }
  }

  /** Compares every lock the model or the engine knows with the engine's view. */
  check(engine: LockEngine): void {
    const names = new Set([...this.owners.keys(), ...engine.view.listLocks().map((l) => l.name)]);
    for (const name of names) {
      const view = engine.view.getLock(name);
      const owners = [...(view?.holders ?? [])].map((o) =>
        `${o.token}:s${o.sessionId}:${o.mode}:${o.slot}:${text(o.value)}`
      );
      const modelOwners = [...this.#owners(name)].sort(([a], [b]) => a - b).map(([token, o]) =>
        `${token}:s${o.sessionId}:${o.mode}:${o.slot}:${o.value}`
      );
      assert.deepEqual(owners, modelOwners, `owners of "${name}" as the events told them`);
      assert.deepEqual(
        new Set(view?.waiters.map((w) => w.sessionId) ?? []),
        this.#waiting(name),
        `waiters of "${name}" as the events told them`,
      );
      if (view === undefined) {
        this.owners.delete(name);
        this.waiting.delete(name);
      }
    }
  }

  #owners(name: string): Map<number, ModelOwner> {
    let owners = this.owners.get(name);
    if (owners === undefined) this.owners.set(name, owners = new Map());
    return owners;
  }

  #waiting(name: string): Set<number> {
    let waiting = this.waiting.get(name);
    if (waiting === undefined) this.waiting.set(name, waiting = new Set());
    return waiting;
  }
}
