/**
 * `deno task cluster`: a whole lockd cluster on this machine to try cluster mode: a 3-member etcd
 * and 3 lockd nodes on 127.0.0.1, run with the shipped server's permissions (`--allow-net
 * --allow-read --allow-write`). Node i listens on 127.0.0.1:74i0 (protocol), 74i1 (admin API)
 * and 74i2 (ops), i = 0, 1, 2 (`--base-port`, `--nodes` change that).
 *
 * It is the experiment docs/cluster.md describes, so it:
 * - checks for `etcd` (3.4 or later) before anything else, and says how to install it;
 * - prints every process it starts with its PID, and each node's addresses;
 * - asks every node's `/api/info` each second and prints a line whenever a node's role, term or
 *   leader changes, or a node stops answering;
 * - keeps running when a node dies (it prints how it ended) and restarts nothing, so
 *   `kill -9 <leader pid>` shows a standby take over;
 * - writes each node's audit log and diagnostic log to a run directory it names at start and
 *   at exit and never deletes (etcd's own data is removed);
 * - stops everything it started, by PID, on Ctrl-C (SIGINT), SIGTERM or SIGHUP: each node gets SIGTERM
 *   (the leader hands over through etcd, which is still up), then etcd. The children run in
 *   their own sessions, so a Ctrl-C in the terminal reaches only this process; a second one
 *   kills every node at once;
 * - never ends in a stack trace: every failure is one line, with exit status 1 (2 for a usage
 *   error).
 */

import { EtcdCluster } from "./etcd_proc.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const POLL_MS = 1_000;
const POLL_TIMEOUT_MS = 800;
/** A node that has not answered this long after its start gets a line pointing at its log. */
const SLOW_START_MS = 15_000;
/**
 * A second signal this soon after the first is the same Ctrl-C delivered twice (the terminal's
 * to the process group, and `deno task` forwarding it), not a second Ctrl-C.
 */
const SAME_SIGNAL_MS = 500;
/** How long a node may take to stop after SIGTERM before it gets SIGKILL. */
const STOP_TIMEOUT_MS = 10_000;

const USAGE = `usage: deno task cluster [--nodes N] [--base-port PORT] [--dir DIR]
  --nodes N         lockd nodes, 1 to 9 (default 3)
  --base-port PORT  node i listens on PORT+10i (protocol), +1 (admin API), +2 (ops);
                    0 takes free ports from the system (default 7400)
  --dir DIR         where the run directory is created (default: the system temp dir)`;

/** What to do without etcd. */
const ETCD_INSTALL_HINT =
  "install etcd 3.4 or later: `sudo apt-get install etcd-server` on Debian/Ubuntu, or the " +
  "release binaries from https://github.com/etcd-io/etcd/releases (put `etcd` on PATH)";

/** A failure this script explains in one line. */
class DemoFailure extends Error {
  constructor(message: string, readonly exitCode = 1) {
    super(message);
  }
}

interface Options {
  readonly nodes: number;
  readonly basePort: number;
  readonly dir: string | undefined;
}

function parseArgs(args: readonly string[]): Options {
  let nodes = 3;
  let basePort = 7400;
  let dir: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const [flag, inline] = args[i].split(/=(.*)/s, 2);
    const value = () => {
      const v = inline ?? args[++i];
      if (v === undefined) throw new DemoFailure(`${flag} needs a value\n${USAGE}`, 2);
      return v;
    };
    switch (flag) {
      case "--nodes": {
        const text = value();
        nodes = Number(text);
        if (!/^\d+$/.test(text) || nodes < 1 || nodes > 9) {
          throw new DemoFailure(`--nodes must be 1 to 9, not "${text}"\n${USAGE}`, 2);
        }
        break;
      }
      case "--base-port": {
        const text = value();
        basePort = Number(text);
        if (!/^\d+$/.test(text) || basePort > 65_535 - 100) {
          throw new DemoFailure(`--base-port must be 0 or a port up to 65435, not "${text}"`, 2);
        }
        break;
      }
      case "--dir":
        dir = value();
        break;
      case "-h":
      case "--help":
        throw new DemoFailure(USAGE, 0);
      default:
        throw new DemoFailure(`unknown argument "${args[i]}"\n${USAGE}`, 2);
    }
  }
  return { nodes, basePort, dir };
}

/** The etcd version on PATH; a DemoFailure with the install hint when there is none. */
async function checkEtcd(): Promise<string> {
  let output: Deno.CommandOutput;
  try {
    output = await new Deno.Command("etcd", {
      args: ["--version"],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) {
      throw new DemoFailure(`cannot start: no \`etcd\` on PATH; ${ETCD_INSTALL_HINT}`);
    }
    throw new DemoFailure(`cannot run \`etcd --version\`: ${messageOf(error)}`);
  }
  const text = new TextDecoder().decode(output.stdout);
  const match = /etcd Version: (\d+)\.(\d+)\.(\d+)/.exec(text);
  if (!output.success || match === null) {
    throw new DemoFailure(`\`etcd --version\` did not say its version; ${ETCD_INSTALL_HINT}`);
  }
  const [major, minor] = [Number(match[1]), Number(match[2])];
  if (major < 3 || major === 3 && minor < 4) {
    throw new DemoFailure(
      `etcd ${match[1]}.${match[2]}.${match[3]} is too old (lockd speaks the v3 JSON gateway of ` +
        `3.4 and later); ${ETCD_INSTALL_HINT}`,
    );
  }
  return `${match[1]}.${match[2]}.${match[3]}`;
}

/** Three ports per node: the fixed layout (checked free) or free ones from the system. */
function nodePorts(options: Options): number[][] {
  if (options.basePort === 0) {
    const listeners = Array.from(
      { length: options.nodes * 3 },
      () => Deno.listen({ hostname: "127.0.0.1", port: 0 }),
    );
    const ports = listeners.map((l) => l.addr.port);
    for (const l of listeners) l.close();
    return Array.from({ length: options.nodes }, (_, i) => ports.slice(3 * i, 3 * i + 3));
  }
  const layout = Array.from(
    { length: options.nodes },
    (_, i) => [0, 1, 2].map((k) => options.basePort + 10 * i + k),
  );
  for (const port of layout.flat()) {
    try {
      Deno.listen({ hostname: "127.0.0.1", port }).close();
    } catch (error) {
      const why = error instanceof Deno.errors.AddrInUse ? "is in use" : messageOf(error);
      throw new DemoFailure(
        `port 127.0.0.1:${port} ${why} (is another \`deno task cluster\` running?); ` +
          `choose other ports with --base-port, or --base-port 0 for free ones`,
      );
    }
  }
  return layout;
}

interface LockdNode {
  readonly name: string;
  readonly addr: string;
  readonly admin: string;
  readonly ops: string;
  readonly auditPath: string;
  readonly logPath: string;
  readonly child: Deno.ChildProcess;
  /** The log file being written from the node's standard error. */
  readonly logged: Promise<void>;
  exited: boolean;
  /** What the last poll said (a role with its term or leader, or "not answering"). */
  seen: string;
  /** Whether the node ever answered (before that, "not answering" is just its start). */
  answered: boolean;
}

function spawnNode(
  name: string,
  [port, adminPort, opsPort]: number[],
  etcdUrls: readonly string[],
  runDir: string,
): LockdNode {
  const addr = `127.0.0.1:${port}`;
  const admin = `127.0.0.1:${adminPort}`;
  const ops = `127.0.0.1:${opsPort}`;
  const auditPath = `${runDir}/audit-${name}.jsonl`;
  const logPath = `${runDir}/${name}.log`;
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-net",
      "--allow-read",
      "--allow-write",
      `${ROOT}main.ts`,
      "serve",
      "-listen",
      addr,
      "-admin-listen",
      admin,
      "-ops-listen",
      ops,
      "-cluster-etcd",
      etcdUrls.join(","),
      "-cluster",
      "local",
      "-cluster-node",
      name,
      "-audit-log",
      auditPath,
      "-shutdown-grace",
      "0s",
    ],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
    detached: true,
  }).spawn();
  const logged = Deno.open(logPath, { write: true, create: true, append: true })
    .then((file) => child.stderr.pipeTo(file.writable))
    .catch(() => {});
  return {
    name,
    addr,
    admin,
    ops,
    auditPath,
    logPath,
    child,
    logged,
    exited: false,
    seen: "not answering",
    answered: false,
  };
}

// deno-lint-ignore no-explicit-any
type Json = any;

/** What `/api/info` says about the node's role, as one short phrase. */
async function poll(node: LockdNode): Promise<string> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), POLL_TIMEOUT_MS);
  try {
    const response = await fetch(`http://${node.admin}/api/info`, { signal: controller.signal });
    const info: Json = await response.json();
    const cluster = info?.cluster;
    if (typeof cluster !== "object" || cluster === null) return "answering, not in cluster mode";
    const role = String(cluster.role);
    const leader = cluster.leader?.node;
    if (cluster.term > 0) return `${role}, term ${cluster.term}`;
    return leader ? `${role}, leader ${leader}` : `${role}, no leader known`;
  } catch {
    return "not answering";
  } finally {
    clearTimeout(timer);
  }
}

function describeExit(status: Deno.CommandStatus): string {
  if (status.signal !== null) return `killed by ${status.signal}`;
  return `exit status ${status.code}`;
}

async function lastLine(path: string): Promise<string> {
  const text = await Deno.readTextFile(path).catch(() => "");
  return text.trimEnd().split("\n").at(-1) ?? "";
}

function messageOf(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.split("\n")[0];
}

function clock(): string {
  return new Date().toISOString().slice(11, 23);
}

/**
 * Runs the demo until a signal; returns the exit status. `out` gets every line it prints, `err`
 * the one line of a failure.
 */
export async function runDemo(
  args: readonly string[],
  out: (line: string) => void = (line) => quietly(() => console.log(line)),
  err: (line: string) => void = (line) => quietly(() => console.error(line)),
): Promise<number> {
  const stop = Promise.withResolvers<string>();
  let signals = 0;
  let nodes: LockdNode[] = [];
  let firstSignalMs = 0;
  const onSignal = (signal: Deno.Signal) => () => {
    if (signals > 0 && performance.now() - firstSignalMs < SAME_SIGNAL_MS) return;
    signals++;
    if (signals === 1) {
      firstSignalMs = performance.now();
      stop.resolve(signal);
    } else {
      out(`${signal} again: killing every node at once`);
      for (const n of nodes) if (!n.exited) killQuietly(n.child, "SIGKILL");
    }
  };
  // SIGHUP too: the children are in their own sessions, so a closed terminal would not end them.
  const handlers: [Deno.Signal, () => void][] = [
    ["SIGINT", onSignal("SIGINT")],
    ["SIGTERM", onSignal("SIGTERM")],
    ["SIGHUP", onSignal("SIGHUP")],
  ];
  for (const [signal, handler] of handlers) Deno.addSignalListener(signal, handler);
  let etcd: EtcdCluster | null = null;
  let runDir: string | null = null;
  try {
    const options = parseArgs(args);
    const version = await checkEtcd();
    const ports = nodePorts(options);
    if (options.dir !== undefined) await Deno.mkdir(options.dir, { recursive: true });
    runDir = await Deno.makeTempDir({ dir: options.dir, prefix: "lockd-cluster-" });
    out(`run directory ${runDir} (kept at exit: each node's audit log and diagnostic log)`);
    out(`starting a 3-member etcd ${version} ...`);
    try {
      etcd = await EtcdCluster.start({ dir: runDir, detached: true });
    } catch (error) {
      throw new DemoFailure(`cannot start etcd: ${messageOf(error)}`);
    }
    out(
      `etcd: ${
        etcd.members.map((m) => `${m.name} pid ${m.pid} ${m.clientUrl}`).join(", ")
      } (data in ${etcd.dir}, removed at exit)`,
    );
    if (signals > 0) return 0;
    nodes = ports.map((p, i) => spawnNode(`n${i + 1}`, p, etcd!.clientUrls, runDir!));
    out("");
    out("node  pid      protocol         admin API        ops              audit log");
    for (const n of nodes) {
      out(
        `${n.name.padEnd(4)}  ${String(n.child.pid).padEnd(7)}  ${n.addr.padEnd(15)}  ` +
          `${n.admin.padEnd(15)}  ${n.ops.padEnd(15)}  ${n.auditPath}`,
      );
    }
    const addrs = nodes.map((n) => n.addr).join(",");
    const admins = nodes.map((n) => n.admin).join(",");
    out(`
Try it in another shell:
  deno run -A main.ts run -addr ${addrs} jobs/demo -- sh -c 'echo token $LOCKD_TOKEN; sleep 10'
  deno run -A main.ts admin -admin ${admins} info
  kill -9 <pid of the leader>    # a standby takes over; nothing is restarted
Node roles are printed below as they change; Ctrl-C stops everything.
`);
    for (const n of nodes) {
      n.child.status.then(async (status) => {
        n.exited = true;
        let line = `${clock()}  ${n.name} (pid ${n.child.pid}) exited: ${describeExit(status)}`;
        if (signals === 0) line += "; not restarted, the others keep running";
        out(line);
        if (status.signal === null && status.code !== 0) {
          await n.logged;
          out(`${clock()}  ${n.name}: ${await lastLine(n.logPath)}`);
        }
      });
    }
    const startedMs = performance.now();
    while (signals === 0) {
      await Promise.all(
        nodes.filter((n) => !n.exited).map(async (n) => {
          const seen = await poll(n);
          if (seen !== n.seen && !n.exited && signals === 0) {
            n.seen = seen;
            n.answered = true;
            out(`${clock()}  ${n.name} (pid ${n.child.pid}): ${seen}`);
          } else if (!n.answered && performance.now() - startedMs > SLOW_START_MS) {
            n.answered = true; // said once
            out(`${clock()}  ${n.name} (pid ${n.child.pid}): not answering yet; see ${n.logPath}`);
          }
        }),
      );
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        stop.promise,
        new Promise((resolve) => (timer = setTimeout(resolve, POLL_MS))),
      ]);
      clearTimeout(timer);
    }
    return 0;
  } catch (error) {
    if (error instanceof DemoFailure && error.exitCode === 0) {
      out(error.message);
      return 0;
    }
    err(`deno task cluster: ${error instanceof DemoFailure ? error.message : messageOf(error)}`);
    return error instanceof DemoFailure ? error.exitCode : 1;
  } finally {
    if (nodes.length > 0 || etcd !== null) out(`${clock()}  stopping ...`);
    await stopNodes(nodes);
    if (etcd !== null) {
      await etcd[Symbol.asyncDispose]().catch((error) => {
        err(`deno task cluster: cannot stop etcd: ${messageOf(error)}`);
      });
    }
    if (runDir !== null) out(`stopped. The run directory is kept: ${runDir}`);
    for (const [signal, handler] of handlers) Deno.removeSignalListener(signal, handler);
  }
}

/** SIGTERM to every node still running (by PID), SIGKILL to those not gone in time. */
async function stopNodes(nodes: readonly LockdNode[]): Promise<void> {
  await Promise.all(nodes.map(async (n) => {
    if (!n.exited) killQuietly(n.child, "SIGTERM");
    let timer: ReturnType<typeof setTimeout> | undefined;
    const gone = await Promise.race([
      n.child.status.then(() => true),
      new Promise<boolean>((resolve) => (timer = setTimeout(resolve, STOP_TIMEOUT_MS, false))),
    ]);
    clearTimeout(timer);
    if (!gone) killQuietly(n.child, "SIGKILL");
    await n.child.status;
    await n.logged;
  }));
}

/** Runs `write`, ignoring a standard output that is gone (`deno task cluster | head`). */
function quietly(write: () => void): void {
  try {
    write();
  } catch {
    // nowhere to say it
  }
}

function killQuietly(child: Deno.ChildProcess, signal: Deno.Signal): void {
  try {
    child.kill(signal);
  } catch {
    // already gone
  }
}

if (import.meta.main) {
  Deno.exit(await runDemo(Deno.args));
}
