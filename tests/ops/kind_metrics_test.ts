/**
 * The metrics of lock kinds, lock-delays and read refusals (issue 22 item 6, issue 23 item 4) on
 * a real scrape: owners per kind, delays started and active, and the spec's metrics keeping their
 * meaning (`lockd_locks_held`: locks with at least one owner; `lockd_acquires_total`: grants).
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { parseAcl } from "../../src/security/acl.ts";
import { parseLockRules } from "../../src/security/lock_rules.ts";
import { http } from "../admin/admin_helpers.ts";
import { startTestServer, TEST_ACTOR } from "../helpers/start_server.ts";
import { FramePort, settle } from "../service/service_harness.ts";

async function samples(opsAddr: string): Promise<Map<string, number>> {
  const answer = await http(opsAddr, "GET", "/metrics");
  const map = new Map<string, number>();
  for (const line of answer.text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const space = line.lastIndexOf(" ");
    map.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return map;
}

function pick(all: Map<string, number>, names: string[]): Record<string, number | undefined> {
  return Object.fromEntries(names.map((name) => [name, all.get(name)]));
}

const NAMES = [
  "lockd_locks_held",
  "lockd_acquires_total",
  'lockd_lock_owners{kind="exclusive"}',
  'lockd_lock_owners{kind="shared"}',
  'lockd_lock_owners{kind="semaphore"}',
  "lockd_lock_delays_total",
  "lockd_lock_delays_active",
  "lockd_acl_denials_total",
  "lockd_acl_read_denials_total",
];

Deno.test("metrics: owners per kind, lock-delays started and active, read refusals; locks_held counts a lock once", async () => {
  const scheduler = new ManualScheduler();
  await using t = await startTestServer({ opsListen: "127.0.0.1:0" }, { scheduler });
  const service = t.server.context.service;
  service.setLockRules(parseLockRules("semaphore render/* 3 lock-delay=2s\n", "x.rules"));
  service.setAcl(parseAcl("deny ** secret/** read\nallow ** **\n", "x.acl"));
  let port = 41_000;
  const open = () => {
    const peer = service.openSession("", `127.0.0.1:${port++}`, new FramePort());
    if ("code" in peer) throw new Error(peer.message);
    return peer;
  };
  const semaphore = [open(), open(), open()];
  semaphore.forEach((peer) =>
    service.acquire(peer, 1, "render/a", 10_000, null, { mode: "exclusive", limit: 0, value: null })
  );
  const readers = [open(), open()];
  readers.forEach((peer) =>
    service.acquire(peer, 1, "reports", 10_000, null, { mode: "shared", limit: 1, value: null })
  );
  service.acquire(open(), 1, "plain", 10_000, null);
  await settle();
  assert.deepEqual(pick(await samples(t.server.opsAddr!), NAMES), {
    "lockd_locks_held": 3,
    "lockd_acquires_total": 6,
    'lockd_lock_owners{kind="exclusive"}': 1,
    'lockd_lock_owners{kind="shared"}': 2,
    'lockd_lock_owners{kind="semaphore"}': 3,
    "lockd_lock_delays_total": 0,
    "lockd_lock_delays_active": 0,
    "lockd_acl_denials_total": 0,
    "lockd_acl_read_denials_total": 0,
  });

  // A force-release ends every owner of the semaphore: each end starts (or extends) the delay.
  assert.equal(service.forceRelease("render/a", TEST_ACTOR).status, "released");
  assert.notEqual(service.checkRead(open(), "secret/x"), null);
  assert.equal(service.checkRead(open(), "reports"), null);
  await settle();
  assert.deepEqual(pick(await samples(t.server.opsAddr!), NAMES), {
    "lockd_locks_held": 2,
    "lockd_acquires_total": 6,
    'lockd_lock_owners{kind="exclusive"}': 1,
    'lockd_lock_owners{kind="shared"}': 2,
    'lockd_lock_owners{kind="semaphore"}': 0,
    "lockd_lock_delays_total": 3,
    "lockd_lock_delays_active": 1,
    "lockd_acl_denials_total": 0,
    "lockd_acl_read_denials_total": 1,
  });
  scheduler.advance(2_000);
  await settle();
  const after = await samples(t.server.opsAddr!);
  assert.equal(after.get("lockd_lock_delays_active"), 0);
  assert.equal(after.get("lockd_lock_delays_total"), 3);
});
