/**
 * Only `lockd run` keeps the permission to start processes (src/cli/permissions.ts): the
 * binary is built with --allow-run for it, and `lockd run` works under exactly the shipped
 * permissions; the server gives the permission up at start.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { runLockd } from "../../bench/lockd_proc.ts";
import { startTestServer } from "../helpers/start_server.ts";

const PERMISSIONS = fileURLToPath(new URL("../../src/cli/permissions.ts", import.meta.url));

/** The permission flags of `deno task compile`. */
function shippedPermissions(): string[] {
  const root = new URL("../../", import.meta.url);
  const tasks = JSON.parse(Deno.readTextFileSync(new URL("deno.json", root))).tasks;
  return (tasks.compile as string).split(/\s+/).filter((arg) => /^--allow-/.test(arg));
}

/** The run permission's state after dropUnneededPermissions(command), in a fresh process. */
async function runStateAfter(command: string, permissions: string[]): Promise<string> {
  const code = `import { dropUnneededPermissions } from ${JSON.stringify(PERMISSIONS)};
dropUnneededPermissions(${JSON.stringify(command)});
console.log(Deno.permissions.querySync({ name: "run" }).state);`;
  // `deno eval` has every permission: a script file under `deno run` gets just these.
  const script = await Deno.makeTempFile({ suffix: ".ts" });
  try {
    await Deno.writeTextFile(script, code);
    const output = await new Deno.Command(Deno.execPath(), {
      args: ["run", ...permissions, script],
      env: { NO_COLOR: "1" },
      stdin: "null",
    }).output();
    assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
    return new TextDecoder().decode(output.stdout).trim();
  } finally {
    await Deno.remove(script);
  }
}

Deno.test("permissions: the shipped binary may start processes, for lockd run", () => {
  assert.ok(shippedPermissions().includes("--allow-run"), "deno task compile has --allow-run");
  assert.ok(!shippedPermissions().includes("--allow-all"));
});

Deno.test("permissions: every command but run gives up the run permission; run keeps it; -A keeps all", async () => {
  const shipped = shippedPermissions();
  for (const command of ["serve", "admin", "health", "version"]) {
    assert.equal(await runStateAfter(command, shipped), "prompt", command);
  }
  assert.equal(await runStateAfter("run", shipped), "granted");
  assert.equal(await runStateAfter("serve", ["--allow-all"]), "granted");
});

Deno.test("permissions: lockd run works under the shipped permissions, LOCKD_TOKEN set", async () => {
  await using t = await startTestServer();
  const output = await runLockd(
    ["run", "-addr", t.addr, "perm/run", "--", "sh", "-c", 'echo "token=$LOCKD_TOKEN"'],
    { permissions: shippedPermissions() },
  );
  const stderr = output.stderr;
  assert.equal(output.code, 0, stderr);
  assert.match(output.stdout, /^token=\d{10,}\n$/);
});
