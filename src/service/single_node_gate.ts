/**
 * The `OwnershipGate` of a single node (and of any service without a cluster): term 0, a random
 * ticket key per process, no ownership records.
 *
 * A single node that restarts forgets every session and lock, so nothing can be reclaimed from
 * an earlier process: its tickets verify only in the process that minted them. What version 2's
 * reclaim does serve here is a client whose connection went silent while the server lived on:
 * its RESUME finds the old session still open and moves its claims to the new one (`moved`). The
 * old session stays open until its I/O timeout, so `reclaimWindowMs` is the I/O timeout: after
 * that the old session is gone and its claims with it (RESUMED `none`, CLAIM_VOID).
 *
 * @module
 */

import { randomTicketKey, Tickets } from "../security/tickets.ts";
import type { ClusterVoidReason, OwnershipGate } from "./leadership_gate.ts";

export class SingleNodeGate implements OwnershipGate {
  readonly term = 0;
  readonly reclaimWindowMs: number;
  readonly tickets: Tickets;

  /** `ioTimeoutMs`: how long a silent session stays open (`-io-timeout`). */
  constructor(ioTimeoutMs: number) {
    this.reclaimWindowMs = ioTimeoutMs;
    this.tickets = new Tickets(randomTicketKey(), "");
  }

  /** No earlier term: nothing of one can be reclaimed. */
  reclaimWindowLeftMs(_prevTerm: number): number {
    return 0;
  }

  reclaimCheck(): ClusterVoidReason | null {
    return "term";
  }

  /** No records: an ACQUIRED leaves once its audit record is written. */
  beforeDeliver(): Promise<void> | null {
    return null;
  }

  ended(): void {}

  idle(): void {}

  busy(): void {}

  reclaimsDone(): void {}
}
