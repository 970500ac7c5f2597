/**
 * `lockd admin show` of an orphaned holder (issue 20): its session line says the connection is
 * gone and the ownership is kept until its lease ends; a connected holder's line is unchanged.
 */

import assert from "node:assert/strict";
import type { LockJson } from "../../src/admin/views.ts";
import { formatLock } from "../../src/cli/admin_text.ts";

const LOCK: LockJson = {
  name: "jobs/nightly",
  holder: {
    identity: "",
    remote_addr: "127.0.0.1:50000",
    since: "2026-01-01T00:00:00.000Z",
    lease_ms: 10_000,
    token: 42,
    client_name: "worker",
    session: 7,
    held_for_ms: 1_000,
  },
  waiters: [],
};

Deno.test("lockd admin show marks an orphaned holder's session as disconnected, and only that", () => {
  const sessionLine = (text: string) => text.split("\n").find((line) => line.startsWith("session"));
  assert.match(sessionLine(formatLock(LOCK))!, /^session\s+7$/);
  const orphaned = { ...LOCK, holder: { ...LOCK.holder!, connected: false as const } };
  assert.match(
    sessionLine(formatLock(orphaned))!,
    /^session\s+7 \(disconnected: kept until its lease ends\)$/,
  );
});
