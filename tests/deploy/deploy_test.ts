/**
 * Checks of the operations kit: the Grafana dashboard, the Prometheus alert rules and their
 * unit tests, and the runbook anchors in docs/operations.md. promtool and systemd-analyze run
 * in .ci/deploy_checks.sh; this file needs only Deno.
 */
import assert from "node:assert/strict";
import {
  CLUSTER_FAMILIES,
  CLUSTER_LABEL_VALUES,
  EXPECTED_FAMILIES,
  EXPECTED_LABEL_VALUES,
  familiesInExposition,
  familyOf,
  metricFamilies,
} from "./metric_names.ts";

const ROOT = new URL("../../", import.meta.url);
const read = (path: string) => Deno.readTextFileSync(new URL(path, ROOT));

const DASHBOARD = "deploy/grafana/lockd-dashboard.json";
const ALERTS = "deploy/prometheus/lockd-alerts.yml";
const ALERT_TESTS = "deploy/prometheus/lockd-alerts.test.yml";
const RUNBOOK = "docs/operations.md";
const RUNBOOK_URL_PREFIX = "https://github.com/lockd/lockd/blob/main/docs/operations.md#";

// ---------------------------------------------------------------------------------------
// Dashboard

interface Target {
  expr?: string;
  refId?: string;
}
interface Panel {
  type?: string;
  title?: string;
  datasource?: { type?: string; uid?: string } | string | null;
  targets?: Target[];
  panels?: Panel[];
}

function dashboardPanels(): Panel[] {
  const dashboard = JSON.parse(read(DASHBOARD));
  const out: Panel[] = [];
  const walk = (panels: Panel[] | undefined) => {
    for (const panel of panels ?? []) {
      if (panel.type === "row") walk(panel.panels); // rows only group; collapsed rows nest
      else out.push(panel);
    }
  };
  walk(dashboard.panels);
  return out;
}

Deno.test("dashboard: valid JSON with a Prometheus datasource variable", () => {
  const dashboard = JSON.parse(read(DASHBOARD));
  assert.equal(typeof dashboard.title, "string");
  assert.equal(typeof dashboard.uid, "string");
  assert.ok(dashboard.schemaVersion >= 36, `schemaVersion ${dashboard.schemaVersion}`);
  const vars: { name: string; type: string; query: unknown }[] = dashboard.templating.list;
  const ds = vars.find((v) => v.name === "datasource");
  assert.ok(ds, "templating variable 'datasource'");
  assert.equal(ds.type, "datasource");
  assert.equal(ds.query, "prometheus");
  for (const v of vars.filter((v) => v.type === "query")) {
    const q = v.query as string | { query: string };
    for (const family of metricFamilies(typeof q === "string" ? q : q.query)) {
      assert.ok(EXPECTED_FAMILIES.includes(family), `variable ${v.name} uses unknown ${family}`);
    }
  }
});

Deno.test("dashboard: every panel has a title, a datasource and targets", () => {
  const panels = dashboardPanels();
  assert.ok(panels.length >= 10, `only ${panels.length} panels`);
  const ids = new Set<unknown>();
  for (const panel of panels) {
    const p = panel as Panel & { id?: number };
    assert.ok(typeof panel.title === "string" && panel.title.trim() !== "", "panel without title");
    assert.ok(!ids.has(p.id), `duplicate panel id ${p.id}`);
    ids.add(p.id);
    const ds = panel.datasource;
    assert.ok(ds && typeof ds === "object", `${panel.title}: no datasource`);
    assert.equal(ds.type, "prometheus", `${panel.title}: datasource type`);
    assert.equal(ds.uid, "${datasource}", `${panel.title}: datasource uid`);
    assert.ok((panel.targets ?? []).length >= 1, `${panel.title}: no targets`);
    for (const target of panel.targets!) {
      assert.ok(typeof target.expr === "string" && target.expr.trim() !== "", panel.title);
      // Each query shows a lockd metric, or `up` (added by Prometheus' scrape).
      assert.ok(
        metricFamilies(target.expr).size >= 1 || /^up\{/.test(target.expr),
        `${panel.title}: ${target.expr}`,
      );
    }
  }
});

Deno.test("dashboard: every metric used is an expected family", () => {
  const used = new Set<string>();
  for (const panel of dashboardPanels()) {
    for (const target of panel.targets ?? []) {
      for (const family of metricFamilies(target.expr ?? "")) {
        assert.ok(
          EXPECTED_FAMILIES.includes(family),
          `panel "${panel.title}" uses ${family}, which is not in EXPECTED_FAMILIES`,
        );
        used.add(family);
      }
    }
  }
  // The panels the operator contract asks for.
  for (
    const family of [
      "lockd_connections_active",
      "lockd_locks_held",
      "lockd_waiters",
      "lockd_acquires_total",
      "lockd_releases_total",
      "lockd_wait_seconds",
      "lockd_hold_seconds",
      "lockd_protocol_errors_total",
      "lockd_accept_errors_total",
      "lockd_tls_handshake_errors_total",
      "process_resident_memory_bytes",
      "deno_heap_used_bytes",
      "deno_event_loop_lag_seconds",
    ]
  ) {
    assert.ok(used.has(family), `no panel shows ${family}`);
  }
});

// ---------------------------------------------------------------------------------------
// Alert rules (read line by line: the file keeps each field on one line, see its header)

interface AlertRule {
  name: string;
  expr: string;
  forDuration?: string;
  severity?: string;
  summary?: string;
  description?: string;
  runbookUrl?: string;
}

function unquote(value: string): string {
  const v = value.trim();
  if (v.length >= 2 && (v[0] === '"' || v[0] === "'") && v.at(-1) === v[0]) {
    return v.slice(1, -1);
  }
  return v;
}

function parseAlertRules(text: string): AlertRule[] {
  const rules: AlertRule[] = [];
  let current: AlertRule | undefined;
  for (const raw of text.split("\n")) {
    const line = raw.replace(/\s+$/, "");
    if (/^\s*#/.test(line) || line.trim() === "") continue;
    const m = /^\s*(?:-\s+)?([a-z_]+):\s*(.*)$/.exec(line);
    if (!m) continue;
    const [, key, value] = m;
    if (key === "alert") {
      current = { name: unquote(value), expr: "" };
      rules.push(current);
      continue;
    }
    if (key === "record") current = undefined;
    if (!current) continue;
    assert.ok(
      !/^[|>][-+]?$/.test(value.trim()),
      `${current.name}: ${key} uses a block scalar; keep it on one line`,
    );
    switch (key) {
      case "expr":
        current.expr = unquote(value);
        break;
      case "for":
        current.forDuration = unquote(value);
        break;
      case "severity":
        current.severity = unquote(value);
        break;
      case "summary":
        current.summary = unquote(value);
        break;
      case "description":
        current.description = unquote(value);
        break;
      case "runbook_url":
        current.runbookUrl = unquote(value);
        break;
    }
  }
  return rules;
}

const REQUIRED_ALERTS = [
  "LockdDown",
  "LockdLeaseExpiries",
  "LockdAcceptErrors",
  "LockdAclDenials",
  "LockdWaitersHigh",
  "LockdWaitTimeHigh",
];

Deno.test("alerts: line-based parse finds every rule with all fields", () => {
  const text = read(ALERTS);
  const rules = parseAlertRules(text);
  const names = rules.map((r) => r.name);
  // Cross-check the line-based parse: one `alert:` and one `expr:` line per rule.
  assert.equal(rules.length, (text.match(/^\s*-\s+alert:/gm) ?? []).length);
  assert.equal(rules.length, (text.match(/^\s*expr:/gm) ?? []).length);
  assert.equal(new Set(names).size, names.length, "duplicate alert names");
  for (const name of REQUIRED_ALERTS) assert.ok(names.includes(name), `missing alert ${name}`);
  for (const rule of rules) {
    assert.ok(rule.expr !== "", `${rule.name}: expr`);
    assert.ok(
      ["critical", "warning", "info"].includes(rule.severity ?? ""),
      `${rule.name}: severity ${rule.severity}`,
    );
    assert.ok(rule.summary, `${rule.name}: summary`);
    assert.ok(rule.description, `${rule.name}: description`);
    assert.ok(rule.runbookUrl, `${rule.name}: runbook_url`);
  }
});

Deno.test("alerts: expressions use expected metric families only", () => {
  for (const rule of parseAlertRules(read(ALERTS))) {
    const families = metricFamilies(rule.expr);
    if (rule.name !== "LockdDown") assert.ok(families.size >= 1, `${rule.name}: ${rule.expr}`);
    for (const family of families) {
      assert.ok(
        EXPECTED_FAMILIES.includes(family) || CLUSTER_FAMILIES.includes(family),
        `${rule.name} uses unknown ${family}`,
      );
    }
    // Label values the rules depend on must be ones the server emits.
    for (
      const [family, labels] of Object.entries({
        ...EXPECTED_LABEL_VALUES,
        ...CLUSTER_LABEL_VALUES,
      })
    ) {
      if (!families.has(family)) continue;
      for (const [label, values] of Object.entries(labels)) {
        for (const m of rule.expr.matchAll(new RegExp(`\\b${label}="([^"]*)"`, "g"))) {
          assert.ok(values.includes(m[1]), `${rule.name}: ${label}="${m[1]}"`);
        }
      }
    }
  }
  const byName = new Map(parseAlertRules(read(ALERTS)).map((r) => [r.name, r]));
  assert.match(byName.get("LockdDown")!.expr, /^up\{job="lockd"\} == 0$/);
  assert.equal(byName.get("LockdDown")!.forDuration, "1m");
  assert.match(byName.get("LockdLeaseExpiries")!.expr, /lockd_releases_total\{reason="expired"\}/);
  assert.match(byName.get("LockdWaitersHigh")!.expr, /lockd_waiters > 100/);
  assert.match(byName.get("LockdWaitTimeHigh")!.expr, /lockd_wait_seconds_sum.*\/.*_count/);
});

/** GitHub's heading anchors: lowercase, drop punctuation except `-` and `_`, spaces → `-`. */
function githubAnchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M} _-]/gu, "")
    .replace(/ /g, "-");
}

function markdownAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of markdown.split("\n")) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    if (fenced) continue;
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const base = githubAnchor(m[1].replace(/`/g, ""));
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

Deno.test("githubAnchor follows GitHub's rules", () => {
  assert.equal(githubAnchor("LockdLeaseExpiries"), "lockdleaseexpiries");
  assert.equal(githubAnchor("Rotating TLS certificates"), "rotating-tls-certificates");
  assert.equal(githubAnchor("Upgrading (without lower tokens)!"), "upgrading-without-lower-tokens");
  assert.equal(githubAnchor("Deploying with systemd/Docker"), "deploying-with-systemddocker");
  assert.equal(githubAnchor("a_b - c"), "a_b---c");
  const anchors = markdownAnchors("# X\n## Same\n```\n# not a heading\n```\n### Same\n");
  assert.deepEqual([...anchors], ["x", "same", "same-1"]);
});

Deno.test("alerts: every runbook_url points at a heading of docs/operations.md", () => {
  const anchors = markdownAnchors(read(RUNBOOK));
  for (const rule of parseAlertRules(read(ALERTS))) {
    const url = rule.runbookUrl ?? "";
    assert.ok(url.startsWith(RUNBOOK_URL_PREFIX), `${rule.name}: ${url}`);
    const anchor = url.slice(RUNBOOK_URL_PREFIX.length);
    assert.ok(anchors.has(anchor), `${rule.name}: no heading for #${anchor} in ${RUNBOOK}`);
    assert.equal(anchor, githubAnchor(rule.name), `${rule.name}: runbook anchor is the alert name`);
  }
});

Deno.test("runbook: links inside the Runbook section point at existing headings", () => {
  const markdown = read(RUNBOOK);
  const anchors = markdownAnchors(markdown);
  const start = markdown.search(/^## Runbook\s*$/m);
  assert.ok(start >= 0, "no '## Runbook' section");
  const rest = markdown.slice(start + 1);
  const next = rest.search(/^## /m);
  const section = next < 0 ? rest : rest.slice(0, next);
  const links = [...section.matchAll(/\]\(#([^)\s]+)\)/g)].map((m) => m[1]);
  assert.ok(links.length > 0);
  for (const link of links) assert.ok(anchors.has(link), `broken runbook link #${link}`);
});

Deno.test("alert tests: every alert has a firing and a silent promtool case", () => {
  const rules = parseAlertRules(read(ALERTS)).map((r) => r.name);
  const firing = new Set<string>();
  const silent = new Set<string>();
  let current: string | undefined;
  for (const line of read(ALERT_TESTS).split("\n")) {
    const name = /^\s*alertname:\s*(\S+)\s*$/.exec(line);
    if (name) {
      current = unquote(name[1]);
      continue;
    }
    const exp = /^\s*exp_alerts:\s*(.*)$/.exec(line);
    if (exp && current) {
      (exp[1].trim() === "[]" ? silent : firing).add(current);
      current = undefined;
    }
  }
  for (const rule of rules) {
    assert.ok(firing.has(rule), `${ALERT_TESTS}: no case where ${rule} fires`);
    assert.ok(silent.has(rule), `${ALERT_TESTS}: no case where ${rule} stays silent`);
  }
  for (const name of [...firing, ...silent]) assert.ok(rules.includes(name), `unknown ${name}`);
});

// ---------------------------------------------------------------------------------------
// Metric name helpers

Deno.test("metricFamilies maps samples to families and skips strings", () => {
  assert.deepEqual(
    [...metricFamilies(
      'sum(rate(lockd_wait_seconds_sum{job="lockd_x"}[5m])) / rate(lockd_wait_seconds_count[5m])',
    )],
    ["lockd_wait_seconds"],
  );
  assert.deepEqual(
    [...metricFamilies("process_resident_memory_bytes + deno_heap_used_bytes")].sort(),
    ["deno_heap_used_bytes", "process_resident_memory_bytes"],
  );
  assert.deepEqual([...metricFamilies('up{job="lockd"} == 0')], []);
  assert.equal(familyOf("lockd_releases_total"), "lockd_releases_total");
  assert.equal(familyOf("lockd_hold_seconds_count"), "lockd_hold_seconds");
});

Deno.test("familiesInExposition reads # TYPE lines", () => {
  const text = [
    "# HELP lockd_waiters Waiting claims.",
    "# TYPE lockd_waiters gauge",
    "lockd_waiters 3",
    "# TYPE lockd_wait_seconds summary",
    "lockd_wait_seconds_sum 1.5",
    "lockd_wait_seconds_count 2",
    "",
  ].join("\n");
  assert.deepEqual(
    [...familiesInExposition(text)],
    [["lockd_waiters", "gauge"], ["lockd_wait_seconds", "summary"]],
  );
  assert.equal(new Set(EXPECTED_FAMILIES).size, EXPECTED_FAMILIES.length);
  for (const family of EXPECTED_FAMILIES) assert.equal(familyOf(family), family);
});

// ---------------------------------------------------------------------------------------
// Container image

Deno.test("the image's health check reaches the ops listener over loopback, which remote clients cannot crowd out", () => {
  const dockerfile = read("Dockerfile");
  const check = /^HEALTHCHECK .*\\\n\s*CMD (\[.*\])$/m.exec(dockerfile);
  assert.ok(check !== null, "a HEALTHCHECK with an exec-form CMD");
  const checkArgs: string[] = JSON.parse(check[1]);
  assert.deepEqual(checkArgs.slice(1, 2), ["health"]);
  const ops = checkArgs[checkArgs.indexOf("-ops") + 1];
  assert.match(ops, /^127\.0\.0\.1:\d+$/, "over the container's loopback");
  const cmd = /^CMD (\[.*\])$/m.exec(dockerfile);
  const serveArgs: string[] = JSON.parse(cmd![1]);
  const opsListen = serveArgs[serveArgs.indexOf("-ops-listen") + 1];
  // The same listener Prometheus scrapes from outside: its loopback connections are kept room
  // for (src/http/listen.ts, tests/http/listen_test.ts "local connection").
  assert.equal(opsListen.split(":").pop(), ops.split(":").pop());
});
