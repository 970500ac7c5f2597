/**
 * Which requests made by web browsers the admin API answers (defence against
 * cross-site request forgery).
 *
 * Browsers say where a request comes from: `Origin` (on every request that
 * is not a plain same-origin GET; `null` from sandboxed frames, `data:` URLs
 * and some redirects) and `Sec-Fetch-Site` (`none` when the user typed the
 * address or used a bookmark, else `same-origin`, `same-site` or
 * `cross-site`). Web pages cannot set either header; curl, `lockd admin` and
 * server-side HTTP clients send neither.
 *
 * - With the console off, the admin API answers no web page at all: any
 *   `Origin`, or a `Sec-Fetch-Site` other than `none`, is refused (403); an
 *   address typed into the browser (`none`, no `Origin`) is answered.
 * - With the console on, the console's own requests are answered: an
 *   `Origin` must be the origin of the request's `Host` (`http://` or
 *   `https://` with the same host and port; the Host itself is one the Host
 *   policy allows, checked before), and `Sec-Fetch-Site` must be `none` or
 *   `same-origin`. `same-site` is refused: another port of `localhost` is the
 *   same site but a different origin (any local web app). Everything else
 *   stays refused: a form POST from another site (`cross-site`, foreign
 *   Origin), `Origin: null`, a page on another port.
 *
 * A DNS-rebinding page is same-origin to itself; the Host policy refuses it
 * before this check (its Host is the attacker's name).
 *
 * @module
 */

import { parseHost } from "../http/host_policy.ts";

/** What a request says about the page that sent it. */
export type BrowserVerdict =
  /** Neither header: not from a web page (or a plain GET of an old browser). */
  | "no_page"
  /** Typed into the address bar or from a bookmark (`Sec-Fetch-Site: none`, no `Origin`). */
  | "typed"
  /** From the console's own origin. */
  | "same_origin"
  /** From any other page. */
  | "foreign";

/** Classifies a request by its `Origin`, `Sec-Fetch-Site` and `Host` headers. */
export function browserVerdict(request: Request): BrowserVerdict {
  const origin = request.headers.get("origin");
  const site = request.headers.get("sec-fetch-site");
  if (origin === null && site === null) return "no_page";
  if (site !== null && site !== "none" && site !== "same-origin") return "foreign";
  if (origin !== null && !isOriginOfHost(origin, request.headers.get("host"))) return "foreign";
  return origin === null && site === "none" ? "typed" : "same_origin";
}

/** Whether `origin` is `http(s)://` + exactly the host and port the request was sent to. */
function isOriginOfHost(origin: string, host: string | null): boolean {
  if (host === null) return false; // Browsers always send Host.
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return false; // `null`, or garbage.
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return false;
  if (url.origin !== origin.toLowerCase().replace(/\/$/, "")) return false; // a path, user, ...
  const defaultPort = url.protocol === "http:" ? 80 : 443;
  const fromOrigin = parseHost(url.host);
  const fromHost = parseHost(host);
  if (fromOrigin === null || fromHost === null) return false;
  return fromOrigin.host === fromHost.host &&
    (fromOrigin.port ?? defaultPort) === (fromHost.port ?? defaultPort);
}
