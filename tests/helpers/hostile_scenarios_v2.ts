/**
 * Hostile servers of protocol version 2 (issue 20), shared by the TypeScript and the Python client
 * tests as tests/helpers/hostile_scenarios.ts is for version 1: the frames version 2 adds, crafted
 * wrong, encoded by the real codec. The Python tests run this file, which serves every scenario on
 * its own 127.0.0.1 port 0, prints one JSON line (`addrs`: scenario → `127.0.0.1:port`, and the
 * tables: `misfits`, `reclaimMisfits`, `welcomes`), then serves until its standard input closes.
 *
 *     deno run --allow-net tests/helpers/hostile_scenarios_v2.ts
 *
 * - `v2-misfit-<i>`: a version-2 leader (term {@link TERM}) that grants "own" correctly and
 *   answers an ACQUIRE of "a" with the frames of `V2_MISFITS[i]`.
 * - `reclaim-a-<i>` and `reclaim-b-<i>`, dialled as `[a, b]`: leader A (term {@link TERM}) grants
 *   "own", queues "w" and ends the connection at an ACQUIRE of "crash" (any later HELLO gets
 *   NOT_LEADER naming no leader); its successor B (term {@link TERM} + 1) answers the RESUME and
 *   RECLAIMs that follow with `RECLAIM_MISFITS[i]`.
 * - `v2-welcome-<i>`: a WELCOME for a version-2 HELLO with the fields of `BAD_WELCOMES_V2[i]`.
 */

import { WIRE_CODES } from "../../src/wire/codes.ts";
import type {
  Acquire,
  ClientMessage,
  Reclaim,
  Resume,
  ServerMessage,
  Welcome,
} from "../../src/wire/messages.ts";
import { error, TOKEN } from "./hostile_scenarios.ts";
import { GOOD_WELCOME_V2, type HostileScript, HostileServer } from "./hostile_server.ts";

/** The term of leader A (B's is one more). */
export const TERM = 3;
/** A ticket as a server mints them (any 16 bytes but zeros). */
export const TICKET = new Uint8Array(16).fill(7);
const RECLAIM_WINDOW_MS = 8_000;

type Acquired = Extract<ServerMessage, { type: "acquired" }>;
type Queued = Extract<ServerMessage, { type: "queued" }>;

/** A correct version-2 grant of an ACQUIRE or RECLAIM. */
export function grantV2(
  request: { requestId: number; name: string; leaseMs: number },
  token = TOKEN,
): Acquired {
  return {
    type: "acquired",
    requestId: request.requestId,
    name: request.name,
    token,
    leaseMs: request.leaseMs || 15_000,
    ticket: TICKET,
    mode: "exclusive",
    limit: 1,
    slot: 0,
    writeGeneration: 0,
  };
}

/** A correct version-2 QUEUED (place 1, order `TERM`/`seq`). */
export function queuedV2(request: { requestId: number; name: string }, seq = 10): Queued {
  return {
    type: "queued",
    requestId: request.requestId,
    name: request.name,
    position: 1,
    orderTerm: TERM,
    orderSeq: seq,
    ticket: TICKET,
  };
}

function resumed(resume: Resume, outcome: number | "reclaim" = "reclaim"): ServerMessage {
  return { type: "resumed", requestId: resume.requestId, outcome, windowLeftMs: 4_000 };
}

/** The right answer to a RECLAIM: the owned claim kept with its token; the queued one queued. */
function kept(reclaim: Reclaim): ServerMessage[] {
  return reclaim.kind === "owned" ? [grantV2(reclaim, reclaim.token)] : [queuedV2(reclaim)];
}

/** What a version-2 leader sends for an ACQUIRE of "a" (the client also owns "own"). */
export const V2_MISFITS: { name: string; frames: (a: Acquire) => ServerMessage[] }[] = [
  {
    name: "a QUEUED with an orderTerm above the session's term",
    frames: (a) => [{ ...queuedV2(a), orderTerm: TERM + 1 }],
  },
  {
    name: "an ACQUIRED granting a shared lock to an exclusive ACQUIRE",
    frames: (a) => [{ ...grantV2(a), mode: "shared" }],
  },
  {
    name: "an ACQUIRED with a mode that names nothing",
    frames: (a) => [{ ...grantV2(a), mode: 9 }],
  },
  { name: "an ACQUIRED with slot 1 of a limit of 1", frames: (a) => [{ ...grantV2(a), slot: 1 }] },
  { name: "an ACQUIRED with limit 0", frames: (a) => [{ ...grantV2(a), limit: 0 }] },
  {
    name: "an ACQUIRED of an exclusive lock with a writeGeneration",
    frames: (a) => [{ ...grantV2(a), writeGeneration: TOKEN - 6 }],
  },
  {
    name: "a CLAIM_VOID answering an ACQUIRE",
    frames: (a) => [error(a.requestId, WIRE_CODES.CLAIM_VOID.code, a.name)],
  },
  {
    name: "a RESUMED answering an ACQUIRE",
    frames: (a) => [{ type: "resumed", requestId: a.requestId, outcome: "none", windowLeftMs: 0 }],
  },
  {
    name: "a RESUMED for a request id never sent",
    frames: (
      a,
    ) => [{ type: "resumed", requestId: a.requestId + 1_000, outcome: "none", windowLeftMs: 0 }],
  },
  {
    name: "a LOCK_STATE nobody asked for",
    frames: (a) => [{
      type: "lock_state",
      requestId: a.requestId,
      event: "state",
      reason: "none",
      kind: "none",
      limit: 1,
      queueLength: 0,
      owners: 0,
      name: a.name,
      holders: [],
    }],
  },
];

/** How successor B answers the RESUME and the RECLAIMs (owned "own", queued "w"). */
export const RECLAIM_MISFITS: {
  name: string;
  answer: (message: Resume | Reclaim) => ServerMessage[];
}[] = [
  {
    name: "an ACQUIRED re-confirming an owned RECLAIM with another token",
    answer: (m) =>
      m.type === "resume"
        ? [resumed(m)]
        : m.kind === "owned"
        ? [grantV2(m, m.token + 6)]
        : [queuedV2(m)],
  },
  {
    name: "a QUEUED answering an owned RECLAIM",
    answer: (m) => m.type === "resume" ? [resumed(m)] : [queuedV2(m)],
  },
  {
    name: "a CLAIM_VOID answering a queued RECLAIM",
    answer: (m) =>
      m.type === "resume"
        ? [resumed(m)]
        : m.kind === "queued"
        ? [error(m.requestId, WIRE_CODES.CLAIM_VOID.code, m.name)]
        : kept(m),
  },
  {
    name: "a LEASE_EXPIRED for a queued RECLAIM still waiting",
    answer: (m) =>
      m.type === "resume"
        ? [resumed(m)]
        : m.kind === "queued"
        ? [error(m.requestId, WIRE_CODES.LEASE_EXPIRED.code, m.name)]
        : kept(m),
  },
  {
    name: "a LEASE_EXPIRED answering RESUME",
    answer: (m) =>
      m.type === "resume" ? [error(m.requestId, WIRE_CODES.LEASE_EXPIRED.code, "")] : kept(m),
  },
  {
    name: "a RESUMED whose outcome names nothing",
    answer: (m) => m.type === "resume" ? [resumed(m, 7)] : kept(m),
  },
  {
    name: "a second RESUMED",
    answer: (m) => m.type === "resume" ? [resumed(m), resumed(m)] : kept(m),
  },
  {
    name: "a RESUMED answering a RECLAIM",
    answer: (m) =>
      m.type === "resume"
        ? [resumed(m)]
        : [{ type: "resumed", requestId: m.requestId, outcome: "reclaim", windowLeftMs: 1 }],
  },
];

/** A WELCOME answering a version-2 HELLO with these fields is a protocol error. */
export const BAD_WELCOMES_V2: [string, Partial<Welcome>, RegExp][] = [
  [
    "reclaimWindowMs above ten minutes",
    { reclaimWindowMs: 600_001 },
    /reclaimWindowMs 600001/,
  ],
  ["valueBytesMax above 65535", { valueBytesMax: 65_536 }, /valueBytesMax 65536/],
  [
    "a version-1 WELCOME answering a version-2 HELLO",
    { version: 1, term: 0, reclaimWindowMs: 0, valueBytesMax: 0 },
    /protocol version 1/,
  ],
];

/** The scenarios the Python tests dial, by name. */
export function scenariosV2(): Record<string, HostileScript> {
  const table: Record<string, HostileScript> = {};
  const versions = [1, 2];
  V2_MISFITS.forEach((misfit, i) => {
    table[`v2-misfit-${i}`] = {
      versions,
      hello: (conn) => conn.send({ ...GOOD_WELCOME_V2, term: TERM, sessionId: conn.index }),
      request: (conn, message) => {
        if (message.type !== "acquire") return;
        if (message.name === "own") conn.send(grantV2(message));
        else conn.send(...misfit.frames(message));
      },
    };
  });
  RECLAIM_MISFITS.forEach((misfit, i) => {
    table[`reclaim-a-${i}`] = {
      versions,
      hello: (conn) =>
        conn.index === 1
          ? conn.send({
            ...GOOD_WELCOME_V2,
            term: TERM,
            sessionId: 41,
            reclaimWindowMs: RECLAIM_WINDOW_MS,
          })
          : conn.send(error(0, WIRE_CODES.NOT_LEADER.code, "")),
      request: (conn, message) => answerLeaderA(conn, message),
    };
    table[`reclaim-b-${i}`] = {
      versions,
      hello: (conn) =>
        conn.send({
          ...GOOD_WELCOME_V2,
          term: TERM + 1,
          sessionId: conn.index,
          reclaimWindowMs: RECLAIM_WINDOW_MS,
        }),
      request: (conn, message) => {
        if (message.type === "resume" || message.type === "reclaim") {
          conn.send(...misfit.answer(message));
        } else if (message.type === "heartbeat") {
          conn.send({ type: "heartbeat_ack", requestId: message.requestId, renewed: 1 });
        }
      },
    };
  });
  BAD_WELCOMES_V2.forEach(([, fields], i) => {
    table[`v2-welcome-${i}`] = {
      versions,
      hello: (conn) => conn.send({ ...GOOD_WELCOME_V2, ...fields } as Welcome),
    };
  });
  return table;
}

/** Leader A: grants "own", queues "w", ends the connection at "crash"; acknowledges heartbeats. */
function answerLeaderA(
  conn: { send: (...m: ServerMessage[]) => void; close: () => void },
  message: ClientMessage,
): void {
  if (message.type === "heartbeat") {
    conn.send({ type: "heartbeat_ack", requestId: message.requestId, renewed: 1 });
  } else if (message.type === "acquire") {
    if (message.name === "own") conn.send(grantV2(message));
    else if (message.name === "w") conn.send(queuedV2(message));
    else if (message.name === "crash") conn.close();
  }
}

if (import.meta.main) {
  const servers = Object.entries(scenariosV2()).map(([name, script]) =>
    [name, new HostileServer(script)] as const
  );
  console.log(JSON.stringify({
    addrs: Object.fromEntries(servers.map(([name, server]) => [name, server.addr])),
    misfits: V2_MISFITS.map((m) => m.name),
    reclaimMisfits: RECLAIM_MISFITS.map((m) => m.name),
    welcomes: BAD_WELCOMES_V2.map(([what, , pattern]) => ({ what, pattern: pattern.source })),
  }));
  // Serve until the test closes our standard input (or kills us by PID).
  for await (const _ of Deno.stdin.readable) {
    // nothing to read; the loop ends at EOF
  }
  for (const [, server] of servers) await server[Symbol.asyncDispose]();
}
