/**
 * The ordered shutdown (docs/operations.md, "Shutdown sequence") as a table of named steps, run
 * in order, each awaited before the next. Every step is logged by name at debug level when it
 * begins (`shutdown step`); the operator's lines (`shutdown: ...`) say what was done.
 * `tests/server/shutdown_steps_test.ts` checks the documented sequence against the steps a real
 * shutdown logs.
 *
 * @module
 */

import type { ClusterNode } from "../cluster/cluster_node.ts";
import type { Scheduler } from "../clock.ts";
import { SESSIONS_CLOSE_MS_MAX } from "../limits.ts";
import type { AuditLog } from "../log/audit.ts";
import { log } from "../log/diagnostic.ts";
import { SHUTTING_DOWN_ERROR } from "../service/wire_errors.ts";
import type { ProtocolListener } from "../protocol/listener.ts";
import type { LockService } from "../service/lock_service.ts";
import type { StallWatchdog } from "../service/stall_watchdog.ts";
import type { ConnectionRegistry } from "./connection_registry.ts";
import type { HttpServers } from "./http_start.ts";
import type { DataDirLock } from "./records.ts";

const logger = log("server");

/** What runs timers: stopped together at shutdown, or when the protocol listener cannot start. */
export interface TimerOwners {
  readonly watchdog: StallWatchdog;
  readonly service: LockService;
  readonly cluster: ClusterNode | null;
}

export function stopTimers({ watchdog, service, cluster }: TimerOwners): void {
  watchdog.stop();
  service.stop();
  cluster?.close();
}

/** What the shutdown stops. */
export interface ShutdownParts extends TimerOwners {
  readonly scheduler: Scheduler;
  readonly listener: ProtocolListener;
  readonly connections: ConnectionRegistry;
  readonly audit: AuditLog;
  readonly dataDirLock: DataDirLock | null;
  /** Each set once it listens; null when off (or not started). */
  readonly http: HttpServers;
}

type Note = (message: string, fields?: Record<string, unknown>) => void;

/** What a step is given. */
interface StepRun {
  readonly parts: ShutdownParts;
  /** Monotonic time until which the ops server stays up (`-shutdown-grace` after the start). */
  readonly graceEndsMs: number;
  /** The operator's line for a step done. */
  readonly note: Note;
  /** Turns `/healthz` and `/readyz` to 503. */
  readonly endLiveness: () => void;
}

interface ShutdownStep {
  /** Logged when the step begins; docs/operations.md names it. */
  readonly name: string;
  run(step: StepRun): void | Promise<void>;
}

/** The steps, in order. A step with nothing to do (no admin API, no cluster) returns at once. */
const SHUTDOWN_STEPS: readonly ShutdownStep[] = [
  {
    name: "probes",
    run({ endLiveness, note }) {
      endLiveness();
      note("shutdown: probes now answer 503");
    },
  },
  {
    name: "protocol-listener",
    async run({ parts, note }) {
      parts.listener.close();
      await parts.listener.done;
      note("shutdown: protocol listener closed; closing sessions");
    },
  },
  {
    name: "leadership",
    async run({ parts: { cluster }, note }) {
      if (cluster === null) return;
      // Planned hand-over: sessions learn NOT_LEADER, then a standby is elected at once.
      await cluster.handOver();
      note("shutdown: leadership handed over");
    },
  },
  {
    name: "sessions",
    async run({ parts }) {
      parts.service.beginShutdown();
      await parts.connections.endAll(SHUTTING_DOWN_ERROR, SESSIONS_CLOSE_MS_MAX);
    },
  },
  {
    name: "admin-api",
    async run({ parts: { http: { admin } }, note }) {
      if (admin === null) return;
      // Admin requests in flight finish (and write their audit records) before the log closes.
      await admin.close();
      note("shutdown: admin API closed");
    },
  },
  { name: "timers", run: ({ parts }) => stopTimers(parts) },
  // Writes what it can of the backlog within AUDIT_CLOSE_TIMEOUT_MS; logs and counts the rest.
  { name: "audit-log", run: ({ parts }) => parts.audit.close() },
  {
    name: "grace-window",
    async run({ parts: { http: { ops }, scheduler }, graceEndsMs, note }) {
      if (ops === null) return;
      const remainingMs = graceEndsMs - scheduler.monotonicMs();
      if (remainingMs <= 0) return;
      note("shutdown: ops server stays up for the grace window", {
        remaining_ms: Math.ceil(remainingMs),
      });
      await new Promise<void>((resolve) => scheduler.setTimer(resolve, remainingMs));
    },
  },
  { name: "ops-server", run: ({ parts }) => parts.http.ops?.close() },
  { name: "data-dir", run: ({ parts }) => parts.dataDirLock?.release() },
];

/**
 * Probes 503 → protocol listener and sessions → admin API → ops server last, no earlier than
 * the grace window after the start, so probes and scrapes see the whole window.
 */
export class Shutdown {
  readonly #parts: ShutdownParts;
  #live = true;
  #done: Promise<void> | undefined;
  #note: Note = (message, fields) => logger.info(message, fields);

  constructor(parts: ShutdownParts) {
    this.#parts = parts;
  }

  /** False once shutdown began. */
  get live(): boolean {
    return this.#live;
  }

  /** Runs the steps once; a later call returns the same completion. */
  run(graceMs: number): Promise<void> {
    this.#done ??= this.#steps(graceMs);
    return this.#done;
  }

  /**
   * Undoes a start that failed after the protocol listener: no grace window, and the steps'
   * lines at debug level (the operator needs the reason, not a shutdown sequence).
   */
  abort(): Promise<void> {
    this.#note = (message, fields) => logger.debug(message, fields);
    return this.run(0);
  }

  async #steps(graceMs: number): Promise<void> {
    const run: StepRun = {
      parts: this.#parts,
      graceEndsMs: this.#parts.scheduler.monotonicMs() + graceMs,
      note: this.#note,
      endLiveness: () => this.#live = false,
    };
    for (const step of SHUTDOWN_STEPS) {
      logger.debug("shutdown step", { step: step.name });
      // A step done at once is not awaited: the steps before the first wait run in one turn.
      const done = step.run(run);
      if (done !== undefined) await done;
    }
    this.#note("shutdown complete");
  }
}
