/**
 * `deno task cluster`: a whole lockd cluster on this machine for trying cluster mode out: a
 * 3-member etcd (free ports, a temp dir) and 3 lockd nodes in cluster mode, run with the same
 * permissions as the shipped server (`--allow-net --allow-read --allow-write`; the binary's
 * `--allow-run` is only for `lockd run`, the server revokes it). Node i listens on
 * 127.0.0.1:74i0 (protocol), 74i1 (admin API) and 74i2 (ops), i = 0, 1, 2. Their diagnostic logs
 * are printed with the node's name in front; their audit logs go to the temp dir. Ctrl-C stops
 * everything (each node shuts down in order: the leader hands over on its way out) and removes
 * the dir.
 */

import { EtcdCluster } from "./etcd_proc.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const NODES = 3;

const dir = await Deno.makeTempDir({ prefix: "lockd-cluster-" });
console.log(`starting a 3-member etcd in ${dir} ...`);
const etcd = await EtcdCluster.start({ dir });
console.log(`etcd: ${etcd.clientUrls.join(" ")}`);

interface Node {
  name: string;
  addr: string;
  admin: string;
  ops: string;
  child: Deno.ChildProcess;
  piped: Promise<void>;
}

const encoder = new TextEncoder();

async function prefixLines(
  stream: ReadableStream<Uint8Array<ArrayBuffer>>,
  prefix: string,
): Promise<void> {
  let rest = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    rest += chunk;
    const lines = rest.split("\n");
    rest = lines.pop()!;
    for (const line of lines) Deno.stderr.writeSync(encoder.encode(`${prefix} ${line}\n`));
  }
}

const nodes: Node[] = [];
for (let i = 0; i < NODES; i++) {
  const name = `n${i + 1}`;
  const base = 7400 + 10 * i;
  const addr = `127.0.0.1:${base}`;
  const admin = `127.0.0.1:${base + 1}`;
  const ops = `127.0.0.1:${base + 2}`;
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
      etcd.clientUrls.join(","),
      "-cluster",
      "local",
      "-cluster-node",
      name,
      "-audit-log",
      `${dir}/audit-${name}.jsonl`,
      "-shutdown-grace",
      "0s",
    ],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  nodes.push({ name, addr, admin, ops, child, piped: prefixLines(child.stderr, `[${name}]`) });
}

const addrs = nodes.map((n) => n.addr).join(",");
const admins = nodes.map((n) => n.admin).join(",");
console.log(`
lockd nodes: ${nodes.map((n) => `${n.name} ${n.addr} (admin ${n.admin}, ops ${n.ops})`).join("; ")}

Try it (in another shell):
  deno run -A main.ts run -addr ${addrs} jobs/demo -- sh -c 'echo token $LOCKD_TOKEN; sleep 10'
  deno run -A main.ts admin -admin ${admins} info
  deno run -A main.ts admin -admin ${admins} locks
  kill -9 <pid of the leader>   # (lockd admin info shows which node leads) and watch a standby take over

Ctrl-C stops the cluster.
`);

const stopping = Promise.withResolvers<void>();
const onSignal = () => stopping.resolve();
Deno.addSignalListener("SIGINT", onSignal);
Deno.addSignalListener("SIGTERM", onSignal);
await Promise.race([stopping.promise, ...nodes.map((n) => n.child.status)]);
console.log("stopping ...");
// Ctrl-C in a terminal reaches the nodes too (one process group): give them a moment to stop on
// their own (a second signal would make them exit at once, skipping the hand-over).
const exited = (n: Node, ms: number) =>
  Promise.race([n.child.status.then(() => true), new Promise((r) => setTimeout(r, ms, false))]);
await Promise.all(nodes.map(async (n) => {
  for (const [signal, waitMs] of [["SIGTERM", 3_000], ["SIGKILL", 5_000]] as const) {
    if (await exited(n, waitMs)) break;
    try {
      n.child.kill(signal);
    } catch {
      // already gone
    }
  }
  await n.child.status;
  await n.piped.catch(() => {});
}));
await etcd[Symbol.asyncDispose]();
await Deno.remove(dir, { recursive: true }).catch(() => {});
Deno.removeSignalListener("SIGINT", onSignal);
Deno.removeSignalListener("SIGTERM", onSignal);
console.log("stopped");
