import {
  configureSync,
  getJsonLinesFormatter,
  getLogger,
  type Logger,
  type LogRecord,
  resetSync,
} from "@logtape/logtape";
import {
  DIAGNOSTIC_LOG_BUFFER_BYTES_MAX,
  DIAGNOSTIC_LOG_FLUSH_MS,
  DIAGNOSTIC_LOG_WRITE_BYTES_MAX,
} from "../limits.ts";
import { LineWriter } from "./line_writer.ts";
import { stdioWritesSynchronously } from "./sink_kind.ts";

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
 * Standard error, as the diagnostic log writes it (see {@link configureDiagnosticLog}); one for
 * the process, made on first use.
 */
let stderrWriter: LineWriter | null = null;

/** Diagnostic log lines dropped because standard error could not take them (a metric). */
export function diagnosticLinesDropped(): number {
  return stderrWriter?.droppedLines ?? 0;
}

/**
 * Writes text to standard error through the diagnostic log's writer (never blocking), e.g. the
 * one-line reason of a failed start.
 */
export function writeDiagnosticText(text: string): void {
  if (stderrWriter === null) stderrWriter = openStderrWriter();
  stderrWriter.write(encoder.encode(text));
}

/**
 * Waits until the lines buffered for standard error are written, at most `timeoutMs` (at exit:
 * a reader that stopped must not keep the process from ending). True when all were written.
 */
export function flushDiagnosticLog(timeoutMs = DIAGNOSTIC_LOG_FLUSH_MS): Promise<boolean> {
  return stderrWriter?.flush(timeoutMs) ?? Promise.resolve(true);
}

function openStderrWriter(): LineWriter {
  const synchronous = stdioWritesSynchronously(2);
  return new LineWriter({
    write: (bytes) => Deno.stderr.write(bytes),
    ...(synchronous ? { writeSync: (bytes: Uint8Array) => Deno.stderr.writeSync(bytes) } : {}),
  }, {
    bufferBytesMax: DIAGNOSTIC_LOG_BUFFER_BYTES_MAX,
    writeBytesMax: DIAGNOSTIC_LOG_WRITE_BYTES_MAX,
    onDropped: (lines) =>
      getLogger(["lockd", "log"]).warn(
        "diagnostic log lines were dropped: standard error was not read",
        { dropped_lines: lines },
      ),
  });
}

/**
 * Configures the diagnostic log: standard error only (standard output belongs
 * to the audit log), UTC RFC 3339 timestamps, structured properties. Standard
 * error is written without ever blocking the server (a reader that stops, a
 * full pipe): synchronously where no reader can stall it (a regular file,
 * /dev/null), else asynchronously through a bounded buffer whose overflow is
 * dropped, counted and reported once writing works again; see
 * {@link flushDiagnosticLog} for the exit. `write` replaces standard error
 * (tests capture lines with it).
 */
export function configureDiagnosticLog(
  level: LogLevel,
  format: LogFormat,
  write?: (bytes: Uint8Array) => void,
): void {
  const formatter = format === "json"
    ? getJsonLinesFormatter({ properties: "flatten" })
    : formatText;
  resetSync();
  if (write === undefined) {
    if (stderrWriter === null) stderrWriter = openStderrWriter();
    const writer = stderrWriter;
    write = (bytes) => writer.write(bytes);
  }
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
