/**
 * A command and everything it starts, as one unit that can be signalled and waited for:
 * `lockd run` must stop all of it when the lock is lost, not only its direct child.
 *
 * How: `Deno.Command` with `detached: true` calls setsid(2) in the child before exec, so the
 * command leads a new session and process group whose id is its pid; its children and
 * grandchildren inherit the group. `Deno.kill(-pgid, signal)` is kill(2) with a negative pid:
 * it signals every process of the group. No helper binary (util-linux `setsid`) is needed.
 * A process that leaves the group on purpose (a daemon that calls setsid itself) escapes; that
 * is documented for `lockd run`.
 *
 * "Gone" means no process of the group is alive. A killed process whose parent died is
 * re-parented to PID 1 and stays a zombie until PID 1 reaps it (some container inits reap late
 * or never); a zombie cannot run or write, so zombies do not count. On Linux the group's
 * members are read from /proc; elsewhere kill(-pgid, 0) answers, zombies included.
 *
 * @module
 */

import type { Scheduler } from "../clock.ts";

/** A process group led by a command started with {@link spawnInGroup}. */
export class ProcessGroup {
  /** Process group id (the leader's pid). */
  readonly pgid: number;

  constructor(pgid: number) {
    this.pgid = pgid;
  }

  /** Sends `signal` to every process of the group; a group that is gone is not an error. */
  signal(signal: Deno.Signal): void {
    try {
      Deno.kill(-this.pgid, signal);
    } catch {
      // ESRCH: nobody left in the group
    }
  }

  /** Whether any process of the group is still alive (zombies do not count). */
  alive(): boolean {
    try {
      Deno.kill(-this.pgid, 0);
    } catch {
      return false; // not even a zombie
    }
    const members = liveMembersFromProc(this.pgid);
    return members === null ? true : members > 0;
  }

  /** Resolves once no process of the group is alive, polling every `pollMs` on `scheduler`. */
  async gone(scheduler: Scheduler, pollMs = 10): Promise<void> {
    while (this.alive()) {
      await new Promise<void>((resolve) => scheduler.setTimer(resolve, pollMs));
    }
  }
}

/** Spawns `command` as the leader of a new session and process group. */
export function spawnInGroup(
  command: readonly string[],
  env: Record<string, string>,
): { child: Deno.ChildProcess; group: ProcessGroup } {
  const child = new Deno.Command(command[0], {
    args: command.slice(1),
    env,
    stdin: "inherit",
    stdout: "inherit",
    stderr: "inherit",
    detached: true,
  }).spawn();
  return { child, group: new ProcessGroup(child.pid) };
}

/**
 * Live (not zombie, not dead) processes whose process group is `pgid`, from /proc; null when
 * /proc cannot be read (not Linux, or no permission).
 */
function liveMembersFromProc(pgid: number): number | null {
  let entries;
  try {
    entries = [...Deno.readDirSync("/proc")];
  } catch {
    return null;
  }
  let live = 0;
  for (const entry of entries) {
    if (!/^\d+$/.test(entry.name)) continue;
    let stat;
    try {
      stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
    } catch {
      continue; // exited while we looked
    }
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const state = fields[0];
    if (Number(fields[2]) === pgid && state !== "Z" && state !== "X") live++;
  }
  return live;
}
