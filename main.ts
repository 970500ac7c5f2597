/**
 * The `lockd` command: one table of subcommands (`serve`, the default, `run`, `observe`,
 * `admin`, `health`, `version`). This is the only place that exits the process: every subcommand
 * returns its status. `-h` on any subcommand prints that subcommand's usage on standard output
 * and exits 0; a bad command line prints one line and the usage on standard error and exits 2.
 */
import { ADMIN_USAGE, adminCommand } from "./src/cli/admin.ts";
import { FlagError, HelpRequested } from "./src/cli/flags.ts";
import { HEALTH_USAGE, healthCommand } from "./src/cli/health.ts";
import { commandNameOf, dropUnneededPermissions } from "./src/cli/permissions.ts";
import { OBSERVE_USAGE, observeCommand } from "./src/cli/observe.ts";
import { RUN_USAGE, runCommand } from "./src/cli/run.ts";
import { SERVE_USAGE, serveCommand, serveConfigFromArgs } from "./src/cli/serve.ts";
import { flushDiagnosticLog } from "./src/log/diagnostic.ts";
import { VERSION } from "./src/version.ts";

interface Command {
  /** How `lockd -h` lists it. */
  readonly synopsis: string;
  readonly summary: string;
  /** What `lockd NAME -h` prints. */
  readonly usage: string;
  run(args: string[]): Promise<number>;
}

const COMMANDS: Readonly<Record<string, Command>> = {
  serve: {
    synopsis: "lockd [serve] [flags]",
    summary: "run the server (lockd serve -h for flags)",
    usage: SERVE_USAGE,
    run: (args) => serveCommand(serveConfigFromArgs(args)),
  },
  run: {
    synopsis: "lockd run NAME [flags] -- CMD [ARGS]",
    summary: "run CMD while holding the lock NAME",
    usage: RUN_USAGE,
    run: (args) => runCommand(args),
  },
  observe: {
    synopsis: "lockd observe NAME|GLOB [flags]",
    summary: "print a JSON line per state of locks (holder, value)",
    usage: OBSERVE_USAGE,
    run: (args) => observeCommand(args),
  },
  admin: {
    synopsis: "lockd admin [flags] info|locks|show|release|kick ...",
    summary: "operate a running server",
    usage: ADMIN_USAGE,
    run: (args) => adminCommand(args),
  },
  health: {
    synopsis: "lockd health [-ops host:port] [-wait d]",
    summary: "probe /healthz (for container health checks)",
    usage: HEALTH_USAGE,
    run: (args) => healthCommand(args),
  },
  version: {
    synopsis: "lockd version",
    summary: "print the version",
    usage: "Usage: lockd version\n\nPrints the version of lockd.",
    run: (args) => {
      if (args.length > 0 && args[0] !== "-h" && args[0] !== "--help") {
        throw new FlagError(`unexpected argument "${args[0]}"`);
      }
      if (args.length > 0) throw new HelpRequested();
      console.log(VERSION);
      return Promise.resolve(0);
    },
  },
};

const width = Math.max(...Object.values(COMMANDS).map((c) => c.synopsis.length)) + 2;
const USAGE = `lockd ${VERSION}: a network lock service with fencing tokens

Usage:
${Object.values(COMMANDS).map((c) => `  ${c.synopsis.padEnd(width)}${c.summary}`).join("\n")}`;

export async function main(args: string[]): Promise<number> {
  const [first, ...rest] = args;
  if (first === "-h" || first === "--help" || first === "help") {
    console.log(USAGE);
    return 0;
  }
  const name = commandNameOf(args);
  const command = COMMANDS[name];
  if (command === undefined) {
    console.error(`lockd: unknown command "${first}"\n\n${USAGE}`);
    return 2;
  }
  try {
    return await command.run(name === first ? rest : args);
  } catch (error) {
    if (error instanceof HelpRequested) {
      console.log(command.usage);
      return 0;
    }
    if (error instanceof FlagError) {
      console.error(`lockd: ${error.message}\n\n${command.usage}`);
      return 2;
    }
    throw error;
  }
}

if (import.meta.main) {
  // Only `lockd run` keeps the permission to start processes (src/cli/permissions.ts).
  dropUnneededPermissions(commandNameOf(Deno.args));
  const code = await main(Deno.args);
  // Lines still buffered for standard error go out first, within a bound (a reader that
  // stopped reading must not keep the process from exiting).
  await flushDiagnosticLog();
  Deno.exit(code);
}
