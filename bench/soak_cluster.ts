/**
 * `deno task soak:cluster [-size full|ci] [-clients 24] [-only kinds] [-kills 20] [-per-name 3]`: the cluster
 * chaos soak. A 3-member etcd and 3 `lockd serve` nodes in cluster mode on loopback (TTL 2 s);
 * each node reaches etcd through its own proxies, so it can be cut off. 24 clients (the
 * TypeScript client with the address list) loop on 6 locks (lease 600 ms) and write to an
 * in-process fenced resource, with client faults (crashes without GOODBYE, stalls). Beside them
 * the milestone-2 population (`soak_m2.ts`): riders (lease 10 s) whose locks and queue places
 * must survive every fault, and short holders with `suspend` over many names. Every 10-20 s
 * (6-7 s at CI size) one fault hits the cluster:
 *
 * - `kill_leader`: SIGKILL the lockd leader (restarted 1 s later); a new client started 0.5 s
 *   after it must get a fresh lock;
 * - `term_leader`: SIGTERM it (a planned hand-over; restarted 1 s later);
 * - `stop_leader`: SIGSTOP it for 3 × TTL, then SIGCONT;
 * - `cut_leader`: cut it off from etcd for 3 × TTL (its proxies swallow everything);
 * - `kill_etcd_leader`: SIGKILL the etcd raft leader (restarted after 5 s);
 * - `double_kill`: SIGKILL the leader, then the new leader 1 s after it serves.
 *
 * Full size: 20 leader kills (`-kills`), 10 etcd-leader kills, 5 of each other fault; CI size
 * one of each. `-only` keeps only the named kinds (a measuring run). Breaches (exit 1) are listed
 * in docs/reliability.md ("Cluster chaos soak"); on a breach the run directory (every node's
 * audit and diagnostic log) is kept. It prints the fail-over time per fault kind (fault → first
 * grant after it) with p50 and max, the grant pauses of etcd-leader kills, the time until every
 * surviving holder is confirmed on the new leader, and one summary line.
 */

import { EtcdCluster } from "./etcd_proc.ts";
import { BenchConn } from "./bench_client.ts";
import { type LockdProc, spawnLockd } from "./lockd_proc.ts";
import { type Client, type Lock, LockdError, type LockLostError } from "../mod.ts";
import { connectWith } from "../src/client/client.ts";
import { type ClientSocket, type Dial, nodeSocketDial } from "../src/client/transport.ts";
import { systemScheduler } from "../src/clock.ts";
import { etcdClient, EtcdLink } from "../tests/helpers/etcd.ts";
import { fmt, M2_SIZES, M2Population, type WrittenRecord } from "./soak_m2.ts";
import { checkOwnersByTime } from "./soak_audit.ts";

function flag(name: string, fallback: string): string {
  const i = Deno.args.findIndex((a) => a === `-${name}` || a === `--${name}`);
  return i >= 0 ? Deno.args[i + 1] : fallback;
}

type FaultKind =
  | "kill_leader"
  | "term_leader"
  | "stop_leader"
  | "cut_leader"
  | "kill_etcd_leader"
  | "double_kill";
const SIZE = flag("size", "full");
const PLAN: Record<FaultKind, number> = SIZE === "ci"
  ? {
    kill_leader: 1,
    term_leader: 1,
    stop_leader: 1,
    cut_leader: 1,
    kill_etcd_leader: 1,
    double_kill: 1,
  }
  : {
    kill_leader: Number(flag("kills", "20")),
    term_leader: 5,
    stop_leader: 5,
    cut_leader: 5,
    kill_etcd_leader: 10,
    double_kill: 5,
  };
const [GAP_MIN_MS, GAP_MAX_MS] = SIZE === "ci" ? [6_000, 7_000] : [10_000, 20_000];
const CLIENTS = Number(flag("clients", "24"));
const LOCKS = 6;
const LEASE_MS = 600;
const TTL_MS = 2_000;
/** An end of a holder's ownership this long after another client's grant is a breach. */
const OVERLAP_TOLERANCE_MS = 20;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const now = () => performance.now();
const breaches: string[] = [];
const breach = (what: string) => {
  if (breaches.length < 50) console.error(`BREACH: ${what}`);
  breaches.push(what);
  count(`breach_${what.split(/[ :]/)[0]}`);
};
const counts: Record<string, number> = {};
const count = (what: string, n = 1) => (counts[what] = (counts[what] ?? 0) + n);

// ---- the fenced resource ---------------------------------------------------------------

/** Accepts a write only with a token ≥ the highest seen for its lock; refuses a commit overtaken. */
class FencedResource {
  readonly highest = new Map<string, number>();
  readonly writing = new Map<string, number>();
  accepted = 0;
  fenced = 0;
  async write(lock: string, token: number): Promise<boolean> {
    if (token < (this.highest.get(lock) ?? 0)) {
      this.fenced++;
      return false;
    }
    this.highest.set(lock, token);
    const other = this.writing.get(lock);
    if (other !== undefined && other > token) {
      breach(`write of token ${token} on ${lock} accepted during ${other}`);
    }
    this.writing.set(lock, token);
    await sleep(Math.random() < 0.5 ? 0 : 2);
    if (this.writing.get(lock) !== token || this.highest.get(lock) !== token) {
      this.fenced++;
      return false;
    }
    this.writing.delete(lock);
    this.accepted++;
    return true;
  }
}
const resource = new FencedResource();

const m2 = new M2Population({
  breach,
  count,
  addrs: () => nodes.map((n) => n.addr),
  write: (lock, token) => resource.write(lock, token),
  lastFault: () => faults.at(-1),
}, {
  ...M2_SIZES[SIZE === "ci" ? "ci" : "full"],
  // `-per-name 2`: one holder and one waiter per ride name (1,000 + 1,000 at full size).
  ...(flag("per-name", "") === "" ? {} : { perName: Number(flag("per-name", "")) }),
});
/** Confirmation trackers and new-client probes running beside the faults. */
const beside: Promise<void>[] = [];

// ---- etcd and the lockd nodes ------------------------------------------------------------

const dir = await Deno.makeTempDir({ prefix: "lockd-soak-cluster-" });
const etcd = await EtcdCluster.start({ dir });

interface Node {
  readonly name: string;
  readonly addr: string;
  readonly link: EtcdLink;
  proc: LockdProc | null;
  stopped: boolean;
  runs: number;
  readonly audits: string[];
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  listener.close();
  return port;
}

const nodes: Node[] = Array.from({ length: 3 }, (_, i) => ({
  name: `n${i + 1}`,
  addr: `127.0.0.1:${freePort()}`,
  link: EtcdLink.open(etcd.clientUrls),
  proc: null,
  stopped: false,
  runs: 0,
  audits: [],
}));

/** Every lockd process started, for its diagnostic log at the end. */
const started: { name: string; proc: LockdProc }[] = [];

async function startNode(node: Node): Promise<void> {
  node.runs++;
  const audit = `${dir}/audit-${node.name}-${node.runs}.jsonl`;
  node.audits.push(audit);
  node.proc = await spawnLockd({
    http: true,
    startTimeoutMs: 30_000,
    flags: [
      "-listen",
      node.addr,
      "-cluster-etcd",
      node.link.urls.join(","),
      "-cluster",
      "soak",
      "-cluster-node",
      node.name,
      "-cluster-ttl",
      `${TTL_MS / 1000}s`,
      "-audit-log",
      audit,
      // Above the riders' lease: a client's local deadline counts the shorter of the two.
      "-io-timeout",
      "15s",
      "-shutdown-grace",
      "0s",
    ],
  });
  started.push({ name: `${node.name}-${node.runs}`, proc: node.proc });
}

async function fetchWithin(url: string, timeoutMs: number): Promise<Response | null> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  try {
    const response = await fetch(url, { signal: controller.signal });
    await response.arrayBuffer().catch(() => {});
    return response;
  } catch {
    return null;
  } finally {
    clearTimeout(timer);
  }
}

// deno-lint-ignore no-explicit-any
async function infoOf(node: Node): Promise<any | null> {
  if (node.proc === null || node.stopped || node.proc.adminAddr === null) return null;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 1_000);
  try {
    const response = await fetch(`http://${node.proc.adminAddr}/api/info`, {
      signal: controller.signal,
    });
    return await response.json();
  } catch {
    return null;
  } finally {
    clearTimeout(timer);
  }
}

/** The node whose /readyz says it serves, waiting up to `timeoutMs`. */
async function servingNode(timeoutMs = 15_000): Promise<Node> {
  const until = now() + timeoutMs;
  while (now() < until) {
    for (const node of nodes) {
      if (node.proc === null || node.stopped || node.proc.opsAddr === null) continue;
      const response = await fetchWithin(`http://${node.proc.opsAddr}/readyz`, 300);
      if (response?.status === 200) return node;
    }
    await sleep(50);
  }
  throw new Error("no node serves");
}

// ---- clients -------------------------------------------------------------------------------

interface Holding {
  readonly client: number;
  readonly token: number;
  readonly grantAtMs: number;
  /** When the ownership ended for the client (released, lost), or null. */
  endAtMs: number | null;
  /** False once a client fault started (crash, stall): no longer a healthy holder. */
  healthy: boolean;
  /** How it ended: "released" or the lost reason. */
  endReason: string;
}
/**
 * The soak's own event-loop lag: a 10 ms probe keeps (time, lateness) for the last seconds. The
 * client library promises `lost` before another grant only while the client's event loop is not
 * blocked past the deadline; 24 clients share this one, so the report shows its stalls.
 */
const LAG_PROBE_MS = 10;
let maxLagMs = 0;
const lagSamples: { atMs: number; lateMs: number }[] = [];
let lagExpected = performance.now() + LAG_PROBE_MS;
const lagProbe = setInterval(() => {
  const t = performance.now();
  const lateMs = Math.max(0, t - lagExpected);
  maxLagMs = Math.max(maxLagMs, lateMs);
  lagSamples.push({ atMs: t, lateMs });
  if (lagSamples.length > 1_000) lagSamples.splice(0, lagSamples.length - 1_000);
  lagExpected = t + LAG_PROBE_MS;
}, LAG_PROBE_MS);

/** The longest event-loop stall of this process that ended within [fromMs, toMs]. */
function stallBetween(fromMs: number, toMs: number): number {
  let longest = 0;
  for (const s of lagSamples) {
    if (s.atMs >= fromMs && s.atMs - s.lateMs <= toMs) longest = Math.max(longest, s.lateMs);
  }
  return longest;
}

/** Positive overlaps (a holder's end after another client's grant), for the report. */
const overlaps: {
  overlapMs: number;
  lock: string;
  reason: string;
  sinceFaultMs: number;
  stallMs: number;
}[] = [];
const holdings = new Map<string, Holding>();
const maxToken = new Map<string, number>();
let grants = 0;
let maxOverlapMs = -Infinity;
/** Grant times, for the etcd-leader-kill pauses. */
const grantTimes: number[] = [];

interface FaultRecord {
  kind: FaultKind;
  atMs: number;
  atWallMs: number;
  endWallMs: number;
  /** The lockd leader's term when the fault hit. */
  termBefore: number;
  /** Time from the fault to the first grant of a newer term (from the audit logs). */
  firstGrantMs: number | null;
  node: string;
  endAtMs: number;
}
const faults: FaultRecord[] = [];

function noteGrant(lock: string, token: number, client: number, atMs: number): Holding {
  grants++;
  grantTimes.push(atMs);
  const previousMax = maxToken.get(lock) ?? 0;
  if (token <= previousMax) breach(`token ${token} for ${lock} not above ${previousMax}`);
  maxToken.set(lock, Math.max(token, previousMax));
  const previous = holdings.get(lock);
  const mine: Holding = {
    client,
    token,
    grantAtMs: atMs,
    endAtMs: null,
    healthy: true,
    endReason: "",
  };
  holdings.set(lock, mine);
  if (previous !== undefined && previous.healthy) {
    // The previous holder's end (release, lost) may be queued behind this grant in the event
    // loop: look again a moment later, and compare the times.
    setTimeout(() => {
      const endMs = previous.endAtMs ?? now();
      const overlapMs = endMs - atMs;
      maxOverlapMs = Math.max(maxOverlapMs, overlapMs);
      const stallMs = stallBetween(atMs - LEASE_MS, endMs);
      if (previous.healthy && overlapMs > 0) {
        const fault = faults.at(-1);
        overlaps.push({
          overlapMs,
          lock,
          reason: previous.endReason || "(still held)",
          sinceFaultMs: fault === undefined ? -1 : atMs - fault.atMs,
          stallMs,
        });
      }
      if (previous.healthy && overlapMs > OVERLAP_TOLERANCE_MS) {
        breach(
          `${lock} granted (token ${token}) while client ${previous.client} held token ` +
            `${previous.token} healthily for ${overlapMs.toFixed(0)} ms more (this process ` +
            `stalled at most ${stallMs.toFixed(0)} ms around it)`,
        );
      }
    }, 200);
  }
  return mine;
}

/** A dial whose writes can be swallowed: a client whose heartbeats stop reaching the server. */
function stallableDial(state: { stalled: boolean }) {
  const dial = nodeSocketDial(systemScheduler);
  return async (...args: Parameters<Dial>): Promise<ClientSocket> => {
    const socket = await dial(...args);
    return {
      write: (bytes) => {
        if (!state.stalled) socket.write(bytes);
      },
      close: () => socket.close(),
    };
  };
}

async function newClient(id: number, state: { stalled: boolean }): Promise<Client> {
  for (;;) {
    try {
      return await connectWith(
        { addrs: nodes.map((n) => n.addr), clientName: `soak-${id}`, connectTimeoutMs: 5_000 },
        { dial: stallableDial(state) },
      );
    } catch {
      await sleep(100);
    }
  }
}

let stopAll = false;

async function worker(id: number): Promise<void> {
  const state = { stalled: false };
  let client = await newClient(id, state);
  try {
    while (!stopAll) {
      const lock = `soak/${Math.floor(Math.random() * LOCKS)}`;
      let held: Lock;
      try {
        held = await client.acquire(lock, { leaseMs: LEASE_MS, waitMs: 3_000 });
      } catch (error) {
        if (!(error instanceof LockdError)) {
          // The client failed for good (it should not: it reconnects by itself).
          count("client_error");
          await client.close();
          client = await newClient(id, state);
        }
        continue;
      }
      const mine = noteGrant(lock, held.token, id, now());
      if (held.lost.aborted) {
        // A grant that arrived past its local deadline (its ACQUIRED was held back while the
        // leader paused) arrives lost, and the client has already given it back: this client
        // never held it.
        mine.endAtMs = mine.grantAtMs;
        mine.endReason = (held.lost.reason as LockLostError).reason;
        mine.healthy = false;
        count("granted_already_lost");
        continue;
      }
      held.lost.addEventListener("abort", () => {
        mine.endAtMs ??= now();
        mine.endReason ||= (held.lost.reason as LockLostError).reason;
        count(`lost_${(held.lost.reason as LockLostError).reason}`);
      });
      const r = Math.random();
      const mode = r < 0.9 ? "clean" : r < 0.95 ? "crash" : "stall";
      if (!held.lost.aborted) await resource.write(lock, held.token);
      if (mode === "clean") {
        await sleep(Math.random() < 0.5 ? 0 : 20);
        mine.endAtMs ??= now();
        mine.endReason ||= "released";
        await held.release().catch(() => {});
        continue;
      }
      mine.healthy = false;
      count(mode);
      if (mode === "crash") {
        // A crash says no GOODBYE: the leader keeps the session orphaned until its lease ends.
        state.stalled = true;
        await client.close();
        state.stalled = false;
        client = await newClient(id, state);
        continue;
      }
      // Stall: nothing reaches the server (heartbeats included); the lease runs out, then a
      // late write with the old token must be refused if someone else wrote meanwhile.
      state.stalled = true;
      await sleep(LEASE_MS + 400);
      await resource.write(lock, held.token);
      state.stalled = false;
      await client.close();
      client = await newClient(id, state);
    }
  } finally {
    await client.close();
  }
}

// ---- observers of a faulted leader ---------------------------------------------------------

/**
 * A raw session on the leader that heartbeats and asks for a lock, and never leaves: what
 * the leader sends it, and when, shows whether it acted on stale leadership.
 */
class Observer {
  /** Every request sent, with its reply (type and when it was read), in sending order. */
  readonly requests: { sentAtMs: number; type: string | null; atMs: number | null }[] = [];
  #conn: BenchConn | null = null;
  #timer: ReturnType<typeof setInterval> | undefined;
  #requests = 0;

  async open(addr: string): Promise<void> {
    this.#conn = await BenchConn.session(addr, "soak-observer");
    const conn = this.#conn;
    await this.#track(conn.acquire("soak/observer", LEASE_MS, 0));
    this.#timer = setInterval(() => void this.#track(conn.heartbeat()), 150);
  }

  /** A new ACQUIRE (sent now; a frozen leader reads it when it wakes). */
  ask(): void {
    const conn = this.#conn;
    if (conn === null || conn.closed) return;
    void this.#track(conn.acquire(`soak/observer-${++this.#requests}`, LEASE_MS, 0));
  }

  async #track(reply: Promise<{ type: string }>): Promise<void> {
    const request = { sentAtMs: now(), type: null as string | null, atMs: null as number | null };
    this.requests.push(request);
    try {
      request.type = (await reply).type;
      request.atMs = now();
    } catch {
      // the connection ended
    }
  }

  /**
   * ACQUIRED and HEARTBEAT_ACK frames read after `boundMs` that the node decided when it could
   * not prove it led: those answering a request sent after `decidedAfterMs`, and those that
   * were not held in reply order behind an earlier request still unanswered when they came (a
   * promise checked in time can leave late behind an ACQUIRED that waits for its ownership
   * record's etcd commit, then dropped at the step-down). Frames read late because this
   * process's own event loop stalled are not counted either. Each late frame is printed.
   */
  promisesAfter(boundMs: number, decidedAfterMs: number, what: string): number {
    count("observer_frames", this.requests.length);
    let late = 0;
    for (const [i, f] of this.requests.entries()) {
      if (f.atMs === null || f.atMs <= boundMs) continue;
      if (f.type !== "acquired" && f.type !== "heartbeat_ack") continue;
      const held = this.requests.slice(0, i).some((e) => e.atMs === null || e.atMs >= f.atMs!);
      const stallMs = stallBetween(boundMs - 500, f.atMs);
      const lateMs = f.atMs - boundMs;
      const decidedLate = f.sentAtMs > decidedAfterMs;
      const explained = !decidedLate && (held || lateMs <= stallMs + 20);
      console.error(
        `${what}: ${f.type} read ${lateMs.toFixed(0)} ms after the bound, asked ` +
          `${(f.sentAtMs - decidedAfterMs).toFixed(0)} ms after the last moment it could be ` +
          `decided; ${held ? "held behind an earlier request; " : ""}this process stalled ` +
          `${stallMs.toFixed(0)} ms around it${explained ? " (explained)" : ""}`,
      );
      if (explained) count("observer_promises_late_in_reply_order");
      else late++;
    }
    return late;
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    const conn = this.#conn;
    this.#conn = null;
    if (conn !== null) {
      conn.close();
      await conn.done;
    }
  }
}

// ---- faults ----------------------------------------------------------------------------------

async function leaderTerm(): Promise<number> {
  for (const node of nodes) {
    const info = await infoOf(node);
    if (info?.cluster?.serving) return info.cluster.term;
  }
  return 0;
}

async function runFault(kind: FaultKind): Promise<void> {
  const leader = await servingNode();
  if (kind !== "kill_etcd_leader") {
    await m2.snapshotQueues(leader.proc?.adminAddr ?? null, faults.length);
  }
  const record: FaultRecord = {
    kind,
    atMs: 0,
    atWallMs: 0,
    endWallMs: 0,
    termBefore: (await infoOf(leader))?.cluster?.term ?? 0,
    firstGrantMs: null,
    node: leader.name,
    endAtMs: 0,
  };
  const hit = () => {
    record.atMs = now();
    record.atWallMs = Date.now();
    faults.push(record);
    if (kind !== "kill_etcd_leader" && kind !== "double_kill") {
      beside.push(m2.trackConfirmations(kind, record.atMs));
    }
    if (kind === "kill_leader") {
      beside.push(m2.probeNewClient(kind, record.atMs, faults.length));
    }
  };
  const proc = leader.proc!;
  switch (kind) {
    case "kill_leader":
    case "term_leader": {
      hit();
      await proc.stop(kind === "kill_leader" ? "SIGKILL" : "SIGTERM");
      leader.proc = null;
      await sleep(1_000);
      await startNode(leader);
      break;
    }
    case "double_kill": {
      // The new leader is killed 1 s after it serves: riders reclaim twice (the second time
      // perhaps with a ticket of the first leader's term, if they had not reached the second).
      hit();
      await proc.stop("SIGKILL");
      leader.proc = null;
      const restarted = sleep(1_000).then(() => startNode(leader));
      const second = await servingNode();
      await sleep(1_000);
      const secondAtMs = now();
      beside.push(m2.trackConfirmations("double_kill (from the second kill)", secondAtMs));
      await second.proc!.stop("SIGKILL");
      second.proc = null;
      await restarted;
      await sleep(1_000);
      if (second.proc === null) await startNode(second);
      break;
    }
    case "stop_leader": {
      const observer = new Observer();
      await observer.open(leader.addr).catch(() => {});
      hit();
      leader.stopped = true;
      proc.child.kill("SIGSTOP");
      await sleep(1_000);
      observer.ask(); // read by the frozen leader only when it wakes
      await sleep(3 * TTL_MS - 1_000);
      const contAtMs = now();
      proc.child.kill("SIGCONT");
      leader.stopped = false;
      await sleep(TTL_MS);
      // Nothing asked while it was frozen may be promised; nothing at all read after SIGCONT
      // but what was decided before the freeze and held in reply order.
      const late = observer.promisesAfter(contAtMs, record.atMs, `frozen leader ${leader.name}`);
      if (late > 0) {
        breach(
          `the frozen leader ${leader.name} sent ${late} ACQUIRED/HEARTBEAT_ACK after SIGCONT`,
        );
      }
      await observer.close();
      break;
    }
    case "cut_leader": {
      const observer = new Observer();
      await observer.open(leader.addr).catch(() => {});
      hit();
      leader.link.partition();
      await sleep(1_000);
      observer.ask();
      await sleep(3 * TTL_MS - 1_000);
      leader.link.heal();
      await sleep(TTL_MS);
      // Its last keep-alive was sent before the cut: its safeUntil is at most TTL after it.
      const late = observer.promisesAfter(
        record.atMs + TTL_MS,
        record.atMs + TTL_MS,
        `cut-off leader ${leader.name}`,
      );
      if (late > 0) {
        breach(`the cut-off leader ${leader.name} sent ${late} promises after its safeUntil`);
      }
      await observer.close();
      break;
    }
    case "kill_etcd_leader": {
      const termBefore = await leaderTerm();
      const member = await etcd.leader();
      if (member === null) throw new Error("etcd has no leader");
      hit();
      await etcd.kill(member);
      await sleep(5_000);
      etcd.restart(member);
      await etcd.waitHealthy(30_000);
      await sleep(1_000);
      const termAfter = await leaderTerm();
      if (termAfter !== termBefore) {
        breach(
          `killing the etcd leader ${member} changed the lockd leader (term ${termBefore} → ${termAfter})`,
        );
      }
      break;
    }
  }
  record.endAtMs = now();
  record.endWallMs = Date.now();
}

// ---- the run ------------------------------------------------------------------------------------

function shuffled<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
}

/** `-only kill_leader,term_leader`: only these kinds of the plan (a measuring run). */
const ONLY = flag("only", "");
const schedule = shuffled(
  (Object.entries(PLAN) as [FaultKind, number][])
    .filter(([kind]) => ONLY === "" || ONLY.split(",").includes(kind))
    .flatMap(([kind, n]) => Array(n).fill(kind)),
);
const startedAtMs = now();
let exitCode = 0;
try {
  for (const node of nodes) await startNode(node);
  await servingNode();
  const workers = Array.from({ length: CLIENTS }, async (_, i) => {
    await sleep(i * 20);
    await worker(i);
  });
  await m2.start();
  console.error(
    `m2 clients: ${m2.size.rideNames} ride names × ${m2.size.perName} (lease 10 s), ` +
      `${m2.size.coldClients} short holders over ${m2.size.coldNames} names`,
  );
  await sleep(3_000); // the riders' first grants
  for (const [i, kind] of schedule.entries()) {
    await sleep(GAP_MIN_MS + Math.random() * (GAP_MAX_MS - GAP_MIN_MS));
    console.error(`fault ${i + 1}/${schedule.length}: ${kind}`);
    await runFault(kind);
  }
  await sleep(GAP_MIN_MS);
  await Promise.all(beside);
  stopAll = true;
  await Promise.all(workers);
  await m2.stop();
  await finalChecks();
} catch (error) {
  breach(`soak failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}`);
} finally {
  stopAll = true;
  clearInterval(lagProbe);
  await m2.stop().catch(() => {});
  for (const node of nodes) {
    if (node.stopped) node.proc?.child.kill("SIGCONT");
    await node.proc?.stop("SIGKILL");
    await node.link[Symbol.asyncDispose]();
  }
  await etcd[Symbol.asyncDispose]();
  report();
  exitCode = breaches.length > 0 ? 1 : 0;
  if (exitCode === 0) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  } else {
    // Kept for the post-mortem: every node's audit and diagnostic log, and every breach.
    await Deno.writeTextFile(`${dir}/breaches.txt`, breaches.join("\n") + "\n").catch(() => {});
    for (const { name, proc } of started) {
      await Deno.writeTextFile(`${dir}/${name}.log`, proc.log()).catch(() => {});
    }
    await Deno.remove(`${dir}/etcd`, { recursive: true }).catch(() => {});
    console.log(`audit and diagnostic logs kept in ${dir}`);
  }
}
Deno.exit(exitCode);

// ---- checks at the end --------------------------------------------------------------------------

interface AuditLine {
  ts: string;
  event: string;
  lock: string;
  token: number | null;
  term?: number;
  reason?: string;
  node?: string;
  client_name?: string;
  claim?: string;
  prev_term?: number;
}

/** An audit record with where it was written and its wall time in ms. */
interface Written extends WrittenRecord {
  readonly record: AuditLine;
}

async function finalChecks(): Promise<void> {
  // Tokens across every node's audit log: within a term in issue order, and every term above
  // every earlier one (globally, so per lock too).
  const byTerm = new Map<number, number[]>();
  const seen = new Set<number>();
  const written: Written[] = [];
  for (const node of nodes) {
    for (const path of node.audits) {
      const text = await Deno.readTextFile(path).catch(() => "");
      const file = path.slice(dir.length + 1);
      for (const line of text.split("\n")) {
        if (line.trim() === "") continue;
        let record: AuditLine;
        try {
          record = JSON.parse(line);
        } catch {
          continue; // a line torn by SIGKILL
        }
        const index = written.length;
        written.push({ record, node: node.name, wallMs: Date.parse(record.ts), file, index });
        if (record.term === undefined) breach(`audit record without a term in ${path}: ${line}`);
        if (record.event === "leader_elected") {
          const wallMs = Date.parse(record.ts);
          for (const fault of faults) {
            if (
              fault.kind === "kill_etcd_leader" && wallMs >= fault.atWallMs &&
              wallMs <= fault.endWallMs
            ) {
              breach(`leader elected (term ${record.term}) during an etcd-leader kill`);
            }
          }
        }
        if (record.event !== "acquire" || record.token === null) continue;
        const wallMs = Date.parse(record.ts);
        for (const fault of faults) {
          if (
            fault.kind !== "kill_etcd_leader" && (record.term ?? 0) > fault.termBefore &&
            wallMs >= fault.atWallMs
          ) {
            const tookMs = wallMs - fault.atWallMs;
            if (fault.firstGrantMs === null || tookMs < fault.firstGrantMs) {
              fault.firstGrantMs = tookMs;
            }
          }
        }
        if (seen.has(record.token)) breach(`token ${record.token} granted twice`);
        seen.add(record.token);
        const list = byTerm.get(record.term ?? 0) ?? [];
        list.push(record.token);
        byTerm.set(record.term ?? 0, list);
      }
    }
  }
  let highest = 0;
  for (const term of [...byTerm.keys()].sort((a, b) => a - b)) {
    const tokens = byTerm.get(term)!;
    for (let i = 1; i < tokens.length; i++) {
      if (tokens[i] <= tokens[i - 1]) {
        breach(`term ${term}: token ${tokens[i]} after ${tokens[i - 1]}`);
      }
    }
    if (tokens[0] <= highest) {
      breach(`term ${term} starts at token ${tokens[0]}, not above ${highest}`);
    }
    highest = Math.max(highest, ...tokens);
  }
  counts.terms = byTerm.size;
  counts.ownerships_checked_by_time = checkOwnersByTime(written, { breach, count });
  // Milestone 2: the clients' own view of holders, kept reclaims against the floors etcd held
  // when their term began, FIFO among reclaimed waiters, and no records left once all is idle.
  counts.m2_holdings_checked = m2.checkHoldings();
  const fifo = m2.checkFifo(written, faults);
  counts.fifo_pairs_checked = fifo.pairs;
  counts.fifo_inversions = fifo.inversions;
  const client = etcdClient(etcd.clientUrls, 10_000);
  try {
    await m2.checkFloors(written, client, "soak");
    // Every lock is idle now: a reserved lock nobody reclaimed waits for its window (up to the
    // riders' lease, the horizon), then the linger (2 s).
    await m2.checkLeftoverRecords(client, "soak", 20_000);
  } finally {
    client.close();
  }
  // The nodes agree on the leader, and every gauge is back to 0 with all clients gone.
  await sleep(500);
  const infos = await Promise.all(nodes.map(infoOf));
  const terms = new Set(infos.map((i) => i?.cluster?.leader?.term ?? -1));
  const serving = infos.filter((i) => i?.cluster?.serving).length;
  if (terms.size !== 1 || serving !== 1) {
    breach(`nodes disagree on the leader: ${JSON.stringify(infos.map((i) => i?.cluster))}`);
  }
  for (const node of nodes) {
    const response = await fetch(`http://${node.proc!.opsAddr}/metrics`);
    const text = await response.text();
    for (const gauge of ["lockd_connections_active", "lockd_locks_held", "lockd_waiters"]) {
      const m = new RegExp(`^${gauge} (\\S+)$`, "m").exec(text);
      if (m === null || Number(m[1]) !== 0) {
        breach(`${node.name}: ${gauge} is ${m?.[1]} at the end`);
      }
    }
  }
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

function report(): void {
  const lines: string[] = [];
  for (const kind of Object.keys(PLAN) as FaultKind[]) {
    const of = faults.filter((f) => f.kind === kind);
    if (of.length === 0) continue;
    const times = of.map((f) => f.firstGrantMs).filter((t): t is number => t !== null);
    if (kind === "kill_etcd_leader") {
      const pauses = of.map((f) => longestGrantGap(f.atMs - 1_000, f.endAtMs));
      lines.push(
        `  ${kind}: ${of.length} faults, longest grant gap p50 ${fmt(percentile(pauses, 0.5))} ` +
          `max ${fmt(Math.max(...pauses))} (ms)`,
      );
      continue;
    }
    lines.push(
      `  ${kind}: ${of.length} faults, fault → first grant p50 ${fmt(percentile(times, 0.5))} ` +
        `max ${fmt(Math.max(...times))} (ms)${
          times.length < of.length ? " (some without a grant)" : ""
        }`,
    );
  }
  const top = overlaps.sort((a, b) => b.overlapMs - a.overlapMs).slice(0, 5);
  if (top.length > 0) {
    console.log(
      `positive holder overlaps (${overlaps.length}; the largest): ` +
        top.map((o) =>
          `${o.overlapMs.toFixed(1)} ms on ${o.lock} (${o.reason}, ${
            o.sinceFaultMs.toFixed(0)
          } ms after a fault, soak event loop stalled ${o.stallMs.toFixed(0)} ms)`
        ).join("; "),
    );
  }
  console.log(`fail-over (lockd cluster soak, size ${SIZE}, TTL ${TTL_MS} ms):`);
  console.log(lines.join("\n"));
  console.log(`holders across fail-overs (milestone 2):`);
  console.log(m2.reportLines().join("\n"));
  console.log(
    `soak:cluster ${((now() - startedAtMs) / 1000).toFixed(0)}s: ${breaches.length} breaches, ` +
      `${grants} grants (m2 ${m2.grants}), ${resource.accepted} writes accepted, ${resource.fenced} fenced, ` +
      `max holder overlap ${fmt(maxOverlapMs)} ms, soak event-loop lag max ${fmt(maxLagMs)} ms, ` +
      JSON.stringify(counts),
  );
}

/** The longest time without a grant inside [fromMs, toMs]. */
function longestGrantGap(fromMs: number, toMs: number): number {
  let last = fromMs;
  let longest = 0;
  for (const t of grantTimes) {
    if (t < fromMs || t > toMs) continue;
    longest = Math.max(longest, t - last);
    last = t;
  }
  return Math.max(longest, toMs - last);
}
