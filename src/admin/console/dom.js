// @ts-check
/// <reference lib="dom" />
/**
 * DOM helpers of the lockd console. Everything the server sends (lock names,
 * client names, identities, addresses) reaches the page through `el()` and
 * `textContent` only, never as markup: a lock named `<img src=x onerror=...>`
 * is shown as that text. The page's Content-Security-Policy also forbids
 * assigning strings to `innerHTML` (Trusted Types), so a slip would fail loudly.
 */

/**
 * Creates an element. `attributes` are set with setAttribute (`class`, `aria-*`, `data-*`, ...);
 * children are nodes or text (strings and numbers become text nodes; null is skipped).
 * @param {string} tag
 * @param {Record<string, string | number | boolean | null | undefined>} [attributes]
 * @param {...(Node | string | number | null | undefined)} children
 * @returns {HTMLElement}
 */
export function el(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    element.setAttribute(name, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

/**
 * Appends nodes or text to a parent.
 * @param {Node} parent
 * @param {(Node | string | number | null | undefined)[]} children
 */
export function append(parent, children) {
  for (const child of children) {
    if (child === null || child === undefined) continue;
    parent.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
}

/**
 * The element with this id (the page's own markup: a missing one is a bug).
 * @template {HTMLElement} T
 * @param {string} id
 * @returns {T}
 */
export function byId(id) {
  const element = document.getElementById(id);
  if (element === null) throw new Error(`console: no element #${id}`);
  return /** @type {T} */ (element);
}

/**
 * Draws a table body again from new rows, touching only what changed. A row drawn over one with
 * as many cells keeps its cells that did not change (the same nodes, given the new cells' click
 * handlers, so they act on the new data); other cells and rows are replaced. The tables are drawn
 * again on every change (up to four times a second on a busy server): replacing every row would
 * drop a click whose mouse-down and mouse-up straddle a redraw (it lands on nothing) and the
 * keyboard focus between Tab and Enter. A focused control that is replaced all the same passes
 * the focus to the new control with the same `aria-label`.
 * @param {HTMLElement} body
 * @param {HTMLElement[]} rows
 */
export function patchRows(body, rows) {
  const focused = document.activeElement;
  const label = focused !== null && focused !== body && body.contains(focused)
    ? focused.getAttribute("aria-label")
    : null;
  const old = [...body.children];
  rows.forEach((row, index) => {
    const before = old[index];
    if (before === undefined) {
      body.appendChild(row);
    } else if (before.tagName !== row.tagName || before.children.length !== row.children.length) {
      before.replaceWith(row);
    } else {
      for (const { name } of [...before.attributes]) {
        if (!row.hasAttribute(name)) before.removeAttribute(name);
      }
      for (const { name, value } of row.attributes) before.setAttribute(name, value);
      [...row.children].forEach((cell, i) => {
        const kept = before.children[i];
        if (kept.isEqualNode(cell)) takeHandlers(cell, kept);
        else kept.replaceWith(cell);
      });
    }
  });
  for (const extra of old.slice(rows.length)) extra.remove();
  if (label === null || focused === null || focused.isConnected) return;
  for (const candidate of body.querySelectorAll("[aria-label]")) {
    if (candidate.getAttribute("aria-label") === label) {
      /** @type {HTMLElement} */ (candidate).focus({ preventScroll: true });
      return;
    }
  }
}

/**
 * Gives `kept`, a node equal to `from` (isEqualNode), the click handlers (`onclick`) of `from`
 * and its descendants.
 * @param {Element} from
 * @param {Element} kept
 */
function takeHandlers(from, kept) {
  if (from instanceof HTMLElement && kept instanceof HTMLElement) kept.onclick = from.onclick;
  for (let i = 0; i < from.children.length; i++) takeHandlers(from.children[i], kept.children[i]);
}

/**
 * A definition list's content from [term, value] pairs.
 * @param {HTMLElement} list
 * @param {[string, Node | string | number][]} pairs
 */
export function fillPairs(list, pairs) {
  list.replaceChildren(
    ...pairs.flatMap(([term, value]) => [el("dt", {}, term), el("dd", {}, value)]),
  );
}

/**
 * `1h 02m`, `3m 07s`, `12.3s`, `450ms`: a duration for people.
 * @param {number} ms
 * @returns {string}
 */
export function formatDuration(ms) {
  if (!Number.isFinite(ms)) return "–";
  if (ms < 1_000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(ms < 10_000 ? 2 : 1)}s`;
  const totalS = Math.floor(ms / 1_000);
  const h = Math.floor(totalS / 3_600);
  const m = Math.floor((totalS % 3_600) / 60);
  const s = totalS % 60;
  if (h > 0) return `${h}h ${String(m).padStart(2, "0")}m`;
  return `${m}m ${String(s).padStart(2, "0")}s`;
}

/**
 * A count or rate with at most 3 significant decimals: `0`, `0.25`, `12.5`, `1,234`.
 * @param {number} value
 * @returns {string}
 */
export function formatNumber(value) {
  if (!Number.isFinite(value)) return "–";
  const digits = Math.abs(value) >= 100 ? 0 : Math.abs(value) >= 10 ? 1 : 2;
  return value.toLocaleString("en-US", { maximumFractionDigits: digits });
}

/**
 * Text as the console shows what a client wrote (a holder's value): control and invisible format
 * characters as `\u` escapes, so a value cannot reorder the page around it (a bidirectional
 * control) or hide part of itself (a zero-width character). The result still goes in as text.
 * @param {string} text
 * @returns {string}
 */
function visibleText(text) {
  return text.replace(/[\p{Cc}\p{Cf}\u2028\u2029]/gu, (c) => {
    const hex = /** @type {number} */ (c.codePointAt(0)).toString(16).toUpperCase();
    return hex.length <= 4 ? `\\u${hex.padStart(4, "0")}` : `\\u{${hex}}`;
  });
}

/**
 * A holder's value for the page, or null when it has none: the text (see visibleText), or for
 * bytes that are not UTF-8 their length and base64.
 * @param {{ value?: string | null, value_base64?: string, value_bytes?: number }} holder
 * @returns {string | null}
 */
export function valueText(holder) {
  if (holder.value_base64 === undefined) return null;
  if (typeof holder.value !== "string") {
    return `(${holder.value_bytes} bytes, not UTF-8) base64: ${holder.value_base64}`;
  }
  return holder.value === "" ? "(empty)" : visibleText(holder.value);
}
