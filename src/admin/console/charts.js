// @ts-check
/// <reference lib="dom" />
/**
 * Small line charts in plain SVG (no library) of the last 15 minutes of
 * `GET /api/history`. Rates are taken between consecutive snapshots over
 * their monotonic `uptime_ms`; averages the spec's way, Δsum / Δcount (no
 * point where nothing ended in that second). A point with no neighbour (one
 * wait that ended in a quiet minute) has no line to draw: it is drawn as a dot.
 */

import { el, formatDuration, formatNumber } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 300;
const HEIGHT = 64;
/** The x axis: 15 minutes, or back to the first snapshot when that is shorter, but 1 minute at least. */
const WINDOW_MS_MAX = 15 * 60_000;
const WINDOW_MS_MIN = 60_000;

/**
 * @typedef {{ uptime_ms: number, acquires_total: number, handoffs_total: number,
 *   wait_seconds_sum: number, wait_seconds_count: number, hold_seconds_sum: number,
 *   hold_seconds_count: number, waiters: number, oldest_waiter_ms?: number }} Snapshot
 * @typedef {{ value: number, note: string }} Headline
 * @typedef {{ id: string, title: string, format: (value: number) => string,
 *   value: (before: Snapshot, after: Snapshot, seconds: number) => number | null,
 *   headline?: (latest: Snapshot) => Headline | null }} ChartSpec
 */

/** @param {number} seconds */
const seconds = (seconds) => formatDuration(seconds * 1_000);
/** @param {number} value */
const perSecond = (value) => `${formatNumber(value)}/s`;

/** @type {ChartSpec[]} */
export const CHARTS = [
  {
    id: "acquires",
    title: "Acquires/s",
    format: perSecond,
    value: (a, b, s) => (b.acquires_total - a.acquires_total) / s,
  },
  {
    id: "handoffs",
    title: "Hand-offs/s",
    format: perSecond,
    value: (a, b, s) => (b.handoffs_total - a.handoffs_total) / s,
  },
  {
    id: "wait",
    title: "Average wait",
    format: seconds,
    value: (a, b) =>
      average(b.wait_seconds_sum - a.wait_seconds_sum, b.wait_seconds_count - a.wait_seconds_count),
    // The averages count finished waits only: while someone waits, the longest current wait is
    // the figure that matters (a waiter queued for minutes must not read as "1.2s").
    headline: (latest) =>
      latest.waiters > 0 && latest.oldest_waiter_ms !== undefined
        ? { value: latest.oldest_waiter_ms / 1_000, note: "longest waiting now" }
        : null,
  },
  {
    id: "hold",
    title: "Average hold",
    format: seconds,
    value: (a, b) =>
      average(b.hold_seconds_sum - a.hold_seconds_sum, b.hold_seconds_count - a.hold_seconds_count),
  },
  {
    id: "waiters",
    title: "Waiters",
    format: formatNumber,
    value: (_a, b) => b.waiters,
  },
];

/**
 * @param {number} sum
 * @param {number} count
 */
function average(sum, count) {
  return count > 0 ? sum / count : null;
}

/** One chart: a figure with a caption (title, latest value) and an SVG line. */
export class Chart {
  /** @param {ChartSpec} spec */
  constructor(spec) {
    this.spec = spec;
    this.valueText = el("span", { class: "value" }, "–");
    this.svg = document.createElementNS(SVG, "svg");
    this.svg.setAttribute("viewBox", `0 0 ${WIDTH} ${HEIGHT}`);
    this.svg.setAttribute("preserveAspectRatio", "none");
    this.svg.setAttribute("role", "img");
    this.path = document.createElementNS(SVG, "path");
    this.path.setAttribute("class", "line");
    this.path.setAttribute("vector-effect", "non-scaling-stroke");
    const axis = document.createElementNS(SVG, "line");
    axis.setAttribute("class", "axis");
    axis.setAttribute("x1", "0");
    axis.setAttribute("x2", String(WIDTH));
    axis.setAttribute("y1", String(HEIGHT - 1));
    axis.setAttribute("y2", String(HEIGHT - 1));
    axis.setAttribute("vector-effect", "non-scaling-stroke");
    // Points without a neighbour: a short stroke with round caps each (a dot, whatever the
    // SVG's stretch: the stroke does not scale).
    this.dots = document.createElementNS(SVG, "path");
    this.dots.setAttribute("class", "dots");
    this.dots.setAttribute("vector-effect", "non-scaling-stroke");
    this.svg.append(axis, this.path, this.dots);
    this.noteText = el("span", { class: "note" }, "");
    this.peakText = el("span", { class: "muted" }, "");
    this.element = el(
      "figure",
      { class: "chart", "data-chart": spec.id },
      el("figcaption", {}, el("span", {}, spec.title), this.valueText),
      this.svg,
      el("div", { class: "muted" }, this.noteText, this.peakText),
    );
  }

  /**
   * Redraws from snapshots, oldest first.
   * @param {Snapshot[]} snapshots
   */
  update(snapshots) {
    /** @type {[number, number | null][]} */
    const points = [];
    for (let i = 1; i < snapshots.length; i++) {
      const before = snapshots[i - 1];
      const after = snapshots[i];
      const s = (after.uptime_ms - before.uptime_ms) / 1_000;
      if (s <= 0) continue;
      points.push([after.uptime_ms, this.spec.value(before, after, s)]);
    }
    const latestMs = points.length > 0 ? points[points.length - 1][0] : 0;
    const windowMs = Math.min(
      WINDOW_MS_MAX,
      Math.max(WINDOW_MS_MIN, latestMs - (snapshots[0]?.uptime_ms ?? latestMs)),
    );
    const values = points.map(([, v]) => v).filter((v) => v !== null);
    const peak = values.length > 0 ? Math.max(...values) : 0;
    const top = peak > 0 ? peak : 1;
    let d = "";
    let dots = "";
    points.forEach(([ms, value], i) => {
      if (value === null) return;
      const x = WIDTH - ((latestMs - ms) / windowMs) * WIDTH;
      const y = HEIGHT - 2 - (value / top) * (HEIGHT - 6);
      const joined = i > 0 && points[i - 1][1] !== null;
      d += `${joined ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)} `;
      const alone = !joined && (i === points.length - 1 || points[i + 1][1] === null);
      if (alone) dots += `M${(x - 0.5).toFixed(1)},${y.toFixed(1)} h1 `;
    });
    this.path.setAttribute("d", d.trim());
    this.dots.setAttribute("d", dots.trim());
    const latest = [...points].reverse().find(([, v]) => v !== null)?.[1];
    const newest = snapshots[snapshots.length - 1];
    const headline = newest === undefined ? null : this.spec.headline?.(newest) ?? null;
    const now = headline !== null
      ? this.spec.format(headline.value)
      : latest === undefined || latest === null
      ? "–"
      : this.spec.format(latest);
    this.valueText.textContent = now;
    this.noteText.textContent = headline === null ? "" : `${headline.note} · `;
    this.peakText.textContent = values.length > 0
      ? `peak ${this.spec.format(peak)}`
      : "no data yet";
    this.svg.setAttribute(
      "aria-label",
      `${this.spec.title} over the last 15 minutes: now ${now}${
        headline === null ? "" : ` (${headline.note})`
      }, peak ${this.spec.format(peak)}`,
    );
  }
}
