/**
 * What `lockd admin` prints for the admin API's JSON (without `-json`): key-value blocks and
 * tables for people, durations as `1h2m3s`.
 *
 * @module
 */

import type { HolderJson, InfoJson, LockJson, WaiterJson } from "../admin/views.ts";

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
    ["locks", String(info.locks)],
    ["sessions", String(info.sessions)],
    ...clusterLines(info),
  ]);
}

/** Cluster mode: the node's role, the leader, its lease and etcd's health. */
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

export function formatLockList(locks: LockJson[]): string {
  return table(
    ["NAME", "HOLDER", "TOKEN", "SINCE", "WAITERS"],
    locks.map((lock) => [
      lock.name,
      lock.holder === null ? "-" : holderText(lock.holder),
      lock.holder === null ? "-" : String(lock.holder.token),
      lock.holder === null ? "-" : lock.holder.since,
      String(lock.waiters.length),
    ]),
  );
}

/**
 * One lock: the holder block and the waiters table, each record with the client name from
 * HELLO and the session id, so a client that rejoins the queue after a kick (new address, new
 * session) is recognised by its name. `durations` adds "held for" / "waiting for"; watch mode
 * into a pipe leaves them out, or every view would differ from the last.
 */
export function formatLock(lock: LockJson, durations = true): string {
  const holder = lock.holder;
  const rows: [string, string][] = [["name", lock.name]];
  if (holder === null) {
    rows.push(["holder", "(none)"]);
  } else {
    rows.push(
      ["holder", holder.remote_addr],
      ["client", orNone(holder.client_name ?? "")],
      ["session", String(holder.session ?? "-")],
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
  }
  rows.push(["waiters", String(lock.waiters.length)]);
  let text = keyValues(rows);
  if (lock.waiters.length > 0) text += "\n" + formatWaiters(lock.waiters, durations);
  return text;
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

/** `1h2m3s`, `4m5s`, `6.7s`. */
export function formatDurationMs(ms: number): string {
  if (ms < 60_000) return `${Math.round(ms / 100) / 10}s`;
  const totalSeconds = Math.floor(ms / 1000);
  const hours = Math.floor(totalSeconds / 3600);
  const minutes = Math.floor((totalSeconds % 3600) / 60);
  const seconds = totalSeconds % 60;
  return hours > 0 ? `${hours}h${minutes}m${seconds}s` : `${minutes}m${seconds}s`;
}
