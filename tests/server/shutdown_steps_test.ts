/**
 * docs/operations.md's "Shutdown sequence" names the steps of the ordered shutdown
 * (src/server/shutdown.ts); a real shutdown logs each step by name as it begins. The two lists
 * must be the same, in the same order.
 */

import assert from "node:assert/strict";
import { ManualScheduler } from "../../src/clock.ts";
import { captureDiagnosticLog } from "../log/capture.ts";
import { startTestServer } from "../helpers/start_server.ts";

/** The step names of each item of the documented sequence, in order. */
async function documentedSteps(): Promise<string[][]> {
  const text = await Deno.readTextFile(new URL("../../docs/operations.md", import.meta.url));
  const section = text.split(/^## Shutdown sequence$/m)[1].split(/^## /m)[0];
  const items = section.split(/^\d+\. /m).slice(1);
  assert.ok(items.length > 0, "the section has a numbered list");
  return items.map((item) => {
    const steps = item.match(/Steps?:\s+((?:`[a-z-]+`(?:,\s+)?)+)\./);
    assert.ok(steps !== null, `no "Step: ..." in: ${item.slice(0, 80)}`);
    return [...steps[1].matchAll(/`([a-z-]+)`/g)].map((m) => m[1]);
  });
}

/** The steps a real shutdown logs, in order. */
async function loggedSteps(
  config: Parameters<typeof startTestServer>[0],
): Promise<{ steps: string[]; messages: string[] }> {
  using captured = captureDiagnosticLog("debug", "json");
  const scheduler = new ManualScheduler();
  const t = await startTestServer({ ...config, shutdownGraceMs: 0 }, { scheduler });
  await t.server.shutdown();
  const records = captured.records();
  return {
    steps: records.filter((r) => r.message === "shutdown step").map((r) => String(r.step)),
    messages: records.map((r) => String(r.message)),
  };
}

Deno.test("docs/operations.md names every shutdown step, in the order a shutdown runs them", async () => {
  const documented = (await documentedSteps()).flat();
  const { steps, messages } = await loggedSteps({
    adminListen: "127.0.0.1:0",
    opsListen: "127.0.0.1:0",
  });
  assert.deepEqual(documented, steps);
  assert.equal(new Set(steps).size, steps.length, "step names are unique");
  assert.equal(messages.at(-1), "shutdown complete");
});

Deno.test("a step with nothing to do (no admin API, no ops server, one node) is still logged", async () => {
  const { steps } = await loggedSteps({});
  assert.deepEqual(steps, (await documentedSteps()).flat());
});
