import type { AuditSink } from "../../src/log/audit.ts";

/** An audit sink in memory that can be told to fail (closed pipe, full disk). */
export class MemorySink implements AuditSink {
  /** Every line written, without its newline (one write may carry several). */
  readonly lines: string[] = [];
  /** How many writes the sink took. */
  writes = 0;
  failing = false;
  readonly #decoder = new TextDecoder();

  write(bytes: Uint8Array): Promise<number> {
    if (this.failing) return Promise.reject(new Error("No space left on device (os error 28)"));
    const text = this.#decoder.decode(bytes);
    if (!text.endsWith("\n")) {
      return Promise.reject(new Error("an audit write must end with a whole line"));
    }
    this.lines.push(...text.slice(0, -1).split("\n"));
    this.writes++;
    return Promise.resolve(bytes.length);
  }

  /** Parsed records, in order. */
  records(): Record<string, unknown>[] {
    return this.lines.map((line) => JSON.parse(line));
  }
}
