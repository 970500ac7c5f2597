/**
 * The one suite of wire error codes: plays every row of the "Every error case" table of
 * docs/protocol.md against a real server over TCP: the ERROR's code, request id and name, and
 * whether the connection closes after it. The table is read from the doc, so a row without a
 * scenario (or a scenario without a row) fails too, and every wire code must have a row: each
 * code is produced by some scenario.
 */
import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import type { ServerConfig } from "../../src/config.ts";
import { AUDIT_RETRY_MS } from "../../src/limits.ts";
import { TokenIssuer } from "../../src/core/tokens.ts";
import { WIRE_CODES, type WireCodeName } from "../../src/wire/codes.ts";
import { encodeFrame } from "../../src/wire/frame.ts";
import {
  type ClientRequest,
  type ErrorMessage,
  type Message,
  type Reclaim,
  withNeutral,
} from "../../src/wire/messages.ts";
import { VERSION } from "../../src/version.ts";
import { parseLockRules } from "../../src/security/lock_rules.ts";
import { writeAcl } from "../helpers/acl_file.ts";
import { startEtcdCluster } from "../helpers/cluster_fixture.ts";
import { skipWithoutEtcd } from "../helpers/etcd.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { eventually, startTestServer, type TestServer } from "../helpers/start_server.ts";

const doc = Deno.readTextFileSync(new URL("../../docs/protocol.md", import.meta.url));
const WAIT_FOREVER = 0xffff_ffff;

interface Row {
  case: string;
  code: string;
  requestId: string;
  name: string;
  connection: string;
}

function tableRows(): Row[] {
  const start = doc.indexOf("## Every error case");
  assert.ok(start >= 0, "docs/protocol.md has an error case table");
  const section = doc.slice(start, doc.indexOf("\n## ", start + 3));
  const rows: Row[] = [];
  for (const line of section.split("\n")) {
    const cells = line.split("|").slice(1, -1).map((cell) => cell.trim());
    if (cells.length !== 5 || cells[0] === "case" || cells[0].startsWith("---")) continue;
    rows.push({
      case: cells[0],
      code: cells[1],
      requestId: cells[2],
      name: cells[3],
      connection: cells[4],
    });
  }
  return rows;
}

/** One ERROR seen in a scenario, with what the row's words mean for it. */
interface Observation {
  error: Message | null;
  /** Request ids the scenario sent, for "the ACQUIRE's" and "the RELEASE's". */
  acquireId?: number;
  releaseId?: number;
  /** Version 2: the RESUME's and the RECLAIM's request ids, and any request's ("the request's"). */
  resumeId?: number;
  reclaimId?: number;
  requestId?: number;
  /** The name the request carried ("the request's name") and the lock ("the lock"). */
  requestName?: string;
  lock?: string;
  /** True when the server closed the connection right after the ERROR. */
  closed: boolean;
  /** Cluster mode: the leader's advertised address ("the leader's address"). */
  leader?: string;
}

/** Reads the next frame, which must be an ERROR, and whether the connection then closes or stays usable. */
async function observe(
  raw: RawClient,
  extra: Omit<Observation, "error" | "closed"> = {},
  afterError?: (raw: RawClient) => Promise<void>,
): Promise<Observation> {
  const error = await raw.next();
  if (error === null || error.type !== "error") return { error, closed: false, ...extra };
  await afterError?.(raw);
  return { error, closed: await closesNow(raw), ...extra };
}

/** True when the next event is the server closing; false when a HEARTBEAT still gets its ACK. */
async function closesNow(raw: RawClient): Promise<boolean> {
  try {
    await raw.send({ type: "heartbeat", requestId: 999 });
  } catch {
    // The server already closed; the read below sees it.
  }
  const next = await raw.next();
  if (next === null) return true;
  assert.deepEqual(next, {
    type: "heartbeat_ack",
    requestId: 999,
    renewed: next.type === "heartbeat_ack" ? next.renewed : 0,
  }, "after a kept ERROR the session answers");
  return false;
}

/** A server on a manual clock: timeouts, leases and retries happen when a scenario moves it. */
async function server(
  config: Partial<ServerConfig> = {},
): Promise<TestServer & { scheduler: ManualScheduler }> {
  const scheduler = new ManualScheduler();
  return Object.assign(await startTestServer(config, { scheduler }), { scheduler });
}

/** A version-2 session of a server whose ACL denies reading `secret/**` to everybody. */
async function withReadAcl(
  play: (raw: RawClient) => Promise<Observation[]>,
): Promise<Observation[]> {
  const dir = await Deno.makeTempDir();
  try {
    const aclFile = await writeAcl(dir, "deny ** secret/** read\nallow ** **\n");
    await using t = await server({ aclFile });
    await using raw = await RawClient.session(t.addr, 2);
    return await play(raw);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function acquire(
  raw: RawClient,
  requestId: number,
  name: string,
  waitMs = 0,
  leaseMs = 0,
): Promise<Message | null> {
  await raw.send({ type: "acquire", requestId, name, leaseMs, waitMs });
  return await raw.next();
}

/** A RECLAIM of an owned plain lock. */
function ownedReclaim(requestId: number, name: string, token: number, ticket: Uint8Array): Reclaim {
  return {
    type: "reclaim",
    requestId,
    kind: "owned",
    token,
    orderTerm: 0,
    orderSeq: 0,
    leaseMs: 5_000,
    waitMs: 0,
    ticket,
    mode: "exclusive",
    limit: 1,
    slot: 0,
    name,
    value: new Uint8Array(0),
  };
}

async function admin(t: TestServer, method: string, path: string): Promise<number> {
  const response = await fetch(`http://${t.server.adminAddr}${path}`, { method });
  await response.body?.cancel();
  return response.status;
}

const scenarios: Record<string, () => Promise<Observation[]>> = {
  async "the first frame is not HELLO"() {
    await using t = await server();
    await using raw = await RawClient.connect(t.addr);
    await raw.send({ type: "heartbeat", requestId: 1 });
    return [await observe(raw)];
  },

  async "a frame breaks the framing rules (before or after HELLO)"() {
    await using t = await server();
    const out: Observation[] = [];
    for (const open of [false, true]) {
      for (const bytes of [[0, 0, 0, 0], [0, 0, 0, 1, 0x03], [0x7f, 0xff, 0xff, 0xff]]) {
        await using raw = open ? await RawClient.session(t.addr) : await RawClient.connect(t.addr);
        await raw.sendBytes(Uint8Array.from(bytes));
        out.push(await observe(raw));
      }
    }
    // The server still serves others.
    await using ok = await RawClient.session(t.addr);
    assert.equal((await acquire(ok, 1, "x"))?.type, "acquired");
    return out;
  },

  async "a frame larger than any valid request when the room for such frames is full"() {
    // A small room, so two large frames fill it (the default is 64 MiB).
    await using t = await startTestServer({}, {
      scheduler: new ManualScheduler(),
      partialFrameBytesMax: 60_000,
    });
    await using first = await RawClient.session(t.addr);
    await using second = await RawClient.session(t.addr);
    const part = (bytes: number) => {
      const frame = new Uint8Array(4 + bytes);
      new DataView(frame.buffer).setUint32(0, 60_000);
      frame[4] = 0x10;
      return frame;
    };
    await first.sendBytes(part(30_000));
    await eventually(
      () => t.server.context.counters.partialFrameBytes > 25_000,
      "the first connection's frame holds room",
    );
    await second.sendBytes(part(30_000));
    const out = [await observe(second)];
    assert.equal(t.server.context.counters.limitRefusals.partial_frames, 1);
    return out;
  },

  async "HELLO with a client name over 256 bytes"() {
    await using t = await server();
    await using raw = await RawClient.connect(t.addr);
    // Also a wrong version: the name is checked first.
    await raw.send({ type: "hello", version: 3, clientName: "n".repeat(257) });
    const out = [await observe(raw)];
    await using ok = await RawClient.connect(t.addr);
    await ok.send({ type: "hello", version: 1, clientName: "n".repeat(256) });
    assert.equal((await ok.next())?.type, "welcome", "256 bytes are accepted");
    return out;
  },

  async "HELLO with a version the server does not speak"() {
    await using t = await server();
    const out: Observation[] = [];
    for (const version of [0, 3, 99, 0xffff]) {
      await using raw = await RawClient.connect(t.addr);
      await raw.send({ type: "hello", version, clientName: "future" });
      out.push(await observe(raw));
    }
    return out;
  },

  async "HELLO while the server has `-max-sessions` sessions open"() {
    await using t = await server({ sessionsMax: 1 });
    await using _first = await RawClient.session(t.addr);
    await using raw = await RawClient.connect(t.addr);
    await raw.send({ type: "hello", version: 1, clientName: "one too many" });
    return [await observe(raw)];
  },

  async "a connection without HELLO when `-max-handshakes` newer ones wait too"() {
    await using t = await server({ handshakesMax: 2 });
    await using oldest = await RawClient.connect(t.addr);
    await eventually(() => t.server.context.connections.size === 1, "first connection accepted");
    await using _second = await RawClient.connect(t.addr);
    await eventually(() => t.server.context.connections.size === 2, "second connection accepted");
    // A third connection closes the one that waited longest; the newer ones may still HELLO.
    await using third = await RawClient.connect(t.addr);
    const out = [await observe(oldest)];
    await third.hello();
    assert.equal(t.server.context.counters.limitRefusals.handshakes, 1);
    return out;
  },

  async "no HELLO within the handshake timeout"() {
    await using t = await server({ handshakeTimeoutMs: 100 });
    await using raw = await RawClient.connect(t.addr);
    await eventually(() => t.server.context.connections.size === 1, "connection accepted");
    t.scheduler.advance(100);
    return [await observe(raw)];
  },

  async "a second HELLO, or a server-to-client message type"() {
    await using t = await server();
    const out: Observation[] = [];
    const frames: Message[] = [
      { type: "hello", version: 1, clientName: "again" },
      { type: "queued", requestId: 5, name: "x", position: 1 },
      { type: "heartbeat_ack", requestId: 5, renewed: 0 },
      { type: "error", requestId: 5, code: 1, name: "", message: "" },
    ];
    for (const frame of frames) {
      await using raw = await RawClient.session(t.addr);
      await raw.sendBytes(encodeFrame(frame));
      out.push(await observe(raw));
    }
    return out;
  },

  async "a server-to-client message type with request id 0"() {
    // A client that sends server frames is broken, whatever the request id: it is not a request
    // with an out-of-range field (INVALID_ARGUMENT, kept) but a frame a client never sends.
    await using t = await server();
    const out: Observation[] = [];
    const frames: Message[] = [
      { type: "queued", requestId: 0, name: "x", position: 1 },
      { type: "acquired", requestId: 0, name: "x", token: 1, leaseMs: 1_000 },
      { type: "released", requestId: 0, name: "x" },
      { type: "heartbeat_ack", requestId: 0, renewed: 0 },
      { type: "error", requestId: 0, code: 1, name: "x", message: "" },
      {
        type: "welcome",
        version: 1,
        serverVersion: "0",
        sessionId: 0,
        ioTimeoutMs: 0,
        leaseDefaultMs: 0,
        leaseMaxMs: 0,
      },
    ];
    for (const frame of frames) {
      await using raw = await RawClient.session(t.addr);
      await raw.sendBytes(encodeFrame(frame));
      out.push(await observe(raw));
    }
    return out;
  },

  async "a request (ACQUIRE, RELEASE, HEARTBEAT) whose own request id is 0"() {
    await using t = await server();
    await using raw = await RawClient.session(t.addr);
    const out: Observation[] = [];
    await raw.send({ type: "heartbeat", requestId: 0 });
    out.push(await observe(raw, { requestName: "" }));
    await raw.send({ type: "acquire", requestId: 0, name: "jobs/a", leaseMs: 0, waitMs: 0 });
    out.push(await observe(raw, { requestName: "jobs/a" }));
    await raw.send({ type: "release", requestId: 0, name: "jobs/b", token: 0 });
    out.push(await observe(raw, { requestName: "jobs/b" }));
    return out;
  },

  async "ACQUIRE with a name that breaks the [lock name rules](#lock-names)"() {
    await using t = await server();
    await using raw = await RawClient.session(t.addr);
    const bad = [
      "",
      "n".repeat(1025),
      "é".repeat(513), // 1026 bytes in 513 characters
      "a\u0000b",
      "a\u001fb",
      "a\u007fb",
      "a\u0080b",
      "a\u0085b",
      "a\u009fb",
      ".",
      "..",
      "e\u0301", // "é" decomposed: not NFC
      "jobs/\u212b", // ANGSTROM SIGN, whose NFC is U+00C5
    ];
    const out: Observation[] = [];
    let requestId = 1;
    for (const name of bad) {
      await raw.send({ type: "acquire", requestId, name, leaseMs: 0, waitMs: 0 });
      out.push(await observe(raw, { acquireId: requestId, requestName: name }));
      requestId++;
    }
    // The edges of the rules are accepted.
    for (const name of ["n".repeat(1024), "a\u00a0b", "a/b", "...", ".a", "a\u2028b", "\u00e9"]) {
      const reply = await acquire(raw, requestId++, name);
      assert.equal(reply?.type, "acquired", `name ${JSON.stringify(name.slice(0, 20))}`);
    }
    return out;
  },

  async "ACQUIRE the ACL does not allow"() {
    const dir = await Deno.makeTempDir();
    try {
      const aclFile = await writeAcl(dir, 'deny "" secret/**\nallow ** **\n');
      await using t = await server({ aclFile });
      await using raw = await RawClient.session(t.addr);
      await raw.send({ type: "acquire", requestId: 3, name: "secret/db", leaseMs: 0, waitMs: 0 });
      return [await observe(raw, { acquireId: 3, requestName: "secret/db" })];
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },

  async "ACQUIRE for a name this session already owns or waits for"() {
    await using t = await server();
    await using a = await RawClient.session(t.addr);
    await using b = await RawClient.session(t.addr);
    assert.equal((await acquire(a, 1, "owned"))?.type, "acquired");
    await a.send({ type: "acquire", requestId: 2, name: "owned", leaseMs: 0, waitMs: 0 });
    const out = [await observe(a, { acquireId: 2, requestName: "owned" })];
    assert.equal((await acquire(b, 1, "owned", WAIT_FOREVER))?.type, "queued");
    await b.send({ type: "acquire", requestId: 2, name: "owned", leaseMs: 0, waitMs: 0 });
    out.push(await observe(b, { acquireId: 2, requestName: "owned" }));
    return out;
  },

  async "ACQUIRE while the audit log cannot be written"() {
    await using t = await server();
    await using a = await RawClient.session(t.addr);
    await using b = await RawClient.session(t.addr);
    t.audit.failing = true;
    await a.send({ type: "acquire", requestId: 1, name: "audited", leaseMs: 0, waitMs: 0 });
    await eventually(() => !t.server.context.ready, "the server reports the audit outage");
    await b.send({ type: "acquire", requestId: 4, name: "other", leaseMs: 0, waitMs: 0 });
    const out = [await observe(b, { acquireId: 4, requestName: "other" })];
    t.audit.failing = false;
    t.scheduler.advance(AUDIT_RETRY_MS);
    assert.equal((await a.next(5_000))?.type, "acquired", "the held-back grant arrives");
    return out;
  },

  async "ACQUIRE while no fencing token can be reserved"() {
    let failing = true;
    const tokens = new TokenIssuer(0, 1, () => {
      if (failing) throw new Error("No space left on device (os error 28)");
    });
    const scheduler = new ManualScheduler();
    await using t = await startTestServer({}, { scheduler, tokens });
    await using a = await RawClient.session(t.addr);
    await a.send({ type: "acquire", requestId: 3, name: "no-token", leaseMs: 0, waitMs: 0 });
    const out = [await observe(a, { acquireId: 3, requestName: "no-token" })];
    const refused = out[0].error;
    assert.match(
      refused?.type === "error" ? refused.message : "",
      /no fencing token could be reserved \(No space left on device \(os error 28\)\)/,
    );
    // Once the store can be written again, the next reservation (a retry) grants again.
    failing = false;
    scheduler.advance(10_000);
    assert.equal((await acquire(a, 4, "no-token"))?.type, "acquired");
    return out;
  },

  async "ACQUIRE past `-max-claims-per-session`"() {
    await using t = await server({ claimsPerSessionMax: 1 });
    await using raw = await RawClient.session(t.addr);
    assert.equal((await acquire(raw, 1, "first"))?.type, "acquired");
    await raw.send({ type: "acquire", requestId: 2, name: "second", leaseMs: 0, waitMs: 0 });
    return [await observe(raw, { acquireId: 2, requestName: "second" })];
  },

  async "ACQUIRE of a lock whose queue has `-max-waiters-per-lock` waiters"() {
    await using t = await server({ waitersPerLockMax: 1 });
    await using a = await RawClient.session(t.addr);
    await using b = await RawClient.session(t.addr);
    await using c = await RawClient.session(t.addr);
    assert.equal((await acquire(a, 1, "busy"))?.type, "acquired");
    assert.equal((await acquire(b, 1, "busy", WAIT_FOREVER))?.type, "queued");
    await c.send({ type: "acquire", requestId: 6, name: "busy", leaseMs: 0, waitMs: WAIT_FOREVER });
    return [await observe(c, { acquireId: 6, requestName: "busy" })];
  },

  async "ACQUIRE while the server stores `-max-claims` claims (all sessions)"() {
    await using t = await server({ claimsMax: 2 });
    await using a = await RawClient.session(t.addr);
    await using b = await RawClient.session(t.addr);
    assert.equal((await acquire(a, 1, "one"))?.type, "acquired");
    assert.equal((await acquire(b, 1, "one", WAIT_FOREVER))?.type, "queued");
    // A try-lock of a held lock stores nothing: it is not refused by the limit.
    await using c = await RawClient.session(t.addr);
    const tried = await acquire(c, 1, "one");
    assert.ok(tried?.type === "error" && tried.code === WIRE_CODES.WAIT_TIMEOUT.code);
    await b.send({ type: "acquire", requestId: 3, name: "two", leaseMs: 0, waitMs: 0 });
    const out = [await observe(b, { acquireId: 3, requestName: "two" })];
    assert.equal(t.server.context.counters.limitRefusals.claims, 1);
    return out;
  },

  async "ACQUIRE with waitMs 0 (try-lock) of a held lock"() {
    await using t = await server();
    await using a = await RawClient.session(t.addr);
    await using b = await RawClient.session(t.addr);
    assert.equal((await acquire(a, 1, "held"))?.type, "acquired");
    await b.send({ type: "acquire", requestId: 2, name: "held", leaseMs: 0, waitMs: 0 });
    return [await observe(b, { acquireId: 2, requestName: "held" })];
  },

  async "a queued ACQUIRE's waitMs passes"() {
    await using t = await server();
    await using a = await RawClient.session(t.addr);
    await using b = await RawClient.session(t.addr);
    assert.equal((await acquire(a, 1, "held"))?.type, "acquired");
    assert.equal((await acquire(b, 2, "held", 50))?.type, "queued");
    t.scheduler.advance(50);
    return [await observe(b, { acquireId: 2, requestName: "held" })];
  },

  async "RELEASE with token 0 of a queued claim (then RELEASED for the RELEASE)"() {
    await using t = await server();
    await using a = await RawClient.session(t.addr);
    await using b = await RawClient.session(t.addr);
    assert.equal((await acquire(a, 1, "held"))?.type, "acquired");
    const queued = await acquire(b, 2, "held", WAIT_FOREVER);
    assert.equal(queued?.type, "queued");
    assert.deepEqual(
      queued,
      withNeutral({ type: "queued", requestId: 2, name: "held", position: 1 }),
    );
    await b.send({ type: "release", requestId: 3, name: "held", token: 0 });
    return [
      await observe(b, { acquireId: 2, requestName: "held" }, async (raw) => {
        assert.deepEqual(await raw.next(), { type: "released", requestId: 3, name: "held" });
      }),
    ];
  },

  async "RELEASE of a name this session does not own with that token"() {
    await using t = await server();
    await using a = await RawClient.session(t.addr);
    const granted = await acquire(a, 1, "mine");
    assert.ok(granted?.type === "acquired");
    const out: Observation[] = [];
    const releases: [string, number][] = [
      ["mine", granted.token + 1], // wrong token
      ["mine", 0], // token 0 of an ownership, not a queued claim
      ["never", granted.token], // no claim at all
      ["", 0], // not even a valid name
    ];
    let requestId = 10;
    for (const [name, token] of releases) {
      await a.send({ type: "release", requestId, name, token });
      out.push(await observe(a, { releaseId: requestId, requestName: name }));
      requestId++;
    }
    // The refusals left the ownership as it was: a heartbeat renews it.
    await a.send({ type: "heartbeat", requestId: 20 });
    assert.deepEqual(await a.next(), { type: "heartbeat_ack", requestId: 20, renewed: 1 });
    return out;
  },

  async "an ownership's lease runs out"() {
    await using t = await server();
    await using raw = await RawClient.session(t.addr);
    assert.equal((await acquire(raw, 7, "short", 0, 50))?.type, "acquired");
    t.scheduler.advance(50);
    return [await observe(raw, { acquireId: 7, lock: "short" })];
  },

  async "nothing received from the client for `ioTimeoutMs`"() {
    await using t = await server({ ioTimeoutMs: 150 });
    await using raw = await RawClient.session(t.addr);
    assert.equal((await acquire(raw, 1, "held"))?.type, "acquired");
    t.scheduler.advance(150);
    return [await observe(raw)];
  },

  async "an operator force-releases an ownership of this session"() {
    await using t = await server({ adminListen: "127.0.0.1:0" });
    await using raw = await RawClient.session(t.addr);
    await using waiter = await RawClient.session(t.addr);
    assert.equal((await acquire(raw, 1, "jobs/nightly"))?.type, "acquired");
    assert.equal((await acquire(raw, 2, "other"))?.type, "acquired");
    assert.equal((await acquire(waiter, 1, "jobs/nightly", WAIT_FOREVER))?.type, "queued");
    assert.equal(await admin(t, "POST", "/api/locks/jobs%2Fnightly/release"), 200);
    const out = [await observe(raw, { lock: "jobs/nightly" })];
    // The lock goes to the next waiter.
    assert.equal((await waiter.next())?.type, "acquired");
    return out;
  },

  async "an operator removes a waiter of this session"() {
    await using t = await server({ adminListen: "127.0.0.1:0" });
    await using a = await RawClient.session(t.addr);
    await using b = await RawClient.session(t.addr);
    assert.equal((await acquire(a, 1, "jobs/nightly"))?.type, "acquired");
    assert.equal((await acquire(b, 1, "jobs/nightly", WAIT_FOREVER))?.type, "queued");
    const local = b.conn.localAddr;
    const path = `/api/locks/jobs%2Fnightly/waiters/${
      encodeURIComponent(`${local.hostname}:${local.port}`)
    }`;
    assert.equal(await admin(t, "DELETE", path), 204);
    return [await observe(b, { lock: "jobs/nightly" })];
  },

  async "HELLO at a cluster node that does not serve (a standby)"() {
    await using servers = await startEtcdCluster({ nodes: 2 });
    const { leader, standbys: [standby] } = await servers.waitLeaderKnown();
    await using raw = await RawClient.connect(standby.addr);
    await raw.send({ type: "hello", version: 1, clientName: "x" });
    return [await observe(raw, { leader: leader.addr })];
  },

  async "the cluster node stops leading with a session open (step-down or hand-over)"() {
    await using servers = await startEtcdCluster({ nodes: 1 });
    const leader = await servers.waitServing();
    await using raw = await RawClient.session(leader.addr);
    assert.equal((await acquire(raw, 1, "held"))?.type, "acquired");
    const stopping = leader.server.shutdown(); // a planned hand-over
    const out = [await observe(raw)];
    await stopping;
    return out;
  },

  async "RESUME that is not the first request of the session (version 2)"() {
    await using t = await server();
    await using raw = await RawClient.session(t.addr, 2);
    await raw.send({ type: "heartbeat", requestId: 1 });
    assert.equal((await raw.next())?.type, "heartbeat_ack");
    await raw.send({ type: "resume", requestId: 2, prevTerm: 0, prevSessionId: 1, claims: 0 });
    return [await observe(raw, { resumeId: 2, requestName: "" })];
  },

  async "RECLAIM without a RESUME before it, or beyond the RECLAIMs it announced (version 2)"() {
    await using t = await server();
    const out: Observation[] = [];
    for (const claims of [null, 0, 1]) {
      await using raw = await RawClient.session(t.addr, 2);
      if (claims !== null) {
        await raw.send({ type: "resume", requestId: 1, prevTerm: 0, prevSessionId: 99, claims });
        assert.equal((await raw.next())?.type, "resumed");
      }
      if (claims === 1) {
        await raw.send(ownedReclaim(2, "r/x", 5, new Uint8Array(16)));
        assert.equal((await raw.next())?.type, "error", "CLAIM_VOID: no such session");
      }
      await raw.send(ownedReclaim(3, "r/x", 5, new Uint8Array(16)));
      out.push(await observe(raw, { reclaimId: 3, requestName: "r/x" }));
    }
    return out;
  },

  async "RECLAIM of an owned claim this leader cannot carry over (version 2)"() {
    await using t = await server();
    const out: Observation[] = [];
    const old = await RawClient.session(t.addr, 2);
    const granted = await acquire(old, 1, "void/held");
    assert.ok(granted?.type === "acquired");
    const forged = granted.ticket!.map((byte, i) => i === 3 ? byte ^ 0x80 : byte);
    // A forged ticket while the old session is open (moved); a term this server never served;
    // the ticket of a session that is gone (it said GOODBYE: without it, it would be orphaned).
    const tries: [number, Uint8Array, () => Promise<void>][] = [
      [0, forged, async () => {}],
      [4, granted.ticket!, async () => {}],
      [0, granted.ticket!, async () => {
        await old.send({ type: "goodbye", requestId: 2 });
        await old[Symbol.asyncDispose]();
        await eventually(() => t.server.context.engine.lockCount === 0, "the old session ended");
      }],
    ];
    for (const [prevTerm, ticket, before] of tries) {
      await before();
      await using raw = await RawClient.session(t.addr, 2);
      await raw.send(
        {
          type: "resume",
          requestId: 1,
          prevTerm,
          prevSessionId: old.welcome!.sessionId,
          claims: 1,
        },
        ownedReclaim(2, "void/held", granted.token, ticket),
      );
      assert.equal((await raw.next())?.type, "resumed");
      out.push(await observe(raw, { reclaimId: 2, requestName: "void/held" }));
    }
    return out;
  },

  async "a version-2 ACQUIRE whose mode, limit or value is refused (version 2)"() {
    await using t = await server();
    await using holder = await RawClient.session(t.addr, 2);
    await using raw = await RawClient.session(t.addr, 2);
    await holder.send({
      type: "acquire",
      requestId: 1,
      name: "k/sem",
      leaseMs: 0,
      waitMs: 0,
      limit: 4,
    });
    assert.equal((await holder.next())?.type, "acquired");
    const out: Observation[] = [];
    const requests: ClientRequest[] = [
      // A claim that disagrees with the lock's kind and limit.
      { type: "acquire", requestId: 1, name: "k/sem", leaseMs: 0, waitMs: 0, limit: 2 },
      // A mode byte that names nothing.
      { type: "acquire", requestId: 2, name: "k/a", leaseMs: 0, waitMs: 0, mode: 9 },
      // A value longer than valueBytesMax.
      {
        type: "acquire",
        requestId: 3,
        name: "k/b",
        leaseMs: 0,
        waitMs: 0,
        value: new Uint8Array(1025),
      },
    ];
    for (const request of requests) {
      await raw.send(request);
      const name = "name" in request ? request.name : "";
      out.push(await observe(raw, { acquireId: request.requestId, requestName: name }));
    }
    return out;
  },

  async "SET_VALUE with a token this session does not own, a stale one included (version 2)"() {
    await using t = await server();
    await using raw = await RawClient.session(t.addr, 2);
    await raw.send({ type: "acquire", requestId: 1, name: "v/a", leaseMs: 0, waitMs: 0 });
    const granted = await raw.next();
    assert.ok(granted?.type === "acquired");
    const out: Observation[] = [];
    for (
      const [requestId, name, token] of [[2, "v/a", granted.token + 1], [3, "v/none", 1]] as const
    ) {
      await raw.send({ type: "set_value", requestId, name, token, value: new Uint8Array(1) });
      out.push(await observe(raw, { requestId, requestName: name }));
    }
    return out;
  },

  async "SET_VALUE with a value longer than WELCOME's `valueBytesMax` (version 2)"() {
    await using t = await server({ lockValueBytesMax: 16 });
    await using raw = await RawClient.session(t.addr, 2);
    assert.equal(raw.welcome?.valueBytesMax, 16);
    await raw.send({ type: "acquire", requestId: 1, name: "v/a", leaseMs: 0, waitMs: 0 });
    const granted = await raw.next();
    assert.ok(granted?.type === "acquired");
    await raw.send({
      type: "set_value",
      requestId: 2,
      name: "v/a",
      token: granted.token,
      value: new Uint8Array(17),
    });
    return [await observe(raw, { requestId: 2, requestName: "v/a" })];
  },

  async "QUERY with a name that breaks the [lock name rules](#lock-names) (version 2)"() {
    await using t = await server();
    await using raw = await RawClient.session(t.addr, 2);
    const out: Observation[] = [];
    for (const [requestId, name] of [[1, ""], [2, "a\u0000b"], [3, "x".repeat(1025)]] as const) {
      await raw.send({ type: "query", requestId, name });
      out.push(await observe(raw, { requestId, requestName: name }));
    }
    return out;
  },

  async "QUERY of a lock the ACL does not let this identity read (version 2)"() {
    return await withReadAcl(async (raw) => {
      await raw.send({ type: "query", requestId: 4, name: "secret/db" });
      return [await observe(raw, { requestId: 4, requestName: "secret/db" })];
    });
  },

  async "WATCH of one lock the ACL does not let this identity read (version 2)"() {
    return await withReadAcl(async (raw) => {
      await raw.send({ type: "watch", requestId: 5, pattern: "secret/db" });
      return [await observe(raw, { requestId: 5, requestName: "" })];
    });
  },

  async "WATCH with an invalid glob, or the request id of a watch still open (version 2)"() {
    await using t = await server();
    await using raw = await RawClient.session(t.addr, 2);
    await raw.send({ type: "watch", requestId: 1, pattern: "jobs/[" });
    const out = [await observe(raw, { requestId: 1, requestName: "" })];
    await raw.send({ type: "watch", requestId: 2, pattern: "jobs/a" });
    assert.equal((await raw.next())?.type, "lock_state");
    assert.equal((await raw.next())?.type, "watching");
    await raw.send({ type: "watch", requestId: 2, pattern: "jobs/b" });
    out.push(await observe(raw, { requestId: 2, requestName: "" }));
    return out;
  },

  async "WATCH while the session has `WATCHES_PER_SESSION_MAX` (16) watches open (version 2)"() {
    await using t = await server();
    await using raw = await RawClient.session(t.addr, 2);
    for (let i = 1; i <= 16; i++) {
      await raw.send({ type: "watch", requestId: i, pattern: `w/${i}/*` });
      assert.deepEqual(await raw.next(), { type: "watching", requestId: i, locks: 0 });
    }
    await raw.send({ type: "watch", requestId: 17, pattern: "w/more" });
    return [await observe(raw, { requestId: 17, requestName: "" })];
  },

  async "DOWNGRADE with a token this session does not own, a stale one included (version 2)"() {
    await using t = await server();
    await using raw = await RawClient.session(t.addr, 2);
    await raw.send({ type: "acquire", requestId: 1, name: "d/a", leaseMs: 0, waitMs: 0 });
    const granted = await raw.next();
    assert.ok(granted?.type === "acquired");
    const out: Observation[] = [];
    for (
      const [requestId, name, token] of [[2, "d/a", granted.token - 1], [3, "d/b", 1]] as const
    ) {
      await raw.send({ type: "downgrade", requestId, name, token });
      out.push(await observe(raw, { requestId, requestName: name }));
    }
    return out;
  },

  async "DOWNGRADE of a semaphore, or of a lock a server rule makes exclusive (version 2)"() {
    await using t = await server();
    t.server.context.service.setLockRules(parseLockRules("exclusive fixed/**\n", "t.rules"));
    await using raw = await RawClient.session(t.addr, 2);
    const out: Observation[] = [];
    for (const [id, name, limit] of [[1, "d/sem", 3], [3, "fixed/x", 0]] as const) {
      await raw.send({ type: "acquire", requestId: id, name, leaseMs: 0, waitMs: 0, limit });
      const granted = await raw.next();
      assert.ok(granted?.type === "acquired", JSON.stringify(granted));
      await raw.send({ type: "downgrade", requestId: id + 1, name, token: granted.token });
      out.push(await observe(raw, { requestId: id + 1, requestName: name }));
    }
    return out;
  },

  async "the server starts shutting down (with or without a session open)"() {
    await using t = await server();
    // Accepted first: the listener accepts in order, so it is in its handshake once `open`
    // has its WELCOME.
    await using before = await RawClient.connect(t.addr);
    await using open = await RawClient.session(t.addr);
    assert.equal((await acquire(open, 1, "held"))?.type, "acquired");
    const stopping = t.server.shutdown();
    const out = [await observe(open), await observe(before)];
    await stopping;
    return out;
  },
};

const CODE_NAMES = new Set(Object.keys(WIRE_CODES));

function check(row: Row, seen: Observation): void {
  const { error } = seen;
  assert.ok(
    error !== null && error.type === "error",
    `expected ERROR, got ${JSON.stringify(error)}`,
  );
  const err = error as ErrorMessage;
  assert.ok(CODE_NAMES.has(row.code), `unknown code ${row.code}`);
  assert.equal(
    err.code,
    WIRE_CODES[row.code as WireCodeName].code,
    `code (message: ${err.message})`,
  );
  const requestIds: Record<string, number | undefined> = {
    "0": 0,
    "the ACQUIRE's": seen.acquireId,
    "the RELEASE's": seen.releaseId,
    "the RESUME's": seen.resumeId,
    "the RECLAIM's": seen.reclaimId,
    "the request's": seen.requestId,
  };
  assert.ok(row.requestId in requestIds, `unknown request id column ${row.requestId}`);
  assert.notEqual(requestIds[row.requestId], undefined, "the scenario sent that request");
  assert.equal(err.requestId, requestIds[row.requestId], "request id");
  const names: Record<string, string | undefined> = {
    '`""`': "",
    "the request's name": seen.requestName,
    "the lock": seen.lock,
    "the leader's address": seen.leader,
  };
  assert.ok(row.name in names, `unknown name column ${row.name}`);
  assert.notEqual(names[row.name], undefined, "the scenario knows that name");
  assert.equal(err.name, names[row.name], "name");
  assert.ok(new TextEncoder().encode(err.message).byteLength <= 1024, "message ≤ 1024 bytes");
  assert.ok(["closed", "kept"].includes(row.connection), `connection column ${row.connection}`);
  assert.equal(seen.closed, row.connection === "closed", "closes the connection?");
}

const rows = tableRows();

/**
 * Rows of features the server does not build yet, each with where its code is produced: they get
 * a scenario here when the feature lands.
 */
const PENDING_ROWS: Record<string, string> = {};

Deno.test("the error case table has a scenario for every row and a row for every scenario", () => {
  assert.deepEqual(
    rows.map((row) => row.case).filter((name) => !(name in PENDING_ROWS)).sort(),
    Object.keys(scenarios).sort(),
  );
  for (const name of Object.keys(PENDING_ROWS)) {
    assert.ok(rows.some((row) => row.case === name), `pending row "${name}" is in the table`);
    assert.ok(!(name in scenarios), `"${name}" has a scenario now: take it off PENDING_ROWS`);
  }
});

Deno.test("a client can tell a closing ERROR from the frame: request id 0 and not INVALID_ARGUMENT after HELLO", () => {
  for (const row of rows) {
    const beforeWelcome = /HELLO|first frame|with or without a session/.test(row.case);
    if (row.connection === "closed") {
      assert.equal(row.requestId, "0", row.case);
      if (!beforeWelcome) assert.notEqual(row.code, "INVALID_ARGUMENT", row.case);
    } else {
      assert.ok(row.requestId !== "0" || row.code === "INVALID_ARGUMENT", row.case);
    }
  }
});

Deno.test("every wire code appears in the error case table", () => {
  const inTable = new Set(rows.map((row) => row.code));
  assert.deepEqual(Object.keys(WIRE_CODES).filter((code) => !inTable.has(code)), []);
});

for (const row of rows) {
  if (row.case in PENDING_ROWS) {
    Deno.test({
      name: `error case: ${row.case} → ${row.code} (pending: ${PENDING_ROWS[row.case]})`,
      ignore: true,
      fn() {},
    });
    continue;
  }
  const scenario = scenarios[row.case];
  if (scenario === undefined) continue; // reported by the test above
  Deno.test({
    name: `error case: ${row.case} → ${row.code}, request id ${row.requestId}, ${row.connection}`,
    // Cluster-mode rows need a real etcd (CI installs it and sets LOCKD_REQUIRE_ETCD).
    ignore: row.code === "NOT_LEADER" && skipWithoutEtcd,
  }, async () => {
    const observations = await scenario();
    assert.ok(observations.length > 0);
    for (const [i, seen] of observations.entries()) {
      try {
        check(row, seen);
      } catch (error) {
        throw new Error(`observation ${i}: ${(error as Error).message}`, { cause: error });
      }
    }
  });
}

Deno.test("WELCOME carries the bare server version, as in the doc's example", async () => {
  await using t = await server();
  await using raw = await RawClient.connect(t.addr);
  await raw.send({ type: "hello", version: 1, clientName: "v" });
  const welcome = await raw.next();
  assert.ok(welcome?.type === "welcome");
  assert.equal(welcome.serverVersion, VERSION);
  assert.match(welcome.serverVersion, /^\d+\.\d+\.\d+/);
  assert.match(doc, new RegExp(`"serverVersion":"\\d+\\.\\d+\\.\\d+"`));
});

Deno.test("a real ERROR quoting a 1,024-byte name is cut to 1,024 bytes, the name is whole", async () => {
  await using t = await server();
  await using a = await RawClient.session(t.addr);
  await using b = await RawClient.session(t.addr);
  const name = "锁".repeat(341) + "n"; // 1,024 bytes
  assert.equal((await acquire(a, 1, name))?.type, "acquired");
  const error = await acquire(b, 2, name);
  assert.ok(error?.type === "error");
  assert.equal(error.name, name);
  assert.equal(error.code, WIRE_CODES.WAIT_TIMEOUT.code);
  const bytes = new TextEncoder().encode(error.message).byteLength;
  assert.ok(bytes <= 1024 && bytes > 1000, `${bytes} bytes`);
  assert.ok(error.message.endsWith("…"));
});

Deno.test("QUEUED is sent once: the position is not updated as the queue moves", async () => {
  await using t = await server();
  await using a = await RawClient.session(t.addr);
  await using b = await RawClient.session(t.addr);
  await using c = await RawClient.session(t.addr);
  const granted = await acquire(a, 1, "q");
  assert.ok(granted?.type === "acquired");
  assert.deepEqual(
    await acquire(b, 1, "q", WAIT_FOREVER),
    withNeutral({ type: "queued", requestId: 1, name: "q", position: 1 }),
  );
  assert.deepEqual(
    await acquire(c, 1, "q", WAIT_FOREVER),
    withNeutral({ type: "queued", requestId: 1, name: "q", position: 2 }),
  );
  await a.send({ type: "release", requestId: 2, name: "q", token: granted.token });
  assert.equal((await a.next())?.type, "released");
  assert.equal((await b.next())?.type, "acquired");
  // C moved to position 1 but hears nothing until its own grant.
  await c.send({ type: "heartbeat", requestId: 2 });
  assert.deepEqual(await c.next(), { type: "heartbeat_ack", requestId: 2, renewed: 0 });
});

Deno.test("requests sent right behind HELLO, before WELCOME arrives, are served", async () => {
  await using t = await server();
  await using raw = await RawClient.connect(t.addr);
  await raw.send(
    { type: "hello", version: 1, clientName: "eager" },
    { type: "acquire", requestId: 1, name: "eager", leaseMs: 0, waitMs: 0 },
    { type: "heartbeat", requestId: 2 },
  );
  assert.equal((await raw.next())?.type, "welcome");
  // Matched by request id: the ACK may come first (it needs no audit record).
  const replies = [await raw.next(), await raw.next()];
  const byId = new Map(
    replies.map((reply) => [reply && "requestId" in reply ? reply.requestId : -1, reply]),
  );
  assert.equal(byId.get(1)?.type, "acquired");
  assert.equal(byId.get(2)?.type, "heartbeat_ack");
});
