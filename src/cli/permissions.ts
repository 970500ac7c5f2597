/**
 * The binary is built with `--allow-run` for one command: `lockd run` starts the user's command
 * in its own process group and signals that group. Every other command, the server above all,
 * gives the permission up before it reads a flag, so a server process cannot start one.
 *
 * A process with every permission (`deno run -A`) keeps it: it could do anything anyway, and
 * Deno lets only such a process read /proc (process_open_fds), which a revoke would end.
 */

/** The subcommand a command line runs: flags alone (or nothing) mean `serve`. */
export function commandNameOf(args: readonly string[]): string {
  const first = args[0];
  return first === undefined || first.startsWith("-") ? "serve" : first;
}

/** Permissions the shipped binary never has: all of them granted means `--allow-all`. */
const GRANTED_ONLY_BY_ALLOW_ALL = ["env", "sys", "ffi"] as const;

/** Revokes what `command` does not need (only `run` keeps the run permission). */
export function dropUnneededPermissions(command: string): void {
  if (command === "run") return;
  const allowAll = GRANTED_ONLY_BY_ALLOW_ALL.every((name) =>
    Deno.permissions.querySync({ name }).state === "granted"
  );
  if (!allowAll) Deno.permissions.revokeSync({ name: "run" });
}
