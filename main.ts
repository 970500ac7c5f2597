/**
 * The `lockd` command: `serve` (default), `run`, `admin`, `health`, `version`.
 * This is the only place that exits the process.
 */
import { adminCommand } from "./src/cli/admin.ts";
import { FlagError, HelpRequested } from "./src/cli/flags.ts";
import { healthCommand } from "./src/cli/health.ts";
import { runCommand } from "./src/cli/run.ts";
import { SERVE_USAGE, serveCommand, serveConfigFromArgs } from "./src/cli/serve.ts";
import { VERSION } from "./src/version.ts";

const USAGE = `lockd ${VERSION}: a network lock service with fencing tokens

Usage:
  lockd [serve] [flags]                   run the server (lockd serve -h for flags)
  lockd run NAME [flags] -- CMD [ARGS]    run CMD while holding the lock NAME
  lockd admin [flags] info|locks|show|release|kick ...   operate a running server
  lockd health [-ops host:port]           probe /healthz (for container health checks)
  lockd version                           print the version`;

export async function main(args: string[]): Promise<number> {
  const [first, ...rest] = args;
  try {
    if (first === undefined || first.startsWith("-") && first !== "-h" && first !== "--help") {
      return await serveCommand(serveConfigFromArgs(args));
    }
    switch (first) {
      case "serve":
        return await serveCommand(serveConfigFromArgs(rest));
      case "run":
        return await runCommand(rest);
      case "admin":
        return await adminCommand(rest);
      case "health":
        return await healthCommand(rest);
      case "version":
        console.log(VERSION);
        return 0;
      case "-h":
      case "--help":
      case "help":
        console.log(USAGE);
        return 0;
      default:
        console.error(`lockd: unknown command "${first}"\n\n${USAGE}`);
        return 2;
    }
  } catch (error) {
    if (error instanceof HelpRequested) {
      console.error(first === "serve" || first?.startsWith("-") ? SERVE_USAGE : USAGE);
      return 0;
    }
    if (error instanceof FlagError) {
      console.error(`lockd: ${error.message}\n\n${SERVE_USAGE}`);
      return 2;
    }
    throw error;
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
