import { type Scheduler, systemScheduler } from "../clock.ts";
import { formatHostPort, parseHostPort } from "../host_port.ts";
import { HEALTH_RETRY_MS, HEALTH_TIMEOUT_MS } from "../limits.ts";
import { FlagError, type FlagSpec, formatFlagHelp, HelpRequested, parseFlags } from "./flags.ts";
import { describeFetchError } from "./http_errors.ts";

const OPS_ADDR_DEFAULT = "127.0.0.1:7402";

const FLAGS: readonly FlagSpec[] = [
  { name: "ops", kind: "string", help: "ops listener host:port", defaultText: OPS_ADDR_DEFAULT },
  {
    name: "wait",
    kind: "duration",
    help: "probe again until healthy or this long has passed (e.g. right after a start)",
    defaultText: "0s",
  },
];

export const HEALTH_USAGE = `Usage: lockd health [-ops HOST:PORT] [-wait DURATION]

GETs /healthz on the ops listener (lockd serve -ops-listen). Exit status 0 when it
answers 200, 1 when it does not (the reason on standard error), 2 for a usage error.

Flags:
${formatFlagHelp(FLAGS)}`;

/** Where `lockd health` writes, and the clock it waits on; tests replace them. */
export interface HealthIo {
  stderr(text: string): void;
  /** The clock and timers of `-wait`, the pause between probes and each probe's timeout. */
  scheduler?: Scheduler;
}

/**
 * `lockd health [-ops host:port] [-wait D]`: GETs /healthz; exit 0 on 200,
 * 1 otherwise, 2 on a usage error. For container health checks where no curl
 * is available, and for install scripts (`-wait`: the server may still be
 * starting).
 */
export async function healthCommand(
  args: readonly string[],
  io: HealthIo = { stderr: (text) => console.error(text.trimEnd()) },
): Promise<number> {
  let ops: string;
  let waitMs: number;
  try {
    const { values, positionals } = parseFlags(args, FLAGS);
    if (positionals.length > 0) throw new FlagError(`unexpected argument "${positionals[0]}"`);
    ops = (values.get("ops") as string | undefined) ?? OPS_ADDR_DEFAULT;
    waitMs = (values.get("wait") as number | undefined) ?? 0;
    const { hostname, port } = parseHostPort(ops);
    // A wildcard listen address (what -ops-listen may say) means this host.
    if (hostname === "0.0.0.0") ops = formatHostPort("127.0.0.1", port);
    if (hostname === "::") ops = formatHostPort("::1", port);
  } catch (error) {
    // -h: main.ts prints HEALTH_USAGE on standard output.
    if (error instanceof HelpRequested) throw error;
    if (error instanceof FlagError || error instanceof RangeError) {
      const message = (error as Error).message;
      const line = error instanceof FlagError ? message : `invalid value for flag -ops: ${message}`;
      io.stderr(`lockd health: ${line}\n\n${HEALTH_USAGE}\n`);
      return 2;
    }
    throw error;
  }
  const scheduler = io.scheduler ?? systemScheduler;
  const deadline = scheduler.monotonicMs() + waitMs;
  for (;;) {
    const failure = await probe(ops, scheduler);
    if (failure === null) return 0;
    if (scheduler.monotonicMs() + HEALTH_RETRY_MS > deadline) {
      const after = waitMs > 0 ? `not healthy after -wait ${waitMs} ms: ` : "";
      io.stderr(`lockd health: ${after}${failure}\n`);
      return 1;
    }
    await new Promise<void>((resolve) => scheduler.setTimer(resolve, HEALTH_RETRY_MS));
  }
}

/** null when /healthz answered 200, else why not. */
async function probe(ops: string, scheduler: Scheduler): Promise<string | null> {
  const timeout = new AbortController();
  const timer = scheduler.setTimer(
    () => timeout.abort(new DOMException("timed out", "TimeoutError")),
    HEALTH_TIMEOUT_MS,
  );
  try {
    const response = await fetch(`http://${ops}/healthz`, { signal: timeout.signal });
    const body = (await response.text()).trim().split("\n")[0];
    if (response.status === 200) return null;
    return `the ops listener at ${ops} answered ${response.status}${body ? ` "${body}"` : ""}` +
      (response.status === 503 ? " (lockd is shutting down)" : "");
  } catch (error) {
    return describeFetchError(error, {
      what: "the ops listener",
      addr: ops,
      clientFlag: "-ops",
      serverFlag: "-ops-listen",
    }, HEALTH_TIMEOUT_MS);
  } finally {
    timer.cancel();
  }
}
