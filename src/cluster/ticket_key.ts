/**
 * The cluster's ticket key in etcd: `<cluster>/ticket-key` = 32 random bytes, base64. Created
 * once by whichever node needs it first, with a put-if-absent (`create_revision == 0`) that reads
 * the key back in the same transaction, so every node and every term use the same key whichever
 * put won. The stored value is checked like everything read from etcd: a value that is not
 * exactly 32 bytes of canonical base64 is refused with a message saying how to recover, never
 * used and never silently replaced (replacing it would void every outstanding ticket).
 *
 * @module
 */

import { randomTicketKey, TICKET_KEY_BYTES } from "../security/tickets.ts";
import { type Etcd, EtcdError } from "./etcd.ts";

/** The stored ticket key is not 32 bytes of base64. */
export class TicketKeyInvalid extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TicketKeyInvalid";
  }
}

/** The key's name in etcd. */
export function ticketKeyName(cluster: string): string {
  return `${cluster}/ticket-key`;
}

/** 32 bytes in canonical base64: 43 characters and one "=" (the last one's low bits zero). */
const KEY_BASE64 = /^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$/;

/** Decodes a stored key; throws `TicketKeyInvalid` naming `key` when it is not one. */
export function parseTicketKey(key: string, value: string): Uint8Array {
  if (!KEY_BASE64.test(value)) {
    throw new TicketKeyInvalid(
      `The ticket key "${key}" in etcd is not ${TICKET_KEY_BYTES} bytes of base64; delete it ` +
        `(etcdctl del ${key}) and a new one is created: tickets issued before then become void`,
    );
  }
  const binary = atob(value);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function base64(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

/**
 * Returns the cluster's ticket key, creating it if it does not exist yet. Rejects with an
 * `EtcdError` when etcd does not answer (the outcome of the put is then unknown; calling again
 * is safe: a put that landed makes the compare fail and the key is read back), or with
 * `TicketKeyInvalid` when the stored value is not a key.
 */
export async function loadTicketKey(
  etcd: Etcd,
  cluster: string,
  options: { readonly timeoutMs: number; readonly random?: () => Uint8Array },
): Promise<Uint8Array> {
  const key = ticketKeyName(cluster);
  const fresh = (options.random ?? randomTicketKey)();
  if (fresh.length !== TICKET_KEY_BYTES) throw new RangeError("A new ticket key must be 32 bytes");
  const result = await etcd.txn(
    [{ key, target: "create", revision: 0 }],
    [{ type: "put", key, value: base64(fresh) }, { type: "get", key }],
    [{ type: "get", key }],
    { timeoutMs: options.timeoutMs },
  );
  fresh.fill(0);
  const stored = result.gets[0];
  if (stored === undefined) {
    // Deleted between the compare and the read of one transaction cannot happen: etcd broke.
    throw new EtcdError("rejected", `The ticket key "${key}" vanished inside a transaction`);
  }
  return parseTicketKey(key, stored.value);
}
