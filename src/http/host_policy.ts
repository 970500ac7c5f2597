/**
 * Which `Host` values the admin API answers (defence against DNS rebinding).
 *
 * A web page on `http://evil.example:7401` whose name is re-pointed at
 * 127.0.0.1 makes the operator's browser send same-origin requests, without
 * `Origin`, to a loopback admin API; only the `Host` header still names the
 * attacker's domain. So the admin API answers only Hosts that cannot be an
 * attacker's name:
 *
 * - `localhost` (browsers resolve it to loopback themselves; nobody can
 *   re-point it);
 * - the address the listener is bound to, as an IP literal; a listener bound
 *   to a wildcard address (`0.0.0.0`, `::`) accepts every IP literal, because
 *   its addresses change at run time (DHCP, containers, NAT: `docker -p`
 *   forwards a host address the container never sees) and an IP literal
 *   cannot be produced by rebinding a name;
 * - the name given in `-admin-listen` when it is a name;
 * - the names and addresses listed in `-admin-allowed-hosts`.
 *
 * Ports are not compared (an SSH or `kubectl port-forward` changes the port,
 * and rebinding does not need one). Names compare case-insensitively and
 * without one trailing dot; IP literals compare in their canonical form
 * (`[0:0::1]` is `[::1]`, `127.1` is `127.0.0.1`), as the WHATWG URL parser
 * writes them.
 *
 * @module
 */

/** A `Host` header value (or an allowed-hosts entry) broken into parts. */
export interface ParsedHost {
  /** Canonical host: lower-case name without trailing dot, dotted IPv4, or `[v6]`. */
  readonly host: string;
  readonly port: number | null;
  readonly isIpLiteral: boolean;
}

// RFC 3986 host: an IP-literal in brackets, or letters, digits and `-._~` (IPv4 dots included).
// Non-ASCII (IDN) names must arrive in their `xn--` form, as browsers send them.
const HOST_RE = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~-]+)(?::(\d{1,5}))?$/;
const IPV4_RE = /^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$/;

/** Parses `host[:port]`; null when it is not a valid Host value. */
export function parseHost(value: string): ParsedHost | null {
  const match = HOST_RE.exec(value);
  if (match === null) return null;
  const port = match[2] === undefined ? null : Number(match[2]);
  if (port !== null && port > 65_535) return null;
  let host: string;
  try {
    // The URL parser canonicalizes IPv4 (`127.1`, `0x7f.0.0.1`) and IPv6 forms and lower-cases names.
    host = new URL(`http://${match[1]}/`).hostname;
  } catch {
    return null;
  }
  if (host.endsWith(".") && !host.startsWith("[")) host = host.slice(0, -1);
  if (host === "") return null;
  return { host, port, isIpLiteral: host.startsWith("[") || IPV4_RE.test(host) };
}

/**
 * Parses the value of `-admin-allowed-hosts`: comma-separated names or IP
 * literals without ports (IPv6 with or without brackets); blanks around
 * entries are ignored. Throws a RangeError naming the bad entry.
 */
export function parseAllowedHosts(value: string): string[] {
  const hosts: string[] = [];
  for (const raw of value.split(",")) {
    const entry = raw.trim();
    if (entry === "") continue;
    // Two or more colons: a bare IPv6 address; one colon: host:port, refused below.
    const bareV6 = !entry.startsWith("[") && entry.indexOf(":") !== entry.lastIndexOf(":");
    const bracketed = bareV6 ? `[${entry}]` : entry;
    const parsed = parseHost(bracketed);
    if (parsed === null) {
      throw new RangeError(`"${entry}" is not a host name or IP address`);
    }
    if (parsed.port !== null) {
      throw new RangeError(`"${entry}" has a port; list hosts only (ports are not compared)`);
    }
    hosts.push(parsed.host);
  }
  return hosts;
}

/** What the admin listener is: its configured listen host and the address it is bound to. */
export interface HostPolicyOptions {
  /** The host part of `-admin-listen` as configured (a name, an IP, or a wildcard). */
  readonly listenHost: string;
  /** The address the listener is bound to (an IP literal, without brackets for IPv6). */
  readonly boundHost: string;
  /** Canonical entries of `-admin-allowed-hosts`. */
  readonly allowedHosts: readonly string[];
}

/** Decides whether a request's Host is one the admin API answers. */
export class HostPolicy {
  readonly #allowed = new Set<string>(["localhost"]);
  readonly #anyIpLiteral: boolean;

  constructor(options: HostPolicyOptions) {
    for (const host of [options.listenHost, options.boundHost]) {
      const parsed = parseHost(host.includes(":") ? `[${host}]` : host);
      if (parsed !== null) this.#allowed.add(parsed.host);
    }
    for (const host of options.allowedHosts) this.#allowed.add(host);
    this.#anyIpLiteral = this.#allowed.has("0.0.0.0") || this.#allowed.has("[::]");
  }

  /** True when `hostValue` (a Host header or a URL authority) names this listener. */
  allows(hostValue: string): boolean {
    const parsed = parseHost(hostValue);
    if (parsed === null) return false;
    if (parsed.isIpLiteral && this.#anyIpLiteral) return true;
    return this.#allowed.has(parsed.host);
  }
}
