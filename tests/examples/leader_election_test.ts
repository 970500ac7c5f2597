/**
 * examples/leader_election.ts, run as documented: three instances against a real server (and on
 * a cluster on etcd, when an etcd binary is found): exactly one leads, every instance answers
 * with the leader (followers forward to the address it published), epochs (fencing tokens)
 * grow at every new leader, and a leader stops leading at `lost` (an operator's force-release)
 * before the next one is elected.
 */
import assert from "node:assert/strict";
import { type Service, startService } from "../../examples/leader_election.ts";
import { eventually, startTestServer, TEST_ACTOR } from "../helpers/start_server.ts";
import { startEtcdCluster } from "../helpers/cluster_fixture.ts";

async function ask(service: Service): Promise<string> {
  const response = await fetch(`http://${service.addr}/`);
  return (await response.text()).trim();
}

/** Waits until exactly one instance leads and every instance answers with it; returns it. */
async function oneLeader(services: Service[], above = 0): Promise<Service> {
  await eventually(
    () => services.filter((s) => s.epoch !== null && s.epoch > above).length === 1,
    "exactly one leader",
    10_000,
  );
  const leader = services.find((s) => s.epoch !== null)!;
  await eventually(
    () => services.every((s) => s.leader?.epoch === leader.epoch),
    "every instance observed the leader",
    10_000,
  );
  const expected = `leader ${leader.id}, epoch ${leader.epoch}`;
  for (const service of services) assert.equal(await ask(service), expected, service.id);
  return leader;
}

Deno.test("leader election example: one leader, followers forward to it, a resign and a force-release elect the next with a larger epoch", async () => {
  await using t = await startTestServer();
  await using a = await startService({ lockd: t.addr, id: "a" });
  await using b = await startService({ lockd: t.addr, id: "b" });
  await using c = await startService({ lockd: t.addr, id: "c" });
  const services = [a, b, c];
  const first = await oneLeader(services);
  const epoch1 = first.epoch!;

  await first.resign();
  const second = await oneLeader(services, epoch1);
  assert.notEqual(second, first);
  const epoch2 = second.epoch!;

  // An operator takes the lock away: that leader stops leading at `lost`, the next one leads.
  const result = t.server.context.service.forceRelease("service/leader", TEST_ACTOR);
  assert.equal(result.status, "released");
  await eventually(() => second.epoch === null, "the old leader stopped leading at lost");
  const third = await oneLeader(services, epoch2);
  assert.ok(third.epoch! > epoch2);
});

Deno.test("leader election example as processes: a killed leader is followed by another one once its lease ran out", async () => {
  await using t = await startTestServer();
  const start = (id: string) =>
    new Deno.Command(Deno.execPath(), {
      args: ["run", "--allow-net", "examples/leader_election.ts", "-lockd", t.addr, "-id", id],
      cwd: new URL("../../", import.meta.url),
      stdout: "piped",
      stderr: "null",
    }).spawn();
  const procs = [start("p1"), start("p2")];
  try {
    const addrs = await Promise.all(procs.map(firstLineAddr));
    const askAt = async (addr: string) => (await (await fetch(`http://${addr}/`)).text()).trim();
    let answer = "";
    await eventually(
      async () => {
        answer = await askAt(addrs[0]).catch(() => "");
        return answer.startsWith("leader ") && (await askAt(addrs[1]).catch(() => "")) === answer;
      },
      "both processes answer with one leader",
      15_000,
    );
    const leaderId = answer.split(" ")[1].replace(",", "");
    const leaderIndex = leaderId === "p1" ? 0 : 1;
    procs[leaderIndex].kill("SIGKILL"); // no GOODBYE: its lease (2 s) has to run out
    await procs[leaderIndex].status;
    const other = addrs[1 - leaderIndex];
    await eventually(
      async () => (await askAt(other).catch(() => "")).startsWith(`leader p${2 - leaderIndex},`),
      "the other process leads",
      15_000,
    );
  } finally {
    for (const proc of procs) {
      try {
        proc.kill("SIGTERM");
      } catch {
        // already gone
      }
      await proc.status;
      await proc.stdout.cancel().catch(() => {});
    }
  }
});

/** The address an example process prints on its first line. */
async function firstLineAddr(proc: Deno.ChildProcess): Promise<string> {
  const reader = proc.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) break;
    text += value;
  }
  reader.releaseLock();
  const match = text.match(/http:\/\/([^/]+)\//);
  assert.ok(match, `the first line names the address: ${text}`);
  return match[1];
}

const etcd = new Deno.Command("sh", { args: ["-c", "command -v etcd"], stdout: "null" })
  .outputSync().success;

Deno.test({
  name:
    "leader election example on a cluster: the election goes on across a lockd leader's fail-over, every instance answering with one leader",
  ignore: !etcd,
  async fn() {
    await using cluster = await startEtcdCluster({ etcd: { members: 1 }, nodes: 2 });
    await cluster.waitLeaderKnown();
    const addrs = cluster.nodes.map((n) => n.addr);
    await using a = await startService({ lockd: addrs, id: "a" });
    await using b = await startService({ lockd: addrs, id: "b" });
    const leader = await oneLeader([a, b]);
    const epoch = leader.epoch!;
    // The lockd leader goes away: the election's lock is carried over to the next lockd leader.
    const serving = cluster.serving()!;
    await serving.server.shutdown();
    const rest = [a, b];
    await eventually(
      () => cluster.nodes.some((n) => n !== serving && n.server.context.cluster?.serving),
      "a new lockd leader",
      15_000,
    );
    await eventually(
      async () => rest.every((s) => s.leader !== null) && (await ask(a).catch(() => "")) !== "",
      "the instances are back",
      15_000,
    );
    const after = await oneLeader(rest);
    assert.ok(after.epoch! >= epoch);
  },
});
