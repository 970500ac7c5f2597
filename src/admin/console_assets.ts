/**
 * The operator console's files (src/admin/console/), served by the admin
 * listener at `/` and `/ui/...` (docs/operations.md, "Operator console").
 *
 * They are imported as text, so they are part of the module graph: `deno
 * run` and `deno compile` both carry them (a compiled binary embeds every
 * module of its graph, text imports included), and nothing is read from disk
 * at run time. No build step, no CDN: plain HTML, CSS and ES modules.
 *
 * @module
 */

import api from "./console/api.js" with { type: "text" };
import charts from "./console/charts.js" with { type: "text" };
import consoleCss from "./console/console.css" with { type: "text" };
import consoleJs from "./console/console.js" with { type: "text" };
import dom from "./console/dom.js" with { type: "text" };
import favicon from "./console/favicon.svg" with { type: "text" };
import indexHtml from "./console/index.html" with { type: "text" };

/** One file of the console. */
export interface ConsoleAsset {
  /** The file under src/admin/console/ it was read from. */
  readonly file: string;
  readonly contentType: string;
  readonly body: string;
}

const HTML = "text/html; charset=utf-8";
const CSS = "text/css; charset=utf-8";
const JS = "text/javascript; charset=utf-8";
const SVG = "image/svg+xml";

/** The console's files by request path. */
export const CONSOLE_ASSETS: ReadonlyMap<string, ConsoleAsset> = new Map([
  ["/", { file: "index.html", contentType: HTML, body: indexHtml }],
  ["/ui/console.css", { file: "console.css", contentType: CSS, body: consoleCss }],
  ["/ui/console.js", { file: "console.js", contentType: JS, body: consoleJs }],
  ["/ui/api.js", { file: "api.js", contentType: JS, body: api }],
  ["/ui/charts.js", { file: "charts.js", contentType: JS, body: charts }],
  ["/ui/dom.js", { file: "dom.js", contentType: JS, body: dom }],
  ["/ui/favicon.svg", { file: "favicon.svg", contentType: SVG, body: favicon }],
]);

/**
 * The Content-Security-Policy of every console file: the page may load its own scripts and
 * styles and talk to its own origin, nothing else. No inline script or style, no eval, no
 * framing by other pages (clickjacking of the action buttons), no form posts elsewhere, and
 * Trusted Types with no policy, so assigning a string to `innerHTML` throws: lock names can
 * only ever reach the page as text.
 */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
  "require-trusted-types-for 'script'",
  "trusted-types 'none'",
].join("; ");

/** The answer for a console file (GET; HEAD drops the body in the router's way). */
export function consoleResponse(asset: ConsoleAsset): Response {
  return new Response(asset.body, {
    headers: {
      "content-type": asset.contentType,
      "content-security-policy": CONSOLE_CSP,
      "x-content-type-options": "nosniff",
      "x-frame-options": "DENY",
      "referrer-policy": "no-referrer",
      "cross-origin-opener-policy": "same-origin",
      "cross-origin-resource-policy": "same-origin",
      // The files change with the server's version; always ask (they are small).
      "cache-control": "no-cache",
    },
  });
}
