/**
 * What a measured phase cost the server process, read from outside it: CPU time (user + system,
 * from /proc) and, for a process started with `--v8-flags=--trace-gc`, the bytes its JavaScript
 * allocated (from the collector's own trace). Used by `deno task bench` for the echo floor and
 * for lockd alike, so that every scenario can be reported as a ratio to the runtime's floor.
 *
 * Allocation is estimated from the trace lines (`Scavenge 3.2 (4.2) -> 2.3 (4.5) MB`): between two
 * collections the heap grew by what was allocated, so the sum of (size before this collection −
 * size after the previous one) is the bytes allocated. The trace prints sizes to 0.1 MB, so a
 * phase needs a few dozen collections for a figure within about 10 %; what was allocated after
 * the last collection of a phase is counted in the next one.
 *
 * @module
 */

import { cpuSeconds } from "./lockd_proc.ts";

/** The V8 flag that makes a child's standard output carry the trace `GcTrace` reads. */
export const TRACE_GC_FLAG = "--v8-flags=--trace-gc";

const GC_LINE =
  /: (?:[A-Za-z-]+ )*?(?:Scavenge|Mark-Compact|Mark-Sweep|Minor Mark-Sweep|Minor Mark-Compact)\b[^\d]*([\d.]+) \([\d.]+\) -> ([\d.]+) \([\d.]+\) MB/;
const MB = 1024 * 1024;

/** Reads a `--trace-gc` output stream to its end, summing what was allocated. */
export class GcTrace {
  #allocatedMb = 0;
  #lastAfterMb: number | null = null;
  #collections = 0;
  readonly done: Promise<void>;
  /** Lines that were not trace lines (a child's own output), the first 100. */
  readonly otherLines: string[] = [];

  constructor(stdout: ReadableStream<Uint8Array<ArrayBuffer>>) {
    this.done = this.#read(stdout);
  }

  async #read(stdout: ReadableStream<Uint8Array<ArrayBuffer>>): Promise<void> {
    let rest = "";
    try {
      for await (const chunk of stdout.pipeThrough(new TextDecoderStream())) {
        rest += chunk;
        const lines = rest.split("\n");
        rest = lines.pop()!;
        for (const line of lines) this.take(line);
      }
    } catch { /* the process is gone */ }
    if (rest !== "") this.take(rest);
  }

  /** One line of output: a collection's trace line counts; any other line is kept aside. */
  take(line: string): void {
    const m = line.match(GC_LINE);
    if (m === null) {
      if (line.trim() !== "" && this.otherLines.length < 100) this.otherLines.push(line);
      return;
    }
    const beforeMb = Number(m[1]);
    const afterMb = Number(m[2]);
    if (this.#lastAfterMb !== null) this.#allocatedMb += Math.max(0, beforeMb - this.#lastAfterMb);
    this.#lastAfterMb = afterMb;
    this.#collections++;
  }

  /** Bytes allocated up to the last collection seen. */
  get allocatedBytes(): number {
    return this.#allocatedMb * MB;
  }

  get collections(): number {
    return this.#collections;
  }
}

/** What one phase cost the process. */
export interface PhaseCost {
  readonly cpuSeconds: number;
  /** Null without a GC trace, or when the phase saw fewer than 5 collections (too few to tell). */
  readonly allocatedBytes: number | null;
}

/** Marks the start of a phase; `end()` gives what the process spent since. */
export function startPhase(pid: number, gc: GcTrace | null): { end(): PhaseCost } {
  const cpu0 = cpuSeconds(pid);
  const alloc0 = gc?.allocatedBytes ?? 0;
  const collections0 = gc?.collections ?? 0;
  return {
    end() {
      const collections = (gc?.collections ?? 0) - collections0;
      return {
        cpuSeconds: cpuSeconds(pid) - cpu0,
        allocatedBytes: gc !== null && collections >= 5 ? gc.allocatedBytes - alloc0 : null,
      };
    },
  };
}

/** The server's cost of one operation in µs and bytes, and its ratio to the floor's. */
export interface OpCost {
  readonly cpuUsPerOp: number;
  readonly bytesPerOp: number | null;
}

export function perOp(cost: PhaseCost, ops: number): OpCost {
  return {
    cpuUsPerOp: ops > 0 ? (cost.cpuSeconds / ops) * 1e6 : NaN,
    bytesPerOp: cost.allocatedBytes === null || ops <= 0 ? null : cost.allocatedBytes / ops,
  };
}
