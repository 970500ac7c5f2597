/**
 * The systemd install of docs/operations.md ("Deploying with systemd") works
 * as written (issue 13.1). The numbered steps run in a scratch root: every
 * absolute path under /etc, /usr/local and /var is moved below it, and
 * stand-ins replace what needs a real systemd host (`useradd`, `chgrp`, the
 * `-g` of `install`, and `systemctl`, which starts the unit's ExecStart with
 * its EnvironmentFile the way systemd does, and creates StateDirectory= and
 * LogsDirectory=). The "binary" is a script running main.ts with the
 * compiled binary's permissions (net, read, write). Then the steps' own
 * checks (`lockd health`, `lockd admin info`) must pass, and every file the
 * unit and the environment example name must exist.
 *
 * The listeners of the example (7400-7402, on 0.0.0.0) are moved to free
 * loopback ports picked just before the run.
 *
 * `systemd-analyze verify` of the unit runs in .ci/deploy_checks.sh.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { markedBlock, readRepoFile, runBash } from "../helpers/doc_blocks.ts";

const REPO = fileURLToPath(new URL("../../", import.meta.url)).replace(/\/$/, "");
const DOC = "docs/operations.md";
const UNIT = "deploy/systemd/lockd.service";
const ENV_EXAMPLE = "deploy/systemd/lockd.env.example";
/** Flags of `lockd serve` whose value is a file the operator must provide. */
const FILE_FLAGS = ["-admin-token-file", "-tls-cert", "-tls-key", "-tls-client-ca", "-acl-file"];

/** `KEY=value` lines of a unit file, by key (repeated keys keep every value). */
function unitValues(unit: string, key: string): string[] {
  return unit.split("\n").filter((line) => line.startsWith(`${key}=`)).map((line) =>
    line.slice(key.length + 1)
  );
}

/** Every LOCKD_FLAGS value of the environment example, the commented variants included. */
function exampleFlagLines(env: string): string[][] {
  return [...env.matchAll(/^#?LOCKD_FLAGS="([^"]*)"$/gm)].map((m) => m[1].split(/\s+/));
}

/** The files the unit and the environment example expect to exist before lockd starts. */
function namedFiles(): string[] {
  const unit = readRepoFile(UNIT);
  const files = new Set<string>();
  files.add(unitValues(unit, "ExecStart")[0].split(" ")[0]);
  for (const environmentFile of unitValues(unit, "EnvironmentFile")) {
    files.add(environmentFile.replace(/^-/, ""));
  }
  for (const flags of exampleFlagLines(readRepoFile(ENV_EXAMPLE))) {
    flags.forEach((flag, i) => {
      if (FILE_FLAGS.includes(flag)) files.add(flags[i + 1]);
    });
  }
  return [...files];
}

Deno.test("install steps: the unit and the environment example agree with the steps", () => {
  const unit = readRepoFile(UNIT);
  const execStart = unitValues(unit, "ExecStart")[0];
  // -data-dir and -audit-log are the directories systemd creates for the unit.
  const state = unitValues(unit, "StateDirectory")[0];
  const logs = unitValues(unit, "LogsDirectory")[0];
  assert.match(execStart, new RegExp(` -data-dir /var/lib/${state} `));
  assert.match(execStart, new RegExp(` -audit-log /var/log/${logs}/`));
  assert.match(execStart, / \$LOCKD_FLAGS$/);
  const steps = markedBlock(readRepoFile(DOC), "install-steps").body;
  const user = unitValues(unit, "User")[0];
  assert.match(steps, new RegExp(`^useradd .* ${user}$`, "m"), "a step creates the unit's user");
  // Every flag line of the example must name its files under /etc/lockd, which step 3 creates.
  const lines = exampleFlagLines(readRepoFile(ENV_EXAMPLE));
  assert.ok(lines.length >= 2, "a plain and a TLS variant of LOCKD_FLAGS");
  for (const file of namedFiles().filter((f) => f !== execStart.split(" ")[0])) {
    assert.match(file, /^\/etc\/lockd\//, `${file} lies under /etc/lockd`);
  }
});

/** Stand-ins for the commands of a systemd host, as bash scripts. */
const STAND_INS: Record<string, string> = {
  useradd: `#!/bin/bash
# useradd stand-in: remembers the user (its group of the same name) in $ROOT/.groups.
echo "\${@: -1}" >>"$ROOT/.groups"`,
  chgrp: `#!/bin/bash
# chgrp stand-in: the group must have been created by useradd; ownership itself is not changed.
grep -qx "$1" "$ROOT/.groups" || { echo "chgrp: invalid group: '$1'" >&2; exit 1; }`,
  install: `#!/bin/bash
# install stand-in: real install(1) without -g/-o (the group must exist, as with the real one).
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -g|-o) grep -qx "$2" "$ROOT/.groups" || { echo "install: invalid group '$2'" >&2; exit 1; }
           shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
exec /usr/bin/install "\${args[@]}"`,
  systemctl: `#!/bin/bash
# systemctl stand-in for one unit: starts ExecStart with EnvironmentFile the way systemd does
# ($LOCKD_FLAGS unquoted: split on spaces), with the paths and ports of the scratch root.
set -eu
unit="$ROOT/etc/systemd/system/lockd.service"
value() { sed -n "s/^$1=//p" "$unit" | head -n 1; }
relocate() {
  sed -E -e "s#(^| )/(etc|usr/local|var)/#\\1$ROOT/\\2/#g" -e 's#0\\.0\\.0\\.0:#127.0.0.1:#g' \\
    -e "s#:7400( |$)#:$PORT_PROTOCOL\\1#g" -e "s#:7401( |$)#:$PORT_ADMIN\\1#g" \\
    -e "s#:7402( |$)#:$PORT_OPS\\1#g"
}
stop() {
  [ -f "$ROOT/lockd.pid" ] || return 0
  pid=$(cat "$ROOT/lockd.pid")
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  rm -f "$ROOT/lockd.pid"
}
start() {
  [ -f "$unit" ] || { echo "Unit lockd.service not found." >&2; exit 5; }
  LOCKD_FLAGS=
  envfile=$(value EnvironmentFile)
  case "$envfile" in
    -*) envfile=\${envfile#-}; [ -f "$ROOT$envfile" ] && { set -a; . "$ROOT$envfile"; set +a; } ;;
    *) set -a; . "$ROOT$envfile"; set +a ;;
  esac
  mkdir -p "$ROOT/var/lib/$(value StateDirectory)" "$ROOT/var/log/$(value LogsDirectory)"
  exec_start=$(value ExecStart)
  cmd=$(printf '%s\\n' "\${exec_start//\\$LOCKD_FLAGS/$LOCKD_FLAGS}" | relocate)
  # Type=simple: systemctl returns once the process is started, not once it listens.
  $cmd -shutdown-grace 0s </dev/null >>"$ROOT/lockd.out" 2>>"$ROOT/lockd.err" &
  echo $! >"$ROOT/lockd.pid"
}
case "$*" in
  daemon-reload) ;;
  "enable --now lockd") start ;;
  "restart lockd") stop; start ;;
  *) echo "systemctl stand-in: '$*' is not supported" >&2; exit 1 ;;
esac`,
};

/** Moves /etc, /usr/local and /var paths of a step below `root`, and the example's ports. */
function relocate(script: string, root: string, ports: Record<string, number>): string {
  return script
    .replace(/(^|[\s=>"'])\/(etc|usr\/local|var)\//gm, `$1${root}/$2/`)
    .replace(/:7400\b/g, `:${ports.protocol}`)
    .replace(/:7401\b/g, `:${ports.admin}`)
    .replace(/:7402\b/g, `:${ports.ops}`);
}

function freePort(): number {
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  return listener.addr.port;
}

Deno.test("install steps: run as written, lockd starts, and health and admin info answer", async () => {
  const root = await Deno.makeTempDir({ prefix: "lockd-install-" });
  const work = `${root}/checkout`;
  const bin = `${root}/stand-ins`;
  const ports = { protocol: freePort(), admin: freePort(), ops: freePort() };
  const env = {
    ROOT: root,
    PORT_PROTOCOL: String(ports.protocol),
    PORT_ADMIN: String(ports.admin),
    PORT_OPS: String(ports.ops),
    PATH: `${bin}:${root}/usr/local/bin:${Deno.env.get("PATH")}`,
    HOME: root,
    NO_COLOR: "1",
  };
  try {
    await Deno.mkdir(`${work}/dist`, { recursive: true });
    // What every systemd host has before the steps begin.
    for (const dir of ["usr/local/bin", "etc/systemd/system", "var/lib", "var/log"]) {
      await Deno.mkdir(`${root}/${dir}`, { recursive: true });
    }
    await Deno.mkdir(bin);
    await Deno.symlink(`${REPO}/deploy`, `${work}/deploy`);
    // `deno task compile` cannot run here: the "binary" runs main.ts with the binary's permissions.
    await Deno.writeTextFile(
      `${work}/dist/lockd`,
      `#!/bin/sh\nexec "${Deno.execPath()}" run --allow-net --allow-read --allow-write --allow-run "${REPO}/main.ts" "$@"\n`,
      { mode: 0o755 },
    );
    for (const [name, script] of Object.entries(STAND_INS)) {
      await Deno.writeTextFile(`${bin}/${name}`, script + "\n", { mode: 0o755 });
    }
    const doc = readRepoFile(DOC);
    const steps = markedBlock(doc, "install-steps");
    assert.equal(steps.lang, "sh");
    const first = await runBash(relocate(steps.body, root, ports), { cwd: work, env });
    assert.match(first.stdout, /^healthy$/m);
    assert.match(first.stdout, /^version +\d+\.\d+\.\d+$/m);
    assert.match(first.stdout, /^tls +false$/m);
    assert.match(first.stdout, new RegExp(`^audit_log +${root}/var/log/lockd/audit\\.jsonl$`, "m"));

    const token = Deno.readTextFileSync(`${root}/etc/lockd/admin.token`);
    assert.match(token, /^[0-9a-f]{64}$/, "step 4 writes 32 random bytes as hex");
    assert.equal(Deno.statSync(`${root}/etc/lockd/admin.token`).mode! & 0o777, 0o640);

    // Step 7: TLS and the ACL, with the files of the TLS recipe.
    const recipe = markedBlock(doc, "tls-recipe").body
      .replace(/^SERVER_DNS=.*$/m, "SERVER_DNS=localhost")
      .replace(/^SERVER_IP=.*$/m, "SERVER_IP=127.0.0.1");
    await runBash(recipe, { cwd: work });
    await Deno.writeTextFile(`${work}/acl`, "allow ** **\n");
    const tls = await runBash(relocate(markedBlock(doc, "install-steps-tls").body, root, ports), {
      cwd: work,
      env,
    });
    assert.match(tls.stdout, /^healthy$/m);
    assert.match(tls.stdout, /^tls +true$/m);
    assert.match(tls.stdout, /^mtls +true$/m);
    assert.match(tls.stdout, new RegExp(`^acl_file +${root}/etc/lockd/acl$`, "m"));

    for (const file of namedFiles()) {
      assert.ok(
        Deno.statSync(`${root}${file}`).isFile,
        `${file}, named by the unit or the environment example, was created by a step`,
      );
    }
  } finally {
    try {
      const pid = Number(Deno.readTextFileSync(`${root}/lockd.pid`));
      Deno.kill(pid, "SIGKILL");
    } catch {
      // Not started, or already stopped.
    }
    await Deno.remove(root, { recursive: true });
  }
});
