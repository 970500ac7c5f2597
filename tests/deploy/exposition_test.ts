/**
 * The real `/metrics` of a running server against the operations kit: every
 * family the dashboard and alerts use (EXPECTED_FAMILIES) is exposed, with the
 * label values they rely on, and the text passes `promtool check metrics`.
 * promtool is optional locally (the test is skipped) but required in CI.
 */
import assert from "node:assert/strict";
import { connect } from "../../mod.ts";
import { http } from "../admin/admin_helpers.ts";
import { hasPromtool, promtoolCheckMetrics } from "../helpers/promtool.ts";
import { startTestServer } from "../helpers/start_server.ts";
import { EXPECTED_FAMILIES, EXPECTED_LABEL_VALUES, familiesInExposition } from "./metric_names.ts";

const PROMTOOL = await hasPromtool();
const IN_CI = Deno.env.get("CI") === "true";

async function scrapeBusyServer(): Promise<string> {
  await using t = await startTestServer({ opsListen: "127.0.0.1:0", adminListen: "127.0.0.1:0" });
  await using client = await connect({ addr: t.addr });
  await using other = await connect({ addr: t.addr });
  const lock = await client.acquire("exposition/check");
  assert.equal(await other.tryAcquire("exposition/check"), null); // one protocol error counted
  await lock.release();
  const answer = await http(t.server.opsAddr!, "GET", "/metrics");
  assert.equal(answer.status, 200);
  return answer.text;
}

Deno.test("the real /metrics exposes every family the dashboard and alerts use", async () => {
  const text = await scrapeBusyServer();
  const families = familiesInExposition(text);
  const missing = EXPECTED_FAMILIES.filter((name) => !families.has(name));
  assert.deepEqual(missing, [], `families missing from /metrics:\n${text}`);
  for (const [family, labels] of Object.entries(EXPECTED_LABEL_VALUES)) {
    for (const [label, values] of Object.entries(labels)) {
      for (const value of values) {
        assert.ok(
          text.includes(`${family}{${label}="${value}"}`),
          `${family}{${label}="${value}"} is not exposed`,
        );
      }
    }
  }
});

Deno.test({
  name: "the real /metrics passes promtool check metrics",
  // Skipped only outside CI; in CI a missing promtool fails the test.
  ignore: !PROMTOOL && !IN_CI,
  fn: async () => {
    assert.ok(PROMTOOL, "promtool is not on PATH, but CI=true requires it");
    const text = await scrapeBusyServer();
    const { code, report } = await promtoolCheckMetrics(text);
    assert.equal(code, 0, `promtool check metrics failed:\n${report}\n--- exposition ---\n${text}`);
    assert.equal(report.trim(), "", `promtool reported problems:\n${report}`);
  },
});
