// The lock contract of the TypeScript client, written once in plain JavaScript so that the
// same file runs under Deno (against mod.ts, tests/client/contract_test.ts), under Node and
// under Bun (against the installed npm package, npm/test/contract.test.mjs). Each test gets
// its own real lockd server on port 0 from the runner's `startServer`.
//
// Only node:net and the Web platform (fetch, AbortSignal, performance) are used here, which
// all three runtimes implement.

import assert from "node:assert/strict";
import net from "node:net";

/**
 * @typedef {object} TestServer
 * @property {string} addr protocol host:port
 * @property {string} adminAddr admin API host:port
 * @property {() => Promise<void>} close
 */

/**
 * @typedef {object} ContractEnv
 * @property {(name: string, fn: () => Promise<void>) => void} test
 * @property {any} lockd the client module (mod.ts or the npm package)
 * @property {(options?: { mtls?: boolean }) => Promise<TestServer>} startServer
 * @property {{ ca: string, cert: string, key: string }} tls PEM text: the CA of the server
 *   certificate, and a client certificate with URI SAN spiffe://example.org/worker
 */

/** @param {ContractEnv} env */
export function lockContract({ test, lockd, startServer, tls }) {
  const { connect, LockdError, ConnectionError } = lockd;

  /** Runs `fn` with a fresh server and closes everything it opened. */
  function withServer(options, fn) {
    return async () => {
      const server = await startServer(options);
      const opened = [];
      const open = async (connectOptions = {}) => {
        const client = await connect({ addr: server.addr, ...connectOptions });
        opened.push(client);
        return client;
      };
      try {
        await fn({ server, open });
      } finally {
        for (const client of opened) await client.close();
        await server.close();
      }
    };
  }

  test(
    "acquire gives an owned lock with a 64-bit fencing token; release frees it",
    withServer({}, async ({ open }) => {
      const a = await open();
      const b = await open();
      const lock = await a.acquire("contract/acquire", { leaseMs: 10_000 });
      assert.equal(lock.name, "contract/acquire");
      assert.equal(lock.leaseMs, 10_000);
      assert.ok(Number.isSafeInteger(lock.token) && lock.token > 2 ** 32, String(lock.token));
      assert.equal(lock.lost.aborted, false);
      assert.equal(await b.tryAcquire("contract/acquire"), null);
      await lock.release();
      const again = await b.tryAcquire("contract/acquire");
      assert.ok(again !== null && again.token > lock.token);
      await again.release();
    }),
  );

  test(
    "waiters are granted in FIFO order with growing tokens",
    withServer({}, async ({ server, open }) => {
      const holder = await open();
      const clients = [await open(), await open(), await open()];
      const first = await holder.acquire("contract/fifo");
      const granted = [];
      const waits = [];
      for (const [i, client] of clients.entries()) {
        waits.push(
          client.acquire("contract/fifo").then((lock) => {
            granted.push([i, lock.token]);
            return lock.release();
          }),
        );
        await waitForWaiters(server, "contract/fifo", i + 1);
      }
      await first.release();
      await Promise.all(waits);
      assert.deepEqual(granted.map(([i]) => i), [0, 1, 2]);
      const tokens = [first.token, ...granted.map(([, token]) => token)];
      assert.ok(tokens.every((token, i) => i === 0 || token > tokens[i - 1]), String(tokens));
    }),
  );

  test(
    "try-lock resolves to null while the lock is held",
    withServer({}, async ({ open }) => {
      const a = await open();
      const b = await open();
      const lock = await a.acquire("contract/try");
      assert.equal(await b.tryAcquire("contract/try"), null);
      await lock.release();
      const free = await b.tryAcquire("contract/try");
      assert.ok(free !== null);
      await free.release();
    }),
  );

  test(
    "a wait bound rejects with a retryable WAIT_TIMEOUT and leaves the queue",
    withServer({}, async ({ server, open }) => {
      const a = await open();
      const b = await open();
      const lock = await a.acquire("contract/wait");
      const started = performance.now();
      await assert.rejects(b.acquire("contract/wait", { waitMs: 200 }), (error) => {
        assert.ok(error instanceof LockdError);
        assert.equal(error.code, 0x07);
        assert.equal(error.codeName, "WAIT_TIMEOUT");
        assert.equal(error.retryable, true);
        return true;
      });
      assert.ok(performance.now() - started >= 190);
      await waitForWaiters(server, "contract/wait", 0);
      await lock.release();
    }),
  );

  test(
    "the wait bound holds on the client's clock when the server's answer does not come",
    withServer({}, async ({ server }) => {
      const proxy = await stallingProxy(server.addr);
      try {
        const client = await connect({ addr: proxy.addr, reconnect: false });
        try {
          proxy.stall(); // the ACQUIRE never reaches the server, no answer ever comes back
          const started = performance.now();
          await assert.rejects(client.acquire("contract/late", { waitMs: 300 }), (error) => {
            assert.ok(error instanceof LockdError);
            assert.equal(error.codeName, "WAIT_TIMEOUT");
            return true;
          });
          const elapsedMs = performance.now() - started;
          assert.ok(elapsedMs >= 290 && elapsedMs < 5_000, `rejected after ${elapsedMs} ms`);
        } finally {
          await client.close();
        }
      } finally {
        await proxy.close();
      }
    }),
  );

  test(
    "a lease the server expires reports lost with reason expired, and the waiter gets a larger token",
    withServer({}, async ({ open }) => {
      // A clock that stops: no heartbeat leaves and no local deadline passes, as in a client
      // paused by a debugger; the server's LEASE_EXPIRED is what ends the ownership.
      const scheduler = stoppableScheduler();
      const paused = await open({ scheduler });
      const waiter = await open();
      const lock = await paused.acquire("contract/expire", { leaseMs: 200 });
      const lost = lostReason(lock);
      scheduler.stop();
      const next = await waiter.acquire("contract/expire");
      assert.equal(await lost, "expired");
      assert.ok(next.token > lock.token);
      await next.release();
    }),
  );

  test(
    "a force-release reports lost with reason force, and a waiting claim of the same client rejoins the queue",
    withServer({}, async ({ server, open }) => {
      const a = await open();
      const b = await open();
      const other = await b.acquire("contract/other");
      const owned = await a.acquire("contract/forced");
      const lost = lostReason(owned);
      const waiting = a.acquire("contract/other");
      await waitForWaiters(server, "contract/other", 1);
      const response = await fetch(
        `http://${server.adminAddr}/api/locks/${encodeURIComponent("contract/forced")}/release`,
        { method: "POST" },
      );
      assert.equal(response.status, 200, await response.text());
      assert.equal(await lost, "force");
      // The client reconnects and queues again for what it was waiting for.
      await waitForWaiters(server, "contract/other", 1);
      await other.release();
      const rejoined = await waiting;
      assert.ok(rejoined.token > other.token);
      await rejoined.release();
    }),
  );

  test(
    "over a path that stalls without closing, lost (lease_unconfirmed) fires before the next waiter is granted",
    withServer({}, async ({ server, open }) => {
      const proxy = await stallingProxy(server.addr);
      try {
        const holder = await connect({ addr: proxy.addr, reconnect: false });
        try {
          const waiter = await open();
          const lock = await holder.acquire("contract/stall", { leaseMs: 300 });
          let lostAt = Infinity;
          const lost = lostReason(lock).then((reason) => {
            lostAt = performance.now();
            return reason;
          });
          const next = waiter.acquire("contract/stall").then((granted) => {
            const grantedAt = performance.now();
            return { granted, grantedAt };
          });
          await waitForWaiters(server, "contract/stall", 1);
          proxy.stall();
          const { granted, grantedAt } = await next;
          assert.equal(await lost, "lease_unconfirmed");
          assert.ok(lostAt < grantedAt, `lost at ${lostAt}, next grant seen at ${grantedAt}`);
          await granted.release();
        } finally {
          await holder.close();
        }
      } finally {
        await proxy.close();
      }
    }),
  );

  test(
    "mutual TLS: a client certificate gets a session, and its identity holds the lock",
    withServer({ mtls: true }, async ({ server }) => {
      const port = server.addr.slice(server.addr.lastIndexOf(":") + 1);
      const client = await connect({
        addr: `127.0.0.1:${port}`,
        tls: { ca: tls.ca, cert: tls.cert, key: tls.key, serverName: "localhost" },
      });
      try {
        const lock = await client.acquire("contract/mtls");
        const response = await fetch(
          `http://${server.adminAddr}/api/locks/${encodeURIComponent("contract/mtls")}`,
        );
        const view = await response.json();
        assert.equal(view.holder.identity, "spiffe://example.org/worker");
        assert.equal(view.holder.token, lock.token);
        await lock.release();
      } finally {
        await client.close();
      }
      // Without a client certificate the server refuses the handshake.
      await assert.rejects(
        connect({ addr: `127.0.0.1:${port}`, tls: { ca: tls.ca, serverName: "localhost" } }),
        ConnectionError,
      );
    }),
  );

  test("connect() gives up after connectTimeoutMs when the server never answers", async () => {
    const mute = net.createServer(() => {});
    await new Promise((resolve) => mute.listen(0, "127.0.0.1", resolve));
    const sockets = new Set();
    mute.on("connection", (socket) => sockets.add(socket));
    try {
      const started = performance.now();
      await assert.rejects(
        connect({ addr: `127.0.0.1:${mute.address().port}`, connectTimeoutMs: 300 }),
        (error) => {
          assert.ok(error instanceof ConnectionError);
          assert.match(error.message, /no WELCOME within 300 ms/);
          return true;
        },
      );
      assert.ok(performance.now() - started >= 290);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => mute.close(resolve));
    }
  });

  test(
    "a leader publishes its address; query and observe show it, its changes and its end",
    withServer({}, async ({ open }) => {
      const leader = await open();
      const follower = await open();
      const text = (bytes) => new TextDecoder().decode(bytes);
      const lock = await leader.acquire("contract/leader", { value: "10.0.0.7:8080" });
      const state = await follower.query("contract/leader");
      assert.equal(state.holder.token, lock.token);
      assert.equal(text(state.holder.value), "10.0.0.7:8080");
      const seen = [];
      for await (const s of follower.observe("contract/leader")) {
        seen.push([s.event, s.reason, s.holder === null ? null : text(s.holder.value)]);
        if (s.event === "state") await lock.setValue("10.0.0.7:9090");
        else if (s.event === "value") await lock.release();
        else break;
      }
      assert.deepEqual(seen, [
        ["state", null, "10.0.0.7:8080"],
        ["value", null, "10.0.0.7:9090"],
        ["ended", "graceful", null],
      ]);
      assert.equal((await follower.query("contract/leader")).holder, null);
    }),
  );

  test(
    "a semaphore grants slots; a shared grant carries the writer's token",
    withServer({}, async ({ open }) => {
      const [a, b] = [await open(), await open()];
      const one = await a.acquire("contract/render", { limit: 2 });
      const two = await b.acquire("contract/render", { limit: 2 });
      assert.deepEqual([one.slot, two.slot].sort(), [0, 1]);
      const writer = await a.acquire("contract/report");
      const reading = b.acquire("contract/report", { mode: "shared" });
      await writer.release();
      const reader = await reading;
      assert.deepEqual([reader.mode, reader.writeGeneration], ["shared", writer.token]);
    }),
  );
}

/** Resolves with the lost reason once `lock.lost` fires. */
function lostReason(lock) {
  return new Promise((resolve) => {
    lock.lost.addEventListener("abort", () => resolve(lock.lost.reason.reason), { once: true });
  });
}

/** Polls the admin API until `name` has `count` waiters. */
async function waitForWaiters(server, name, count) {
  const deadline = performance.now() + 10_000;
  for (;;) {
    const response = await fetch(
      `http://${server.adminAddr}/api/locks/${encodeURIComponent(name)}`,
    );
    const waiters = response.status === 200 ? (await response.json()).waiters.length : 0;
    if (response.status !== 200) await response.body?.cancel();
    if (waiters === count) return;
    if (performance.now() > deadline) {
      throw new Error(`"${name}" never had ${count} waiters (has ${waiters})`);
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * A scheduler (the client's `scheduler` testing hook) whose clock and timers can be stopped:
 * after `stop()` time stands still and no timer runs.
 */
function stoppableScheduler() {
  let stoppedAt = null;
  const handles = new Set();
  return {
    monotonicMs: () => stoppedAt ?? performance.now(),
    wallMs: () => Date.now(),
    setTimer(callback, delayMs) {
      if (stoppedAt !== null) return { cancel() {} };
      const handle = setTimeout(() => {
        handles.delete(handle);
        if (stoppedAt === null) callback();
      }, Math.max(0, delayMs));
      handles.add(handle);
      return {
        cancel() {
          clearTimeout(handle);
          handles.delete(handle);
        },
      };
    },
    stop() {
      stoppedAt = performance.now();
      for (const handle of handles) clearTimeout(handle);
      handles.clear();
    },
  };
}

/** A TCP proxy on port 0 that can stop forwarding in both directions without closing. */
async function stallingProxy(target) {
  const at = target.lastIndexOf(":");
  const host = target.slice(0, at);
  const port = Number(target.slice(at + 1));
  let stalled = false;
  const sockets = new Set();
  const server = net.createServer((inbound) => {
    const outbound = net.connect({ host, port });
    for (const socket of [inbound, outbound]) {
      sockets.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => sockets.delete(socket));
    }
    inbound.on("data", (bytes) => stalled || outbound.write(bytes));
    outbound.on("data", (bytes) => stalled || inbound.write(bytes));
    inbound.on("close", () => outbound.destroy());
    outbound.on("close", () => inbound.destroy());
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    addr: `127.0.0.1:${server.address().port}`,
    stall() {
      stalled = true;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
