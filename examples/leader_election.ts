/**
 * Leader election with fencing on lockd: one instance of a service leads, the others follow it
 * and forward to it (README.md, "Leader election with fencing").
 *
 * - **campaign**: `acquire` the election lock; the fencing token is the leader's epoch;
 * - **publish**: the value of the ownership says where the leader serves;
 * - **observe**: followers watch the lock and always know the current leader and its address;
 * - **resign**: `release` (or the leader's process ends: its lease runs out).
 *
 * Each instance serves HTTP. The leader answers `GET /` itself with its id and epoch, while
 * its lock is held: at `lost` it stops answering as the leader at once and campaigns again. A
 * follower forwards the request to the leader it observed. `POST /resign` makes a leader step
 * down. Whatever the leader writes to a shared resource should carry its epoch, which the
 * resource compares with the largest it has seen: a paused old leader that wakes up after the
 * new one was elected is refused there, which a lease without a token cannot do.
 *
 * Run three instances against a lockd server (`deno task start`), then ask any of them:
 *
 *     deno run --allow-net examples/leader_election.ts -id a &
 *     deno run --allow-net examples/leader_election.ts -id b &
 *     deno run --allow-net examples/leader_election.ts -id c &
 *     curl -s http://127.0.0.1:<port of any>/   # "leader a, epoch 1795…"
 *
 * tests/examples/leader_election_test.ts runs it against a real server, and on a cluster.
 *
 * @module
 */

import { type Client, connect, type Lock, type LockInfo } from "../mod.ts";

/** How one instance is started. */
export interface ServiceOptions {
  /** The lockd server (`host:port`), or the nodes of a cluster. */
  readonly lockd: string | readonly string[];
  /** This instance's name, shown in answers. */
  readonly id: string;
  /** The election lock. */
  readonly election?: string;
  /** The leader's lease: how long a vanished leader blocks the next one at most. */
  readonly leaseMs?: number;
}

/** A running instance. */
export interface Service extends AsyncDisposable {
  /** Where it serves HTTP (`127.0.0.1:port`). */
  readonly addr: string;
  readonly id: string;
  /** The epoch (fencing token) while it leads, else null. */
  readonly epoch: number | null;
  /** The leader it last observed: its address and epoch (null while there is none). */
  readonly leader: { readonly addr: string; readonly epoch: number } | null;
  /** Gives leadership up (RELEASE), then campaigns again. */
  resign(): Promise<void>;
  /** Stops serving and leaves lockd (a leader resigns). */
  close(): Promise<void>;
}

/** Starts an instance: it serves HTTP, campaigns, and observes the election. */
export async function startService(options: ServiceOptions): Promise<Service> {
  const election = options.election ?? "service/leader";
  const lockd = typeof options.lockd === "string" ? { addr: options.lockd } : {
    addrs: options.lockd,
  };
  const stop = new AbortController();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: stop.signal, onListen: () => {} },
    (request) => answer(request),
  );
  const addr = `127.0.0.1:${server.addr.port}`;
  const client: Client = await connect({ ...lockd, clientName: `example-${options.id}` });
  let lock: Lock | null = null;
  let leader: { addr: string; epoch: number } | null = null;

  async function answer(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (request.method === "POST" && url.pathname === "/resign") {
      await service.resign();
      return new Response("resigned\n");
    }
    // Lead only while the lock is held: `lost` is checked right before answering as the leader.
    if (lock !== null && !lock.lost.aborted) {
      return new Response(`leader ${options.id}, epoch ${lock.token}\n`);
    }
    const current = leader;
    if (current === null || current.addr === addr) {
      return new Response("no leader right now\n", { status: 503 });
    }
    // A follower forwards to the leader it observed.
    const forwarded = await fetch(`http://${current.addr}${url.pathname}`, { signal: stop.signal });
    return new Response(forwarded.body, { status: forwarded.status });
  }

  /** Campaign: wait for the lock, publish this instance's address, lead until lost. */
  async function campaign(): Promise<void> {
    while (!stop.signal.aborted) {
      try {
        const held = await client.acquire(election, {
          leaseMs: options.leaseMs ?? 2_000,
          value: addr,
          signal: stop.signal,
        });
        lock = held;
        // Lead until the ownership ends; then stop leading at once and campaign again.
        await new Promise<void>((resolve) => {
          if (held.lost.aborted) resolve();
          held.lost.addEventListener("abort", () => resolve(), { once: true });
          stop.signal.addEventListener("abort", () => resolve(), { once: true });
          resigning = resolve;
        });
        if (lock === held) lock = null;
        await held.release();
      } catch (error) {
        if (stop.signal.aborted) return;
        // The client reconnects by itself; a refused campaign is tried again after a pause.
        console.error(`${options.id}: campaign failed: ${(error as Error).message}`);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  }
  let resigning: (() => void) | null = null;

  /** Observe: the election's states, for every follower to know the leader and its address. */
  async function follow(): Promise<void> {
    for await (const state of client.observe(election, { signal: stop.signal })) {
      leader = leaderOf(state);
    }
  }

  const campaigning = campaign();
  const following = follow().catch((error) => {
    if (!stop.signal.aborted) console.error(`${options.id}: observe failed: ${error.message}`);
  });

  const service: Service = {
    addr,
    id: options.id,
    get epoch() {
      return lock !== null && !lock.lost.aborted ? lock.token : null;
    },
    get leader() {
      return leader;
    },
    async resign() {
      const held = lock;
      lock = null; // stop answering as the leader before the lock goes
      resigning?.();
      await held?.release();
    },
    async close() {
      if (stop.signal.aborted) return;
      stop.abort();
      resigning?.();
      await Promise.all([campaigning, following]);
      await client.close();
      await server.finished;
    },
    [Symbol.asyncDispose]() {
      return this.close();
    },
  };
  return service;
}

/** The leader a state names: the holder's published address and its token as the epoch. */
function leaderOf(state: LockInfo): { addr: string; epoch: number } | null {
  const holder = state.holder;
  if (holder === null || holder.value.length === 0) return null;
  return { addr: new TextDecoder().decode(holder.value), epoch: holder.token };
}

if (import.meta.main) {
  const args = Deno.args;
  const flag = (name: string, fallback: string) => {
    const i = args.indexOf(`-${name}`);
    return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
  };
  const service = await startService({
    lockd: flag("lockd", "127.0.0.1:7400").split(","),
    id: flag("id", `instance-${Deno.pid}`),
  });
  console.log(`${service.id} serves on http://${service.addr}/`);
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    Deno.addSignalListener(signal, () => void service.close().then(() => Deno.exit(0)));
  }
}
