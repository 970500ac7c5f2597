import {
  configureSync,
  getJsonLinesFormatter,
  getLogger,
  type Logger,
  type LogRecord,
  resetSync,
} from "@logtape/logtape";

export type LogLevel = "debug" | "info" | "warn" | "error";
export type LogFormat = "text" | "json";
export const LOG_LEVELS: readonly LogLevel[] = ["debug", "info", "warn", "error"];
export const LOG_FORMATS: readonly LogFormat[] = ["text", "json"];

const encoder = new TextEncoder();

/** Whether debug lines are emitted: read on hot paths instead of asking LogTape per frame. */
let debugOn = false;

/**
 * True when the diagnostic log is at debug level. Costs a variable read, so a
 * hot path (every frame) can guard a debug line with it and build nothing when
 * debug is off; `logger.isEnabledFor` costs ~60-130 ns per call.
 */
export function debugEnabled(): boolean {
  return debugOn;
}

/**
 * Configures the diagnostic log: standard error only (standard output belongs
 * to the audit log), UTC RFC 3339 timestamps, structured properties. The sink
 * writes synchronously so no line is lost when the process exits.
 */
export function configureDiagnosticLog(
  level: LogLevel,
  format: LogFormat,
  write: (bytes: Uint8Array) => void = (bytes) => writeAll(bytes),
): void {
  const formatter = format === "json"
    ? getJsonLinesFormatter({ properties: "flatten" })
    : formatText;
  resetSync();
  debugOn = level === "debug";
  configureSync({
    reset: true,
    sinks: {
      stderr: (record: LogRecord) => write(encoder.encode(formatter(record))),
    },
    loggers: [
      { category: ["lockd"], lowestLevel: level === "warn" ? "warning" : level, sinks: ["stderr"] },
      { category: ["logtape", "meta"], lowestLevel: "warning", sinks: ["stderr"] },
    ],
  });
}

function writeAll(bytes: Uint8Array): void {
  let written = 0;
  while (written < bytes.length) {
    written += Deno.stderr.writeSync(bytes.subarray(written));
  }
}

const LEVEL_NAMES: Record<string, string> = {
  trace: "TRACE",
  debug: "DEBUG",
  info: "INFO",
  warning: "WARN",
  error: "ERROR",
  fatal: "FATAL",
};

/**
 * `2026-01-01T00:00:00.000Z INFO protocol session opened session=3 remote_addr="127.0.0.1:5000"`:
 * the message, then every property as key=value; strings are JSON-quoted so
 * names with spaces or control characters cannot forge a line.
 */
function formatText(record: LogRecord): string {
  let line = `${new Date(record.timestamp).toISOString()} ${LEVEL_NAMES[record.level]} ${
    record.category.slice(1).join(".")
  } `;
  // Even indexes are the literal text of the message, odd ones interpolated values (quoted).
  record.message.forEach((part, i) => {
    line += i % 2 === 0 ? String(part) : formatValue(part);
  });
  for (const [key, value] of Object.entries(record.properties)) {
    line += ` ${key}=${formatValue(value)}`;
  }
  return line.replaceAll("\n", "\\n").replaceAll("\r", "\\r") + "\n";
}

function formatValue(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (value instanceof Error) return JSON.stringify(value.message);
  if (typeof value === "object" && value !== null) return JSON.stringify(value);
  return String(value);
}

/** The logger of one part of the server, e.g. `log("protocol")`. */
export function log(part: string): Logger {
  return getLogger(["lockd", part]);
}
