/**
 * Message shapes of the lockd wire protocol, versions 1 and 2. Byte layouts are in
 * `docs/protocol.md`; the codec (`frame.ts`, `frame_reader.ts`) turns these into frames and back.
 *
 * Version 2 adds fields to WELCOME, ACQUIRE, QUEUED and ACQUIRED and adds message types. A
 * decoded message (`Decoded<M>`, what `FrameReader` returns) always has the version-2 fields of
 * its type: a frame of a version-1 session decodes with their neutral values (`NEUTRAL`), so code
 * above the codec reads them without asking which version the session speaks. A message to
 * encode may leave them out (neutral). What a version-1 session cannot carry is refused by the
 * encoder (a programmer error): a version-2 message type, or a version-2 field with a value
 * other than its neutral one.
 *
 * Enum fields (`mode`, `kind`, `outcome`, `event`, `reason`) decode to their names; a byte that
 * names nothing is kept as its number, because refusing it is a semantic check of the layer
 * above (INVALID_ARGUMENT from the server, a protocol error in a client), not a framing error.
 *
 * @module
 */

/** Every protocol version this codec encodes and decodes. */
export const PROTOCOL_VERSIONS: readonly number[] = [1, 2];

/**
 * The version lockd's own tools (the leader probe, benches, test clients) put into HELLO. Still
 * 1: they need nothing of version 2. The TypeScript client asks for 2 and falls back to 1
 * (src/client/connection.ts; docs/protocol.md, "Versioning").
 */
export const PROTOCOL_VERSION = 1;

/** ACQUIRE `waitMs` value meaning "wait as long as it takes". */
export const WAIT_FOREVER = 0xffff_ffff;

/** Bytes of a `b16` field (a reclaim ticket). */
export const TICKET_BYTES = 16;

/**
 * "No ticket": what a version-1 frame decodes to, and what a version-2 frame carrying 16 zero
 * bytes decodes to (the server never issues the all-zero ticket). Length 0, so nobody can
 * change the shared value.
 */
export const EMPTY_TICKET: Uint8Array = Object.freeze(new Uint8Array(0)) as Uint8Array;

/** "No value": an empty `bin` field, and what a version-1 frame decodes to. Shared, length 0. */
export const EMPTY_VALUE: Uint8Array = Object.freeze(new Uint8Array(0)) as Uint8Array;

/** Type byte of each message. 0x17 to 0x23 are version 2 only. */
export const MessageType = {
  HELLO: 0x01,
  WELCOME: 0x02,
  ACQUIRE: 0x10,
  QUEUED: 0x11,
  ACQUIRED: 0x12,
  RELEASE: 0x13,
  RELEASED: 0x14,
  HEARTBEAT: 0x15,
  HEARTBEAT_ACK: 0x16,
  RESUME: 0x17,
  RESUMED: 0x18,
  RECLAIM: 0x19,
  GOODBYE: 0x1a,
  SET_VALUE: 0x1b,
  VALUE_SET: 0x1c,
  QUERY: 0x1d,
  LOCK_STATE: 0x1e,
  WATCH: 0x1f,
  WATCHING: 0x20,
  UNWATCH: 0x21,
  WATCH_ENDED: 0x22,
  DOWNGRADE: 0x23,
  ERROR: 0x7f,
} as const;

/** The first type byte of a version-2-only message; on a version-1 session it is an unknown type. */
export const FIRST_V2_TYPE = MessageType.RESUME;

// ---- enum fields: the name of each byte value ----------------------------------------------

/** ACQUIRE/ACQUIRED/RECLAIM/holder `mode`: 0 exclusive, 1 shared. */
export const LOCK_MODES = ["exclusive", "shared"] as const;
export type LockMode = typeof LOCK_MODES[number];

/** RECLAIM `kind`: 1 owned, 2 queued (0 names nothing). */
export const CLAIM_KINDS = [null, "owned", "queued"] as const;
export type ClaimKind = Exclude<typeof CLAIM_KINDS[number], null>;

/** RESUMED `outcome`: 0 moved, 1 reclaim, 2 none. */
export const RESUME_OUTCOMES = ["moved", "reclaim", "none"] as const;
export type ResumeOutcome = typeof RESUME_OUTCOMES[number];

/** LOCK_STATE `event`: 0 state (a QUERY's answer or a WATCH's snapshot), 1 granted, 2 ended, 3 value, 4 queue. */
export const LOCK_EVENTS = ["state", "granted", "ended", "value", "queue"] as const;
export type LockEvent = typeof LOCK_EVENTS[number];

/** LOCK_STATE `reason` (event `ended`): 1 graceful .. 5 failover; 0 (none) for the other events. */
export const END_REASONS = [
  "none",
  "graceful",
  "expired",
  "io_timeout",
  "force",
  "failover",
] as const;
export type LockEndReason = typeof END_REASONS[number];

/** LOCK_STATE `kind`: 0 none (no owner and no waiter), 1 exclusive, 2 shared, 3 semaphore. */
export const LOCK_KINDS = ["none", "exclusive", "shared", "semaphore"] as const;
export type LockKindName = typeof LOCK_KINDS[number];

/** WATCH_ENDED `reason`: 0 unwatched (the client's UNWATCH), 1 too many locks matched. */
export const WATCH_END_REASONS = ["unwatched", "too_many_locks"] as const;
export type WatchEndReason = typeof WATCH_END_REASONS[number];

/**
 * An enum field as decoded: its name, or the byte itself when it names nothing (for the layer
 * above to refuse and quote). The encoder takes either, but a number only when it names nothing.
 */
export type Enum<Name extends string> = Name | number;

// ---- messages of both versions ---------------------------------------------------------------

/** Client → server: first frame of every connection. */
export interface Hello {
  type: "hello";
  version: number;
  clientName: string;
}
/**
 * Server → client: answer to HELLO. The last three fields are version 2's: on the wire iff
 * `version` is 2. Version-2 fields of every message: left out = neutral (`NEUTRAL`); always
 * present on a decoded message.
 */
export interface Welcome {
  type: "welcome";
  version: number;
  serverVersion: string;
  sessionId: number;
  ioTimeoutMs: number;
  leaseDefaultMs: number;
  leaseMaxMs: number;
  /** Cluster term of the leader (0 on a single node). Version 2. */
  term?: number;
  /** How long after losing a connection a client should keep trying to reclaim (0: no reclaim). Version 2. */
  reclaimWindowMs?: number;
  /** The server's -max-lock-value-bytes (0: values unsupported). Version 2. */
  valueBytesMax?: number;
}
/** Client → server: ask for a lock. `leaseMs` 0 = server default; `waitMs` 0 = try-lock, WAIT_FOREVER = no bound. */
export interface Acquire {
  type: "acquire";
  requestId: number;
  name: string;
  leaseMs: number;
  waitMs: number;
  /** Version 2. */
  mode?: Enum<LockMode>;
  /**
   * 0: no opinion (the lock's or a rule's limit, else 1); N ≥ 1: a semaphore of N (1: a plain
   * lock). Version 2. A version-1 ACQUIRE decodes with 0, the wire's neutral value; that a
   * version-1 claim means a plain lock is the session's rule (docs/architecture.md), not the
   * codec's.
   */
  limit?: number;
  /** The holder's value from the grant on (EMPTY_VALUE: none). Version 2. */
  value?: Uint8Array;
}
/** Server → client: the claim joined the queue at `position` (1 = next in line). */
export interface Queued {
  type: "queued";
  requestId: number;
  name: string;
  position: number;
  /** The claim's place in the queue's order (cluster term and sequence), for a reclaim. Version 2. */
  orderTerm?: number;
  orderSeq?: number;
  /** Reclaim ticket of the queued claim (EMPTY_TICKET: none). Version 2. */
  ticket?: Uint8Array;
}
/** Server → client: the claim is now an owner. */
export interface Acquired {
  type: "acquired";
  requestId: number;
  name: string;
  token: number;
  leaseMs: number;
  /** Reclaim ticket of the ownership (EMPTY_TICKET: none). Version 2. */
  ticket?: Uint8Array;
  /** Version 2. */
  mode?: Enum<LockMode>;
  /** The lock's limit: N for a semaphore of N, else 1. Version 2. */
  limit?: number;
  /** The semaphore slot (0 to limit - 1); 0 for exclusive and shared locks. Version 2. */
  slot?: number;
  /** Shared grants: the token of the lock's last exclusive grant (0: none); else 0. Version 2. */
  writeGeneration?: number;
}
/** Client → server: end an ownership (`token` of the grant) or cancel a queued claim (`token` 0). */
export interface Release {
  type: "release";
  requestId: number;
  name: string;
  token: number;
}
/** Server → client: the ownership ended (graceful) or the queued claim left the queue. */
export interface Released {
  type: "released";
  requestId: number;
  name: string;
}
/** Client → server: renews every ownership of the session and keeps the session alive. */
export interface Heartbeat {
  type: "heartbeat";
  requestId: number;
}
/** Server → client: answer to HEARTBEAT with the number of ownerships renewed. */
export interface HeartbeatAck {
  type: "heartbeat_ack";
  requestId: number;
  renewed: number;
}
/** Server → client: a request failed, or (request id 0 or the ACQUIRE's id) a server condition. */
export interface ErrorMessage {
  type: "error";
  requestId: number;
  code: number;
  name: string;
  message: string;
}

// ---- messages of version 2 only --------------------------------------------------------------

/** Client → server (issue 20): the first request after WELCOME of a client that reclaims. */
export interface Resume {
  type: "resume";
  requestId: number;
  /** Term and session id of the connection the claims were made on. */
  prevTerm: number;
  prevSessionId: number;
  /** How many RECLAIMs follow. */
  claims: number;
}
/** Server → client (issue 20): answer to RESUME. */
export interface Resumed {
  type: "resumed";
  requestId: number;
  outcome: Enum<ResumeOutcome>;
  /** What is left of the reclaim window, in ms. */
  windowLeftMs: number;
}
/** Client → server (issue 20): carry an owned or queued claim over to this leader; answered as ACQUIRE. */
export interface Reclaim {
  type: "reclaim";
  requestId: number;
  kind: Enum<ClaimKind>;
  /** Owned claims: the grant's token; else 0. */
  token: number;
  /** Queued claims: the QUEUED's order fields; else 0. */
  orderTerm: number;
  orderSeq: number;
  leaseMs: number;
  /** What is left of the wait bound (WAIT_FOREVER allowed). */
  waitMs: number;
  ticket: Uint8Array;
  mode: Enum<LockMode>;
  limit: number;
  slot: number;
  name: string;
  value: Uint8Array;
  /**
   * Owned shared claims: the ACQUIRED's write generation (its ticket binds it); else 0. The last
   * field of the frame; absent here: 0.
   */
  writeGeneration?: number;
}
/** Client → server (issue 20): the server ends the session gracefully and closes; no reply. */
export interface Goodbye {
  type: "goodbye";
  requestId: number;
}
/** Client → server (issue 23): replace the value of the ownership with `token`. */
export interface SetValue {
  type: "set_value";
  requestId: number;
  token: number;
  name: string;
  value: Uint8Array;
}
/** Server → client (issue 23): answer to SET_VALUE. */
export interface ValueSet {
  type: "value_set";
  requestId: number;
  name: string;
}
/** Client → server (issue 23): the state of one lock, without queueing. */
export interface Query {
  type: "query";
  requestId: number;
  name: string;
}
/** One owner in a LOCK_STATE, oldest first. */
export interface LockStateHolder {
  token: number;
  heldMs: number;
  leaseMs: number;
  mode: Enum<LockMode>;
  slot: number;
  identity: string;
  clientName: string;
  value: Uint8Array;
}
/** Server → client (issue 23): a lock's state (QUERY's answer, a WATCH's snapshot or event). */
export interface LockState {
  type: "lock_state";
  /** The QUERY's or the WATCH's request id. */
  requestId: number;
  event: Enum<LockEvent>;
  /** Event `ended`: why the ownership ended; else `none`. */
  reason: Enum<LockEndReason>;
  kind: Enum<LockKindName>;
  limit: number;
  queueLength: number;
  /** Owners in all; `holders` lists the oldest of them, as many as fit in one frame. */
  owners: number;
  name: string;
  holders: LockStateHolder[];
}
/** Client → server (issue 23): observe a lock, or every lock a glob matches. */
export interface Watch {
  type: "watch";
  requestId: number;
  pattern: string;
}
/** Server → client (issue 23): the WATCH's snapshots were sent; events follow with its id. */
export interface Watching {
  type: "watching";
  requestId: number;
  /** LOCK_STATE snapshots sent. */
  locks: number;
}
/** Client → server (issue 23): end the watch with this request id. */
export interface Unwatch {
  type: "unwatch";
  requestId: number;
}
/**
 * Client → server (issue 22): make the exclusive ownership with `token` shared, in place (same
 * token); answered by ACQUIRED with this request id (mode shared, a fresh ticket). There is no
 * upgrade: release, then acquire exclusive.
 */
export interface Downgrade {
  type: "downgrade";
  requestId: number;
  token: number;
  name: string;
}
/** Server → client (issue 23): the watch with this request id is over. */
export interface WatchEnded {
  type: "watch_ended";
  requestId: number;
  reason: Enum<WatchEndReason>;
}

// ---- unions ----------------------------------------------------------------------------------

/** A client's frame after HELLO: each is one command of its session. */
export type ClientRequest =
  | Acquire
  | Release
  | Heartbeat
  | Resume
  | Reclaim
  | Goodbye
  | SetValue
  | Query
  | Watch
  | Unwatch
  | Downgrade;
export type ClientMessage = Hello | ClientRequest;
export type ServerMessage =
  | Welcome
  | Queued
  | Acquired
  | Released
  | HeartbeatAck
  | Resumed
  | ValueSet
  | LockState
  | Watching
  | WatchEnded
  | ErrorMessage;
/** Every message (to encode: version-2 fields may be left out). */
export type Message = ClientMessage | ServerMessage;

/** The version-2 fields of the messages version 2 changed, with their neutral values. */
const NEUTRAL = {
  welcome: { term: 0, reclaimWindowMs: 0, valueBytesMax: 0 },
  acquire: { mode: "exclusive", limit: 0, value: EMPTY_VALUE },
  queued: { orderTerm: 0, orderSeq: 0, ticket: EMPTY_TICKET },
  acquired: { ticket: EMPTY_TICKET, mode: "exclusive", limit: 1, slot: 0, writeGeneration: 0 },
} as const;

type Changed = keyof typeof NEUTRAL;

/** A message as the decoder returns it: the version-2 fields of its type are present. */
export type Decoded<M extends Message> = M extends { type: infer T extends Changed }
  ? M & Required<Pick<M, Extract<keyof typeof NEUTRAL[T], keyof M>>>
  : M;
export type DecodedMessage = Decoded<Message>;
export type DecodedClientMessage = Decoded<ClientMessage>;
export type DecodedServerMessage = Decoded<ServerMessage>;
export type DecodedClientRequest = Decoded<ClientRequest>;

/**
 * `msg` with the version-2 fields it leaves out set to their neutral values, as the decoder
 * would return it: for paths that hand messages over without the codec (the contract suite's
 * in-process transport). A message that has them all is returned as it is.
 */
export function withNeutral<M extends Message>(msg: M): Decoded<M> {
  if (!(msg.type in NEUTRAL)) return msg as Decoded<M>;
  const neutral: Record<string, unknown> = NEUTRAL[msg.type as Changed];
  const fields = msg as unknown as Record<string, unknown>;
  if (Object.keys(neutral).every((key) => fields[key] !== undefined)) return msg as Decoded<M>;
  const out = { ...fields };
  for (const key in neutral) out[key] ??= neutral[key];
  return out as unknown as Decoded<M>;
}
