import type { AuditSink } from "../../src/log/audit.ts";

/** An audit sink in memory that can be told to fail (closed pipe, full disk). */
export class MemorySink implements AuditSink {
  readonly lines: string[] = [];
  failing = false;
  readonly #decoder = new TextDecoder();

  writeSync(bytes: Uint8Array): number {
    if (this.failing) throw new Error("No space left on device (os error 28)");
    this.lines.push(this.#decoder.decode(bytes));
    return bytes.length;
  }

  /** Parsed records, in order. */
  records(): Record<string, unknown>[] {
    return this.lines.map((line) => JSON.parse(line));
  }
}
