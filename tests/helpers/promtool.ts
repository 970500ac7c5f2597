/** `promtool` from Prometheus, when it is on PATH (CI installs it: see .ci/deploy_checks.sh). */

/** Whether `promtool` runs here. */
export async function hasPromtool(): Promise<boolean> {
  try {
    const { success } = await new Deno.Command("promtool", {
      args: ["--version"],
      stdout: "null",
      stderr: "null",
    }).output();
    return success;
  } catch {
    return false;
  }
}

/** Runs `promtool check metrics` on an exposition; returns its exit code and everything it printed. */
export async function promtoolCheckMetrics(
  exposition: string,
): Promise<{ code: number; report: string }> {
  const child = new Deno.Command("promtool", {
    args: ["check", "metrics"],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(exposition));
  await writer.close();
  const { code, stdout, stderr } = await child.output();
  const decoder = new TextDecoder();
  return { code, report: decoder.decode(stdout) + decoder.decode(stderr) };
}
