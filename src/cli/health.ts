import { FlagError, parseFlags } from "./flags.ts";

/** How long `lockd health` waits for an answer. */
const HEALTH_TIMEOUT_MS = 2_000;

/**
 * `lockd health [-ops host:port]`: GETs /healthz; exit 0 on 200, 1 otherwise.
 * For container health checks where no curl is available.
 */
export async function healthCommand(args: readonly string[]): Promise<number> {
  let ops: string;
  try {
    const { values } = parseFlags(args, [
      {
        name: "ops",
        kind: "string",
        help: "ops listener host:port",
        defaultText: "127.0.0.1:7402",
      },
    ]);
    ops = (values.get("ops") as string | undefined) ?? "127.0.0.1:7402";
  } catch (error) {
    if (error instanceof FlagError) {
      console.error(`lockd health: ${error.message}`);
      return 2;
    }
    throw error;
  }
  try {
    const response = await fetch(`http://${ops}/healthz`, {
      signal: AbortSignal.timeout(HEALTH_TIMEOUT_MS),
    });
    const body = await response.text();
    if (response.status === 200) return 0;
    console.error(`lockd health: ${response.status} ${body.trim()}`);
    return 1;
  } catch (error) {
    console.error(`lockd health: ${(error as Error).message}`);
    return 1;
  }
}
