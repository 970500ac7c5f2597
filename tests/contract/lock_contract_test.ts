/**
 * Runs the lock contract (`lock_contract.ts`) against every way of reaching the engine: the
 * LockService directly (no sockets, no codec), plain TCP, TLS and mutual TLS, each with sessions
 * of protocol version 1 and of version 2; and the reclaim contract (`reclaim_contract.ts`) and
 * the kinds and values contract (`kinds_contract.ts`) and the query and watch contract
 * (`observe_contract.ts`) against the same four with version 2. Every server has a manual scheduler, so leases, wait
 * bounds and I/O timeouts move only when a case says so.
 */

import { ManualScheduler } from "../../src/clock.ts";
import { DEFAULT_CONFIG, type ServerConfig } from "../../src/config.ts";
import { LockEngine } from "../../src/core/engine.ts";
import type { CloseCause, Peer } from "../../src/core/types.ts";
import { AuditLog } from "../../src/log/audit.ts";
import { ServerCounters } from "../../src/counters.ts";
import { errorFrame } from "../../src/service/wire_errors.ts";
import { type ClientMessage, type ServerMessage, withNeutral } from "../../src/wire/messages.ts";
import { ReplyOrder } from "../../src/protocol/reply_order.ts";
import { peerClosedCause, RequestDispatch } from "../../src/protocol/dispatch.ts";
import { LockService } from "../../src/service/lock_service.ts";
import type { SessionPort } from "../../src/service/session_registry.ts";
import { openTokenIssuer } from "../../src/storage/token_store.ts";
import { certPem, keyPem, serverTlsConfig } from "../fixtures/tls/certs.ts";
import { MemorySink } from "../helpers/memory_sink.ts";
import { RawClient } from "../helpers/raw_client.ts";
import { startTestServer } from "../helpers/start_server.ts";
import { type ContractClient, type ContractTransport, LOCK_CONTRACT } from "./lock_contract.ts";
import { KINDS_CONTRACT } from "./kinds_contract.ts";
import { OBSERVE_CONTRACT } from "./observe_contract.ts";
import { RECLAIM_CONTRACT } from "./reclaim_contract.ts";

/** How long a case waits for a frame before it fails (real time: only I/O is awaited). */
const FRAME_WAIT_MS = 5_000;

// ---- the service, without sockets ---------------------------------------------

/** Stands in the reply order for the end of the session (delivered as null). */
const CLOSED = Symbol("closed");

/**
 * What the service sends to one session, kept in the order it decided (holds included) by the
 * server's own reply order.
 */
class ServicePort implements SessionPort {
  readonly version: number;
  readonly #delivered: (ServerMessage | null)[] = [];
  /** Frames whose delivery a watch waits for (as a socket's write). */
  readonly #observed = new Map<ServerMessage, () => void>();
  readonly #order = new ReplyOrder<ServerMessage | typeof CLOSED>({
    deliver: (frame) => {
      this.#delivered.push(frame === CLOSED ? null : frame);
      const written = frame === CLOSED ? undefined : this.#observed.get(frame);
      if (written !== undefined) {
        this.#observed.delete(frame as ServerMessage);
        queueMicrotask(written);
      }
      this.#wake?.();
    },
  });
  #wake: (() => void) | null = null;
  closed = false;

  constructor(version: number) {
    this.version = version;
  }

  send(message: ServerMessage): void {
    this.#order.send(message);
  }

  sendObserved(message: ServerMessage, written: () => void): void {
    this.#observed.set(message, written);
    this.#order.send(message);
  }

  hold(): (message: ServerMessage | null) => void {
    return this.#order.hold();
  }

  terminate(finalError: ServerMessage | null): void {
    if (this.closed) return;
    this.closed = true;
    if (finalError !== null) this.#order.send(finalError);
    this.#order.send(CLOSED);
  }

  /** The next frame delivered (null: the session was closed); fails after FRAME_WAIT_MS. */
  async next(): Promise<ServerMessage | null> {
    const deadline = performance.now() + FRAME_WAIT_MS;
    while (this.#delivered.length === 0) {
      if (performance.now() > deadline) throw new Error(`no frame within ${FRAME_WAIT_MS} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 20);
        this.#wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.#wake = null;
    }
    return this.#delivered.shift()!;
  }
}

/** A client of the service: each request is the service command a session would call. */
function serviceClient(
  service: LockService,
  peer: Peer,
  port: ServicePort,
  version: number,
): ContractClient {
  const dispatch = new RequestDispatch(service, peer, version, (message) => port.send(message));
  const request = (message: ClientMessage) => {
    service.touch(peer.sessionId);
    if (message.type === "hello") throw new Error("not a request: hello");
    dispatch.apply(withNeutral(message));
  };
  const leave = (cause: CloseCause) => {
    if (!port.closed) {
      port.closed = true;
      service.connectionLost(peer.sessionId, cause);
    }
  };
  return {
    sessionId: peer.sessionId,
    version,
    send(...messages) {
      for (const message of messages) request(message);
      return Promise.resolve();
    },
    next: () => port.next(),
    close() {
      if (version >= 2 && !port.closed) request({ type: "goodbye", requestId: 0xffff_fff0 });
      leave(peerClosedCause(version));
      return Promise.resolve();
    },
    drop() {
      leave(peerClosedCause(version));
      return Promise.resolve();
    },
  };
}

function isServerMessage(value: { type: string }): value is ServerMessage {
  return [
    "welcome",
    "queued",
    "acquired",
    "released",
    "heartbeat_ack",
    "resumed",
    "value_set",
    "lock_state",
    "watching",
    "watch_ended",
    "error",
  ].includes(value.type);
}

const serviceTransport = (version: number): ContractTransport => ({
  name: version === 1 ? "service" : `service v${version}`,
  version,
  start(overrides) {
    const config: ServerConfig = { ...DEFAULT_CONFIG, ...overrides };
    const scheduler = new ManualScheduler();
    const sink = new MemorySink();
    const engine = new LockEngine({
      tokens: openTokenIssuer(null, scheduler.wallMs()),
      ioTimeoutMs: config.ioTimeoutMs,
      leaseDefaultMs: config.leaseDefaultMs,
      leaseMaxMs: config.leaseMaxMs,
      sessionsMax: config.sessionsMax,
      claimsPerSessionMax: config.claimsPerSessionMax,
      waitersPerLockMax: config.waitersPerLockMax,
      valueBytesMax: config.lockValueBytesMax,
    });
    const audit = new AuditLog(sink, { scheduler });
    const service = new LockService({ engine, audit, scheduler, counters: new ServerCounters() });
    audit.onHealthChange = (failure) => service.auditHealthChanged(failure);
    let nextPort = 40_000;
    const open = (at = version): ContractClient | ServerMessage => {
      const port = new ServicePort(at);
      const opened = service.openSession("", `127.0.0.1:${nextPort++}`, port);
      if ("code" in opened) {
        return errorFrame(0, "", opened);
      }
      return serviceClient(service, opened, port, at);
    };
    return Promise.resolve({
      identity: "",
      engine: engine.view,
      service,
      open(at?: number) {
        const client = open(at);
        if ("type" in client) throw new Error(`HELLO refused: ${JSON.stringify(client)}`);
        return Promise.resolve(client);
      },
      openRefused() {
        const client = open();
        if (!("type" in client)) throw new Error("HELLO was accepted");
        return Promise.resolve(client);
      },
      advance: (ms) => scheduler.advance(ms),
      auditRecords: () => sink.records(),
      async close() {
        engine.assertInvariants();
        service.beginShutdown();
        service.stop();
        await audit.close();
      },
    });
  },
});

// ---- real servers over sockets ------------------------------------------------

/** A server on loopback port 0 reached with `connect` (TCP or TLS), on a manual scheduler. */
function socketTransport(
  name: string,
  tlsConfig: Partial<ServerConfig>,
  identity: string,
  connect: (addr: string) => Promise<RawClient>,
  version: number,
): ContractTransport {
  return {
    name: version === 1 ? name : `${name} v${version}`,
    version,
    async start(config) {
      const scheduler = new ManualScheduler();
      const t = await startTestServer({ ...tlsConfig, ...config }, { scheduler });
      const clients: RawClient[] = [];
      const gone = async (raw: RawClient) => {
        await raw[Symbol.asyncDispose]();
        // The server has handled the close once the session is gone from the engine.
        const deadline = performance.now() + FRAME_WAIT_MS;
        while (t.server.context.connections.size > clients.filter((c) => c !== raw).length) {
          if (performance.now() > deadline) break;
          await new Promise((resolve) => setTimeout(resolve, 2));
        }
        clients.splice(clients.indexOf(raw), 1);
      };
      const wrap = (raw: RawClient, version: number): ContractClient => ({
        sessionId: raw.welcome!.sessionId,
        version,
        send: (...messages) => raw.send(...messages),
        next: async () => {
          const message = await raw.next(FRAME_WAIT_MS);
          if (message !== null && message.type !== "error" && !isServerMessage(message)) {
            throw new Error(`a client frame from the server: ${message.type}`);
          }
          return message as ServerMessage | null;
        },
        close: async () => {
          // A version-2 client says GOODBYE, and the server closes.
          if (version >= 2 && clients.includes(raw)) {
            await raw.send({ type: "goodbye", requestId: 0xffff_fff0 }).catch(() => {});
          }
          await gone(raw);
        },
        drop: () => gone(raw),
      });
      return {
        identity,
        engine: t.server.context.engine,
        service: t.server.context.service,
        async open(at = version) {
          const raw = await (await connect(t.addr)).hello("contract", at);
          clients.push(raw);
          return wrap(raw, at);
        },
        async openRefused() {
          await using raw = await connect(t.addr);
          await raw.send({ type: "hello", version, clientName: "refused" });
          const refusal = await raw.next(FRAME_WAIT_MS);
          return refusal as ServerMessage | null;
        },
        advance: (ms) => scheduler.advance(ms),
        auditRecords: () => t.audit.records(),
        async close() {
          t.server.context.engine.assertInvariants();
          for (const raw of clients) await raw[Symbol.asyncDispose]();
          await t.server.shutdown();
        },
      };
    },
  };
}

const caCerts = [certPem("ca")];

const transports = (version: number): ContractTransport[] => [
  serviceTransport(version),
  socketTransport("tcp", {}, "", (addr) => RawClient.connect(addr), version),
  socketTransport(
    "tls",
    serverTlsConfig(false),
    "",
    (addr) => RawClient.connectTls(addr, { caCerts }),
    version,
  ),
  socketTransport(
    "mtls",
    serverTlsConfig(true),
    "spiffe://example.org/worker",
    (addr) =>
      RawClient.connectTls(addr, {
        caCerts,
        cert: certPem("client-uri"),
        key: keyPem("client-uri"),
      }),
    version,
  ),
];

const RUNS = [
  ...transports(1).map((transport) => ({ transport, cases: LOCK_CONTRACT })),
  ...transports(2).map((transport) => ({
    transport,
    cases: [...LOCK_CONTRACT, ...RECLAIM_CONTRACT, ...KINDS_CONTRACT, ...OBSERVE_CONTRACT],
  })),
];

for (const { transport, cases } of RUNS) {
  for (const c of cases) {
    Deno.test(`${transport.name}: ${c.name}`, async () => {
      const server = await transport.start({ listen: "127.0.0.1:0", ...c.config });
      try {
        await c.run(server);
      } finally {
        await server.close();
      }
    });
  }
}
