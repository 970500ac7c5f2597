import assert from "node:assert/strict";
import {
  encodePrometheus,
  type MetricFamily,
  PROMETHEUS_CONTENT_TYPE,
} from "../../src/ops/prometheus.ts";
import { hasPromtool, promtoolCheckMetrics } from "../helpers/promtool.ts";

const encodeCases: { name: string; families: MetricFamily[]; expected: string }[] = [
  {
    name: "a counter with labels is written with HELP, TYPE and one line per sample",
    families: [{
      name: "lockd_releases_total",
      help: "Ended ownerships by reason.",
      type: "counter",
      samples: [
        { labels: { reason: "graceful" }, value: 12 },
        { labels: { reason: "expired" }, value: 0 },
      ],
    }],
    expected: "# HELP lockd_releases_total Ended ownerships by reason.\n" +
      "# TYPE lockd_releases_total counter\n" +
      'lockd_releases_total{reason="graceful"} 12\n' +
      'lockd_releases_total{reason="expired"} 0\n',
  },
  {
    name: "several labels are written in insertion order",
    families: [{
      name: "x_total",
      help: "h",
      type: "counter",
      samples: [{ labels: { zeta: "1", alpha: "2" }, value: 3 }],
    }],
    expected: '# HELP x_total h\n# TYPE x_total counter\nx_total{zeta="1",alpha="2"} 3\n',
  },
  {
    name: "a gauge without labels has no braces",
    families: [{
      name: "lockd_locks_held",
      help: "Locks that have an owner now.",
      type: "gauge",
      samples: [{ value: 7 }],
    }],
    expected: "# HELP lockd_locks_held Locks that have an owner now.\n" +
      "# TYPE lockd_locks_held gauge\n" +
      "lockd_locks_held 7\n",
  },
  {
    name: "an empty label set has no braces",
    families: [{ name: "g", help: "h", type: "gauge", samples: [{ labels: {}, value: 1 }] }],
    expected: "# HELP g h\n# TYPE g gauge\ng 1\n",
  },
  {
    name: "a summary is written as _sum and _count samples",
    families: [{
      name: "lockd_wait_seconds",
      help: "Time from ACQUIRE to ACQUIRED.",
      type: "summary",
      samples: [{ suffix: "_sum", value: 1.25 }, { suffix: "_count", value: 4 }],
    }],
    expected: "# HELP lockd_wait_seconds Time from ACQUIRE to ACQUIRED.\n" +
      "# TYPE lockd_wait_seconds summary\n" +
      "lockd_wait_seconds_sum 1.25\n" +
      "lockd_wait_seconds_count 4\n",
  },
  {
    name: "a summary suffix comes before the labels",
    families: [{
      name: "s",
      help: "h",
      type: "summary",
      samples: [{ suffix: "_sum", labels: { op: "a" }, value: 0.5 }],
    }],
    expected: '# HELP s h\n# TYPE s summary\ns_sum{op="a"} 0.5\n',
  },
  {
    name: "an untyped family is written with type untyped",
    families: [{ name: "go_goroutines", help: "h", type: "untyped", samples: [{ value: 1 }] }],
    expected: "# HELP go_goroutines h\n# TYPE go_goroutines untyped\ngo_goroutines 1\n",
  },
  {
    name: "a family without samples keeps its HELP and TYPE lines",
    families: [{ name: "lockd_waiters", help: "Waiting claims.", type: "gauge", samples: [] }],
    expected: "# HELP lockd_waiters Waiting claims.\n# TYPE lockd_waiters gauge\n",
  },
  {
    name: "families are written in the order given",
    families: [
      { name: "b", help: "first", type: "gauge", samples: [{ value: 1 }] },
      { name: "a", help: "second", type: "gauge", samples: [{ value: 2 }] },
    ],
    expected: "# HELP b first\n# TYPE b gauge\nb 1\n# HELP a second\n# TYPE a gauge\na 2\n",
  },
  {
    name: "no families give an empty exposition",
    families: [],
    expected: "",
  },
  {
    name: "label values escape backslash, double quote and newline",
    families: [{
      name: "g",
      help: "h",
      type: "gauge",
      samples: [{ labels: { path: 'C:\\dir "x"\nnext' }, value: 1 }],
    }],
    expected: '# HELP g h\n# TYPE g gauge\ng{path="C:\\\\dir \\"x\\"\\nnext"} 1\n',
  },
  {
    name: "label values keep other characters as they are",
    families: [{
      name: "g",
      help: "h",
      type: "gauge",
      samples: [{ labels: { name: "jobs/😀 {a}=b,c\t#" }, value: 1 }],
    }],
    expected: '# HELP g h\n# TYPE g gauge\ng{name="jobs/😀 {a}=b,c\t#"} 1\n',
  },
  {
    name: "an empty label value is written as empty quotes",
    families: [{
      name: "g",
      help: "h",
      type: "gauge",
      samples: [{ labels: { id: "" }, value: 1 }],
    }],
    expected: '# HELP g h\n# TYPE g gauge\ng{id=""} 1\n',
  },
  {
    name: "help text escapes backslash and newline but not double quotes",
    families: [{
      name: "g",
      help: 'Path like C:\\x, "quoted",\nsecond line',
      type: "gauge",
      samples: [],
    }],
    expected: '# HELP g Path like C:\\\\x, "quoted",\\nsecond line\n# TYPE g gauge\n',
  },
  {
    name: "metric names may contain colons and label names underscores",
    families: [{
      name: "job:lockd_x:rate5m",
      help: "h",
      type: "gauge",
      samples: [{ labels: { _private: "1", a_1: "2" }, value: 1 }],
    }],
    expected:
      '# HELP job:lockd_x:rate5m h\n# TYPE job:lockd_x:rate5m gauge\njob:lockd_x:rate5m{_private="1",a_1="2"} 1\n',
  },
];

for (const c of encodeCases) {
  Deno.test(`prometheus: ${c.name}`, () => {
    assert.equal(encodePrometheus(c.families), c.expected);
  });
}

const valueCases: { name: string; value: number; text: string }[] = [
  { name: "zero", value: 0, text: "0" },
  { name: "negative zero prints as zero", value: -0, text: "0" },
  {
    name: "a large exact integer has no exponent",
    value: 123456789012345,
    text: "123456789012345",
  },
  {
    name: "the largest safe integer has no exponent",
    value: Number.MAX_SAFE_INTEGER,
    text: "9007199254740991",
  },
  { name: "a negative integer", value: -42, text: "-42" },
  { name: "a fraction", value: 0.25, text: "0.25" },
  { name: "a small fraction keeps plain notation down to 1e-6", value: 0.00001, text: "0.00001" },
  { name: "a tiny fraction uses an exponent", value: 1e-7, text: "1e-7" },
  { name: "a huge value uses an exponent", value: 1e21, text: "1e+21" },
  { name: "NaN", value: NaN, text: "NaN" },
  { name: "positive infinity", value: Infinity, text: "+Inf" },
  { name: "negative infinity", value: -Infinity, text: "-Inf" },
];

for (const c of valueCases) {
  Deno.test(`prometheus value: ${c.name} is written as ${c.text}`, () => {
    const text = encodePrometheus([
      { name: "g", help: "h", type: "gauge", samples: [{ value: c.value }] },
    ]);
    assert.equal(text, `# HELP g h\n# TYPE g gauge\ng ${c.text}\n`);
  });
}

const invalidCases: { name: string; families: MetricFamily[]; message: string }[] = [
  {
    name: "a metric name starting with a digit",
    families: [{ name: "1abc", help: "h", type: "gauge", samples: [] }],
    message: 'Invalid metric name "1abc"',
  },
  {
    name: "a metric name with a dash",
    families: [{ name: "lockd-x", help: "h", type: "gauge", samples: [] }],
    message: 'Invalid metric name "lockd-x"',
  },
  {
    name: "an empty metric name",
    families: [{ name: "", help: "h", type: "gauge", samples: [] }],
    message: 'Invalid metric name ""',
  },
  {
    name: "a metric name with a newline",
    families: [{ name: "a\nb", help: "h", type: "gauge", samples: [] }],
    message: 'Invalid metric name "a\nb"',
  },
  {
    name: "a label name with a colon",
    families: [{
      name: "g",
      help: "h",
      type: "gauge",
      samples: [{ labels: { "a:b": "x" }, value: 1 }],
    }],
    message: 'Invalid label name "a:b" on metric "g"',
  },
  {
    name: "a label name starting with a digit",
    families: [{
      name: "g",
      help: "h",
      type: "gauge",
      samples: [{ labels: { "0a": "x" }, value: 1 }],
    }],
    message: 'Invalid label name "0a" on metric "g"',
  },
  {
    name: "an empty label name",
    families: [{
      name: "g",
      help: "h",
      type: "gauge",
      samples: [{ labels: { "": "x" }, value: 1 }],
    }],
    message: 'Invalid label name "" on metric "g"',
  },
  {
    name: "a duplicate family name",
    families: [
      { name: "g", help: "h", type: "gauge", samples: [] },
      { name: "g", help: "h", type: "gauge", samples: [] },
    ],
    message: 'Duplicate metric family "g"',
  },
  {
    name: "an unknown type",
    families: [{ name: "g", help: "h", type: "histogram" as "gauge", samples: [] }],
    message: 'Invalid type "histogram" of metric "g"',
  },
  {
    name: "a summary sample without a suffix (a quantile)",
    families: [{ name: "s", help: "h", type: "summary", samples: [{ value: 1 }] }],
    message: 'Summary "s" sample needs suffix "_sum" or "_count"',
  },
  {
    name: "a suffix on a counter",
    families: [{ name: "c", help: "h", type: "counter", samples: [{ suffix: "_sum", value: 1 }] }],
    message: 'Sample suffix "_sum" is only allowed on summaries, not on counter "c"',
  },
];

for (const c of invalidCases) {
  Deno.test(`prometheus rejects ${c.name}`, () => {
    assert.throws(() => encodePrometheus(c.families), (err: unknown) => {
      assert.ok(err instanceof TypeError);
      assert.equal(err.message, c.message);
      return true;
    });
  });
}

Deno.test("prometheus: the content type is the 0.0.4 text format in UTF-8", () => {
  assert.equal(PROMETHEUS_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
});

/** Roughly what lockd exposes: 40 families, a few with label sets. */
function lockdLikeFamilies(): MetricFamily[] {
  const families: MetricFamily[] = [
    {
      name: "lockd_connections_active",
      help: "Open sessions.",
      type: "gauge",
      samples: [{ value: 12 }],
    },
    {
      name: "lockd_releases_total",
      help: "Ended ownerships by reason.",
      type: "counter",
      samples: ["graceful", "expired", "io_timeout", "force"].map((reason, i) => ({
        labels: { reason },
        value: i * 1000,
      })),
    },
    {
      name: "lockd_protocol_errors_total",
      help: "ERROR messages sent, by wire code.",
      type: "counter",
      samples: [{ labels: { code: "0x02" }, value: 3 }],
    },
    {
      name: "lockd_wait_seconds",
      help: "Time from ACQUIRE to ACQUIRED.",
      type: "summary",
      samples: [{ suffix: "_sum", value: 12.5 }, { suffix: "_count", value: 100 }],
    },
    {
      name: "lockd_hold_seconds",
      help: "Duration of ownerships.",
      type: "summary",
      samples: [{ suffix: "_sum", value: 0.000015 }, { suffix: "_count", value: 1 }],
    },
    {
      name: "lockd_weird_labels",
      help: 'A gauge with "awkward" help \\ and\nnewlines.',
      type: "gauge",
      samples: [{ labels: { name: 'a\\b "c"\nd' }, value: NaN }],
    },
    {
      name: "lockd_infinite",
      help: "Infinities.",
      type: "gauge",
      samples: [{ labels: { sign: "plus" }, value: Infinity }, {
        labels: { sign: "minus" },
        value: -Infinity,
      }],
    },
  ];
  for (let i = families.length; i < 40; i++) {
    families.push({
      name: `lockd_filler_${i}_total`,
      help: `Filler counter number ${i}.`,
      type: "counter",
      samples: [{ labels: { shard: String(i % 4) }, value: i * 17 }],
    });
  }
  return families;
}

Deno.test("prometheus: encoding forty families takes under 2 ms on average", () => {
  const families = lockdLikeFamilies();
  encodePrometheus(families); // warm up
  const rounds = 100;
  const started = performance.now();
  for (let i = 0; i < rounds; i++) encodePrometheus(families);
  const perEncodeMs = (performance.now() - started) / rounds;
  assert.ok(perEncodeMs < 2, `${perEncodeMs} ms per encode`);
});

const promtool = await hasPromtool();

Deno.test({
  name: "prometheus: promtool accepts the exposition (skipped without promtool)",
  ignore: !promtool,
  async fn() {
    const exposition = encodePrometheus(lockdLikeFamilies());
    const { code, report } = await promtoolCheckMetrics(exposition);
    assert.equal(code, 0, report);
    assert.equal(report.trim(), "");
  },
});

Deno.test({
  name:
    "prometheus: promtool rejects a broken exposition, so its check can fail (skipped without promtool)",
  ignore: !promtool,
  async fn() {
    const broken = encodePrometheus(lockdLikeFamilies()).replace(
      'lockd_protocol_errors_total{code="0x02"} 3',
      'lockd_protocol_errors_total{code="0x02} 3',
    );
    const { code } = await promtoolCheckMetrics(broken);
    assert.notEqual(code, 0);
  },
});
