/** A listen or dial address. */
export interface HostPort {
  hostname: string;
  port: number;
}

/**
 * Parses `host:port`, `[v6]:port` or `:port` (all interfaces). Throws a
 * RangeError naming the value when it is not one of those.
 */
export function parseHostPort(value: string): HostPort {
  const match = /^(?:\[([0-9a-fA-F:.%\w]+)\]|([^:\[\]]*)):(\d{1,5})$/.exec(value);
  const port = match ? Number(match[3]) : NaN;
  if (!match || port > 65_535) {
    throw new RangeError(`"${value}" is not a host:port address (IPv6 as [::1]:7400)`);
  }
  const hostname = match[1] ?? (match[2] === "" ? "0.0.0.0" : match[2]);
  return { hostname, port };
}

/** `host:port` with IPv6 hosts in brackets. */
export function formatHostPort(hostname: string, port: number): string {
  return hostname.includes(":") ? `[${hostname}]:${port}` : `${hostname}:${port}`;
}
