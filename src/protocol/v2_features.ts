/**
 * THE switch of protocol version 2's features that this server does not serve yet: lock kinds
 * (issue 22: a mode, a limit), holders' values (issue 23: a value, SET_VALUE) and looking at
 * locks (issue 23: QUERY, WATCH, UNWATCH). The layouts carry their fields from the start (with
 * neutral values: mode exclusive, limit 0 or 1, slot 0, no value); a version-2 request that asks
 * for more, or a message type of such a feature, gets ERROR INVALID_ARGUMENT "… not supported by
 * this server yet" and the session goes on (docs/protocol.md, "Version 2").
 *
 * The issues that build these features replace this module: `acquireClaim` passes mode, limit
 * and value through, and `featureRefusal` goes once every message type is served.
 *
 * @module
 */

import type { ClaimOptions } from "../service/claim_options.ts";
import { PLAIN_CLAIM } from "../service/claim_options.ts";
import type { WireError } from "../service/wire_errors.ts";
import type { Enum, LockMode, Query, SetValue, Unwatch, Watch } from "../wire/messages.ts";

/** What an ACQUIRE or RECLAIM of version 2 asks for beyond a plain lock. */
interface ClaimFields {
  readonly name: string;
  readonly mode: Enum<LockMode>;
  readonly limit: number;
  readonly value: Uint8Array;
  /** RECLAIM only: the owned claim's semaphore slot. */
  readonly slot?: number;
}

function notYet(name: string, what: string, action = "acquire"): WireError {
  return {
    code: "INVALID_ARGUMENT",
    message: `Cannot ${action} lock "${name}": ${what} is not supported by this server yet`,
  };
}

/**
 * The claim a version-2 ACQUIRE or RECLAIM asks the engine for, or the INVALID_ARGUMENT that
 * refuses it. Today: neutral fields only, which ask for a plain lock, as version 1 does.
 */
export function acquireClaim(fields: ClaimFields, action = "acquire"): ClaimOptions | WireError {
  const { name } = fields;
  if (fields.mode !== "exclusive") {
    return typeof fields.mode === "number"
      ? {
        code: "INVALID_ARGUMENT",
        message: `Cannot ${action} lock "${name}": mode ${fields.mode} is neither 0 (exclusive) ` +
          "nor 1 (shared)",
      }
      : notYet(name, "shared mode (a read/write lock)", action);
  }
  if (fields.limit !== 0 && fields.limit !== 1) {
    return notYet(name, `limit ${fields.limit} (a semaphore)`, action);
  }
  if ((fields.slot ?? 0) !== 0) return notYet(name, `slot ${fields.slot} (a semaphore)`, action);
  if (fields.value.length > 0) return notYet(name, "a holder's value", action);
  return PLAIN_CLAIM;
}

/** The INVALID_ARGUMENT answering a request of a feature this server does not serve yet. */
export function featureRefusal(message: SetValue | Query | Watch | Unwatch): WireError {
  switch (message.type) {
    case "set_value":
      return notYet(message.name, "SET_VALUE (a holder's value)", "set the value of");
    case "query":
      return notYet(message.name, "QUERY", "query");
    case "watch":
      return {
        code: "INVALID_ARGUMENT",
        message: `Cannot watch "${message.pattern}": WATCH is not supported by this server yet`,
      };
    case "unwatch":
      return {
        code: "INVALID_ARGUMENT",
        message: "Cannot unwatch: WATCH is not supported by this server yet",
      };
  }
}
