/**
 * Reclaim tickets (cluster mode milestone 2, design §3.4): a MAC over one claim, handed to the
 * client in ACQUIRED (owned) and QUEUED (queued), which the client shows again in RECLAIM at the
 * next leader. A valid ticket proves that a leader of this cluster issued exactly this claim to
 * exactly this session and identity; whether the claim is still good (term, window, floor) is the
 * reclaim rule's business, not the ticket's.
 *
 *     ticket = HMAC-SHA256(key, "lockd-ticket-v1" | cluster | term | sessionId | identity | kind
 *                               | name | token-or-order | mode | limit | slot)[0, 16)
 *
 * Every field is encoded unambiguously: strings as a u32 byte length then their UTF-8 bytes,
 * integers at a fixed width, big-endian (term, sessionId u64; kind u8, 1 owned, 2 queued; then
 * two u64: the token and 0 for an owned claim, orderTerm and orderSeq for a queued one; mode u8,
 * limit u32, slot u32). So no two different claims encode to the same bytes, and a ticket of one
 * kind, lock, session or cluster never verifies for another.
 *
 * 16 bytes (128 bits) of MAC: a forger gets one try per RECLAIM, each answered and audited.
 *
 * The key: 32 random bytes per cluster, in etcd (`src/cluster/ticket_key.ts`); on a single node
 * `randomTicketKey()` per process (tickets then matter only for a same-process RESUME).
 *
 * @module
 */

import { HmacSha256 } from "./hmac_sha256.ts";

/** Bytes of a ticket (`b16` on the wire). */
export const TICKET_BYTES = 16;
/** Bytes of a ticket key. */
export const TICKET_KEY_BYTES = 32;

const DOMAIN = "lockd-ticket-v1";
const U32_MAX = 0xffff_ffff;
const U8_MAX = 0xff;

/** What a ticket vouches for. */
export interface TicketClaim {
  /** The term of the leader that issued it (0 on a single node). */
  readonly term: number;
  readonly sessionId: number;
  /** The session's identity (mTLS), "" without. */
  readonly identity: string;
  readonly kind: "owned" | "queued";
  readonly name: string;
  /** Owned: the ownership's token (ignored for queued claims). */
  readonly token?: number;
  /** Queued: the waiter's order key (ignored for owned claims). */
  readonly orderTerm?: number;
  readonly orderSeq?: number;
  /** Issue 22's fields, neutral (0) until it lands. */
  readonly mode?: number;
  readonly limit?: number;
  readonly slot?: number;
  /** Owned: a shared grant's write generation (in the field queued claims use for `orderSeq`). */
  readonly writeGeneration?: number;
}

/** 32 random bytes from the system's CSPRNG: a single node's per-process key. */
export function randomTicketKey(): Uint8Array {
  return crypto.getRandomValues(new Uint8Array(TICKET_KEY_BYTES));
}

const encoder = new TextEncoder();

/** Mints and verifies the tickets of one cluster under one key. */
export class Tickets {
  readonly #hmac: HmacSha256;
  /** The encoded message; its first `#prefixBytes` (domain and cluster) never change. */
  #message: Uint8Array;
  readonly #prefixBytes: number;
  readonly #expected = new Uint8Array(TICKET_BYTES);

  /** `key`: exactly 32 bytes; `cluster`: the cluster name ("" on a single node). */
  constructor(key: Uint8Array, cluster: string) {
    if (key.length !== TICKET_KEY_BYTES) {
      throw new RangeError(`A ticket key is ${TICKET_KEY_BYTES} bytes, not ${key.length}`);
    }
    if (!cluster.isWellFormed()) throw new RangeError("The cluster name is not valid Unicode");
    this.#hmac = new HmacSha256(key);
    this.#message = new Uint8Array(512 + 3 * cluster.length);
    let at = writeString(this.#message, 0, DOMAIN);
    at = writeString(this.#message, at, cluster);
    this.#prefixBytes = at;
  }

  /** A new ticket for `claim`. Throws RangeError for a field out of its range (a bug). */
  mint(claim: TicketClaim): Uint8Array {
    const ticket = new Uint8Array(TICKET_BYTES);
    this.mintInto(claim, ticket, 0);
    return ticket;
  }

  /** Writes the ticket for `claim` into `out` at `offset` (a frame being built). */
  mintInto(claim: TicketClaim, out: Uint8Array, offset: number): void {
    const length = this.#encode(claim);
    if (length < 0) throw new RangeError(`Cannot mint a ticket for ${describe(claim)}`);
    this.#hmac.mac(this.#message, length, out, offset, TICKET_BYTES);
  }

  /**
   * Whether `ticket` was minted under this key for exactly `claim`, compared in constant time.
   * False for a ticket of another length or a claim with a field out of range.
   */
  verify(claim: TicketClaim, ticket: Uint8Array): boolean {
    if (ticket.length !== TICKET_BYTES) return false;
    const length = this.#encode(claim);
    if (length < 0) return false;
    const expected = this.#expected;
    this.#hmac.mac(this.#message, length, expected, 0, TICKET_BYTES);
    let diff = 0;
    for (let i = 0; i < TICKET_BYTES; i++) diff |= expected[i] ^ ticket[i];
    return diff === 0;
  }

  /** Encodes `claim` after the fixed prefix; returns the length, or -1 for an invalid field. */
  #encode(claim: TicketClaim): number {
    const owned = claim.kind === "owned";
    if (!owned && claim.kind !== "queued") return -1;
    const a = owned ? claim.token ?? 0 : claim.orderTerm ?? 0;
    const b = owned ? claim.writeGeneration ?? 0 : claim.orderSeq ?? 0;
    const mode = claim.mode ?? 0;
    const limit = claim.limit ?? 0;
    const slot = claim.slot ?? 0;
    if (
      !isU53(claim.term) || !isU53(claim.sessionId) || !isU53(a) || !isU53(b) ||
      !isInt(mode, U8_MAX) || !isInt(limit, U32_MAX) || !isInt(slot, U32_MAX) ||
      !claim.identity.isWellFormed() || !claim.name.isWellFormed()
    ) {
      return -1;
    }
    // Fixed fields: 8 + 8 + 1 + 8 + 8 + 1 + 4 + 4, two length prefixes, UTF-8 at 3 bytes per unit.
    const most = this.#prefixBytes + 50 + 3 * (claim.identity.length + claim.name.length);
    if (this.#message.length < most) {
      const grown = new Uint8Array(most * 2);
      grown.set(this.#message.subarray(0, this.#prefixBytes));
      this.#message = grown;
    }
    const m = this.#message;
    let at = this.#prefixBytes;
    at = writeU64(m, at, claim.term);
    at = writeU64(m, at, claim.sessionId);
    at = writeString(m, at, claim.identity);
    m[at++] = owned ? 1 : 2;
    at = writeString(m, at, claim.name);
    at = writeU64(m, at, a);
    at = writeU64(m, at, b);
    m[at++] = mode;
    at = writeU32(m, at, limit);
    return writeU32(m, at, slot);
  }
}

function isU53(value: number): boolean {
  return Number.isSafeInteger(value) && value >= 0;
}

function isInt(value: number, max: number): boolean {
  return Number.isInteger(value) && value >= 0 && value <= max;
}

function writeU32(buf: Uint8Array, at: number, value: number): number {
  buf[at] = value >>> 24;
  buf[at + 1] = value >>> 16;
  buf[at + 2] = value >>> 8;
  buf[at + 3] = value;
  return at + 4;
}

function writeU64(buf: Uint8Array, at: number, value: number): number {
  writeU32(buf, at, Math.floor(value / 2 ** 32));
  return writeU32(buf, at + 4, value >>> 0);
}

/** A u32 byte length, then the UTF-8 bytes (the buffer has room for 3 bytes per UTF-16 unit). */
function writeString(buf: Uint8Array, at: number, text: string): number {
  const { written } = encoder.encodeInto(text, buf.subarray(at + 4));
  writeU32(buf, at, written);
  return at + 4 + written;
}

function describe(claim: TicketClaim): string {
  return `${claim.kind} claim of "${claim.name}" (term ${claim.term}, session ${claim.sessionId})`;
}
