/**
 * `deno task soak [-duration 60]`: chaos soak against `lockd serve`
 * subprocesses sharing one -data-dir. Clients acquire random locks from a
 * small set and, while holding, write to a fenced in-process resource.
 * Version-2 clients do the same on semaphores (the resource keeps the last
 * token per slot) and shared locks (reader/writer exclusion, the readers'
 * write generation), and watchers beside them check what they hear and, after
 * quiet, that their last states equal the server's (bench/soak_kinds.ts,
 * bench/soak_watch.ts). A
 * chaos driver mixes clean releases, crashes (socket closed), stalls
 * (heartbeats stop → expired), half-open clients (nothing sent → io_timeout),
 * admin force-releases and waiter removals, and server restarts (SIGKILL and
 * SIGTERM). Checks are listed in docs/reliability.md. Prints one summary line
 * and exits 1 on any breach.
 */

import { FrameWriter } from "../src/wire/frame.ts";
import { FrameReader } from "../src/wire/frame_reader.ts";
import { WIRE_CODES } from "../src/wire/codes.ts";
import type { Message } from "../src/wire/messages.ts";
import { BenchConn } from "./bench_client.ts";
import { type LockdProc, spawnLockd } from "./lockd_proc.ts";
import {
  checkKindAudit,
  checkLockDelays,
  kindChaos,
  kindClientLoop,
  KindTracker,
  LOCK_RULES,
  SEMAPHORES,
  SHARED_LOCKS,
  type SoakContext,
} from "./soak_kinds.ts";
import { Watchers } from "./soak_watch.ts";

function flag(name: string, fallback: string): string {
  const i = Deno.args.findIndex((a) => a === `-${name}` || a === `--${name}`);
  return i >= 0 ? Deno.args[i + 1] : fallback;
}
const DURATION_MS = Number(flag("duration", "60")) * 1000;
const CLIENTS = Number(flag("clients", "24"));
/** Version-2 clients on the semaphores and shared locks (bench/soak_kinds.ts). */
const KIND_CLIENTS = Number(flag("kind-clients", "12"));
const LOCKS = 6;
const LEASE_MS = 600;
const HEARTBEAT_MS = 150;
const RUN_MS = Math.max(5_000, Math.min(15_000, DURATION_MS / 5));
/** How close to a starved moment (see checkAudit) a crash's expiry counts as part of it. */
const STARVED_NEAR_MS = 100;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const breaches: string[] = [];
const breach = (what: string) => {
  if (breaches.length < 50) console.error(`BREACH: ${what}`);
  breaches.push(what);
};
let operations = 0;
const faults: Record<string, number> = {};
const fault = (k: string) => (faults[k] = (faults[k] ?? 0) + 1);

/** The guarded resource: accepts a write only with a token ≥ the highest seen for its lock. */
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
    if (other !== undefined && other !== token) {
      // Another holder's write is in progress: it is now fenced off (lower token).
      if (other > token) breach(`write of token ${token} on ${lock} accepted during ${other}`);
    }
    this.writing.set(lock, token);
    await sleep(Math.random() < 0.5 ? 0 : 2);
    if (this.writing.get(lock) !== token || this.highest.get(lock) !== token) {
      this.fenced++; // superseded mid-write: the resource refuses the commit
      return false;
    }
    this.writing.delete(lock);
    this.accepted++;
    return true;
  }
}
const resource = new FencedResource();

/** Expected end reason per "run:token", set by the chaos that ended it. */
const expected = new Map<string, string[]>();
/** Highest token seen per lock across all runs, in arrival order. */
const maxToken = new Map<string, number>();
/** Current healthy holder per lock: a client that heartbeats and was not targeted. */
const holder = new Map<string, Holder>();
interface Holder {
  token: number;
  healthy: boolean;
  conn: BenchConn;
  /** Force-releases issued on the lock when this ownership was granted (see `forcesIssued`). */
  forcesAtGrant: number;
}
/**
 * Force-releases issued per lock. A POST does not name the owner it removes: between reading the
 * holder and the POST landing, the lock may have passed to a newer owner, and that owner is then
 * the one removed. A handover after a force issued since the grant is therefore no breach.
 */
const forcesIssued = new Map<string, number>();

/**
 * The end of the ownership of `lock` with `token` the server told `conn` of, unasked: LEASE_EXPIRED
 * naming it ("expired", with the ACQUIRE's request id), or a closing ERROR (request id 0) that ended the whole session, e.g. its I/O
 * timeout ("io_timeout") when the machine starved this process of CPU past -io-timeout. Null when
 * the server told nothing. A holder that was told is no valid holder from then on.
 */
function toldEnd(conn: BenchConn, lock: string, token: number): string | null {
  for (const m of conn.unsolicited) {
    if (m.type !== "error") continue;
    if (m.code === WIRE_CODES.LEASE_EXPIRED.code) {
      // With the ACQUIRE's request id; its message names the token: "... expired (token 17)".
      if (m.name === lock && m.message.endsWith(`(token ${token})`)) return "expired";
      continue;
    }
    if (m.requestId !== 0) continue; // an answer to a request that ended (e.g. a late RELEASE)
    if (m.code === WIRE_CODES.IO_TIMEOUT.code) return "io_timeout";
    if (m.code === WIRE_CODES.CLOSED_BY_ADMIN.code) return "force";
    return "closed";
  }
  return null;
}

function toldExpired(h: Holder, lock: string): boolean {
  return toldEnd(h.conn, lock, h.token) !== null;
}

/** Connection and lock of each ownership by "run:token", to ask `toldEnd` at the audit check. */
const ownerships = new Map<string, { conn: BenchConn; lock: string }>();

let run = 0;
let server!: LockdProc;
const ctx: SoakContext = {
  breach,
  fault,
  op: () => operations++,
  expected,
  run: () => run,
  addr: () => server.addr,
  adminAddr: () => server.adminAddr,
  toldEnded: (conn, lock, token) => toldEnd(conn, lock, token) !== null,
  owned: (key, conn, lock) => ownerships.set(key, { conn, lock }),
  write: (key, token) => resource.write(key, token),
};
const kinds = new KindTracker(ctx);
const watchers = new Watchers(ctx);
const ALL_LOCKS = [
  ...Array.from({ length: LOCKS }, (_, i) => `soak/${i}`),
  ...SEMAPHORES,
  ...SHARED_LOCKS,
];
const dataDir = await Deno.makeTempDir({ prefix: "lockd-soak-" });
const auditFile = (r: number) => `${dataDir}/audit-${r}.jsonl`;
const rulesFile = `${dataDir}/lock-rules`;
await Deno.writeTextFile(rulesFile, LOCK_RULES);
const killedRuns = new Set<number>();
/** Runs ended by SIGTERM: ownerships still open then end `graceful` (the shutdown's reason). */
const terminatedRuns = new Set<number>();

async function startRun(): Promise<void> {
  run++;
  server = await spawnLockd({
    http: true,
    flags: [
      "-data-dir",
      dataDir,
      "-audit-log",
      auditFile(run),
      "-io-timeout",
      "1s",
      "-shutdown-grace",
      "0s",
      "-lock-rules-file",
      rulesFile,
    ],
  });
  await watchers.start();
}

/**
 * The run's clients are gone: waits until the server holds no lock and only the watchers' sessions
 * (at most 8 s: orphaned and half-open ownerships end with their leases and the I/O timeout), then
 * compares every watcher's last states with the server's.
 */
async function quiet(): Promise<void> {
  const until = performance.now() + 8_000;
  while (performance.now() < until) {
    try {
      const res = await fetch(`http://${server.adminAddr}/api/info`);
      const info = await res.json();
      if (info.locks === 0 && info.sessions <= watchers.sessions) break;
    } catch {
      // the admin API answers again in a moment
    }
    await sleep(200);
  }
  await sleep(300); // the last events on their way to the watchers
  await watchers.compareWithServer(ALL_LOCKS);
}

type Mode = "clean" | "crash" | "stall" | "half_open";

async function clientLoop(id: number, until: number): Promise<void> {
  while (performance.now() < until) {
    let conn: BenchConn;
    const myRun = run;
    try {
      conn = await BenchConn.session(server.addr, `soak-${id}`);
    } catch {
      await sleep(100);
      continue;
    }
    let heartbeat: ReturnType<typeof setInterval> | undefined;
    try {
      heartbeat = setInterval(() => conn.heartbeat().catch(() => {}), HEARTBEAT_MS);
      for (let k = 0; k < 50 && performance.now() < until && !conn.closed; k++) {
        const lock = `soak/${Math.floor(Math.random() * LOCKS)}`;
        const r = Math.random();
        const mode: Mode = r < 0.85
          ? "clean"
          : r < 0.9
          ? "crash"
          : r < 0.95
          ? "stall"
          : "half_open";
        const a = await conn.acquire(lock, mode === "half_open" ? 5_000 : LEASE_MS, 3_000);
        operations++;
        if (a.type !== "acquired") continue;
        const key = `${myRun}:${a.token}`;
        ownerships.set(key, { conn, lock });
        if (a.token <= (maxToken.get(lock) ?? 0)) {
          breach(`token ${a.token} for ${lock} not above ${maxToken.get(lock)}`);
        }
        maxToken.set(lock, Math.max(a.token, maxToken.get(lock) ?? 0));
        const prev = holder.get(lock);
        if (
          prev !== undefined && prev.healthy &&
          (forcesIssued.get(lock) ?? 0) === prev.forcesAtGrant
        ) {
          // The old owner's LEASE_EXPIRED travels on its own socket: give it a moment to arrive.
          await sleep(200);
          if (prev.healthy && !toldExpired(prev, lock)) {
            breach(`${lock} granted (token ${a.token}) while token ${prev.token} was healthy`);
          } else if (prev.healthy) {
            // Not a safety breach (the server ended it and said so), but a heartbeating holder
            // lost its lease: reported so overload shows.
            fault("heartbeating_holder_expired");
          }
        }
        const me: Holder = {
          token: a.token,
          healthy: true,
          conn,
          forcesAtGrant: forcesIssued.get(lock) ?? 0,
        };
        holder.set(lock, me);
        await resource.write(lock, a.token);
        operations++;
        if (mode === "clean") {
          me.healthy = false;
          expected.set(key, ["graceful"]);
          await conn.release(lock, a.token);
          operations++;
          if (holder.get(lock) === me) holder.delete(lock);
          continue;
        }
        me.healthy = false;
        fault(mode);
        clearInterval(heartbeat);
        if (mode === "crash") {
          expected.set(key, ["graceful", "io_timeout"]);
          conn.close();
        } else if (mode === "stall") {
          expected.set(key, ["expired"]); // lease 600 ms ends before the 1 s io timeout
          await sleep(LEASE_MS + 300);
          // A loaded machine may be late: wait until the server says the lease is over.
          for (let w = 0; w < 40 && toldEnd(conn, lock, a.token) === null; w++) await sleep(50);
          // Late write with the old token: the resource must refuse it if someone took over.
          await resource.write(lock, a.token);
          conn.close();
        } else {
          expected.set(key, ["io_timeout"]); // lease 5 s, io timeout 1 s
          await sleep(1_500);
          conn.close();
        }
        break;
      }
    } catch {
      // server restarted or admin removed us
    } finally {
      clearInterval(heartbeat);
      conn.close();
      await conn.done;
    }
  }
}

let slowReaders = 0;

/**
 * A slow reader: takes a lock of its own, then keeps sending HEARTBEATs without
 * reading a single reply. The server must cut it (its reply buffer or a stalled
 * write) and end the ownership as io_timeout, with bounded memory.
 */
async function slowReader(until: number): Promise<void> {
  const myRun = run;
  const lock = `soak/slow-${slowReaders++}`;
  const [hostname, port] = server.addr.split(":");
  let conn: Deno.TcpConn;
  try {
    conn = await Deno.connect({ hostname, port: Number(port) });
  } catch {
    return;
  }
  try {
    const writer = new FrameWriter();
    const reader = new FrameReader();
    const buffer = new Uint8Array(4096);
    const next = async (): Promise<Message | null> => {
      for (;;) {
        const message = reader.next();
        if (message !== null) return message;
        const n = await conn.read(buffer);
        if (n === null) return null;
        reader.push(buffer.subarray(0, n));
      }
    };
    writer.push({ type: "hello", version: 1, clientName: "soak-slow-reader" });
    writer.push({ type: "acquire", requestId: 1, name: lock, leaseMs: 5_000, waitMs: 0 });
    await conn.write(writer.take());
    if ((await next())?.type !== "welcome") return;
    const granted = await next();
    if (granted?.type !== "acquired") return;
    operations++;
    expected.set(`${myRun}:${granted.token}`, ["io_timeout"]);
    fault("slow_reader");
    for (let i = 0; i < 512; i++) writer.push({ type: "heartbeat", requestId: 2 + i });
    const burst = writer.take();
    // Never read again; write until the server cuts the connection (or time is up).
    while (performance.now() < until) {
      await conn.write(burst);
    }
  } catch {
    // cut by the server: what we wanted
  } finally {
    try {
      conn.close();
    } catch {
      // already closed
    }
  }
}

async function chaos(until: number): Promise<void> {
  // One slow reader per run, alongside the other faults.
  const slow = slowReader(until);
  while (performance.now() < until) {
    await sleep(300 + Math.random() * 400);
    const lock = `soak/${Math.floor(Math.random() * LOCKS)}`;
    if (server.adminAddr === null) break;
    try {
      if (Math.random() < 0.6) {
        const h = holder.get(lock);
        if (h) h.healthy = false;
        forcesIssued.set(lock, (forcesIssued.get(lock) ?? 0) + 1);
        const res = await fetch(
          `http://${server.adminAddr}/api/locks/${encodeURIComponent(lock)}/release`,
          { method: "POST" },
        );
        await res.body?.cancel();
        // The owner may have changed since `h` was read: force is accepted for any ownership (checkAudit).
        if (res.ok) fault("force_release");
      } else {
        const res = await fetch(`http://${server.adminAddr}/api/locks/${encodeURIComponent(lock)}`);
        const view = res.ok ? await res.json() : null;
        if (!res.ok) await res.body?.cancel();
        const w = view?.waiters?.[0] ?? view?.lock?.waiters?.[0];
        if (w?.remote_addr) {
          const del = await fetch(
            `http://${server.adminAddr}/api/locks/${encodeURIComponent(lock)}/waiters/${
              encodeURIComponent(w.remote_addr)
            }`,
            { method: "DELETE" },
          );
          await del.body?.cancel();
          if (del.ok) fault("kick_waiter");
        }
      }
    } catch {
      // server restarting
    }
  }
  await slow;
}

function auditRecords(r: number): Record<string, unknown>[] {
  try {
    return Deno.readTextFileSync(auditFile(r)).split("\n").filter((l) => l).map((l) =>
      JSON.parse(l)
    );
  } catch {
    return [];
  }
}

let auditChecked = 0;
function checkAudit(r: number): void {
  const acquires = new Map<number, number>();
  const releases = new Map<number, { n: number; reason: string; atMs: number }>();
  for (const rec of auditRecords(r)) {
    const t = Number(rec.token);
    if (rec.event === "acquire") acquires.set(t, (acquires.get(t) ?? 0) + 1);
    if (rec.event === "release") {
      const prev = releases.get(t);
      const atMs = Date.parse(String(rec.ts));
      releases.set(t, { n: (prev?.n ?? 0) + 1, reason: String(rec.reason), atMs });
    }
  }
  /** When the server ended ownerships first and told their clients: the server was starved. */
  const starvedAtMs: number[] = [];
  /** Other ends by a lease or the I/O timeout: judged once `starvedAtMs` is known. */
  const timedOut: { atMs: number; text: string }[] = [];
  for (const [t, n] of acquires) {
    auditChecked++;
    if (n !== 1) breach(`run ${r}: token ${t} acquired ${n} times in the audit log`);
    const rel = releases.get(t);
    if (rel === undefined) {
      // An ownership open when the server was SIGKILLed has no release record by nature.
      if (!killedRuns.has(r)) breach(`run ${r}: token ${t} has no release record`);
      continue;
    }
    if (rel.n !== 1) breach(`run ${r}: token ${t} released ${rel.n} times`);
    const want = expected.get(`${r}:${t}`);
    // Ownerships still open at a SIGTERM end with the shutdown's reason; only judge those we caused.
    const endedByShutdown = terminatedRuns.has(r) && rel.reason === "graceful";
    // The server may end an ownership before its client does when this machine starves the
    // client of CPU past the lease or the I/O timeout; then it told the client so (a closing
    // ERROR, LEASE_EXPIRED), and that reason stands.
    const owned = ownerships.get(`${r}:${t}`);
    const told = owned === undefined ? null : toldEnd(owned.conn, owned.lock, t);
    const forced = rel.reason === "force" && want?.[0] !== "force";
    if (want && !want.includes(rel.reason) && !endedByShutdown && !forced && told === rel.reason) {
      fault(`told_${told}_first`);
      starvedAtMs.push(rel.atMs);
    } else if (want && !want.includes(rel.reason) && !endedByShutdown) {
      // A force-release or a restart may overtake the planned ending.
      if (!(want[0] !== "force" && rel.reason === "force")) {
        const heard = owned?.conn.unsolicited.map((m) => JSON.stringify(m)).join(", ");
        const text = `run ${r}: token ${t} (${owned?.lock}) ended ${rel.reason}, expected ${
          want.join("|")
        } (heard ${heard})`;
        if (rel.reason === "expired" || rel.reason === "io_timeout") {
          timedOut.push({ atMs: rel.atMs, text });
        } else {
          breach(text);
        }
      }
    }
  }
  // A crashed client's FIN that the server reads only after the lease ran out ends it `expired`
  // (or `io_timeout`, when the silence before it outlasted the I/O timeout), and the client never
  // reads what it was told: no bug when the server was starved at that moment, which shows as
  // heartbeating holders it ended first, and told so, within STARVED_NEAR_MS of it.
  for (const c of timedOut) {
    if (starvedAtMs.some((atMs) => Math.abs(atMs - c.atMs) <= STARVED_NEAR_MS)) {
      fault("timed_out_while_starved");
    } else {
      breach(c.text);
    }
  }
  for (const t of releases.keys()) {
    if (!acquires.has(t)) breach(`run ${r}: release of token ${t} without an acquire`);
  }
  // Tokens strictly increase per lock in grant order, and every run starts above the last one.
  const lastPerLock = new Map<string, number>();
  let runMin = Infinity;
  let runMax = 0;
  for (const rec of auditRecords(r)) {
    if (rec.event !== "acquire") continue;
    const lock = String(rec.lock);
    const t = Number(rec.token);
    if (t <= (lastPerLock.get(lock) ?? 0)) breach(`run ${r}: token ${t} on ${lock} did not grow`);
    lastPerLock.set(lock, t);
    runMin = Math.min(runMin, t);
    runMax = Math.max(runMax, t);
  }
  if (runMin !== Infinity && runMin <= highestBefore) {
    breach(`run ${r}: token ${runMin} is not above every token of earlier runs (${highestBefore})`);
  }
  highestBefore = Math.max(highestBefore, runMax);
}
let highestBefore = 0;

async function metrics(): Promise<Map<string, number>> {
  const text = await (await fetch(`http://${server.opsAddr}/metrics`)).text();
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line.startsWith("#") || line.trim() === "") continue;
    const i = line.lastIndexOf(" ");
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}

const started = performance.now();
const end = started + DURATION_MS;
await startRun();
while (performance.now() < end) {
  const runUntil = Math.min(end, performance.now() + RUN_MS);
  await Promise.all([
    ...Array.from({ length: CLIENTS }, (_, i) => clientLoop(i, runUntil)),
    ...Array.from(
      { length: KIND_CLIENTS },
      (_, i) => kindClientLoop(ctx, kinds, i, runUntil, LEASE_MS, HEARTBEAT_MS),
    ),
    chaos(runUntil),
    kindChaos(ctx, kinds, runUntil),
  ]);
  await quiet();
  if (performance.now() >= end) break;
  // Restart with the same data dir; mark every current holder unhealthy first.
  for (const h of holder.values()) h.healthy = false;
  // Alternate, so every soak of two or more restarts has both kinds.
  const kill = run % 2 === 1;
  if (kill) killedRuns.add(run);
  else terminatedRuns.add(run);
  fault(kill ? "sigkill" : "sigterm");
  await watchers.stop();
  await server.stop(kill ? "SIGKILL" : "SIGTERM");
  holder.clear();
  kinds.reset();
  await startRun();
}

// Last run: every client has left; gauges must be 0 and counters equal the audit counts.
await watchers.stop();
await sleep(1_500);
const m = await metrics();
for (const g of ["lockd_connections_active", "lockd_locks_held", "lockd_waiters"]) {
  if (m.get(g) !== 0) breach(`gauge ${g} is ${m.get(g)} after all clients left`);
}
const last = auditRecords(run);
const audAcq = last.filter((r) => r.event === "acquire").length;
if (m.get("lockd_acquires_total") !== audAcq) {
  breach(`lockd_acquires_total ${m.get("lockd_acquires_total")} ≠ audit acquires ${audAcq}`);
}
for (const reason of ["graceful", "expired", "io_timeout", "force"]) {
  const aud = last.filter((r) => r.event === "release" && r.reason === reason).length;
  const met = m.get(`lockd_releases_total{reason="${reason}"}`) ?? 0;
  if (met !== aud) breach(`releases ${reason}: metrics ${met} ≠ audit ${aud}`);
}
const delays = checkLockDelays(ctx, run, last);
if ((m.get("lockd_lock_delays_total") ?? 0) !== delays.started) {
  breach(`lockd_lock_delays_total ${m.get("lockd_lock_delays_total")} ≠ audit ${delays.started}`);
}
if (m.get("lockd_lock_delays_active") !== 0) {
  breach(`gauge lockd_lock_delays_active is ${m.get("lockd_lock_delays_active")} at the end`);
}
const info = await (await fetch(`http://${server.adminAddr}/api/info`)).json();
if (info.locks !== 0 || info.sessions !== 0) {
  breach(
    `after all clients left the server still stores ${info.locks} locks, ${info.sessions} sessions`,
  );
}
await server.stop("SIGTERM");
let kindGrantsChecked = 0;
let delayedGrantsChecked = 0;
for (let r = 1; r <= run; r++) {
  checkAudit(r);
  kindGrantsChecked += checkKindAudit(ctx, kinds, r, auditRecords(r));
  if (r !== run) delayedGrantsChecked += checkLockDelays(ctx, r, auditRecords(r)).checked;
}
delayedGrantsChecked += delays.checked;
if (Deno.env.get("SOAK_KEEP")) console.log(`kept ${dataDir}`);
else await Deno.remove(dataDir, { recursive: true });

const faultText = Object.entries(faults).map(([k, v]) => `${k}=${v}`).join(" ");
console.log(
  `soak: ${((performance.now() - started) / 1000).toFixed(0)} s, ${run} server runs, ` +
    `operations=${operations} writes_accepted=${resource.accepted} writes_fenced=${resource.fenced} ` +
    `audit_ownerships_checked=${auditChecked} kind_grants_checked=${kindGrantsChecked} ` +
    `delayed_grants_checked=${delayedGrantsChecked} ` +
    `reader_generations=${kinds.readsChecked} watcher_states=${watchers.states} ` +
    `watcher_states_compared=${watchers.compared} faults: ${faultText} breaches=${breaches.length}`,
);
Deno.exit(breaches.length === 0 ? 0 : 1);
