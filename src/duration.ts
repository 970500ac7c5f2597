/**
 * Go-style durations, as the flags and the rules files spell them: `500ms`, `30s`, `1m30s`, `2h`.
 *
 * @module
 */

const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };

/** Go-style durations: `500ms`, `30s`, `1m30s`, `2h`, or `0`. Null when malformed. */
export function parseDurationMs(text: string): number | null {
  if (text === "0") return 0;
  if (!/^(\d+(\.\d+)?(ms|s|m|h))+$/.test(text)) return null;
  let total = 0;
  for (const [, amount, , unit] of text.matchAll(/(\d+(\.\d+)?)(ms|s|m|h)/g)) {
    total += Number(amount) * UNIT_MS[unit];
  }
  return Number.isFinite(total) ? Math.round(total) : null;
}

/** `500ms`, `30s`, `5m`, `1h`: the shortest exact Go-style spelling of a duration. */
export function durationText(ms: number): string {
  if (ms !== 0 && ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms !== 0 && ms % 60_000 === 0) return `${ms / 60_000}m`;
  return ms % 1_000 === 0 ? `${ms / 1_000}s` : `${ms}ms`;
}
