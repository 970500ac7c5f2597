/**
 * The cluster's ticket key in etcd (`<cluster>/ticket-key`), on an in-memory etcd: created once
 * by put-if-absent and read back, the same for every node however the race goes, safe to ask
 * again after an unknown outcome, and refused (never used, never replaced) when the stored value
 * is not 32 bytes of base64.
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { EtcdError } from "../../src/cluster/etcd.ts";
import {
  loadTicketKey,
  parseTicketKey,
  TicketKeyInvalid,
  ticketKeyName,
} from "../../src/cluster/ticket_key.ts";
import { FakeEtcd, settle } from "../helpers/fake_etcd.ts";

const OPTIONS = { timeoutMs: 1_000 };

function hex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function fill(byte: number): () => Uint8Array {
  return () => new Uint8Array(32).fill(byte);
}

Deno.test("the first node creates the key; every later node reads the same one", async () => {
  const etcd = new FakeEtcd(new ManualScheduler());
  const first = await loadTicketKey(etcd, "prod", { ...OPTIONS, random: fill(1) });
  assert.equal(hex(first), "01".repeat(32));
  const stored = etcd.peek("prod/ticket-key")!;
  assert.equal(stored.value, btoa(String.fromCharCode(...new Uint8Array(32).fill(1))));
  const second = await loadTicketKey(etcd, "prod", { ...OPTIONS, random: fill(2) });
  assert.equal(hex(second), hex(first));
  assert.equal(etcd.peek("prod/ticket-key")!.modRevision, stored.modRevision, "written once");
  assert.equal(ticketKeyName("prod"), "prod/ticket-key");
  // Another cluster has its own.
  const other = await loadTicketKey(etcd, "staging", { ...OPTIONS, random: fill(3) });
  assert.equal(hex(other), "03".repeat(32));
});

Deno.test("two nodes racing to create the key end with the same key", async () => {
  const etcd = new FakeEtcd(new ManualScheduler());
  const [a, b] = await Promise.all([
    loadTicketKey(etcd, "prod", { ...OPTIONS, random: fill(0xaa) }),
    loadTicketKey(etcd, "prod", { ...OPTIONS, random: fill(0xbb) }),
  ]);
  assert.equal(hex(a), hex(b));
  assert.equal(hex(a), "aa".repeat(32));
});

Deno.test("a put whose answer was lost is read back by the retry", async () => {
  const scheduler = new ManualScheduler();
  const fake = new FakeEtcd(scheduler);
  let txns = 0;
  const etcd = fake.client({ dropAnswer: (op) => op === "txn" && ++txns === 1, scheduler });
  const lost = loadTicketKey(etcd, "prod", { ...OPTIONS, random: fill(5) });
  await settle();
  scheduler.advance(1_000);
  await assert.rejects(lost, (e) => e instanceof EtcdError && e.kind === "unavailable");
  assert.ok(fake.peek("prod/ticket-key") !== undefined, "the put landed");
  const again = await loadTicketKey(etcd, "prod", { ...OPTIONS, random: fill(6) });
  assert.equal(hex(again), "05".repeat(32));
});

Deno.test("a stored value that is not 32 bytes of canonical base64 is refused with a way out", async () => {
  const valid = btoa(String.fromCharCode(...new Uint8Array(32).fill(7)));
  assert.equal(hex(parseTicketKey("k", valid)), "07".repeat(32));
  const bad = [
    "",
    "not base64 at all",
    btoa(String.fromCharCode(...new Uint8Array(31))),
    btoa(String.fromCharCode(...new Uint8Array(33))),
    valid.slice(0, -1), // no padding
    valid.slice(0, -2) + "B=", // non-canonical: low bits set
    ` ${valid}`,
    `${valid}\n`,
  ];
  for (const value of bad) {
    assert.throws(() => parseTicketKey("prod/ticket-key", value), TicketKeyInvalid, value);
  }
  const etcd = new FakeEtcd(new ManualScheduler());
  etcd.putDirect("prod/ticket-key", "c2hvcnQ=");
  await assert.rejects(
    loadTicketKey(etcd, "prod", { ...OPTIONS, random: fill(1) }),
    (e) => e instanceof TicketKeyInvalid && /etcdctl del prod\/ticket-key/.test(e.message),
  );
  assert.equal(etcd.peek("prod/ticket-key")!.value, "c2hvcnQ=", "never replaced");
});
