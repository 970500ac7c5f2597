/**
 * What a reclaim ticket vouches for, in one place: the claim fields the service mints into a
 * version-2 ACQUIRED or QUEUED and checks again when the claim comes back in a RECLAIM
 * (src/security/tickets.ts has the MAC; docs/protocol.md, "Reclaiming after a fail-over").
 *
 * - An **owned** ticket binds the term and session of the grant, the session's identity, the
 *   lock, the token, and the mode, limit and slot the ACQUIRED told (a RECLAIM sends back
 *   exactly those).
 * - A **queued** ticket binds the term and session, identity, lock, the order key and the mode.
 *   Its limit and slot are 0: a waiter holds nothing but its place, and a RECLAIM's limit is
 *   checked as an ACQUIRE's would be, so binding it would only make a client repeat what it
 *   asked for byte for byte.
 *
 * @module
 */

import type { ClaimMode, Peer } from "../core/types.ts";
import type { TicketClaim, Tickets } from "../security/tickets.ts";

/** The ticket's byte for a mode (as on the wire: 0 exclusive, 1 shared). */
function modeByte(mode: ClaimMode): number {
  return mode === "shared" ? 1 : 0;
}

/** What an ownership's ticket binds. */
export interface OwnedClaim {
  readonly name: string;
  readonly token: number;
  readonly mode: ClaimMode;
  readonly limit: number;
  readonly slot: number;
  /** A shared grant's write generation (0 otherwise). */
  readonly writeGeneration: number;
}

/** What a waiter's ticket binds. */
export interface QueuedClaim {
  readonly name: string;
  readonly orderTerm: number;
  readonly orderSeq: number;
  readonly mode: ClaimMode;
}

function ownedTicketClaim(term: number, sessionId: number, identity: string, c: OwnedClaim) {
  return {
    term,
    sessionId,
    identity,
    kind: "owned",
    name: c.name,
    token: c.token,
    mode: modeByte(c.mode),
    limit: c.limit,
    slot: c.slot,
    writeGeneration: c.writeGeneration,
  } satisfies TicketClaim;
}

function queuedTicketClaim(term: number, sessionId: number, identity: string, c: QueuedClaim) {
  return {
    term,
    sessionId,
    identity,
    kind: "queued",
    name: c.name,
    orderTerm: c.orderTerm,
    orderSeq: c.orderSeq,
    mode: modeByte(c.mode),
  } satisfies TicketClaim;
}

/** The ticket of an ownership of `peer`'s session, minted in `term`. */
export function ownedTicket(tickets: Tickets, term: number, peer: Peer, claim: OwnedClaim) {
  return tickets.mint(ownedTicketClaim(term, peer.sessionId, peer.identity, claim));
}

/** The ticket of a waiter of `peer`'s session, minted in `term`. */
export function queuedTicket(tickets: Tickets, term: number, peer: Peer, claim: QueuedClaim) {
  return tickets.mint(queuedTicketClaim(term, peer.sessionId, peer.identity, claim));
}

/**
 * Whether `ticket` was minted for this claim in (`term`, `sessionId`) to a session of
 * `identity` (the RECLAIM's connection's: a ticket never moves to another identity).
 */
export function ticketValid(
  tickets: Tickets,
  ticket: Uint8Array,
  term: number,
  sessionId: number,
  identity: string,
  claim: ({ kind: "owned" } & OwnedClaim) | ({ kind: "queued" } & QueuedClaim),
): boolean {
  return tickets.verify(
    claim.kind === "owned"
      ? ownedTicketClaim(term, sessionId, identity, claim)
      : queuedTicketClaim(term, sessionId, identity, claim),
    ticket,
  );
}
