import {
  CONFIG_FLAGS,
  ConfigError,
  configFromFlags,
  defaultText,
  type ServerConfig,
} from "../config.ts";
import { durationText } from "../duration.ts";
import { configureDiagnosticLog, log, writeDiagnosticText } from "../log/diagnostic.ts";
import { startServer } from "../server/start.ts";
import { FlagError, type FlagSpec, formatFlagHelp, parseFlags } from "./flags.ts";
import { errorText } from "../error_text.ts";

/** Every flag of `lockd serve`, from the one table in src/config.ts. */
export const SERVE_FLAGS: readonly FlagSpec[] = CONFIG_FLAGS.map((row) => {
  const show = row.kind === "duration" ? durationText : String;
  const range = row.max === undefined ? "" : ` (${show(row.min ?? 0)} to ${show(row.max)})`;
  return { name: row.flag, kind: row.kind, help: row.help + range, defaultText: defaultText(row) };
});

export const SERVE_USAGE = `Usage: lockd serve [flags]

Runs the lock server. The diagnostic log goes to standard error; standard
output carries only the audit log.

Flags:
${formatFlagHelp(SERVE_FLAGS)}`;

/** Turns `lockd serve` arguments into a validated configuration; throws FlagError. */
export function serveConfigFromArgs(args: readonly string[]): ServerConfig {
  const { values, positionals, afterDoubleDash } = parseFlags(args, SERVE_FLAGS);
  if (positionals.length > 0 || afterDoubleDash !== null) {
    throw new FlagError(`unexpected argument "${positionals[0] ?? "--"}"`);
  }
  try {
    return configFromFlags(values);
  } catch (error) {
    if (error instanceof ConfigError) throw new FlagError(error.message);
    throw error;
  }
}

/**
 * `lockd serve`: starts the server, then waits for signals. SIGTERM/SIGINT run
 * the ordered shutdown and exit 0; a second one exits at once; SIGHUP reloads.
 * Returns the exit code.
 */
export async function serveCommand(config: ServerConfig): Promise<number> {
  configureDiagnosticLog(config.logLevel, config.logFormat);
  const logger = log("server");
  let server;
  try {
    server = await startServer(config);
  } catch (error) {
    logger.error("cannot start", { error: errorText(error) });
    // With -log-format json, standard error carries JSON lines only: the line above says it.
    if (config.logFormat !== "json") {
      // Through the diagnostic log's writer: a standard error nobody reads cannot hang the exit.
      writeDiagnosticText(`lockd: ${errorText(error)}\n`);
    }
    return 1;
  }
  const stopping = Promise.withResolvers<string>();
  const impatient = Promise.withResolvers<number>();
  let signalsSeen = 0;
  const onStop = (signal: Deno.Signal) => () => {
    signalsSeen++;
    if (signalsSeen > 1) {
      // main.ts exits with this status at once, skipping what is left of the shutdown.
      logger.warn("second signal: exiting at once", { signal });
      impatient.resolve(1);
    }
    stopping.resolve(signal);
  };
  const onHup = () => void server.reload();
  const handlers: [Deno.Signal, () => void][] = [
    ["SIGTERM", onStop("SIGTERM")],
    ["SIGINT", onStop("SIGINT")],
    ["SIGHUP", onHup],
  ];
  for (const [signal, handler] of handlers) Deno.addSignalListener(signal, handler);
  // Logged once the signals are handled: a supervisor that stops lockd as soon as it reads
  // this line gets the ordered shutdown, not the default exit.
  logger.info("lockd started", {
    listen: server.addr,
    admin_listen: server.adminAddr ?? "",
    ops_listen: server.opsAddr ?? "",
  });
  const signal = await stopping.promise;
  logger.info("shutdown started", { signal });
  const code = await Promise.race([server.shutdown().then(() => 0), impatient.promise]);
  for (const [name, handler] of handlers) {
    if (name !== "SIGTERM" && name !== "SIGINT") Deno.removeSignalListener(name, handler);
  }
  return code;
}
