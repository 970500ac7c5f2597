/**
 * Whether to follow a NOT_LEADER. Its name field is the leader's address as a node says it, so
 * it is untrusted input: a name that is not a plain `host:port` is a failed node (the client
 * goes on with its own list), never a crash and never a frozen reconnect loop.
 *
 * **The trust model of redirects** (docs/protocol.md, "Several nodes"): a client follows a
 * NOT_LEADER to an address in its own list always; to an address outside its list only with
 * TLS, where the node it reaches must present a certificate from the client's CA (for the host
 * it dials, or `tls.serverName`) before anything is sent. Without TLS nothing proves that the
 * named host is a lockd node of this cluster, so a node (misconfigured, compromised, or spoofed
 * on the path) cannot send clients, and their lock names and client names, to a host of its
 * choosing.
 *
 * @module
 */

import net from "node:net";

/** Longest address a NOT_LEADER may name: a 253-byte DNS name, ":", a 5-digit port. */
const LEADER_ADDRESS_CHARS_MAX = 253 + 1 + 5;

/** A DNS label: letters, digits, `-` inside, `_` allowed (service names); 1..63 characters. */
const LABEL = /^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$/;

/**
 * The canonical `host:port` of a leader address (lower-case host, IPv6 in brackets), or null
 * when it is not one: a DNS name, an IPv4 address or a bracketed IPv6 address (no zone), and a
 * decimal port 1..65535, at most {@link LEADER_ADDRESS_CHARS_MAX} printable ASCII characters.
 */
export function parseLeaderAddress(value: string): string | null {
  if (value.length === 0 || value.length > LEADER_ADDRESS_CHARS_MAX + 2) return null;
  if (!/^[\x21-\x7e]+$/.test(value)) return null; // no spaces, no controls, ASCII only
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9_.-]+)):([0-9]{1,5})$/.exec(value);
  if (match === null) return null;
  const port = Number(match[3]);
  if (port < 1 || port > 65_535) return null;
  if (match[1] !== undefined) {
    return net.isIPv6(match[1]) ? `[${match[1].toLowerCase()}]:${port}` : null;
  }
  const host = match[2].toLowerCase();
  if (host.length > 253) return null;
  const labels = host.split(".");
  if (/^[0-9]+$/.test(labels.at(-1)!)) {
    return net.isIPv4(host) ? `${host}:${port}` : null; // all-digit top label: an IPv4 address
  }
  return labels.every((label) => LABEL.test(label)) ? `${host}:${port}` : null;
}

/** `host:port` compared as the client compares nodes: lower-case host, same port. */
export function nodeKey(addr: string): string {
  return parseLeaderAddress(addr) ?? addr.toLowerCase();
}

/** What to do with a NOT_LEADER's name. */
export type RedirectVerdict =
  | { readonly follow: true; readonly addr: string }
  | { readonly follow: false; readonly why: "no_leader" | "invalid" | "outside_list" };

/**
 * Follow the named leader, or not: "" names no leader (go on with the list); an invalid name
 * is a failed node; an address outside `addrs` is followed only with TLS.
 */
export function redirectVerdict(
  name: string,
  addrs: readonly string[],
  tls: boolean,
): RedirectVerdict {
  if (name === "") return { follow: false, why: "no_leader" };
  const addr = parseLeaderAddress(name);
  if (addr === null) return { follow: false, why: "invalid" };
  const listed = addrs.find((a) => nodeKey(a) === addr);
  if (listed !== undefined) return { follow: true, addr: listed };
  return tls ? { follow: true, addr } : { follow: false, why: "outside_list" };
}

/**
 * A string from the server as it may appear in an error message: cut to 80 characters, quoted,
 * with control, format (bidirectional overrides, zero-width) and line-separator characters
 * escaped as `\uXXXX`, so it cannot reorder or hide the text around it.
 */
export function quoteUntrusted(text: string): string {
  const cut = text.length > 80 ? `${text.slice(0, 80)}…` : text;
  return JSON.stringify(cut).replace(
    /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}]/gu,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/**
 * Why a NOT_LEADER was not followed. `invalid` is worded as what the node did wrong (it goes
 * into a ServerProtocolError, which names the node); `outside_list` names the node itself.
 */
export function refusedRedirectText(
  addr: string,
  name: string,
  why: "invalid" | "outside_list",
): string {
  return why === "invalid"
    ? `it answered NOT_LEADER naming ${
      quoteUntrusted(name)
    } as the leader, which is not a host:port address (that node counts as failed)`
    : `lockd at ${addr} is not the leader and named ${name} as the leader, which is not in the ` +
      `address list; without TLS a redirect is followed only to a listed address (add it to ` +
      `the list, or use TLS, where the new node must present a certificate from your CA)`;
}
