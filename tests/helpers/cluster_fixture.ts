/**
 * The cluster test fixture: etcd and lockd nodes on it, set up in one line and released with
 * `await using`, so that a cluster test says what it tests rather than how a cluster is built.
 *
 * - `fakeCluster(wallMs)`: the in-memory etcd (fake_etcd.ts) on one ManualScheduler, with manual
 *   time (`run`, `freeze`), bare `Leadership` machines on it and in-process lockd servers in
 *   cluster mode (real listeners on loopback port 0). No etcd process.
 * - `startEtcdCluster(options)`: a real etcd (bench/etcd_proc.ts; 3 members unless told) on
 *   loopback, `nodes` in-process lockd servers in cluster mode on it (3 unless told; real time,
 *   TTL 2 s), more nodes or bare `Leadership` machines on demand.
 */

import assert from "node:assert/strict";
import { EtcdCluster, type EtcdClusterOptions } from "../../bench/etcd_proc.ts";
import { ManualClock, ManualScheduler, type Scheduler, systemScheduler } from "../../src/clock.ts";
import type { Etcd } from "../../src/cluster/etcd.ts";
import type { EtcdHttpClient } from "../../src/cluster/etcd_http.ts";
import { Leadership, type LeadershipEvent } from "../../src/cluster/leadership.ts";
import type { ServerConfig } from "../../src/config.ts";
import { startServer } from "../../src/server/start.ts";
import { etcdClient, waitFor } from "./etcd.ts";
import { FakeEtcd, type FakeLink, settle } from "./fake_etcd.ts";
import { MemorySink } from "./memory_sink.ts";
import { startTestServer, type TestServer } from "./start_server.ts";

/** The lease TTL of nodes on the in-memory etcd. */
export const FAKE_TTL_MS = 2_000;

/** A bare leadership machine on the in-memory etcd, and every event it reported. */
export interface FakeLeadership {
  readonly leadership: Leadership;
  readonly events: LeadershipEvent[];
}

export interface FakeLeadershipOptions {
  /** The node's connection to etcd (default: the fake itself, a perfect link). */
  etcd?: Etcd;
  /** The node's clock and timers (default: the fixture's). */
  scheduler?: Scheduler;
  /** The admin address it advertises (default `<name>:7401`). */
  admin?: string | null;
}

/** The in-memory etcd on manual time, and what runs on it (see the module comment). */
export class FakeCluster implements AsyncDisposable {
  readonly scheduler: ManualScheduler;
  readonly etcd: FakeEtcd;
  readonly #leaderships: Leadership[] = [];
  readonly #servers: TestServer[] = [];

  constructor(wallMs = 0) {
    this.scheduler = new ManualScheduler(wallMs, 0);
    this.etcd = new FakeEtcd(this.scheduler);
  }

  /** Moves manual time in small steps, letting etcd answers and socket reads settle between. */
  async run(ms: number, stepMs = 10): Promise<void> {
    for (let t = 0; t < ms; t += stepMs) {
      this.scheduler.advance(Math.min(stepMs, ms - t));
      await settle();
    }
  }

  /** Moves the clock without running any timer: a process frozen by SIGSTOP. */
  freeze(ms: number): void {
    ManualClock.prototype.advance.call(this.scheduler, ms);
  }

  /** A leadership machine for node `name` of cluster "test" (TTL 2 s), not started yet. */
  leadership(name: string, options: FakeLeadershipOptions = {}): FakeLeadership {
    const events: LeadershipEvent[] = [];
    const leadership = new Leadership({
      etcd: options.etcd ?? this.etcd,
      scheduler: options.scheduler ?? this.scheduler,
      cluster: "test",
      node: {
        name,
        advertise: `${name}:7400`,
        admin: options.admin === undefined ? `${name}:7401` : options.admin,
      },
      ttlMs: FAKE_TTL_MS,
      onEvent: (e) => events.push(e),
    });
    this.#leaderships.push(leadership);
    return { leadership, events };
  }

  /**
   * An in-process lockd server: node `name` of cluster "test" (TTL 2 s), first steps settled;
   * `link` gives its connection to etcd its own faults (a cut: `dropRequest`).
   */
  async server(
    name: string,
    config: Partial<ServerConfig> = {},
    link?: FakeLink,
  ): Promise<TestServer> {
    const t = await startTestServer({
      clusterEtcd: [...this.etcd.endpoints],
      cluster: "test",
      clusterNode: name,
      clusterTtlMs: FAKE_TTL_MS,
      ...config,
    }, { scheduler: this.scheduler, etcd: this.etcd.client(link) });
    this.#servers.push(t);
    await settle();
    return t;
  }

  /** Run before the servers shut down: a test mends the faults it gave their links here. */
  readonly beforeDispose: (() => void)[] = [];

  async [Symbol.asyncDispose](): Promise<void> {
    for (const leadership of this.#leaderships) leadership.close();
    for (const mend of this.beforeDispose) mend();
    // A hand-over at shutdown needs etcd.
    this.etcd.setMode("up");
    await Promise.all(this.#servers.map((t) => t.server.shutdown()));
  }
}

/** The in-memory etcd on a ManualScheduler whose wall clock starts at `wallMs`. */
export function fakeCluster(wallMs = 0): FakeCluster {
  return new FakeCluster(wallMs);
}

/** A group of lockd servers of one cluster, and who of them serves. */
export interface ClusterNodes {
  readonly nodes: TestServer[];
  /** The node that serves now, or undefined. */
  serving(): TestServer | undefined;
  /** Waits until exactly one node serves and returns it. */
  waitServing(timeoutMs?: number): Promise<TestServer>;
  /** Waits until exactly one node serves and every other node knows it as the leader. */
  waitLeaderKnown(): Promise<{ leader: TestServer; standbys: TestServer[] }>;
}

/** A bare leadership machine on a real etcd, its gateway client and its events with times. */
export interface RealLeadership {
  readonly name: string;
  readonly leadership: Leadership;
  readonly etcd: EtcdHttpClient;
  readonly events: { atMs: number; event: LeadershipEvent }[];
}

export interface EtcdClusterFixtureOptions {
  /** The etcd (members, TLS, ...). */
  etcd?: EtcdClusterOptions;
  /** lockd servers started at once (default 3). */
  nodes?: number;
  /** Their configuration, over the fixture's. */
  config?: Partial<ServerConfig>;
}

/** A real etcd on loopback and lockd nodes on it (see the module comment). */
export class EtcdClusterFixture implements ClusterNodes, AsyncDisposable {
  readonly etcd: EtcdCluster;
  readonly #groups: ClusterNodes[] = [];
  readonly #leaderships: RealLeadership[] = [];
  #first: ClusterNodes | undefined;

  private constructor(etcd: EtcdCluster) {
    this.etcd = etcd;
  }

  static async start(options: EtcdClusterFixtureOptions = {}): Promise<EtcdClusterFixture> {
    const fixture = new EtcdClusterFixture(await EtcdCluster.start(options.etcd));
    try {
      fixture.#first = await fixture.startNodes(options.nodes ?? 3, options.config);
    } catch (error) {
      await fixture[Symbol.asyncDispose]();
      throw error;
    }
    return fixture;
  }

  get nodes(): TestServer[] {
    return this.#first!.nodes;
  }

  serving(): TestServer | undefined {
    return this.#first!.serving();
  }

  waitServing(timeoutMs?: number): Promise<TestServer> {
    return this.#first!.waitServing(timeoutMs);
  }

  waitLeaderKnown(): Promise<{ leader: TestServer; standbys: TestServer[] }> {
    return this.#first!.waitLeaderKnown();
  }

  /**
   * Starts `count` more lockd servers (in-process, both HTTP listeners on port 0, TTL 2 s unless
   * `config` says otherwise) on this etcd in cluster `cluster`, named n1, n2, ...; they stop
   * with the fixture.
   */
  async startNodes(
    count: number,
    config: Partial<ServerConfig> = {},
    cluster = "test",
  ): Promise<ClusterNodes> {
    const nodes: TestServer[] = [];
    const group = nodeGroup(nodes);
    this.#groups.push(group);
    for (let i = 0; i < count; i++) {
      const audit = new MemorySink();
      const server = await startServer({
        listen: "127.0.0.1:0",
        adminListen: "127.0.0.1:0",
        opsListen: "127.0.0.1:0",
        shutdownGraceMs: 0,
        clusterEtcd: this.etcd.clientUrls,
        cluster,
        clusterNode: `n${i + 1}`,
        ...config,
      }, { auditSink: audit });
      nodes.push({
        server,
        audit,
        addr: server.addr,
        [Symbol.asyncDispose]: () => server.shutdown(),
      });
    }
    return group;
  }

  /**
   * A bare leadership machine for node `name` of cluster "it" (TTL 2 s, system time), started,
   * with its own gateway client on `endpoints` (default: every etcd member).
   */
  leadership(name: string, endpoints: readonly string[] = this.etcd.clientUrls): RealLeadership {
    const etcd = etcdClient(endpoints, REAL_TTL_MS / 2);
    const events: { atMs: number; event: LeadershipEvent }[] = [];
    const leadership = new Leadership({
      etcd,
      scheduler: systemScheduler,
      cluster: "it",
      node: { name, advertise: `127.0.0.1:${name}`, admin: null },
      ttlMs: REAL_TTL_MS,
      onEvent: (event) => events.push({ atMs: performance.now(), event }),
    });
    leadership.start();
    const node = { name, leadership, etcd, events };
    this.#leaderships.push(node);
    return node;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    for (const node of this.#leaderships) {
      node.leadership.close();
      node.etcd.close();
    }
    await Promise.all(
      this.#groups.flatMap((group) => group.nodes.map((n) => n.server.shutdown())),
    );
    await this.etcd[Symbol.asyncDispose]();
  }
}

/** The lease TTL of bare leadership machines on a real etcd. */
export const REAL_TTL_MS = 2_000;

/** Starts a real etcd and lockd nodes on it; `await using` stops them all. */
export function startEtcdCluster(
  options: EtcdClusterFixtureOptions = {},
): Promise<EtcdClusterFixture> {
  return EtcdClusterFixture.start(options);
}

function nodeGroup(nodes: TestServer[]): ClusterNodes {
  const serving = () => nodes.find((n) => n.server.context.cluster?.serving);
  const waitServing = async (timeoutMs = 10_000) => {
    await waitFor(
      "one serving node",
      () => nodes.filter((n) => n.server.context.cluster?.serving).length === 1,
      timeoutMs,
    );
    return serving()!;
  };
  const waitLeaderKnown = async () => {
    const leader = await waitServing();
    const standbys = nodes.filter((n) => n !== leader);
    await waitFor(
      "the standbys to know the leader",
      () => standbys.every((n) => n.server.context.cluster?.leader?.advertise === leader.addr),
    );
    return { leader, standbys };
  };
  return { nodes, serving, waitServing, waitLeaderKnown };
}

/**
 * Every term has exactly one `leader_elected` record across all nodes' audit logs (issue 19.7:
 * the campaign's answer and the watch could both report one win).
 */
export function assertOneElectionRecordPerTerm(cluster: { nodes: TestServer[] }): void {
  const terms: number[] = [];
  for (const node of cluster.nodes) {
    for (const record of node.audit.records()) {
      if (record.event === "leader_elected") terms.push(record.term as number);
    }
  }
  assert.ok(terms.length > 0, "no leader_elected record");
  assert.deepEqual([...terms].sort((a, b) => a - b), [...new Set(terms)].sort((a, b) => a - b));
}
