import { resetSync } from "@logtape/logtape";
import { configureDiagnosticLog, type LogFormat, type LogLevel } from "../../src/log/diagnostic.ts";

/** Diagnostic log lines captured in memory; dispose resets logging for the other tests. */
export interface CapturedLog extends Disposable {
  readonly lines: string[];
  /** Lines as JSON (only for format "json"). */
  records(): Record<string, unknown>[];
}

/** Routes the diagnostic log into memory, as `lockd serve` would route it to standard error. */
export function captureDiagnosticLog(
  level: LogLevel = "debug",
  format: LogFormat = "json",
): CapturedLog {
  const lines: string[] = [];
  const decoder = new TextDecoder();
  let partial = "";
  configureDiagnosticLog(level, format, (bytes) => {
    const text = partial + decoder.decode(bytes);
    const parts = text.split("\n");
    partial = parts.pop()!;
    lines.push(...parts);
  });
  return {
    lines,
    records: () => lines.map((line) => JSON.parse(line)),
    [Symbol.dispose]: () => resetSync(),
  };
}
