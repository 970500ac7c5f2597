/**
 * `deno run --allow-read --allow-run bench/codec.ts [rounds] [--base DIR]`: the wire codec's cost per frame
 * on the request path, without sockets: encode and decode of ACQUIRE, ACQUIRED and HEARTBEAT, and of
 * a server's requests and a client's replies mixed (version-1 frames, a batch of 64 per push as a
 * busy session sees them). Each row is the median
 * of `rounds` rounds (default 9) of user+system CPU time in ns per frame.
 *
 * With `--base DIR` the same rows are measured, interleaved round by round, for the codec in
 * `DIR/src/wire/` too (e.g. a `git archive` of an older commit), so a change to the codec can be
 * compared on a busy machine: `git archive HEAD~1 src | tar -x -C /tmp/base`. `--rows RE` measures
 * only the rows whose "op MESSAGE" matches RE.
 */

import process from "node:process";

interface Codec {
  FrameWriter: new () => { push(msg: unknown): void; take(): Uint8Array };
  FrameReader: new () => { push(chunk: Uint8Array): void; next(): unknown };
}

async function loadCodec(root: string): Promise<Codec> {
  const frame = await import(`${root}/src/wire/frame.ts`);
  const reader = await import(`${root}/src/wire/frame_reader.ts`);
  return { FrameWriter: frame.FrameWriter, FrameReader: reader.FrameReader };
}

const BATCH = 64;
const ROUND_FRAMES = 400_000;

const SAMPLES: Record<string, unknown> = {
  ACQUIRE: {
    type: "acquire",
    requestId: 7,
    name: "jobs/nightly",
    leaseMs: 10_000,
    waitMs: 5_000,
  },
  ACQUIRED: {
    type: "acquired",
    requestId: 7,
    name: "jobs/nightly",
    token: 1_795_426_718_504_001,
    leaseMs: 10_000,
  },
  HEARTBEAT: { type: "heartbeat", requestId: 9 },
  // What a busy server reads and a busy client reads: the types in turn.
  REQUESTS: [
    { type: "acquire", requestId: 7, name: "jobs/nightly", leaseMs: 10_000, waitMs: 5_000 },
    { type: "release", requestId: 8, name: "jobs/nightly", token: 1_795_426_718_504_001 },
    { type: "heartbeat", requestId: 9 },
  ],
  REPLIES: [
    { type: "queued", requestId: 7, name: "jobs/nightly", position: 1 },
    {
      type: "acquired",
      requestId: 7,
      name: "jobs/nightly",
      token: 1_795_426_718_504_001,
      leaseMs: 10_000,
    },
    { type: "released", requestId: 8, name: "jobs/nightly" },
    { type: "heartbeat_ack", requestId: 9, renewed: 1 },
  ],
};

/** The message of frame `i` of a sample (a list of messages is used in turn). */
function nth(sample: unknown, i: number): unknown {
  return Array.isArray(sample) ? sample[i % sample.length] : sample;
}

function cpuNs(): number {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) * 1000;
}

/** ns of CPU per frame to encode `msg` BATCH times per take(). */
function encodeNs(codec: Codec, msg: unknown): number {
  const writer = new codec.FrameWriter();
  const start = cpuNs();
  for (let done = 0; done < ROUND_FRAMES; done += BATCH) {
    for (let i = 0; i < BATCH; i++) writer.push(nth(msg, i));
    writer.take();
  }
  return (cpuNs() - start) / ROUND_FRAMES;
}

/** ns of CPU per frame to decode a chunk of BATCH frames of `msg`. */
function decodeNs(codec: Codec, msg: unknown): number {
  const writer = new codec.FrameWriter();
  for (let i = 0; i < BATCH; i++) writer.push(nth(msg, i));
  const chunk = writer.take();
  const reader = new codec.FrameReader();
  let sink = 0;
  const start = cpuNs();
  for (let done = 0; done < ROUND_FRAMES; done += BATCH) {
    reader.push(chunk);
    while (reader.next() !== null) sink++;
  }
  const ns = (cpuNs() - start) / ROUND_FRAMES;
  if (sink !== ROUND_FRAMES) throw new Error(`decoded ${sink} frames, expected ${ROUND_FRAMES}`);
  return ns;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

const args = [...Deno.args];
const take = (flag: string): string | null => {
  const at = args.indexOf(flag);
  return at >= 0 ? args.splice(at, 2)[1].replace(/\/$/, "") : null;
};
const baseDir = take("--base");
const onlyDir = take("--codec"); // one round of one codec (a child process), printed as JSON
const rowFilter = take("--rows"); // a regular expression over "op MESSAGE", e.g. "decode ACQUIRE$"
const rounds = Number(args[0] ?? 9);
const here = new URL("..", import.meta.url).pathname.replace(/\/$/, "");

/** One round for the codec in `root`: warm-up, then every row once. */
async function oneRound(root: string): Promise<Record<string, number>> {
  const codec = await loadCodec(root);
  const row: Record<string, number> = {};
  for (let pass = 0; pass < 2; pass++) { // pass 0 warms up
    for (const [what, msg] of Object.entries(SAMPLES)) {
      for (const [op, measure] of [["encode", encodeNs], ["decode", decodeNs]] as const) {
        if (rowFilter !== null && !new RegExp(rowFilter).test(`${op} ${what}`)) continue;
        const ns = measure(codec, msg);
        if (pass === 1) row[`${op} ${what}`] = ns;
      }
    }
  }
  return row;
}

if (onlyDir !== null) {
  console.log(JSON.stringify(await oneRound(onlyDir)));
} else {
  // Each round of each codec runs in its own process, alternating, so neither shares JIT state
  // (call sites that saw two codecs' classes) with the other.
  const labels: [string, string][] = [["this", here]];
  if (baseDir !== null) labels.unshift(["base", baseDir]);
  const results = new Map<string, number[]>();
  for (let round = 0; round < rounds; round++) {
    for (const [label, root] of round % 2 === 0 ? labels : [...labels].reverse()) {
      const out = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "--allow-read",
          new URL(import.meta.url).pathname,
          "--codec",
          root,
          ...(rowFilter === null ? [] : ["--rows", rowFilter]),
        ],
        stderr: "inherit",
      }).output();
      if (!out.success) throw new Error(`bench child for ${label} failed`);
      const row = JSON.parse(new TextDecoder().decode(out.stdout)) as Record<string, number>;
      for (const [key, ns] of Object.entries(row)) {
        const k = `${key}\t${label}`;
        results.set(k, [...(results.get(k) ?? []), ns]);
      }
    }
  }
  console.log(`ns per frame (CPU), median of ${rounds} rounds, batches of ${BATCH}`);
  for (const key of [...results.keys()].sort()) {
    console.log(`${key}\t${median(results.get(key)!).toFixed(1)}`);
  }
}
