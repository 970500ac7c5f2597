/**
 * A LockService without sockets on a manual clock, for tests of what the service does with the
 * engine's events (audit records, frames, counters, rules): sessions are ports that keep the
 * frames the service sends them, in the server's own reply order.
 */

import { ManualScheduler } from "../../src/clock.ts";
import { LockEngine } from "../../src/core/engine.ts";
import type { Peer } from "../../src/core/types.ts";
import type { TokenSource } from "../../src/core/tokens.ts";
import { ServerCounters } from "../../src/counters.ts";
import { AuditLog } from "../../src/log/audit.ts";
import { ReplyOrder } from "../../src/protocol/reply_order.ts";
import type { Acl } from "../../src/security/acl.ts";
import type { LockRules } from "../../src/security/lock_rules.ts";
import { type ClaimOptions, PLAIN_CLAIM } from "../../src/service/claim_options.ts";
import { LockService } from "../../src/service/lock_service.ts";
import type { SessionPort } from "../../src/service/session_registry.ts";
import { openTokenIssuer } from "../../src/storage/token_store.ts";
import { type ClientRequest, type ServerMessage, withNeutral } from "../../src/wire/messages.ts";
import { peerClosedCause, RequestDispatch } from "../../src/protocol/dispatch.ts";
import type { OwnershipGate } from "../../src/service/leadership_gate.ts";
import { MemorySink } from "../helpers/memory_sink.ts";

/** The frames one session got, in reply order; `closed` once the service terminated it. */
export class FramePort implements SessionPort {
  readonly frames: ServerMessage[] = [];
  closed = false;
  readonly version: number;
  readonly #order = new ReplyOrder<ServerMessage>({ deliver: (f) => this.frames.push(f) });

  constructor(version = 1) {
    this.version = version;
  }

  send(message: ServerMessage): void {
    this.#order.send(message);
  }

  hold(): (message: ServerMessage | null) => void {
    return this.#order.hold();
  }

  terminate(finalError: ServerMessage | null): void {
    this.closed = true;
    if (finalError !== null) this.#order.send(finalError);
  }

  /** The frames delivered since the last call. */
  take(): ServerMessage[] {
    return this.frames.splice(0);
  }
}

export interface Client {
  readonly peer: Peer;
  readonly port: FramePort;
  /** Sends requests as its session would (through the session's dispatch). */
  send(...messages: ClientRequest[]): void;
  /** The connection ends: with GOODBYE first when `goodbye`, else as its peer closing it. */
  leave(goodbye?: boolean): void;
}

export interface ServiceHarness extends AsyncDisposable {
  readonly scheduler: ManualScheduler;
  readonly engine: LockEngine;
  readonly service: LockService;
  readonly counters: ServerCounters;
  readonly sink: MemorySink;
  /** Opens a session (its remote address is unique: `127.0.0.1:<n>`), at protocol `version`. */
  open(identity?: string, clientName?: string, version?: number): Client;
  /** ACQUIRE with a lease of 10 s and no wait bound, by default a plain (version 1) claim. */
  acquire(client: Client, requestId: number, name: string, claim?: Partial<ClaimOptions>): void;
  /** The audit records written so far (waits for the writes of this turn). */
  records(): Promise<Record<string, unknown>[]>;
}

export interface HarnessOptions {
  readonly lockRules?: LockRules;
  readonly acl?: Acl;
  /** Records and reclaims (default: a single node's). */
  readonly ownership?: OwnershipGate;
  /** The scheduler (default: a new manual one). */
  readonly scheduler?: ManualScheduler;
  /** The fencing tokens (default: not durable, from the scheduler's wall clock). */
  readonly tokens?: TokenSource;
}

/** Lets the audit log's writes of this turn finish (they start in a microtask). */
export async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setTimeout(resolve, 0));
}

export function serviceHarness(options: HarnessOptions = {}): ServiceHarness {
  const scheduler = options.scheduler ?? new ManualScheduler();
  const sink = new MemorySink();
  const engine = new LockEngine({
    tokens: options.tokens ?? openTokenIssuer(null, scheduler.wallMs()),
  });
  const audit = new AuditLog(sink, { scheduler });
  const counters = new ServerCounters();
  const service = new LockService({
    engine,
    audit,
    scheduler,
    counters,
    ...(options.acl === undefined ? {} : { acl: options.acl }),
    ...(options.lockRules === undefined ? {} : { lockRules: options.lockRules }),
    ...(options.ownership === undefined ? {} : { ownership: options.ownership }),
  });
  audit.onHealthChange = (failure) => service.auditHealthChanged(failure);
  let nextPort = 50_000;
  return {
    scheduler,
    engine,
    service,
    counters,
    sink,
    open(identity = "", clientName = "", version = 1) {
      const port = new FramePort(version);
      const peer = service.openSession(identity, `127.0.0.1:${nextPort++}`, port, clientName);
      if ("code" in peer) throw new Error(`session refused: ${peer.message}`);
      const dispatch = new RequestDispatch(service, peer, version, (m) => port.send(m));
      return {
        peer,
        port,
        send(...messages) {
          for (const message of messages) {
            service.touch(peer.sessionId);
            dispatch.apply(withNeutral(message));
          }
        },
        leave(goodbye = false) {
          if (goodbye) dispatch.apply({ type: "goodbye", requestId: 0xffff_fff0 });
          else service.connectionLost(peer.sessionId, peerClosedCause(version));
        },
      };
    },
    acquire(client, requestId, name, claim = {}) {
      service.acquire(client.peer, requestId, name, 10_000, null, { ...PLAIN_CLAIM, ...claim });
    },
    async records() {
      await settle();
      return sink.records();
    },
    async [Symbol.asyncDispose]() {
      engine.assertInvariants();
      service.beginShutdown();
      service.stop();
      await audit.close();
    },
  };
}
