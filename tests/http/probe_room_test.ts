/**
 * Issue 19 item 2 on a real server: idle keep-alive connections (each sent one request: on the
 * admin API a 401 counts) and slowloris heads cannot lock out `/healthz` or an operator with the
 * token; and a burst of scrapes past the cap gets an HTTP answer on every connection, never a
 * bare close.
 */

import assert from "node:assert/strict";
import { RawHttp } from "../helpers/raw_http.ts";
import { startTestServer } from "../helpers/start_server.ts";
import { assertProblem } from "../helpers/problem.ts";

const CAP = 16;
const TOKEN = "probe-room-token";
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One request on a fresh connection; the status, or the reason there was none, within 1 s. */
async function statusWithin1s(addr: string, request: string): Promise<number | string> {
  let client: RawHttp | null = null;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<string>((resolve) => {
    timer = setTimeout(() => resolve("no answer within 1 s"), 1_000);
  });
  try {
    return await Promise.race([
      (async () => {
        client = await RawHttp.connect(addr);
        await client.send(request);
        return (await client.response()).status;
      })().catch((error) => String(error)),
      deadline,
    ]);
  } finally {
    clearTimeout(timer);
    (client as RawHttp | null)?.close();
  }
}

/** Opens a connection, sends one request, reads its answer, and keeps the connection open. */
async function idleKeepAlive(addr: string, request: string): Promise<RawHttp | null> {
  try {
    const client = await RawHttp.connect(addr);
    await client.send(request);
    await client.response();
    return client;
  } catch {
    return null; // evicted before it was answered (then it got a 503), or reset
  }
}

Deno.test("10x the cap of idle keep-alive connections plus a slowloris: /healthz and an operator with the token get 200 within 1 s throughout", async () => {
  const dir = await Deno.makeTempDir();
  const held: RawHttp[] = [];
  try {
    await Deno.writeTextFile(`${dir}/token`, TOKEN);
    await using t = await startTestServer({
      adminListen: "127.0.0.1:0",
      opsListen: "127.0.0.1:0",
      adminTokenFile: `${dir}/token`,
      httpConnectionsMax: CAP,
    });
    const ops = t.server.opsAddr!;
    const admin = t.server.adminAddr!;
    const scrape = "GET /metrics HTTP/1.1\r\nHost: lockd\r\n\r\n";
    const unauthorised = "GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    const healthz = "GET /healthz HTTP/1.1\r\nHost: lockd\r\n\r\n";
    const operator =
      `GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`;

    // 10x the cap of idle keep-alive connections on each listener.
    for (let i = 0; i < 10 * CAP; i++) {
      for (const [addr, request] of [[ops, scrape], [admin, unauthorised]]) {
        const client = await idleKeepAlive(addr, request);
        if (client !== null) held.push(client);
      }
    }
    // Slowloris heads on both, a byte every 100 ms.
    const loris: RawHttp[] = [];
    for (let i = 0; i < CAP; i++) {
      for (const addr of [ops, admin]) {
        const client = await RawHttp.connect(addr);
        await client.send("GET /slow");
        loris.push(client);
      }
    }
    held.push(...loris);
    let attacking = true;
    const attack = (async () => {
      while (attacking) {
        for (const client of loris) await client.send("x").catch(() => {});
        // And new idle keep-alive connections keep coming.
        for (const [addr, request] of [[ops, scrape], [admin, unauthorised]]) {
          const client = await idleKeepAlive(addr, request);
          if (client !== null) held.push(client);
        }
        await sleep(100);
      }
    })();
    const failures: string[] = [];
    try {
      for (let round = 0; round < 20; round++) {
        const [probe, op] = await Promise.all([
          statusWithin1s(ops, healthz),
          statusWithin1s(admin, operator),
        ]);
        if (probe !== 200) failures.push(`round ${round}: /healthz ${probe}`);
        if (op !== 200) failures.push(`round ${round}: operator ${op}`);
        await sleep(100);
      }
    } finally {
      attacking = false;
      await attack;
    }
    assert.deepEqual(failures, []);
    const stats = t.server.context.counters.http;
    assert.ok(stats.ops.dropped.evicted >= 9 * CAP, `ops evictions ${stats.ops.dropped.evicted}`);
    assert.ok(
      stats.admin.dropped.evicted >= 9 * CAP,
      `admin evictions ${stats.admin.dropped.evicted}`,
    );
  } finally {
    for (const client of held) client.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("400 concurrent scrapes of /metrics at the default cap each get an HTTP answer", async () => {
  await using t = await startTestServer({ opsListen: "127.0.0.1:0" });
  const ops = t.server.opsAddr!;
  const outcomes = await Promise.all(Array.from({ length: 400 }, async () => {
    let client: RawHttp | null = null;
    try {
      client = await RawHttp.connect(ops);
      await client.send("GET /metrics HTTP/1.1\r\nHost: lockd\r\n\r\n");
      const answer = await client.response();
      if (answer.status === 503) await assertProblem(answer, 503, "too-many-connections");
      return String(answer.status);
    } catch (error) {
      return `no answer: ${error instanceof Error ? error.message : error}`;
    } finally {
      client?.close();
    }
  }));
  const counts: Record<string, number> = {};
  for (const outcome of outcomes) counts[outcome] = (counts[outcome] ?? 0) + 1;
  const answered = (counts["200"] ?? 0) + (counts["503"] ?? 0);
  assert.equal(answered, 400, JSON.stringify(counts));
  assert.ok((counts["200"] ?? 0) >= 128, JSON.stringify(counts));
});
