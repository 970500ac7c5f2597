/**
 * The TypeScript client against servers of protocol version 2 that lie: the shared scenarios of
 * tests/helpers/hostile_scenarios_v2.ts (also served to the Python client's tests). A version-2
 * reply that does not fit its request, a wrong answer to RESUME or RECLAIM, a WELCOME out of the
 * version-2 bounds: each is a protocol error (the connection closes, it is counted and reported),
 * never a wrong grant, a token the claim did not have, or a crash. Real sockets on 127.0.0.1:0.
 */
import assert from "node:assert/strict";
import { connect, ConnectionError, type Lock, ServerProtocolError } from "../../mod.ts";
import type { LockLostError } from "../../src/client/errors.ts";
import { HostileServer } from "../helpers/hostile_server.ts";
import { TOKEN } from "../helpers/hostile_scenarios.ts";
import {
  BAD_WELCOMES_V2,
  RECLAIM_MISFITS,
  scenariosV2,
  V2_MISFITS,
} from "../helpers/hostile_scenarios_v2.ts";

function lostReason(lock: Lock): string | undefined {
  return lock.lost.aborted ? (lock.lost.reason as LockLostError).reason : undefined;
}

/** Resolves when `check` holds (polling); fails after `timeoutMs`. */
async function until(check: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`Timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const SCENARIOS = scenariosV2();

V2_MISFITS.forEach((misfit, i) => {
  Deno.test(`hostile server, version 2: ${misfit.name} is a protocol error and no grant comes of it`, async () => {
    await using server = new HostileServer(SCENARIOS[`v2-misfit-${i}`]);
    const reported: ServerProtocolError[] = [];
    await using client = await connect({
      addr: server.addr,
      reconnect: false,
      onProtocolError: (e) => reported.push(e),
    });
    assert.equal(client.protocolVersion, 2);
    const owned = await client.acquire("own", { leaseMs: 60_000 });
    await assert.rejects(client.acquire("a"), ConnectionError, "never a wrong grant");
    await until(() => owned.lost.aborted, "the owned lock is lost");
    assert.equal(lostReason(owned), "disconnected", "a protocol error is not carried over");
    assert.equal(client.protocolErrors, 1);
    assert.match(reported[0].message, /broke the protocol: .+; the connection was closed$/);
  });
});

const RECLAIM_EXPECTED: Record<string, string> = {
  "an ACQUIRED re-confirming an owned RECLAIM with another token": `with token ${
    TOKEN + 6
  }, but that RECLAIM`,
  "a QUEUED answering an owned RECLAIM": "which is not an ACQUIRE or queued RECLAIM",
  "a CLAIM_VOID answering a queued RECLAIM": "CLAIM_VOID answers an owned RECLAIM only",
  "a LEASE_EXPIRED for a queued RECLAIM still waiting": "for a RECLAIM still waiting",
  "a LEASE_EXPIRED answering RESUME": "a RESUME is answered RESUMED (or refused)",
  "a RESUMED whose outcome names nothing": "with outcome 7, which names nothing",
  "a second RESUMED": "never sent or had its last answer to already",
  "a RESUMED answering a RECLAIM": "which is not a RESUME",
};

RECLAIM_MISFITS.forEach((misfit, i) => {
  Deno.test(`hostile server, version 2: ${misfit.name} is a protocol error; the lock keeps its token and no wrong grant comes of it`, async () => {
    await using a = new HostileServer(SCENARIOS[`reclaim-a-${i}`]);
    await using b = new HostileServer(SCENARIOS[`reclaim-b-${i}`]);
    const reported: ServerProtocolError[] = [];
    await using client = await connect({
      addrs: [a.addr, b.addr],
      onProtocolError: (e) => reported.push(e),
    });
    const owned = await client.acquire("own", { leaseMs: 60_000 });
    let settled = false;
    const waiting = client.acquire("w", { leaseMs: 60_000 }).then(
      (lock) => lock,
      () => null,
    ).finally(() => settled = true);
    await until(() => a.sent("acquire").some((m) => m.name === "w"), "w queued at A");
    await new Promise((resolve) => setTimeout(resolve, 50)); // its QUEUED arrives
    const crash = client.acquire("crash").catch(() => null);
    await until(() => client.protocolErrors >= 1, "a protocol error at B");
    assert.ok(reported[0].message.includes(RECLAIM_EXPECTED[misfit.name]), reported[0].message);
    assert.equal(reported[0].message.split(b.addr).length - 1, 1, "B broke the protocol");
    assert.equal(owned.token, TOKEN);
    assert.equal(settled, false, "no grant came of it");
    await client.close();
    assert.equal(await waiting, null);
    await crash;
  });
});

BAD_WELCOMES_V2.forEach(([what, , pattern], i) => {
  Deno.test(`hostile server, version 2: a WELCOME with ${what} fails connect() as a protocol error`, async () => {
    await using server = new HostileServer(SCENARIOS[`v2-welcome-${i}`]);
    await assert.rejects(
      connect({ addr: server.addr, reconnect: false, connectTimeoutMs: 2_000 }),
      (error: unknown) => {
        assert.ok(error instanceof ServerProtocolError, String(error));
        assert.match(error.message, pattern);
        return true;
      },
    );
  });
});
