/**
 * `deno task soak:cluster [-size full|ci] [-clients 24]`: the cluster chaos soak. A 3-member
 * etcd and 3 `lockd serve` nodes in cluster mode on loopback (TTL 2 s); each node reaches etcd
 * through its own proxies, so it can be cut off. 24 clients (the TypeScript client with the
 * address list) loop on 6 locks and write to an in-process fenced resource, with client faults
 * (crashes, stalls). Every 10-20 s (6-8 s at CI size) one fault hits the cluster:
 *
 * - `kill_leader`: SIGKILL the lockd leader (restarted 1 s later);
 * - `term_leader`: SIGTERM it (a planned hand-over; restarted 1 s later);
 * - `stop_leader`: SIGSTOP it for 3 × TTL, then SIGCONT;
 * - `cut_leader`: cut it off from etcd for 3 × TTL (its proxies swallow everything);
 * - `kill_etcd_leader`: SIGKILL the etcd raft leader (restarted after 5 s);
 * - `double_failover`: SIGKILL the lockd leader, then its successor 1 s after it serves (both
 *   restarted after).
 *
 * Cluster milestone 2: beside them, riders (lease 10 s) hold a lock each for the whole run and
 * keep writing to the resource with its token: every fault above must leave each rider its lock
 * and token (a rider losing its lock is a breach). After each lockd fault the time until every
 * rider is confirmed on the new leader (its lock shown there with the rider's token) is measured.
 * At the end: no ownership record may be left in etcd for an idle lock, no reclaim may be kept
 * with a token at or below a floor (an ownership of the lock that ended badly before), and the
 * reclaim gauges are 0.
 *
 * Also `soak_m2.ts`'s holders and waiters of many names (FIFO kept, per-holder confirmation).
 * `-only kinds`, `-kills n` and `-per-name n`: measuring runs (docs/reliability.md).
 *
 * Breaches (exit 1) are listed in docs/reliability.md ("Cluster chaos soak"); on a breach the run
 * directory (every node's audit and diagnostic log, every breach) is kept. It prints the
 * fail-over time per fault kind (fault → first grant after it) with p50 and max, the grant
 * pauses of etcd-leader kills, and one summary line.
 */

import { EtcdCluster } from "./etcd_proc.ts";
import {
  type AuditLine,
  checkOwnersByTime,
  checkReclaimFloors,
  type Written,
} from "./soak_cluster_audit.ts";
import { FencedResource, keepRunDir, Observer } from "./soak_cluster_parts.ts";
import { type LockdProc, spawnLockd } from "./lockd_proc.ts";
import { type Client, connect, type Lock, LockdError, type LockLostError } from "../mod.ts";
import { connectWith } from "../src/client/client.ts";
import { type ClientSocket, type Dial, nodeSocketDial } from "../src/client/transport.ts";
import { systemScheduler } from "../src/clock.ts";
import { EtcdHttpClient } from "../src/cluster/etcd_http.ts";
import { etcdClient, EtcdLink } from "../tests/helpers/etcd.ts";
import { M2_SIZES, M2Population, type WrittenRecord } from "./soak_m2.ts";

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
  | "double_failover";
const SIZE = flag("size", "full");
const PLAN: Record<FaultKind, number> = SIZE === "ci"
  ? {
    kill_leader: 2,
    term_leader: 1,
    stop_leader: 1,
    cut_leader: 1,
    kill_etcd_leader: 1,
    double_failover: 1,
  }
  : {
    kill_leader: Number(flag("kills", "20")),
    term_leader: 5,
    stop_leader: 5,
    cut_leader: 5,
    kill_etcd_leader: 10,
    double_failover: 5,
  };
/** Riders: clients that hold one lock each (lease 10 s) through every fault. */
const RIDERS = SIZE === "ci" ? 4 : 12;
const RIDER_LEASE_MS = 10_000;
const [GAP_MIN_MS, GAP_MAX_MS] = SIZE === "ci" ? [6_000, 8_000] : [10_000, 20_000];
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

const resource = new FencedResource(breach);

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
      // Riders (lease 10 s) heartbeat every 3.3 s: a client counts its lease confirmed no longer
      // than the server keeps a silent session.
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
  /** Fault → every rider confirmed on the new leader (null: not within 20 s, or not measured). */
  ridersMs: number | null;
  /** Fault → a new client, started 0.5 s after it, holding a lock nobody held (null: failed). */
  coldMs: number | null;
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

// ---- riders (milestone 2) ------------------------------------------------------------------

interface Rider {
  readonly lock: string;
  /** The token of the ownership it holds now (0 between two). */
  token: number;
}
const riders: Rider[] = [];

/**
 * Holds `rider/<id>` (lease 10 s) for the whole run, writing to the resource with its token
 * every half second: every fault of the plan must leave it its lock (a loss is a breach).
 */
async function rider(id: number): Promise<void> {
  const me: Rider = { lock: `rider/${id}`, token: 0 };
  riders.push(me);
  let client = await newClient(1_000 + id, { stalled: false });
  try {
    while (!stopAll) {
      let held: Lock;
      try {
        held = await client.acquire(me.lock, { leaseMs: RIDER_LEASE_MS, waitMs: 20_000 });
      } catch (error) {
        if (!(error instanceof LockdError)) {
          count("rider_client_error");
          await client.close();
          client = await newClient(1_000 + id, { stalled: false });
        }
        continue;
      }
      const mine = noteGrant(me.lock, held.token, 1_000 + id, now());
      me.token = held.token;
      count("rider_grants");
      const lost = new Promise<void>((resolve) =>
        held.lost.addEventListener("abort", () => resolve())
      );
      held.lost.addEventListener("abort", () => {
        const reason = (held.lost.reason as LockLostError).reason;
        mine.endAtMs ??= now();
        mine.endReason ||= reason;
        me.token = 0;
        if (!stopAll) {
          breach(`rider ${me.lock} lost its lock (token ${held.token}, ${reason})`);
        }
      });
      while (!stopAll && !held.lost.aborted) {
        await resource.write(me.lock, held.token);
        await Promise.race([sleep(500), lost]);
      }
      if (!held.lost.aborted) {
        mine.endAtMs ??= now();
        mine.endReason ||= "released";
        me.token = 0;
        await held.release().catch(() => {});
      }
    }
  } finally {
    await client.close();
  }
}

/**
 * Time from `fromMs` until a serving process other than `faulted` shows every rider's lock held with
 * the rider's own token (null after 20 s): holder continuity. Polls /readyz (cheap), then the
 * serving node's rider locks, every 100 ms.
 */
async function ridersConfirmed(faulted: LockdProc, fromMs: number): Promise<number | null> {
  while (now() - fromMs < 20_000) {
    await sleep(100);
    for (const node of nodes) {
      // The faulted process, not its node: restarted, it may well win the next election.
      if (node.proc === faulted || node.proc === null || node.stopped) continue;
      const ready = await fetchWithin(`http://${node.proc.opsAddr}/readyz`, 300);
      if (ready?.status !== 200) continue;
      const response = await fetchJson(
        `http://${node.proc.adminAddr}/api/locks?match=${encodeURIComponent("rider/*")}`,
      );
      const held = new Map<string, number>(
        // deno-lint-ignore no-explicit-any
        (response?.locks ?? []).map((l: any) => [l.name, l.holder?.token ?? 0]),
      );
      if (riders.every((r) => r.token !== 0 && held.get(r.lock) === r.token)) {
        return now() - fromMs;
      }
    }
  }
  return null;
}

/**
 * Fault → a new client started 0.5 s after the fault holds a lock nobody held before: it must get
 * it (held at a standby while the new leader is elected, never refused), at once once a leader
 * serves (no record: not reserved). Null, and a breach, when it fails.
 */
async function coldProbe(kind: FaultKind, fromMs: number, n: number): Promise<number | null> {
  await sleep(500);
  try {
    const client = await connect({
      addrs: nodes.map((node) => node.addr),
      connectTimeoutMs: 20_000,
    });
    try {
      const lock = await client.acquire(`cold/${n}`, { leaseMs: 1_000, waitMs: 0 });
      const tookMs = now() - fromMs;
      await lock.release().catch(() => {});
      return tookMs;
    } finally {
      await client.close();
    }
  } catch (error) {
    breach(`a client started 0.5 s after ${kind} did not get a free lock: ${error}`);
    return null;
  }
}

// deno-lint-ignore no-explicit-any
async function fetchJson(url: string): Promise<any | null> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 1_000);
  try {
    const response = await fetch(url, { signal: controller.signal });
    return await response.json();
  } catch {
    return null;
  } finally {
    clearTimeout(timer);
  }
}

// ---- observers of a faulted leader ---------------------------------------------------------

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
  const tracking: Promise<void>[] = [];
  const record: FaultRecord = {
    kind,
    atMs: 0,
    atWallMs: 0,
    endWallMs: 0,
    termBefore: (await infoOf(leader))?.cluster?.term ?? 0,
    firstGrantMs: null,
    node: leader.name,
    endAtMs: 0,
    ridersMs: null,
    coldMs: null,
  };
  let confirming: Promise<number | null> = Promise.resolve(null);
  let cold: Promise<number | null> = Promise.resolve(null);
  const hit = () => {
    record.atMs = now();
    record.atWallMs = Date.now();
    faults.push(record);
    if (kind !== "kill_etcd_leader") confirming = ridersConfirmed(leader.proc!, record.atMs);
    if (kind !== "kill_etcd_leader" && kind !== "double_failover") {
      tracking.push(m2.trackConfirmations(kind, record.atMs));
    }
    cold = coldProbe(kind, record.atMs, faults.length);
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
    case "stop_leader": {
      const observer = new Observer(LEASE_MS);
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
      const late = observer.promisesAfter(contAtMs);
      count("observer_frames", observer.frames.length);
      if (late > 0) {
        breach(
          `the frozen leader ${leader.name} sent ${late} ACQUIRED/HEARTBEAT_ACK after SIGCONT`,
        );
      }
      await observer.close();
      break;
    }
    case "cut_leader": {
      const observer = new Observer(LEASE_MS);
      await observer.open(leader.addr).catch(() => {});
      hit();
      leader.link.partition();
      await sleep(1_000);
      observer.ask();
      await sleep(3 * TTL_MS - 1_000);
      leader.link.heal();
      await sleep(TTL_MS);
      // Its last keep-alive was sent before the cut: its safeUntil is at most TTL after it.
      const late = observer.livePromisesPast(record.atMs + TTL_MS + OVERLAP_TOLERANCE_MS);
      count("observer_frames", observer.frames.length);
      if (late.length > 0) {
        breach(
          `the cut-off leader ${leader.name} made ${late.length} promises past its safeUntil (` +
            late.map((f) =>
              `${f.type} for a request sent at cut + ${(f.sentAtMs - record.atMs).toFixed(0)} ` +
              `ms, received at cut + ${(f.atMs - record.atMs).toFixed(0)} ms (soak lag ${
                stallBetween(f.atMs - 50, f.atMs).toFixed(0)
              } ms)`
            ).join(", ") + ")",
        );
      }
      await observer.close();
      break;
    }
    case "double_failover": {
      hit();
      await proc.stop("SIGKILL");
      leader.proc = null;
      const second = await servingNode();
      await sleep(1_000);
      tracking.push(m2.trackConfirmations("double_failover (from the second kill)", now()));
      await second.proc!.stop("SIGKILL");
      second.proc = null;
      await sleep(1_000);
      await startNode(leader);
      await startNode(second);
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
  record.ridersMs = await confirming;
  record.coldMs = await cold;
  await Promise.all(tracking);
  if (kind !== "kill_etcd_leader" && record.ridersMs === null && riders.length > 0) {
    breach(`${kind}: the riders were not all confirmed on a new leader within 20 s`);
  }
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
  const workers = [
    ...Array.from({ length: CLIENTS }, async (_, i) => {
      await sleep(i * 20);
      await worker(i);
    }),
    ...Array.from({ length: RIDERS }, async (_, i) => {
      await sleep(i * 20);
      await rider(i);
    }),
  ];
  await m2.start();
  for (const [i, kind] of schedule.entries()) {
    await sleep(GAP_MIN_MS + Math.random() * (GAP_MAX_MS - GAP_MIN_MS));
    console.error(`fault ${i + 1}/${schedule.length}: ${kind}`);
    await runFault(kind);
  }
  await sleep(GAP_MIN_MS);
  stopAll = true;
  await Promise.all(workers);
  await m2.stop();
  await finalChecks();
  await checkLeftoverRecords();
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
    await keepRunDir(dir, breaches, started);
  }
}
Deno.exit(exitCode);

// ---- checks at the end --------------------------------------------------------------------------

async function finalChecks(): Promise<void> {
  // Tokens across every node's audit log: within a term in issue order, and every term above
  // every earlier one (globally, so per lock too).
  const byTerm = new Map<number, number[]>();
  const seen = new Set<number>();
  const written: Written[] = [];
  /** The same records with their file and place in it, for the milestone-2 checks. */
  const placed: WrittenRecord[] = [];
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
        written.push({ record, node: node.name, wallMs: Date.parse(record.ts) });
        placed.push({
          record,
          node: node.name,
          wallMs: Date.parse(record.ts),
          file,
          index: placed.length,
        });
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
  checkOwnersByTime(written, { breach, count, counts });
  checkReclaimFloors(written, { breach, count, counts });
  // Milestone 2's population: the clients' own view of holders, FIFO among reclaimed waiters,
  // kept reclaims against the floors etcd held when their term began.
  await m2.finalChecks(placed, faults, etcdClient(etcd.clientUrls, 10_000), counts);
  // The nodes agree on the leader, and every gauge is back to 0 with all clients gone.
  await sleep(500);
  const infos = await Promise.all(nodes.map(infoOf));
  const terms = new Set(infos.map((i) => i?.cluster?.leader?.term ?? -1));
  const serving = infos.filter((i) => i?.cluster?.serving).length;
  if (terms.size !== 1 || serving !== 1) {
    breach(`nodes disagree on the leader: ${JSON.stringify(infos.map((i) => i?.cluster))}`);
  }
  // A fault near the end leaves a reclaim window open (up to the riders' 10 s horizon): its
  // reserved locks are lifted when it ends.
  const windowsOpenUntil = now() + 30_000;
  while (now() < windowsOpenUntil) {
    const open = (await Promise.all(nodes.map(infoOf))).some((i) =>
      i?.cluster?.window_ends_in_ms !== null && i?.cluster?.window_ends_in_ms !== undefined
    );
    if (!open) break;
    await sleep(250);
  }
  for (const node of nodes) {
    const response = await fetch(`http://${node.proc!.opsAddr}/metrics`);
    const text = await response.text();
    for (
      const gauge of [
        "lockd_connections_active",
        "lockd_locks_held",
        "lockd_waiters",
        "lockd_cluster_reserved_locks",
        "lockd_cluster_grants_waiting_commit",
      ]
    ) {
      const m = new RegExp(`^${gauge} (\\S+)$`, "m").exec(text);
      if (m === null || Number(m[1]) !== 0) {
        breach(`${node.name}: ${gauge} is ${m?.[1]} at the end`);
      }
    }
  }
}

/**
 * Milestone 2: every idle lock's ownership record is gone from etcd once the linger (2 s) has
 * passed (every client is gone by now), whatever fault hit the leader that wrote it.
 */
async function checkLeftoverRecords(): Promise<void> {
  await sleep(2_000 + 1_500);
  const client = new EtcdHttpClient({
    endpoints: etcd.clientUrls,
    requestTimeoutMs: 2_000,
    scheduler: systemScheduler,
  });
  try {
    const page = await client.range("soak/own/", { limit: 100 });
    counts.records_left = page.kvs.length;
    if (page.kvs.length > 0) {
      breach(
        `${page.kvs.length}${page.more ? "+" : ""} ownership records left for idle locks: ` +
          page.kvs.slice(0, 5).map((kv) => `${kv.key}=${kv.value}`).join(", "),
      );
    }
  } finally {
    client.close();
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
    const ridersMs = of.map((f) => f.ridersMs).filter((t): t is number => t !== null);
    const coldMs = of.map((f) => f.coldMs).filter((t): t is number => t !== null);
    lines.push(
      `  ${kind}: ${of.length} faults, fault → first grant p50 ${fmt(percentile(times, 0.5))} ` +
        `max ${fmt(Math.max(...times))} (ms)${
          times.length < of.length ? " (some without a grant)" : ""
        }; every rider confirmed p50 ${fmt(percentile(ridersMs, 0.5))} max ${
          fmt(Math.max(...ridersMs))
        }; a new client's free lock p50 ${fmt(percentile(coldMs, 0.5))} max ${
          fmt(Math.max(...coldMs))
        } (ms)`,
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
  console.log(`holders across fail-overs (milestone 2, ${m2.grants} grants):`);
  console.log(m2.reportLines().join("\n"));
  console.log(
    `soak:cluster ${((now() - startedAtMs) / 1000).toFixed(0)}s: ${breaches.length} breaches, ` +
      `${grants} grants, ${resource.accepted} writes accepted, ${resource.fenced} fenced, ` +
      `max holder overlap ${fmt(maxOverlapMs)} ms, soak event-loop lag max ${fmt(maxLagMs)} ms, ` +
      JSON.stringify(counts),
  );
}

function fmt(ms: number): string {
  return Number.isFinite(ms) ? ms.toFixed(0) : "-";
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
