/**
 * Encoder for the Prometheus text exposition format 0.0.4, written by hand
 * (no client library): lockd only needs counters, gauges and `_sum`/`_count`
 * summaries, and a small encoder keeps `GET /metrics` cheap and dependency-free.
 *
 * Invalid metric or label names and misplaced suffixes are programmer errors
 * and throw; label values and help texts are escaped, never rejected.
 *
 * @module
 */

/** The `Content-Type` of a `GET /metrics` answer. */
export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/** Metric types lockd exposes. Histograms are not used (summaries carry durations). */
export type MetricType = "counter" | "gauge" | "summary" | "untyped";

/** One sample line. */
export interface Sample {
  /** Label names and values, written in insertion order. */
  labels?: Record<string, string>;
  value: number;
  /**
   * Appended to the family name. Summary samples must be `_sum` or `_count`
   * (quantiles are not exposed); samples of other types must have none.
   */
  suffix?: "" | "_sum" | "_count";
}

/** A metric family: HELP and TYPE lines followed by its samples. */
export interface MetricFamily {
  name: string;
  help: string;
  type: MetricType;
  samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const HELP_SPECIAL = /[\\\n]/g;
const LABEL_VALUE_SPECIAL = /[\\"\n]/g;
const TYPES: ReadonlySet<string> = new Set(["counter", "gauge", "summary", "untyped"]);

/**
 * Encodes `families` in order as one exposition ending with a newline.
 * Throws `TypeError` for an invalid metric or label name, a duplicate family
 * name, an unknown type, or a suffix that does not fit the family's type.
 */
export function encodePrometheus(families: MetricFamily[]): string {
  const seen = new Set<string>();
  let out = "";
  for (const family of families) {
    const { name, type } = family;
    if (!METRIC_NAME.test(name)) throw new TypeError(`Invalid metric name "${name}"`);
    if (seen.has(name)) throw new TypeError(`Duplicate metric family "${name}"`);
    seen.add(name);
    if (!TYPES.has(type)) throw new TypeError(`Invalid type "${type}" of metric "${name}"`);
    out += `# HELP ${name} ${family.help.replace(HELP_SPECIAL, escapeChar)}\n`;
    out += `# TYPE ${name} ${type}\n`;
    for (const sample of family.samples) {
      const suffix = sample.suffix ?? "";
      if ((type === "summary") !== (suffix !== "")) {
        throw new TypeError(
          type === "summary"
            ? `Summary "${name}" sample needs suffix "_sum" or "_count"`
            : `Sample suffix "${suffix}" is only allowed on summaries, not on ${type} "${name}"`,
        );
      }
      out += name;
      out += suffix;
      if (sample.labels !== undefined) out += encodeLabels(name, sample.labels);
      out += " ";
      out += formatValue(sample.value);
      out += "\n";
    }
  }
  return out;
}

function encodeLabels(metric: string, labels: Record<string, string>): string {
  let out = "";
  for (const key in labels) {
    if (!LABEL_NAME.test(key)) {
      throw new TypeError(`Invalid label name "${key}" on metric "${metric}"`);
    }
    out += out === "" ? "{" : ",";
    out += `${key}="${String(labels[key]).replace(LABEL_VALUE_SPECIAL, escapeChar)}"`;
  }
  return out === "" ? "" : `${out}}`;
}

function escapeChar(ch: string): string {
  return ch === "\n" ? "\\n" : `\\${ch}`;
}

/**
 * Integers below 1e21 print without an exponent in JavaScript, which is every
 * exact counter value; other finite numbers use JavaScript's shortest
 * round-trip form (`1e-7`, `0.25`), which Prometheus parses.
 */
function formatValue(value: number): string {
  if (Number.isFinite(value)) return String(value);
  if (Number.isNaN(value)) return "NaN";
  return value > 0 ? "+Inf" : "-Inf";
}
