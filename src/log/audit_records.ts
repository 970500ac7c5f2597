/**
 * What the audit log says: one record type per event, each with exactly its fields, and the
 * encoder that turns a record into its JSON line. How the lines reach the sink (order, retries,
 * health) is `audit.ts`'s business.
 *
 * A new event (or field) goes here: its record type, its member of {@link AuditRecord}, its row
 * of {@link AUDIT_EVENT_FIELDS} (the compiler checks that the row names exactly the type's
 * fields), and its row of docs/operations.md's "Audit log" tables
 * (`tests/log/audit_records_test.ts` compares them).
 *
 * @module
 */

import { createHash } from "node:crypto";
import { rfc3339 } from "../clock.ts";

/** Who performed an admin action. */
export interface Actor {
  remote_addr: string;
  /** "token" when the admin API required a bearer token, else "none". */
  auth: "token" | "none";
}

/** The fields every record has, in this order (after `ts`). */
interface CommonFields<Event extends string> {
  event: Event;
  lock: string;
  token: number | null;
  identity: string;
  remote_addr: string;
  session: number;
  /** Cluster mode: the leader's term when the record was decided (on every record, last). */
  term?: number;
}

/**
 * How an ownership holds its lock (issue 22), on `acquire` and `release` records of shared and
 * semaphore locks only: the records of plain exclusive locks stay as they were before kinds
 * existed, byte for byte (all four fields or none).
 */
interface KindFields {
  /** `shared` or `semaphore`. */
  kind?: string;
  /** The semaphore's limit; 1 for a shared lock. */
  limit?: number;
  /** `exclusive` or `shared`. */
  mode?: string;
  /** The semaphore slot (0 to limit − 1); 0 on a shared lock. */
  slot?: number;
}

/** The holder's value as the audit log tells it: its length and digest, never the bytes. */
interface ValueFields {
  /** Length of the value in bytes. */
  value_bytes: number;
  /** SHA-256 of the value, lowercase hex; null when the value is empty (none). */
  value_sha256: string | null;
}

/**
 * A value as the audit log tells it (issue 23): its length and SHA-256, never the bytes, which
 * may be anything a holder publishes.
 */
export function valueDigest(value: Uint8Array | null): ValueFields {
  if (value === null || value.length === 0) return { value_bytes: 0, value_sha256: null };
  return {
    value_bytes: value.length,
    value_sha256: createHash("sha256").update(value).digest("hex"),
  };
}

/** An ownership began: a fencing token was issued. */
export interface AcquireRecord extends CommonFields<"acquire">, KindFields, Partial<ValueFields> {
  token: number;
  /**
   * The client name the session sent in HELLO (informational, chosen by the client; JSON-escaped
   * like every field); "" when it sent none.
   */
  client_name: string;
  /** From the ACQUIRE to the grant. */
  waited_ms: number;
}

/** An ownership ended. */
export interface ReleaseRecord extends CommonFields<"release">, KindFields {
  token: number;
  client_name: string;
  /** `graceful`, `expired`, `io_timeout`, `force`, `failover` (cluster mode). */
  reason: string;
  held_ms: number;
}

/** A holder replaced its value (SET_VALUE); the fields are the holder's. */
export interface ValueSetRecord extends CommonFields<"value_set">, ValueFields {
  token: number;
  client_name: string;
}

/**
 * An exclusive owner became a shared one in place (a downgrade), keeping its token; the fields
 * are the holder's.
 */
export interface DowngradeRecord extends CommonFields<"downgrade"> {
  token: number;
  client_name: string;
  /** The owner's write generation from now on: its own token. */
  write_generation: number;
}

/** An operator force-released the lock; the fields are the owner's. */
export interface ForceReleaseRecord extends CommonFields<"force_release"> {
  token: number;
  actor: Actor;
}

/** An operator removed a waiter; the fields are the waiter's. */
export interface KickWaiterRecord extends CommonFields<"kick_waiter"> {
  token: null;
  actor: Actor;
}

/**
 * Cluster mode: a lock reserved for its holder's RECLAIM after a fail-over was freed without one:
 * by an operator (`by: "operator"`, with `actor`) or by the end of the reclaim window (`"window"`).
 */
export interface ReservationLiftedRecord extends CommonFields<"reservation_lifted"> {
  token: null;
  by: "operator" | "window";
  actor?: Actor;
}

/** The ACL refused an ACQUIRE, or a read (QUERY, WATCH); nothing else changed. */
export interface AclDenyRecord extends CommonFields<"acl_deny"> {
  token: null;
  /** `read` for a refused read; absent for a refused ACQUIRE (as before reading existed). */
  action?: "read";
}

/**
 * Protocol version 2: a RECLAIM carried a claim of an earlier session over to this one (after a
 * fail-over, or a same-term move of a silent connection's claims). An owned claim keeps its token
 * (its ownership goes on: it has this record instead of a second `acquire`); a queued one keeps
 * its place (`token` null; its grant, later, is an `acquire`). The fields are the new session's.
 */
export interface ReclaimRecord extends CommonFields<"reclaim"> {
  client_name: string;
  /** `owned` or `queued`. */
  claim: "owned" | "queued";
  /** The session and the term the claim was made in (the RESUME's). */
  prev_session: number;
  prev_term: number;
}

/**
 * Protocol version 2: a RECLAIM's claim was not carried over (CLAIM_VOID for an owned claim; a
 * queued one joined the tail unless the ACL refused it). `token`: the owned claim's, else null.
 */
export interface ReclaimVoidRecord extends CommonFields<"reclaim_void"> {
  client_name: string;
  claim: "owned" | "queued";
  prev_session: number;
  prev_term: number;
  /** `ticket`, `term`, `window`, `floor`, `regranted`, `acl` or `limit` (docs/protocol.md). */
  reason: string;
}

/**
 * Protocol version 2: two reclaims kept ownerships of one lock; the higher token won and the
 * lower ownership is ended (its session closed, as by a force-release). The common fields are the
 * lower owner's; only a misbehaving client (one that reclaims a lock it released) causes this.
 */
export interface ReclaimConflictRecord extends CommonFields<"reclaim_conflict"> {
  token: number;
  /** The higher token that won, and its session. */
  winner_token: number;
  winner_session: number;
}

/**
 * Cluster mode: this node became the leader (`lock` "", `session` 0: `remote_addr` is its own
 * advertised address).
 */
export interface LeaderElectedRecord extends CommonFields<"leader_elected"> {
  token: null;
  node: string;
  term: number;
}

/** Cluster mode: this node stopped leading (fields as `leader_elected`). */
export interface SteppedDownRecord extends CommonFields<"stepped_down"> {
  token: null;
  /** `lease_expired`, `key_lost`, `deposed`, `etcd_unreachable` or `shutdown`. */
  reason: string;
  node: string;
  term: number;
}

/** One audit event. */
export type AuditRecord =
  | AcquireRecord
  | ReleaseRecord
  | ValueSetRecord
  | DowngradeRecord
  | ForceReleaseRecord
  | KickWaiterRecord
  | AclDenyRecord
  | ReclaimRecord
  | ReclaimVoidRecord
  | ReclaimConflictRecord
  | ReservationLiftedRecord
  | LeaderElectedRecord
  | SteppedDownRecord;

export type AuditEvent = AuditRecord["event"];

/** The fields every record has, in the order of the line. */
export const AUDIT_COMMON_FIELDS = [
  "event",
  "lock",
  "token",
  "identity",
  "remote_addr",
  "session",
] as const satisfies readonly (keyof CommonFields<string>)[];

type RecordOf<E extends AuditEvent> = Extract<AuditRecord, { event: E }>;
/** The fields of event `E` beyond the common ones (`term` counts as one where it is required). */
type ExtraFieldOf<E extends AuditEvent> = Exclude<
  keyof RecordOf<E>,
  typeof AUDIT_COMMON_FIELDS[number] | (undefined extends RecordOf<E>["term"] ? "term" : never)
>;
/**
 * Each event's fields after the common ones, in the order of the line; `term` comes last on
 * every record of cluster mode, so it is named only where every record of the event has it.
 */
export const AUDIT_EVENT_FIELDS = {
  acquire: ["client_name", "waited_ms"],
  release: ["client_name", "reason", "held_ms"],
  value_set: ["client_name", "value_bytes", "value_sha256"],
  downgrade: ["client_name", "write_generation"],
  force_release: ["actor"],
  kick_waiter: ["actor"],
  acl_deny: [],
  reclaim: ["client_name", "claim", "prev_session", "prev_term"],
  reclaim_void: ["client_name", "claim", "prev_session", "prev_term", "reason"],
  reclaim_conflict: ["winner_token", "winner_session"],
  reservation_lifted: ["by"],
  leader_elected: ["node", "term"],
  stepped_down: ["reason", "node", "term"],
} as const satisfies { [E in AuditEvent]: readonly ExtraFieldOf<E>[] };

/**
 * Fields some records of an event have and others not, written after the event's own fields
 * (before `term`) in this order, and only when present: the records of plain exclusive locks,
 * of ownerships without a value and of refused ACQUIREs stay as they were.
 */
export const AUDIT_OPTIONAL_FIELDS = {
  acquire: ["kind", "limit", "mode", "slot", "value_bytes", "value_sha256"],
  release: ["kind", "limit", "mode", "slot"],
  value_set: [],
  downgrade: [],
  force_release: [],
  kick_waiter: [],
  acl_deny: ["action"],
  reclaim: [],
  reclaim_void: [],
  reclaim_conflict: [],
  reservation_lifted: ["actor"],
  leader_elected: [],
  stepped_down: [],
} as const satisfies { [E in AuditEvent]: readonly ExtraFieldOf<E>[] };

/** Fields of an event's record that neither of its rows above names (never). */
type Unlisted = {
  [E in AuditEvent]: Exclude<
    ExtraFieldOf<E>,
    typeof AUDIT_EVENT_FIELDS[E][number] | typeof AUDIT_OPTIONAL_FIELDS[E][number]
  >;
}[AuditEvent];
// A compile error here names a field missing from its event's row above.
const _everyFieldListed: [Unlisted] extends [never] ? true : Unlisted = true;

/**
 * One JSON line: `ts` first, then the common fields, the event's own fields, its optional fields
 * that are present and `term` (when the record has one), in that order whatever the order the
 * record was built in. JSON.stringify
 * escapes every control character, so no field can break the line or forge a record.
 */
export function formatAuditLine(wallMs: number, record: AuditRecord): string {
  const fields = record as unknown as Record<string, unknown>;
  const line: Record<string, unknown> = { ts: rfc3339(wallMs) };
  for (const name of AUDIT_COMMON_FIELDS) line[name] = fields[name];
  for (const name of AUDIT_EVENT_FIELDS[record.event]) line[name] = fields[name];
  for (const name of AUDIT_OPTIONAL_FIELDS[record.event]) {
    if (fields[name] !== undefined) line[name] = fields[name];
  }
  if (record.term !== undefined) line.term = record.term;
  return JSON.stringify(line) + "\n";
}
