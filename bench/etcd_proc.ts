/**
 * A throwaway etcd cluster on loopback for tests, the cluster soak and `deno task cluster`:
 * N members (3 by default) with free ports in a temp dir, each one a child process that can be
 * killed, stopped (SIGSTOP), continued and restarted by PID; the raft leader is found through
 * the members' status endpoint.
 */

export interface EtcdMember {
  readonly name: string;
  /** `http://127.0.0.1:PORT`, the client URL (gRPC and the JSON gateway). */
  readonly clientUrl: string;
  readonly peerUrl: string;
  readonly dataDir: string;
  readonly logPath: string;
  /** PID of the running process, or null while the member is down. */
  readonly pid: number | null;
}

export interface EtcdClusterOptions {
  members?: number;
  /** Parent of the cluster's temp dir (default: the system temp dir). */
  dir?: string;
  /** How long start() and restart() wait for a healthy cluster. */
  startTimeoutMs?: number;
  /**
   * Start every member in its own session (process group), so a Ctrl-C in the terminal reaches
   * only the parent, which then stops the members by PID when it is done with them (`deno task
   * cluster`: the lockd nodes hand over through etcd on their way out).
   */
  detached?: boolean;
  /**
   * Client URLs over TLS, with client certificates required (`--client-cert-auth`): PEM files
   * of the server certificate (it must allow clientAuth too: etcd's JSON gateway presents it to
   * etcd itself), its key, and the CA that signs the client certificates. Peers stay plain.
   */
  tls?: {
    certFile: string;
    keyFile: string;
    caFile: string;
    /** The client pair the cluster's own health checks present. */
    clientCertFile: string;
    clientKeyFile: string;
  };
}

/** Whether an `etcd` binary is on PATH. */
export function etcdAvailable(): boolean {
  try {
    const out = new Deno.Command("etcd", { args: ["--version"], stdout: "null", stderr: "null" })
      .outputSync();
    return out.success;
  } catch {
    return false;
  }
}

/** Ports the OS says are free right now (each bound on 127.0.0.1 port 0, then released). */
function freePorts(n: number): number[] {
  const listeners = Array.from(
    { length: n },
    () => Deno.listen({ hostname: "127.0.0.1", port: 0 }),
  );
  const ports = listeners.map((l) => l.addr.port);
  for (const l of listeners) l.close();
  return ports;
}

interface MemberState {
  name: string;
  clientUrl: string;
  peerUrl: string;
  dataDir: string;
  logPath: string;
  child: Deno.ChildProcess | null;
}

export class EtcdCluster implements AsyncDisposable {
  readonly dir: string;
  readonly #members: MemberState[];
  readonly #initialCluster: string;
  readonly #token: string;
  readonly #startTimeoutMs: number;
  readonly #tls: EtcdClusterOptions["tls"];
  readonly #detached: boolean;
  /** TLS client of the health checks (with a client certificate), or undefined. */
  readonly #http: Deno.HttpClient | undefined;
  #ownsDir: boolean;

  private constructor(
    dir: string,
    members: MemberState[],
    token: string,
    startTimeoutMs: number,
    ownsDir: boolean,
    tls: EtcdClusterOptions["tls"],
    detached = false,
  ) {
    this.#detached = detached;
    this.dir = dir;
    this.#members = members;
    this.#initialCluster = members.map((m) => `${m.name}=${m.peerUrl}`).join(",");
    this.#token = token;
    this.#startTimeoutMs = startTimeoutMs;
    this.#ownsDir = ownsDir;
    this.#tls = tls;
    this.#http = tls === undefined ? undefined : Deno.createHttpClient({
      caCerts: [Deno.readTextFileSync(tls.caFile)],
      cert: Deno.readTextFileSync(tls.clientCertFile),
      key: Deno.readTextFileSync(tls.clientKeyFile),
    });
  }

  /** Starts every member and waits until the cluster has a leader and answers writes. */
  static async start(options: EtcdClusterOptions = {}): Promise<EtcdCluster> {
    const count = options.members ?? 3;
    const dir = await Deno.makeTempDir({ dir: options.dir, prefix: "lockd-etcd-" });
    const ports = freePorts(count * 2);
    const scheme = options.tls === undefined ? "http" : "https";
    const members: MemberState[] = Array.from({ length: count }, (_, i) => ({
      name: `etcd${i + 1}`,
      clientUrl: `${scheme}://127.0.0.1:${ports[2 * i]}`,
      peerUrl: `http://127.0.0.1:${ports[2 * i + 1]}`,
      dataDir: `${dir}/etcd${i + 1}`,
      logPath: `${dir}/etcd${i + 1}.log`,
      child: null,
    }));
    const token = `lockd-${crypto.randomUUID()}`;
    const cluster = new EtcdCluster(
      dir,
      members,
      token,
      options.startTimeoutMs ?? 15_000,
      true,
      options.tls,
      options.detached,
    );
    try {
      // One at a time: a new member first asks its peers whether it was bootstrapped before,
      // and a peer whose port is bound but not yet served makes it wait a second per peer.
      for (const m of members) {
        cluster.#spawn(m);
        await waitServing(m.peerUrl + "/members", cluster.#startTimeoutMs);
      }
      await cluster.waitHealthy();
    } catch (error) {
      await cluster[Symbol.asyncDispose]();
      throw error;
    }
    return cluster;
  }

  get members(): EtcdMember[] {
    return this.#members.map((m) => ({
      name: m.name,
      clientUrl: m.clientUrl,
      peerUrl: m.peerUrl,
      dataDir: m.dataDir,
      logPath: m.logPath,
      pid: m.child?.pid ?? null,
    }));
  }

  /** Every member's client URL, for `-cluster-etcd`. */
  get clientUrls(): string[] {
    return this.#members.map((m) => m.clientUrl);
  }

  #spawn(m: MemberState): void {
    m.child = new Deno.Command("etcd", {
      args: [
        "--name",
        m.name,
        "--data-dir",
        m.dataDir,
        "--listen-client-urls",
        m.clientUrl,
        "--advertise-client-urls",
        m.clientUrl,
        "--listen-peer-urls",
        m.peerUrl,
        "--initial-advertise-peer-urls",
        m.peerUrl,
        "--initial-cluster",
        this.#initialCluster,
        "--initial-cluster-token",
        this.#token,
        "--initial-cluster-state",
        "new",
        // etcd's defaults, spelled out: the fail-over figures depend on them.
        "--heartbeat-interval",
        "100",
        "--election-timeout",
        "1000",
        "--logger",
        "zap",
        "--log-outputs",
        m.logPath,
        ...(this.#tls === undefined ? [] : [
          "--cert-file",
          this.#tls.certFile,
          "--key-file",
          this.#tls.keyFile,
          "--trusted-ca-file",
          this.#tls.caFile,
          "--client-cert-auth",
        ]),
      ],
      stdin: "null",
      stdout: "null",
      stderr: "null",
      detached: this.#detached,
    }).spawn();
  }

  #member(name: string): MemberState {
    const m = this.#members.find((x) => x.name === name);
    if (m === undefined) throw new RangeError(`No etcd member "${name}"`);
    return m;
  }

  /** Sends `signal` to a member; SIGKILL and SIGTERM wait for the exit. */
  async kill(name: string, signal: Deno.Signal = "SIGKILL"): Promise<void> {
    const m = this.#member(name);
    const child = m.child;
    if (child === null) return;
    try {
      child.kill(signal);
    } catch {
      // already gone
    }
    if (signal === "SIGSTOP" || signal === "SIGCONT") return;
    await child.status;
    m.child = null;
  }

  /** Starts a member again on its data dir (after kill). */
  restart(name: string): void {
    const m = this.#member(name);
    if (m.child !== null) throw new Error(`etcd member "${name}" is still running`);
    this.#spawn(m);
  }

  /** The name of the raft leader as the members report it, or null without one. */
  async leader(): Promise<string | null> {
    const byId = new Map<string, string>();
    let leaderId: string | null = null;
    for (const m of this.#members) {
      if (m.child === null) continue;
      try {
        const status = await postJson(
          m.clientUrl,
          "/v3/maintenance/status",
          {},
          1_000,
          this.#http,
        );
        byId.set(String(status.header?.member_id), m.name);
        if (status.leader && status.leader !== "0") leaderId = String(status.leader);
      } catch {
        // a stopped or dying member
      }
    }
    return leaderId === null ? null : byId.get(leaderId) ?? null;
  }

  /** Waits until every running member answers and a write through the first one succeeds. */
  async waitHealthy(timeoutMs = this.#startTimeoutMs): Promise<void> {
    const until = performance.now() + timeoutMs;
    let last: unknown = null;
    while (performance.now() < until) {
      const running = this.#members.filter((m) => m.child !== null);
      try {
        for (const m of running) {
          const h = await getJson(m.clientUrl, "/health", 1_000, this.#http);
          if (h.health !== "true") throw new Error(`${m.name}: ${JSON.stringify(h)}`);
        }
        if ((await this.leader()) !== null) return;
      } catch (error) {
        last = error;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    const logs = await Promise.all(
      this.#members.map(async (m) =>
        `--- ${m.name}\n${(await Deno.readTextFile(m.logPath).catch(() => "")).slice(-2_000)}`
      ),
    );
    throw new Error(`etcd cluster not healthy after ${timeoutMs} ms: ${last}\n${logs.join("\n")}`);
  }

  /** Kills every member and removes the temp dir. */
  async [Symbol.asyncDispose](): Promise<void> {
    for (const m of this.#members) {
      if (m.child !== null) {
        try {
          m.child.kill("SIGCONT");
        } catch {
          // gone
        }
        await this.kill(m.name, "SIGKILL");
      }
    }
    if (this.#ownsDir) {
      this.#ownsDir = false;
      this.#http?.close();
      await Deno.remove(this.dir, { recursive: true }).catch(() => {});
    }
  }
}

/** fetch with a time bound whose timer is cleared (AbortSignal.timeout leaves it running). */
async function fetchWithin(
  url: string,
  init: RequestInit,
  timeoutMs: number,
  client?: Deno.HttpClient,
): Promise<Response> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  try {
    const response = await fetch(url, {
      ...init,
      signal: controller.signal,
      ...(client === undefined ? {} : { client }),
    });
    // The body is read by the caller: keep the bound until it is.
    const body = await response.arrayBuffer();
    return new Response(body, { status: response.status, headers: response.headers });
  } finally {
    clearTimeout(timer);
  }
}

/** Waits until `url` answers (any status). */
async function waitServing(url: string, timeoutMs: number): Promise<void> {
  const until = performance.now() + timeoutMs;
  for (;;) {
    try {
      const response = await fetchWithin(url, {}, 200);
      await response.body?.cancel();
      return;
    } catch (error) {
      if (performance.now() > until) throw new Error(`${url} did not answer: ${error}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }
}

// deno-lint-ignore no-explicit-any
type Json = any;

async function postJson(
  base: string,
  path: string,
  body: unknown,
  timeoutMs: number,
  client?: Deno.HttpClient,
): Promise<Json> {
  const response = await fetchWithin(
    base + path,
    {
      method: "POST",
      body: JSON.stringify(body),
    },
    timeoutMs,
    client,
  );
  const json = await response.json();
  if (!response.ok) throw new Error(`${path}: ${response.status} ${JSON.stringify(json)}`);
  return json;
}

async function getJson(
  base: string,
  path: string,
  timeoutMs: number,
  client?: Deno.HttpClient,
): Promise<Json> {
  const response = await fetchWithin(base + path, {}, timeoutMs, client);
  const json = await response.json();
  if (!response.ok) throw new Error(`${path}: ${response.status} ${JSON.stringify(json)}`);
  return json;
}
