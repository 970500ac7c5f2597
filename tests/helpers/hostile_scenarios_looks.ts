/**
 * Hostile servers for QUERY, WATCH, SET_VALUE and DOWNGRADE (protocol version 2, issues 22 and
 * 23), shared by the TypeScript and the Python client tests as hostile_scenarios_v2.ts is: the
 * frames that answer looks, crafted wrong, encoded by the real codec. The Python tests run this
 * file, which serves every scenario on its own 127.0.0.1 port 0, prints one JSON line (`addrs`:
 * scenario → `127.0.0.1:port`, and `misfits`: the names of LOOK_MISFITS), then serves until its
 * standard input closes.
 *
 *     deno run --allow-net tests/helpers/hostile_scenarios_looks.ts
 *
 * - `look-misfit-<i>`: a version-2 server that grants every ACQUIRE (a plain lock, token
 *   {@link TOKEN}) and, on its first connection only, answers the first WATCH (a client watches
 *   `service/*`), QUERY or DOWNGRADE with the frames of `LOOK_MISFITS[i]`; on later connections
 *   it answers correctly, so a client that left the first one goes on.
 */

import type { ClientMessage, LockState, Message } from "../../src/wire/messages.ts";
import { GOOD_WELCOME_V2, type HostileScript, HostileServer } from "./hostile_server.ts";

export const TOKEN = 1_795_426_718_504_001;

/** A correct LOCK_STATE of a lock held by one exclusive owner. */
export function heldState(
  requestId: number,
  name: string,
  event: LockState["event"] = "state",
  token = TOKEN,
): LockState {
  return {
    type: "lock_state",
    requestId,
    event,
    reason: "none",
    kind: "exclusive",
    limit: 1,
    queueLength: 0,
    owners: 1,
    name,
    holders: [{
      token,
      heldMs: 1_000,
      leaseMs: 10_000,
      mode: "exclusive",
      slot: 0,
      identity: "",
      clientName: "api@host-1:4242",
      value: new TextEncoder().encode("10.0.0.7:8080"),
    }],
  };
}

/** One wrong answer: which request it answers, and the frames (given that request). */
export interface LookMisfit {
  readonly name: string;
  readonly answers: "watch" | "query" | "downgrade";
  readonly frames: (request: { requestId: number; name: string }) => Message[];
}

const watching = (requestId: number, locks: number): Message => ({
  type: "watching",
  requestId,
  locks,
});

export const LOOK_MISFITS: readonly LookMisfit[] = [
  {
    name: "a LOCK_STATE of a lock the pattern cannot match",
    answers: "watch",
    frames: (r) => [heldState(r.requestId, "other/a"), watching(r.requestId, 1)],
  },
  {
    name: "a WATCHING with the wrong count",
    answers: "watch",
    frames: (r) => [heldState(r.requestId, "service/a"), watching(r.requestId, 2)],
  },
  {
    name: "an event before WATCHING",
    answers: "watch",
    frames: (r) => [heldState(r.requestId, "service/a", "granted")],
  },
  {
    name: "a snapshot after WATCHING",
    answers: "watch",
    frames: (r) => [watching(r.requestId, 0), heldState(r.requestId, "service/a")],
  },
  {
    name: "a WATCH_ENDED unwatched without UNWATCH",
    answers: "watch",
    frames: (r) => [{ type: "watch_ended", requestId: r.requestId, reason: "unwatched" }],
  },
  {
    name: "a VALUE_SET answering a WATCH",
    answers: "watch",
    frames: (r) => [{ type: "value_set", requestId: r.requestId, name: "service/a" }],
  },
  {
    name: "an ACQUIRED answering a WATCH",
    answers: "watch",
    frames: (r) => [{
      type: "acquired",
      requestId: r.requestId,
      name: "service/a",
      token: TOKEN,
      leaseMs: 10_000,
    }],
  },
  {
    name: "a LOCK_STATE of kind none with a holder",
    answers: "watch",
    frames: (r) => [{ ...heldState(r.requestId, "service/a"), kind: "none", limit: 0 }],
  },
  {
    name: "a LOCK_STATE with more holders than owners",
    answers: "watch",
    frames: (r) => [{ ...heldState(r.requestId, "service/a"), owners: 0 }],
  },
  {
    name: "a LOCK_STATE whose event names nothing",
    answers: "watch",
    frames: (r) => [watching(r.requestId, 0), { ...heldState(r.requestId, "service/a"), event: 9 }],
  },
  {
    name: "a LOCK_STATE with a reason but no end",
    answers: "watch",
    frames: (r) => [{ ...heldState(r.requestId, "service/a"), reason: "expired" }],
  },
  {
    name: "a WATCH refused after its WATCHING",
    answers: "watch",
    frames: (r) => [watching(r.requestId, 0), {
      type: "error",
      requestId: r.requestId,
      code: 0x0b,
      name: "",
      message: "no",
    }],
  },
  {
    name: "a QUERY answered for another lock",
    answers: "query",
    frames: (r) => [heldState(r.requestId, "other/lock")],
  },
  {
    name: "a QUERY answered with an event of a watch",
    answers: "query",
    frames: (r) => [heldState(r.requestId, r.name, "granted")],
  },
  {
    name: "a QUERY answered with LEASE_EXPIRED",
    answers: "query",
    frames: (r) => [{
      type: "error",
      requestId: r.requestId,
      code: 0x05,
      name: r.name,
      message: "x",
    }],
  },
  {
    name: "a DOWNGRADE answered for another token",
    answers: "downgrade",
    frames: (r) => [{
      type: "acquired",
      requestId: r.requestId,
      name: r.name,
      token: TOKEN + 1,
      leaseMs: 10_000,
      mode: "shared",
      limit: 1,
      writeGeneration: TOKEN + 1,
    }],
  },
  {
    name: "a DOWNGRADE answered with an exclusive grant",
    answers: "downgrade",
    frames: (r) => [{
      type: "acquired",
      requestId: r.requestId,
      name: r.name,
      token: TOKEN,
      leaseMs: 10_000,
      mode: "exclusive",
      limit: 1,
    }],
  },
];

/** The scenario of LOOK_MISFITS[i]: correct but for the first look it answers. */
export function lookScenario(misfit: LookMisfit): HostileScript {
  let wrongSent = false;
  return {
    versions: [2],
    hello: (conn) => conn.send({ ...GOOD_WELCOME_V2, reclaimWindowMs: 0, sessionId: conn.index }),
    request: (conn, message: ClientMessage) => {
      const kind = message.type;
      if (kind === "heartbeat") {
        conn.send({ type: "heartbeat_ack", requestId: message.requestId, renewed: 0 });
      } else if (kind === "acquire") {
        conn.send({
          type: "acquired",
          requestId: message.requestId,
          name: message.name,
          token: TOKEN,
          leaseMs: 10_000,
          limit: 1,
        });
      } else if (kind === "release") {
        conn.send({ type: "released", requestId: message.requestId, name: message.name });
      } else if (kind === misfit.answers && conn.index === 1 && !wrongSent) {
        wrongSent = true;
        const name = "name" in message ? message.name : "";
        conn.send(...misfit.frames({ requestId: message.requestId, name }));
      } else if (kind === "watch") {
        conn.send(watching(message.requestId, 0));
      } else if (kind === "query") {
        conn.send(heldState(message.requestId, message.name));
      }
    },
  };
}

if (import.meta.main) {
  const servers = LOOK_MISFITS.map((misfit, i) =>
    [`look-misfit-${i}`, new HostileServer(lookScenario(misfit))] as const
  );
  console.log(JSON.stringify({
    addrs: Object.fromEntries(servers.map(([name, server]) => [name, server.addr])),
    misfits: LOOK_MISFITS.map((m) => ({ name: m.name, answers: m.answers })),
    welcomes: [],
  }));
  // Serve until the test closes our standard input (or kills us by PID).
  for await (const _ of Deno.stdin.readable) {
    // nothing to read; the loop ends at EOF
  }
  for (const [, server] of servers) await server[Symbol.asyncDispose]();
}
