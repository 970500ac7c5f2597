/**
 * Hostile servers shared by the TypeScript and the Python client tests: the same crafted frames,
 * encoded by the real codec (src/wire/frame.ts), against both clients. The TypeScript tests
 * import the tables; the Python tests run this file, which serves every scenario on its own
 * 127.0.0.1 port 0 and prints one JSON line (`addrs`: scenario → `127.0.0.1:port`, and the
 * tables: `misfits`, `welcomes`, `leaders`), then serves until its standard input closes
 * (tests/helpers/hostile_server.ts is the server).
 *
 *     deno run --allow-net tests/helpers/hostile_scenarios.ts
 */

import { WIRE_CODES } from "../../src/wire/codes.ts";
import type { Acquire, ServerMessage, Welcome } from "../../src/wire/messages.ts";
import { GOOD_WELCOME, type HostileScript, HostileServer } from "./hostile_server.ts";

export const TOKEN = 1_795_426_718_504_001;

export type Acquired = Extract<ServerMessage, { type: "acquired" }>;

export function grant(acquire: Acquire, token = TOKEN): Acquired {
  return {
    type: "acquired",
    requestId: acquire.requestId,
    name: acquire.name,
    token,
    leaseMs: acquire.leaseMs || 15_000,
  };
}

export function error(requestId: number, code: number, name: string): ServerMessage {
  return { type: "error", requestId, code, name, message: "hostile" };
}

/**
 * Each case: what the server sends when the client asks for lock "a" (the client also owns
 * "own", granted correctly; `own` is that ACQUIRE). `grantsFirst`: the crafted frames start
 * with a correct grant of "a", so the acquire resolves before the violation.
 */
export const MISFITS: {
  name: string;
  frames: (a: Acquire, own: Acquire) => ServerMessage[];
  grantsFirst?: boolean;
}[] = [
  {
    name: "an ACQUIRED naming another lock",
    frames: (a) => [{ ...grant(a), name: "b" }],
  },
  {
    name: "an ACQUIRED for a request id never sent",
    frames: (a) => [grant({ ...a, requestId: a.requestId + 1_000 })],
  },
  { name: "an ACQUIRED with a lease of 0 ms", frames: (a) => [{ ...grant(a), leaseMs: 0 }] },
  {
    name: "an ACQUIRED with a lease above WELCOME's leaseMaxMs",
    frames: (a) => [{ ...grant(a), leaseMs: 300_001 }],
  },
  { name: "an ACQUIRED with token 0", frames: (a) => [{ ...grant(a), token: 0 }] },
  {
    name: "a second ACQUIRED for a granted ACQUIRE",
    frames: (a) => [grant(a), grant(a, TOKEN + 1)],
    grantsFirst: true,
  },
  {
    name: "a QUEUED naming another lock",
    frames: (a) => [{ type: "queued", requestId: a.requestId, name: "b", position: 1 }],
  },
  {
    name: "a RELEASED answering an ACQUIRE",
    frames: (a) => [{ type: "released", requestId: a.requestId, name: "a" }],
  },
  {
    name: "a HEARTBEAT_ACK answering an ACQUIRE",
    frames: (a) => [{ type: "heartbeat_ack", requestId: a.requestId, renewed: 1 }],
  },
  {
    name: "a LEASE_EXPIRED for an ACQUIRE still waiting",
    frames: (a) => [error(a.requestId, WIRE_CODES.LEASE_EXPIRED.code, "a")],
  },
  {
    name: "a NOT_OWNER answering an ACQUIRE",
    frames: (a) => [error(a.requestId, WIRE_CODES.NOT_OWNER.code, "a")],
  },
  {
    name: "a WAIT_TIMEOUT naming another lock",
    frames: (a) => [error(a.requestId, WIRE_CODES.WAIT_TIMEOUT.code, "b")],
  },
  {
    name: "a LEASE_EXPIRED naming another lock under an owned lock's request id",
    frames: (_a, own) => [error(own.requestId, WIRE_CODES.LEASE_EXPIRED.code, "b")],
  },
  {
    name: "a LEASE_EXPIRED for a request id never sent",
    frames: (a) => [error(a.requestId + 1_000, WIRE_CODES.LEASE_EXPIRED.code, "own")],
  },
];

export const BAD_WELCOMES: [string, Partial<Welcome>, RegExp][] = [
  ["ioTimeoutMs 0", { ioTimeoutMs: 0 }, /ioTimeoutMs 0, outside 100\.\.3600000/],
  ["ioTimeoutMs 99", { ioTimeoutMs: 99 }, /ioTimeoutMs 99/],
  ["ioTimeoutMs above an hour", { ioTimeoutMs: 3_600_001 }, /ioTimeoutMs 3600001/],
  ["leaseMaxMs 0", { leaseMaxMs: 0 }, /leaseMaxMs 0, outside 50\.\.86400000/],
  ["leaseMaxMs above a day", { leaseMaxMs: 86_400_001 }, /leaseMaxMs 86400001/],
  ["leaseDefaultMs 0", { leaseDefaultMs: 0 }, /leaseDefaultMs 0, outside 50\.\.300000/],
  ["leaseDefaultMs above leaseMaxMs", { leaseDefaultMs: 300_001 }, /leaseDefaultMs 300001/],
  ["protocol version 2", { version: 2 }, /protocol version 2/],
  ["session id 0", { sessionId: 0 }, /sessionId 0/],
];

export const BAD_LEADERS = [
  "evil",
  "evil:99999",
  "evil:0",
  "[::1",
  "[::1]:99999",
  "[fe80::1%eth0]:7400",
  ":7400",
  "1.2.3.256:7400",
  "two words:7400",
  "ctl\u0000char:7400",
  "\u202eevil.example:7400",
  "é.example:7400",
  "x".repeat(300) + ":7400",
  "a..b:7400",
  "-dash:7400",
];

/** The scenarios the Python tests dial, by name. */
export function scenarios(): Record<string, HostileScript> {
  const table: Record<string, HostileScript> = {};
  MISFITS.forEach((misfit, i) => {
    let own: Acquire | null = null;
    table[`misfit-${i}`] = {
      request: (conn, message) => {
        if (message.type !== "acquire") return;
        if (message.name === "own") {
          own = message;
          conn.send(grant(message));
        } else conn.send(...misfit.frames(message, own!));
      },
    };
  });
  BAD_WELCOMES.forEach(([, fields], i) => {
    table[`welcome-${i}`] = { hello: (conn) => conn.send({ ...GOOD_WELCOME, ...fields }) };
  });
  BAD_LEADERS.forEach((name, i) => {
    table[`not-leader-${i}`] = {
      hello: (conn) => conn.send(error(0, WIRE_CODES.NOT_LEADER.code, name)),
    };
  });
  table["presend"] = {
    hello: (conn) =>
      conn.send(
        { ...GOOD_WELCOME },
        ...[1, 2, 3, 4].map((requestId): ServerMessage => ({
          type: "acquired",
          requestId,
          name: "a",
          token: TOKEN,
          leaseMs: 15_000,
        })),
      ),
  };
  table["good"] = { request: (c, m) => m.type === "acquire" && c.send(grant(m)) };
  table["good-7"] = { request: (c, m) => m.type === "acquire" && c.send(grant(m, TOKEN + 7)) };
  table["bad-after-welcome"] = {
    request: (conn, message) => {
      if (message.type !== "acquire") return;
      if (message.name === "own") conn.send(grant(message));
      else conn.send(error(0, WIRE_CODES.NOT_LEADER.code, "evil:99999"));
    },
  };
  table["silent"] = { hello: () => {} };
  table["welcome-then-misfit"] = {
    request: (conn, message) => {
      if (message.type === "acquire") conn.send({ ...grant(message), name: "not-" + message.name });
    },
  };
  return table;
}

if (import.meta.main) {
  const servers = Object.entries(scenarios()).map(([name, script]) =>
    [name, new HostileServer(script)] as const
  );
  // "standby": a NOT_LEADER naming the "good" scenario's address (outside any list given).
  const good = servers.find(([name]) => name === "good")![1];
  const standby = new HostileServer({
    hello: (conn) => conn.send(error(0, WIRE_CODES.NOT_LEADER.code, good.addr)),
  });
  const addrs = Object.fromEntries([
    ...servers.map(([name, server]) => [name, server.addr]),
    ["standby", standby.addr],
  ]);
  console.log(JSON.stringify({
    addrs,
    misfits: MISFITS.map((m) => ({ name: m.name, grantsFirst: m.grantsFirst ?? false })),
    welcomes: BAD_WELCOMES.map(([what, , pattern]) => ({ what, pattern: pattern.source })),
    leaders: BAD_LEADERS,
  }));
  // Serve until the test closes our standard input (or kills us by PID).
  for await (const _ of Deno.stdin.readable) {
    // nothing to read; the loop ends at EOF
  }
  for (const [, server] of servers) await server[Symbol.asyncDispose]();
  await standby[Symbol.asyncDispose]();
}
