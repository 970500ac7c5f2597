/**
 * Access to locks: the ACL's check of an ACQUIRE or a read, and reading locks without queueing
 * (protocol version 2, issue 23): QUERY answers one LOCK_STATE, WATCH and UNWATCH go to the
 * watch hub. Reading is an ACL action of its own (`read`): a refusal
 * of a QUERY or of a WATCH of one name is counted (`lockd_acl_read_denials_total`), logged and
 * audited (`acl_deny`, `action: "read"`) like a refused ACQUIRE, and answered ACL_DENIED; a glob's
 * matches are filtered by the same rule without a word.
 *
 * @module
 */

import type { LockEngineView } from "../core/lock_queries.ts";
import { lockNameProblem } from "../core/lock_name.ts";
import type { EngineEvent, Peer } from "../core/types.ts";
import type { Scheduler } from "../clock.ts";
import type { ServerCounters } from "../counters.ts";
import type { AuditLog } from "../log/audit.ts";
import { log } from "../log/diagnostic.ts";
import type { Acl, AclAction } from "../security/acl.ts";
import { lockChangeOf, lockStateOf } from "./lock_state_frame.ts";
import { WatchPacer } from "./watch_pacer.ts";
import type { SessionRegistry } from "./session_registry.ts";
import { WatchHub } from "./watch_hub.ts";
import { aclDeniedError, aclReadDeniedError, errorFrame, type WireError } from "./wire_errors.ts";

const logger = log("protocol");

export interface LockReadsOptions {
  readonly view: LockEngineView;
  readonly audit: AuditLog;
  readonly counters: ServerCounters;
  readonly sessions: SessionRegistry;
  readonly acl: () => Acl;
  /** The service's scheduler: the instant of a LOCK_STATE, and the pacing of watch events. */
  readonly scheduler: Scheduler;
  /** The largest frame a LOCK_STATE may be (`-max-frame-bytes`): holders beyond it are left out. */
  readonly frameBytesMax: number;
}

export class LockReads {
  readonly #options: LockReadsOptions;
  readonly watches: WatchHub;
  readonly #pacer: WatchPacer;
  readonly #nowMs: () => number;

  constructor(options: LockReadsOptions) {
    this.#options = options;
    const nowMs = this.#nowMs = () => options.scheduler.monotonicMs();
    this.#pacer = new WatchPacer(options.scheduler, () => this.watches);
    // One change reaches every watcher of the lock: the hub builds and encodes its LOCK_STATE
    // once per flush and hands the same bytes to each (SessionPort.sendEncoded).
    this.watches = new WatchHub({
      view: options.view,
      port: (sessionId) => options.sessions.get(sessionId),
      stateOf: (name, requestId, event, reason) =>
        lockStateOf(options.view, name, nowMs(), options.frameBytesMax, requestId, event, reason),
      frameBytesMax: options.frameBytesMax,
      mayRead: (peer, name) => options.acl().decide(peer.identity, name, "read").allowed,
      wake: () => this.#pacer.wake(),
    });
  }

  /**
   * Whether the session may `action` lock `name` (ACQUIRE; QUERY or a WATCH of one name): null
   * when the ACL allows it, else the ERROR to answer with (ACL_DENIED), the refusal already
   * counted (`lockd_acl_denials_total`, `lockd_acl_read_denials_total`), logged at warn and
   * audited (`acl_deny`, with `action: "read"` for reading). Nothing else changes.
   */
  checkAccess(peer: Peer, name: string, action: AclAction): WireError | null {
    const decision = this.#options.acl().decide(peer.identity, name, action);
    if (decision.allowed) return null;
    const { counters, audit } = this.#options;
    if (action === "read") counters.aclReadDenials++;
    else counters.aclDenials++;
    logger.warn(`ACL denied ${action}`, {
      session: peer.sessionId,
      remote_addr: peer.remoteAddr,
      identity: peer.identity,
      lock: name,
      rule_line: decision.rule?.line ?? 0,
    });
    audit.append({
      event: "acl_deny",
      lock: name,
      token: null,
      identity: peer.identity,
      remote_addr: peer.remoteAddr,
      session: peer.sessionId,
      ...(action === "read" ? { action } : {}),
    });
    return action === "read"
      ? aclReadDeniedError(name, peer.identity)
      : aclDeniedError(name, peer.identity);
  }

  /** QUERY: one LOCK_STATE (event `state`), or ERROR INVALID_ARGUMENT / ACL_DENIED. */
  query(peer: Peer, requestId: number, name: string): void {
    const port = this.#options.sessions.get(peer.sessionId);
    if (port === undefined) return;
    const problem = lockNameProblem(name);
    const refusal: WireError | null = problem !== null
      ? { code: "INVALID_ARGUMENT", message: `Cannot query lock "${name}": ${problem}` }
      : this.checkAccess(peer, name, "read");
    if (refusal !== null) {
      port.send(errorFrame(requestId, name, refusal));
      return;
    }
    const { view, frameBytesMax } = this.#options;
    port.send(lockStateOf(view, name, this.#nowMs(), frameBytesMax, requestId, "state", "none"));
  }

  /**
   * WATCH: a pattern without wildcards is checked like a QUERY of that name (INVALID_ARGUMENT,
   * ACL_DENIED); then the watch hub starts the watch (or refuses it: a bad glob, too many).
   */
  watch(peer: Peer, requestId: number, pattern: string): void {
    const port = this.#options.sessions.get(peer.sessionId);
    if (port === undefined) return;
    const literal = !/[*?[\\]/.test(pattern);
    const problem = literal ? lockNameProblem(pattern) : null;
    const refusal: WireError | null = problem !== null
      ? { code: "INVALID_ARGUMENT", message: `Cannot watch lock "${pattern}": ${problem}` }
      : literal
      ? this.checkAccess(peer, pattern, "read")
      : null;
    const error = refusal ?? this.watches.watch(peer, requestId, pattern);
    if (error !== null) port.send(errorFrame(requestId, "", error));
    this.#pacer.wake();
  }

  /** An engine event: the change it makes to its lock goes to the lock's watchers. */
  changed(event: EngineEvent): void {
    const change = lockChangeOf(event);
    if (change === null) return;
    this.watches.changed(change);
    this.#pacer.wake();
  }

  /** The server stops: no more watch events. */
  stop(): void {
    this.#pacer.stop();
  }
}
