/**
 * `lockd run` waiting for a lock while no node answers says so (issue 19, item 14): one line on
 * standard error every 10 s with the addresses it tries, the attempt and the last error, and
 * nothing while the server answers. In-process, on a manual clock (the client's back-off, its
 * wait bound and the progress timer), against a real server that is then stopped.
 */
import assert from "node:assert/strict";
import { runCommand } from "../../src/cli/run.ts";
import { ManualScheduler } from "../../src/clock.ts";
import { RECONNECT_PROGRESS_INTERVAL_MS } from "../../src/limits.ts";
import { connect } from "../../mod.ts";
import { eventually, startTestServer } from "../helpers/start_server.ts";

/** Moves the manual clock in steps, letting real sockets (a refused dial) answer in between. */
async function advance(clock: ManualScheduler, ms: number, stepMs = 500): Promise<void> {
  for (let done = 0; done < ms; done += stepMs) {
    clock.advance(Math.min(stepMs, ms - done));
    await new Promise((resolve) => setTimeout(resolve, 15));
  }
}

Deno.test("lockd run waiting while no node answers prints one line every 10 s saying what it tries", async () => {
  const t = await startTestServer();
  const clock = new ManualScheduler();
  const lines: string[] = [];
  let status: Promise<number> | null = null;
  try {
    await using holder = await connect({ addr: t.addr });
    await holder.acquire("progress/held");
    status = runCommand(
      ["progress/held", "-addr", t.addr, "-wait", "35s", "--", "true"],
      { stderr: (line) => lines.push(line), scheduler: clock },
    );
    await eventually(
      () => t.server.context.engine.queueLengthOf("progress/held") === 1,
      "lockd run waits in the queue",
    );
    // While the server answers, waiting says nothing.
    await advance(clock, RECONNECT_PROGRESS_INTERVAL_MS);
    assert.equal(lines.length, 0, lines.join("\n"));

    // The server goes away: the client reconnects with back-off, and nothing answers.
    await t.server.shutdown();
    await advance(clock, RECONNECT_PROGRESS_INTERVAL_MS);
    assert.equal(lines.length, 1, lines.join("\n"));
    const line = new RegExp(
      `^lockd run: still waiting for lock "progress/held": no lockd node answers; trying ` +
        `${t.addr.replaceAll(".", "\\.")} \\(attempt (\\d+); last error: Cannot connect to ` +
        `lockd at ${t.addr.replaceAll(".", "\\.")}: connection refused, nothing listens there`,
    );
    const first = Number(line.exec(lines[0])?.[1]);
    assert.ok(first >= 2, `${lines[0]}: several attempts in 10 s`);
    await advance(clock, RECONNECT_PROGRESS_INTERVAL_MS);
    assert.equal(lines.length, 2, lines.join("\n"));
    assert.ok(Number(line.exec(lines[1])?.[1]) > first, lines[1]);

    // -wait runs out on the same clock (at 35 s, before the next line): exit 75, and no
    // progress line after it.
    await advance(clock, 6_000);
    assert.equal(await status, 75);
    assert.match(lines.at(-1)!, /wait timed out after 35000 ms/);
    assert.equal(lines.filter((l) => l.includes("still waiting")).length, 2);
    const before = lines.length;
    await advance(clock, 2 * RECONNECT_PROGRESS_INTERVAL_MS);
    assert.equal(lines.length, before);
  } finally {
    await t.server.shutdown();
    if (status !== null) {
      await advance(clock, 60_000);
      await status;
    }
  }
});
