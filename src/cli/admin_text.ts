/**
 * What `lockd admin` prints for the admin API's JSON (without `-json`): key-value blocks and
 * tables for people, durations as `1h2m3s`.
 *
 * @module
 */

import type { HolderJson, InfoJson, LockJson, WaiterJson } from "../admin/views.ts";
import { escapeInvisible } from "../core/lock_name.ts";

function orNone(value: string): string {
  return value === "" ? "(none)" : value;
}

/** `key  value` lines, values aligned. */
function keyValues(rows: [string, string][]): string {
  const width = Math.max(...rows.map(([key]) => key.length)) + 2;
  return rows.map(([key, value]) => `${key.padEnd(width)}${value}\n`).join("");
}

/** A table with a header row; columns separated by two spaces, the last one not padded. */
function table(header: string[], rows: string[][]): string {
  const all = [header, ...rows];
  const widths = header.map((_, column) => Math.max(...all.map((row) => [...row[column]].length)));
  return all.map((row) =>
    row.map((cell, column) =>
      column === row.length - 1 ? cell : cell + " ".repeat(widths[column] - [...cell].length + 2)
    ).join("") + "\n"
  ).join("");
}

export function formatInfo(info: InfoJson): string {
  const c = info.config;
  return keyValues([
    ["version", info.version],
    ["uptime", formatDurationMs(info.uptime_ms)],
    ["listen", c.listen],
    ["ops_listen", orNone(c.ops_listen)],
    ["tls", String(c.tls)],
    ["mtls", String(c.mtls)],
    ["acl_file", orNone(c.acl_file)],
    ["audit_log", c.audit_log === "-" ? "- (standard output)" : c.audit_log],
    ["io_timeout_ms", String(c.io_timeout_ms)],
    // A node that does not serve counts only its own (none): never the cluster's.
    ["locks", String(info.locks) + ownFigure(info)],
    ["sessions", String(info.sessions) + ownFigure(info)],
    ...clusterLines(info),
  ]);
}

/** " (this node)" after a figure of a cluster node that does not serve, else "". */
function ownFigure(info: InfoJson): string {
  return info.cluster !== undefined && !info.cluster.serving
    ? " (this node's; it serves none)"
    : "";
}

/** Cluster mode: the node's status and role, the leader, its lease and etcd's health. */
function clusterLines(info: InfoJson): [string, string][] {
  const k = info.cluster;
  if (k === undefined) return [];
  const leader = k.leader === null
    ? "(none known)"
    : `${k.leader.node} at ${k.leader.advertise} (term ${k.leader.term}, admin ${
      k.leader.admin ?? "not advertised"
    })`;
  return [
    ["cluster", `${k.name}, node ${k.node} at ${k.advertise}`],
    ...(k.status_text === undefined ? [] : [["status", k.status_text] as [string, string]]),
    ["role", `${k.role}${k.serving ? " (serving)" : ""}`],
    ["term", String(k.term)],
    ["leader", leader],
    ["safe_until", k.safe_until_ms === null ? "(no lease)" : `in ${k.safe_until_ms} ms`],
    ["ttl_ms", String(k.ttl_ms)],
    ["token_high_water", String(k.token_high_water)],
    ...k.etcd.map((e): [string, string] => [
      "etcd",
      `${e.endpoint} ${
        e.healthy ? "healthy" : `unhealthy (${e.error ?? "no answer"})`
      }, ${e.took_ms} ms`,
    ]),
  ];
}

function holderText(holder: HolderJson): string {
  return holder.identity === "" ? holder.remote_addr : `${holder.remote_addr} (${holder.identity})`;
}

/**
 * The list of locks. A KIND column (`exclusive`, `shared 3` with its owner count, `semaphore 2/8`
 * with owners and limit) appears only when a listed lock is shared or a semaphore, so the table
 * of plain exclusive locks is what it always was; HOLDER is then the oldest owner, with `+N` for
 * the others.
 */
export function formatLockList(locks: LockJson[]): string {
  const kinds = locks.some((lock) => lock.kind !== undefined);
  const header = ["NAME", "HOLDER", "TOKEN", "SINCE", "WAITERS"];
  if (kinds) header.splice(1, 0, "KIND");
  return table(
    header,
    locks.map((lock) => {
      const others = (lock.holders?.length ?? 1) - 1;
      const row = [
        lock.name,
        lock.holder === null ? "-" : holderText(lock.holder) + (others > 0 ? ` +${others}` : ""),
        lock.holder === null ? "-" : String(lock.holder.token),
        lock.holder === null ? "-" : lock.holder.since,
        String(lock.waiters_total ?? lock.waiters.length),
      ];
      if (kinds) row.splice(1, 0, kindText(lock));
      return row;
    }),
  );
}

/** `exclusive`, `shared 3` (owners), `semaphore 2/8` (owners of limit). */
function kindText(lock: LockJson): string {
  const owners = lock.holders?.length ?? (lock.holder === null ? 0 : 1);
  if (lock.kind === "semaphore") return `semaphore ${owners}/${lock.limit}`;
  if (lock.kind === "shared") return `shared ${owners}`;
  return "exclusive";
}

/**
 * A holder's value for a terminal: the text with control and invisible characters escaped (a
 * value is whatever its holder wrote, and must not move the cursor or reorder the line), or the
 * base64 of bytes that are not UTF-8.
 */
function valueText(holder: HolderJson): string | null {
  if (holder.value_base64 === undefined) return null;
  if (holder.value === null || holder.value === undefined) {
    return `(${holder.value_bytes} bytes, not UTF-8) base64:${holder.value_base64}`;
  }
  return escapeInvisible(holder.value);
}

/**
 * One lock: the holder block and the waiters table, each record with the client name from
 * HELLO and the session id, so a client that rejoins the queue after a kick (new address, new
 * session) is recognised by its name. `durations` adds "held for" / "waiting for"; watch mode
 * into a pipe leaves them out, or every view would differ from the last. A shared or semaphore
 * lock adds its kind and limit and a table of every holder (mode, slot, token, value); a lock
 * under a lock-delay or reservation says until when; an orphaned holder's session says it is
 * disconnected.
 */
export function formatLock(lock: LockJson, durations = true): string {
  const holder = lock.holder;
  const rows: [string, string][] = [["name", lock.name]];
  if (lock.kind !== undefined) {
    rows.push(["kind", lock.kind], ["limit", String(lock.limit)]);
    if (lock.write_generation !== undefined) {
      rows.push(["write_gen", String(lock.write_generation)]);
    }
  }
  if (holder === null) {
    rows.push(["holder", "(none)"]);
  } else {
    rows.push(
      ["holder", holder.remote_addr],
      ["client", orNone(holder.client_name ?? "")],
      [
        "session",
        String(holder.session ?? "-") +
        (holder.connected === false ? " (disconnected: kept until its lease ends)" : ""),
      ],
      ["identity", orNone(holder.identity)],
      [
        "since",
        durations && holder.held_for_ms !== undefined
          ? `${holder.since} (held for ${formatDurationMs(holder.held_for_ms)})`
          : holder.since,
      ],
      ["lease_ms", String(holder.lease_ms)],
      ["token", String(holder.token)],
    );
    const value = valueText(holder);
    if (value !== null) rows.push(["value", value]);
  }
  if (lock.delayed_until !== undefined) {
    rows.push(["delayed", `until ${lock.delayed_until} (lock-delay; nothing is granted)`]);
  }
  if (lock.reserved_until !== undefined) {
    rows.push(["reserved", `until ${lock.reserved_until} (reclaims after a fail-over)`]);
  }
  if (lock.holders !== undefined) rows.push(["holders", String(lock.holders.length)]);
  rows.push(["waiters", String(lock.waiters_total ?? lock.waiters.length)]);
  let text = keyValues(rows);
  if (lock.holders !== undefined && lock.holders.length > 0) {
    text += "\n" + formatHolders(lock, durations);
  }
  if (lock.waiters.length > 0) text += "\n" + formatWaiters(lock.waiters, durations);
  return text;
}

/** Every owner of a shared or semaphore lock, oldest first. */
function formatHolders(lock: LockJson, durations: boolean): string {
  const semaphore = lock.kind === "semaphore";
  const header = ["#", "MODE", "REMOTE_ADDR", "CLIENT", "SESSION", "TOKEN", "SINCE"];
  if (semaphore) header.splice(1, 1, "SLOT");
  if (durations) header.push("HELD");
  header.push("VALUE");
  return table(
    header,
    lock.holders!.map((holder, i) => {
      const row = [
        String(i + 1),
        semaphore ? String(holder.slot) : holder.mode ?? "-",
        holder.remote_addr,
        holder.client_name ? holder.client_name : "-",
        String(holder.session),
        String(holder.token),
        holder.since,
      ];
      if (durations) row.push(formatDurationMs(holder.held_for_ms ?? 0));
      row.push(valueText(holder) ?? "-");
      return row;
    }),
  );
}

function formatWaiters(waiters: WaiterJson[], durations: boolean): string {
  const header = ["#", "REMOTE_ADDR", "CLIENT", "SESSION", "IDENTITY", "QUEUED_AT"];
  if (durations) header.push("WAITING");
  return table(
    header,
    waiters.map((waiter, i) => {
      const row = [
        String(i + 1),
        waiter.remote_addr,
        waiter.client_name ? waiter.client_name : "-",
        String(waiter.session ?? "-"),
        waiter.identity === "" ? "-" : waiter.identity,
        waiter.queued_at,
      ];
      if (durations) row.push(formatDurationMs(waiter.waiting_for_ms ?? 0));
      return row;
    }),
  );
}

export function formatReleased(lock: LockJson): string {
  if (lock.holder === null) return `released lock "${lock.name}"; it is now idle\n`;
  return `released lock "${lock.name}"; new holder ${
    holderText(lock.holder)
  } with token ${lock.holder.token}, ${lock.waiters.length} waiting\n`;
}

export function formatLiftedReservation(lock: LockJson): string {
  if (lock.holder === null) return `lifted the reservation of lock "${lock.name}"; it is free\n`;
  return `lifted the reservation of lock "${lock.name}"; new holder ${
    holderText(lock.holder)
  } with token ${lock.holder.token}, ${lock.waiters.length} waiting\n`;
}

/** `1h2m3s`, `4m5s`, `6.7s`. */
export function formatDurationMs(ms: number): string {
  if (ms < 60_000) return `${Math.round(ms / 100) / 10}s`;
  const totalSeconds = Math.floor(ms / 1000);
  const hours = Math.floor(totalSeconds / 3600);
  const minutes = Math.floor((totalSeconds % 3600) / 60);
  const seconds = totalSeconds % 60;
  return hours > 0 ? `${hours}h${minutes}m${seconds}s` : `${minutes}m${seconds}s`;
}
