/**
 * The client runs unchanged on Deno, Node and Bun only if nothing it imports touches the Deno
 * namespace or a runtime-specific module. This walks mod.ts's module graph (`deno info`) so a
 * stray `Deno.*` fails here, before CI builds the npm package.
 *
 * One probe is allowed, in src/client/client_name.ts: whether Deno (when it is the runtime)
 * already grants reading the host name, so that the default client name never triggers a
 * permission prompt. It reads `globalThis.Deno` optionally and works without it.
 */
import assert from "node:assert/strict";

/**
 * The one sanctioned look at the Deno namespace (see the module comment), as npm/build.ts allows
 * it in the compiled JavaScript too; the code around it must not name Deno.
 */
const HOST_NAME_PROBE = /\(?globalThis(?: as DenoGlobal\))?\.Deno\?\.permissions/g;

Deno.test("mod.ts and everything it imports use no Deno API and only node:net, node:os and node:tls", async () => {
  const info = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", new URL("../../mod.ts", import.meta.url).pathname],
  }).output();
  assert.ok(info.success, new TextDecoder().decode(info.stderr));
  const graph = JSON.parse(new TextDecoder().decode(info.stdout)) as {
    modules: { specifier: string }[];
  };
  const specifiers = graph.modules.map((m) => m.specifier);
  const external = specifiers.filter((s) => !s.startsWith("file:"));
  assert.deepEqual(external.sort(), ["node:net", "node:os", "node:tls"]);
  const offenders: string[] = [];
  for (const specifier of specifiers.filter((s) => s.startsWith("file:"))) {
    const source = await Deno.readTextFile(new URL(specifier));
    const probes = source.match(HOST_NAME_PROBE)?.length ?? 0;
    assert.equal(
      probes,
      specifier.endsWith("/src/client/client_name.ts") ? 1 : 0,
      `${specifier}: the host name probe belongs to client_name.ts, once`,
    );
    const code = source.replace(HOST_NAME_PROBE, "")
      .replace(/\binterface DenoGlobal \{[^]*?\n\}/, "") // the probe's type
      .replace(/\/\*[\s\S]*?\*\//g, "") // comments may name Deno APIs
      .replace(/^\s*\/\/.*$/gm, "");
    if (/\bDeno\b/.test(code)) offenders.push(specifier);
  }
  assert.deepEqual(offenders, []);
});
