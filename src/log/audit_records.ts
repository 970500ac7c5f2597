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

/** An ownership began: a fencing token was issued. */
export interface AcquireRecord extends CommonFields<"acquire"> {
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
export interface ReleaseRecord extends CommonFields<"release"> {
  token: number;
  client_name: string;
  /** `graceful`, `expired`, `io_timeout`, `force`, `failover` (cluster mode). */
  reason: string;
  held_ms: number;
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

/** The ACL refused an ACQUIRE (nothing else changed). */
export interface AclDenyRecord extends CommonFields<"acl_deny"> {
  token: null;
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
  | ForceReleaseRecord
  | KickWaiterRecord
  | AclDenyRecord
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
  force_release: ["actor"],
  kick_waiter: ["actor"],
  acl_deny: [],
  leader_elected: ["node", "term"],
  stepped_down: ["reason", "node", "term"],
} as const satisfies { [E in AuditEvent]: readonly ExtraFieldOf<E>[] };

/** Fields of an event's record that its row of AUDIT_EVENT_FIELDS does not name (never). */
type Unlisted = {
  [E in AuditEvent]: Exclude<ExtraFieldOf<E>, typeof AUDIT_EVENT_FIELDS[E][number]>;
}[AuditEvent];
// A compile error here names a field missing from its event's row above.
const _everyFieldListed: [Unlisted] extends [never] ? true : Unlisted = true;

/**
 * One JSON line: `ts` first, then the common fields, the event's own fields and `term` (when the
 * record has one), in that order whatever the order the record was built in. JSON.stringify
 * escapes every control character, so no field can break the line or forge a record.
 */
export function formatAuditLine(wallMs: number, record: AuditRecord): string {
  const fields = record as unknown as Record<string, unknown>;
  const line: Record<string, unknown> = { ts: rfc3339(wallMs) };
  for (const name of AUDIT_COMMON_FIELDS) line[name] = fields[name];
  for (const name of AUDIT_EVENT_FIELDS[record.event]) line[name] = fields[name];
  if (record.term !== undefined) line.term = record.term;
  return JSON.stringify(line) + "\n";
}
