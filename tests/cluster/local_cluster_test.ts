/**
 * `deno task cluster` (bench/local_cluster.ts) is the demo docs/cluster.md promises: without
 * etcd (or with one too old, or a port taken) it says what to do in one line and exits 1, never
 * with a stack trace; with etcd it prints every PID, role and address, survives the leader's
 * SIGKILL (reporting it and the new leader, restarting nothing), and on SIGINT stops everything
 * it started and keeps the run directory. All on 127.0.0.1 with free ports; every process is
 * stopped by PID.
 */

import assert from "node:assert/strict";
import { skipWithoutEtcd } from "../helpers/etcd.ts";

const DEMO = new URL("../../bench/local_cluster.ts", import.meta.url).pathname;

/** The variables deno itself needs to find its cache, and nothing else. */
function baseEnv(path: string): Record<string, string> {
  const env: Record<string, string> = { PATH: path, NO_COLOR: "1" };
  for (const name of ["HOME", "DENO_DIR", "XDG_CACHE_HOME", "TMPDIR"]) {
    const value = Deno.env.get(name);
    if (value !== undefined) env[name] = value;
  }
  return env;
}

async function runToEnd(
  args: string[],
  path: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", DEMO, ...args],
    env: baseEnv(path),
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
  return { code: output.code, stdout: text(output.stdout), stderr: text(output.stderr) };
}

/** A directory with a fake `etcd` that prints `versionLine`. */
async function fakeEtcdBin(versionLine: string): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "lockd-fake-etcd-" });
  await Deno.writeTextFile(`${dir}/etcd`, `#!/bin/sh\necho '${versionLine}'\n`, { mode: 0o755 });
  return dir;
}

function assertOneLineFailure(result: { stderr: string; stdout: string }, pattern: RegExp): void {
  const lines = result.stderr.trimEnd().split("\n");
  assert.equal(lines.length, 1, `one line, got:\n${result.stderr}`);
  assert.match(lines[0], pattern);
  assert.doesNotMatch(result.stderr + result.stdout, /^\s+at /m, "no stack trace");
}

Deno.test("without etcd on PATH the demo says how to install it, in one line, and exits 1", async () => {
  const empty = await Deno.makeTempDir({ prefix: "lockd-empty-path-" });
  try {
    const result = await runToEnd([], empty);
    assert.equal(result.code, 1);
    assertOneLineFailure(result, /^deno task cluster: cannot start: no `etcd` on PATH; /);
    assert.match(result.stderr, /apt-get install etcd-server/);
    assert.match(result.stderr, /github\.com\/etcd-io\/etcd\/releases/);
    assert.equal(result.stdout, "");
  } finally {
    await Deno.remove(empty, { recursive: true });
  }
});

Deno.test("an etcd older than 3.4 is refused in one line", async () => {
  const bin = await fakeEtcdBin("etcd Version: 3.3.11");
  try {
    const result = await runToEnd([], bin);
    assert.equal(result.code, 1);
    assertOneLineFailure(result, /etcd 3\.3\.11 is too old .*apt-get install etcd-server/);
  } finally {
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("a taken port and a bad argument are one line each (exit 1 and 2), --help exits 0", async () => {
  const bin = await fakeEtcdBin("etcd Version: 3.4.23");
  const taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    const port = taken.addr.port;
    const busy = await runToEnd(["--base-port", String(port)], bin);
    assert.equal(busy.code, 1);
    assertOneLineFailure(busy, new RegExp(`port 127\\.0\\.0\\.1:${port} is in use`));
    assert.equal(busy.stdout, "", "nothing started");

    const bad = await runToEnd(["--nodes=0"], bin);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^deno task cluster: --nodes must be 1 to 9, not "0"\nusage: /);
    assert.doesNotMatch(bad.stderr, /^\s+at /m);

    const help = await runToEnd(["--help"], bin);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /^usage: deno task cluster/);
  } finally {
    taken.close();
    await Deno.remove(bin, { recursive: true });
  }
});

/** Lines of a child's output as they come, with a way to wait for one. */
class Lines {
  readonly all: string[] = [];
  #wake: (() => void) | null = null;
  readonly done: Promise<void>;

  constructor(stream: ReadableStream<Uint8Array>) {
    this.done = (async () => {
      let rest = "";
      for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
        rest += chunk;
        const lines = rest.split("\n");
        rest = lines.pop()!;
        this.all.push(...lines);
        this.#wake?.();
      }
      if (rest !== "") this.all.push(rest);
      this.#wake?.();
    })();
  }

  /** The first line (from `from` on) matching `pattern`, waiting up to `timeoutMs`. */
  async wait(pattern: RegExp, timeoutMs: number, from = 0): Promise<RegExpExecArray> {
    const until = performance.now() + timeoutMs;
    for (;;) {
      for (const line of this.all.slice(from)) {
        const match = pattern.exec(line);
        if (match !== null) return match;
      }
      const leftMs = until - performance.now();
      if (leftMs <= 0) {
        throw new Error(`no line matching ${pattern} in:\n${this.all.join("\n")}`);
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        new Promise<void>((resolve) => (this.#wake = resolve)),
        new Promise((resolve) => (timer = setTimeout(resolve, Math.min(leftMs, 200)))),
      ]);
      clearTimeout(timer);
    }
  }
}

/** Every PID the demo printed: its etcd members and its nodes. */
function printedPids(lines: readonly string[]): number[] {
  const pids = new Set<number>();
  for (const line of lines) {
    if (line.startsWith("etcd: ")) {
      for (const m of line.matchAll(/pid (\d+)/g)) pids.add(Number(m[1]));
    }
    const node = /^n\d\s+(\d+)\s/.exec(line);
    if (node !== null) pids.add(Number(node[1]));
  }
  return [...pids];
}

function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return !/^\d+ \(.*\) Z/.test(stat);
  } catch {
    return false;
  }
}

Deno.test({
  name:
    "the demo survives the leader's SIGKILL, reports the new leader, and stops everything on SIGINT",
  ignore: skipWithoutEtcd,
  sanitizeOps: true,
  sanitizeResources: true,
  fn: async () => {
    const parent = await Deno.makeTempDir({ prefix: "lockd-demo-test-" });
    const demo = new Deno.Command(Deno.execPath(), {
      args: ["run", "--allow-all", DEMO, "--base-port", "0", "--dir", parent],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const out = new Lines(demo.stdout);
    const err = new Lines(demo.stderr);
    let exited = false;
    const status = demo.status.then((s) => {
      exited = true;
      return s;
    });
    try {
      const runDir = (await out.wait(/^run directory (\S+) \(kept at exit/, 10_000))[1];
      assert.ok(runDir.startsWith(`${parent}/lockd-cluster-`));
      const etcdLine = (await out.wait(/^etcd: .*$/, 30_000))[0];
      assert.equal([...etcdLine.matchAll(/pid (\d+)/g)].length, 3, etcdLine);
      const nodes = new Map<string, number>();
      for (const name of ["n1", "n2", "n3"]) {
        const [, pid, addr, admin, ops, audit] = await out.wait(
          new RegExp(`^${name}\\s+(\\d+)\\s+(127\\.0\\.0\\.1:\\d+)\\s+(\\S+)\\s+(\\S+)\\s+(\\S+)$`),
          10_000,
        );
        assert.notEqual(addr, admin);
        assert.notEqual(admin, ops);
        assert.equal(audit, `${runDir}/audit-${name}.jsonl`);
        nodes.set(name, Number(pid));
      }
      const [, leader, leaderPid] = await out.wait(
        /^\S+\s+(n\d) \(pid (\d+)\): leader, term \d+$/,
        30_000,
      );
      assert.equal(nodes.get(leader), Number(leaderPid));
      await out.wait(/: standby, leader n\d$/, 10_000);

      const killedAt = out.all.length;
      Deno.kill(Number(leaderPid), "SIGKILL");
      await out.wait(
        new RegExp(`${leader} \\(pid ${leaderPid}\\) exited: killed by SIGKILL; not restarted`),
        10_000,
        killedAt,
      );
      const [, next] = await out.wait(/\s(n\d) \(pid \d+\): leader, term \d+$/, 20_000, killedAt);
      assert.notEqual(next, leader);
      assert.equal(exited, false, "the demo keeps running");
      assert.equal(alive(Number(leaderPid)), false);

      Deno.kill(demo.pid, "SIGINT");
      const { code } = await status;
      await Promise.all([out.done, err.done]);
      assert.equal(code, 0, err.all.join("\n"));
      assert.deepEqual(err.all.filter((l) => l !== ""), [], "nothing on standard error");
      assert.equal(out.all.at(-1), `stopped. The run directory is kept: ${runDir}`);
      assert.equal(out.all.filter((l) => / exited: /.test(l)).length, 3);
      const pids = printedPids(out.all);
      assert.equal(pids.length, 6, "3 etcd members and 3 nodes");
      for (const pid of pids) assert.equal(alive(pid), false, `pid ${pid} is gone`);
      const kept = [...Deno.readDirSync(runDir)].map((e) => e.name).sort();
      assert.deepEqual(kept, [
        "audit-n1.jsonl",
        "audit-n2.jsonl",
        "audit-n3.jsonl",
        "n1.log",
        "n2.log",
        "n3.log",
      ]);
      assert.match(Deno.readTextFileSync(`${runDir}/${next}.log`), /lockd started/);
    } finally {
      // The demo stops what it started on SIGINT; whatever is left is killed by its PID.
      if (!exited) {
        demo.kill("SIGINT");
        const timer = setTimeout(() => exited || demo.kill("SIGKILL"), 15_000);
        await status;
        clearTimeout(timer);
      }
      for (const pid of printedPids(out.all)) {
        if (alive(pid)) Deno.kill(pid, "SIGKILL");
      }
      await Promise.all([out.done, err.done]).catch(() => {});
      await Deno.remove(parent, { recursive: true });
    }
  },
});
