/**
 * Start-up failures that say which flag, which address or path, and what to
 * do (issue 13.2). `lockd serve` prints the message as `lockd: <message>` and
 * exits 1; the diagnostic log has it as the `error` of "cannot start".
 *
 * @module
 */

import { errorText } from "../error_text.ts";

/** A start that failed for a reason the operator can fix; the message says how. */
export class StartError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "StartError";
  }
}

/**
 * A listener that cannot bind: names the flag and the address, and the usual
 * fix for the error (in use, not this host's address, a privileged port).
 */
export function listenError(error: unknown, flag: string, addr: string): StartError {
  const text = errorText(error);
  const code = (error as { code?: unknown } | null)?.code;
  const port = addr.slice(addr.lastIndexOf(":") + 1);
  let why: string;
  if (error instanceof Deno.errors.AddrInUse || code === "EADDRINUSE" || /in use/i.test(text)) {
    why = `the address is already in use: another process (or another lockd) listens on it. ` +
      `Find it with: ss -ltnp 'sport = :${port}'; stop it or give ${flag} another port`;
  } else if (
    error instanceof Deno.errors.AddrNotAvailable || code === "EADDRNOTAVAIL" ||
    /assign requested address/i.test(text)
  ) {
    why = `this host has no such address (ip -brief address lists them); give ${flag} one of ` +
      `them, 127.0.0.1 for this machine only, or 0.0.0.0 for every interface`;
  } else if (
    error instanceof Deno.errors.PermissionDenied || code === "EACCES" ||
    /permission denied/i.test(text)
  ) {
    why = `permission denied: ports below 1024 need CAP_NET_BIND_SERVICE (see the comment in ` +
      `deploy/systemd/lockd.service); or give ${flag} a port of 1024 or more`;
  } else {
    why = text;
  }
  const detail = why === text ? "" : ` (${text})`;
  return new StartError(`Cannot listen on ${addr} (${flag}): ${why}${detail}`, { cause: error });
}

/** A file or directory named by a flag that cannot be used. */
export function pathError(
  error: unknown,
  flag: string,
  path: string,
  what: string,
  fix: string,
): StartError {
  return new StartError(`Cannot use ${what} "${path}" (${flag}): ${errorText(error)}. ${fix}`, {
    cause: error,
  });
}
