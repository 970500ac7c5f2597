/**
 * Every dashboard panel has data under the permissions lockd ships with
 * (issue 13.6): the compiled binary, `deno task start`, the systemd unit and
 * the Docker image all run with --allow-net --allow-read --allow-write, never
 * --allow-all, and Deno lets only a fully privileged process read /proc. A
 * real server is started with the permissions of `deno task compile` and
 * scraped; each panel needs one query whose metrics are all in the scrape.
 */
import assert from "node:assert/strict";
import { spawnLockd } from "../../bench/lockd_proc.ts";
import { familiesInExposition, metricFamilies } from "./metric_names.ts";
import { readRepoFile } from "../helpers/doc_blocks.ts";

/** The permission flags of `deno task compile` (what the binary is built with). */
function shippedPermissions(): string[] {
  const tasks = JSON.parse(readRepoFile("deno.json")).tasks as Record<string, string>;
  const flags = tasks.compile.split(/\s+/).filter((arg) => /^--allow-/.test(arg));
  assert.ok(flags.length > 0 && !flags.includes("--allow-all"), tasks.compile);
  for (const task of ["start", "compile:all"]) {
    for (const flag of flags) assert.ok(tasks[task].includes(flag), `${task} has ${flag}`);
    assert.ok(!/--allow-all|\s-A\s/.test(tasks[task]), `${task} runs without --allow-all`);
  }
  return flags;
}

interface Panel {
  type?: string;
  title?: string;
  targets?: { expr?: string }[];
  panels?: Panel[];
}

function panels(): Panel[] {
  const out: Panel[] = [];
  const walk = (list: Panel[] | undefined) => {
    for (const panel of list ?? []) {
      if (panel.type === "row") walk(panel.panels);
      else out.push(panel);
    }
  };
  walk(JSON.parse(readRepoFile("deploy/grafana/lockd-dashboard.json")).panels);
  return out;
}

Deno.test("every dashboard panel has data under the shipped permissions (no --allow-all)", async () => {
  await using server = await spawnLockd({
    permissions: shippedPermissions(),
    http: true,
    flags: ["-shutdown-grace", "0s"],
  });
  const ops = server.opsAddr;
  const scrape = await (await fetch(`http://${ops}/metrics`)).text();
  const present = familiesInExposition(scrape);
  assert.ok(
    !present.has("process_open_fds"),
    "no /proc without --allow-all (else retire this test)",
  );
  const empty: string[] = [];
  for (const panel of panels()) {
    const shown = (panel.targets ?? []).some((target) => {
      const families = [...metricFamilies(target.expr ?? "")];
      // `up` comes from Prometheus' scrape, not from lockd.
      if (families.length === 0) return /^up\{/.test(target.expr ?? "");
      return families.every((family) => present.has(family));
    });
    if (!shown) empty.push(panel.title ?? "(untitled)");
  }
  assert.deepEqual(empty, [], "panels with no query that has data");
});
