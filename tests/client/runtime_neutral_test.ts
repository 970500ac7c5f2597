/**
 * The client runs unchanged on Deno, Node and Bun only if nothing it imports touches the Deno
 * namespace or a runtime-specific module. This walks mod.ts's module graph (`deno info`) so a
 * stray `Deno.*` fails here, before CI builds the npm package.
 */
import assert from "node:assert/strict";

Deno.test("mod.ts and everything it imports use no Deno API and only node:net and node:tls", async () => {
  const info = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", new URL("../../mod.ts", import.meta.url).pathname],
  }).output();
  assert.ok(info.success, new TextDecoder().decode(info.stderr));
  const graph = JSON.parse(new TextDecoder().decode(info.stdout)) as {
    modules: { specifier: string }[];
  };
  const specifiers = graph.modules.map((m) => m.specifier);
  const external = specifiers.filter((s) => !s.startsWith("file:"));
  assert.deepEqual(external.sort(), ["node:net", "node:tls"]);
  const offenders: string[] = [];
  for (const specifier of specifiers.filter((s) => s.startsWith("file:"))) {
    const code = (await Deno.readTextFile(new URL(specifier)))
      .replace(/\/\*[\s\S]*?\*\//g, "") // comments may name Deno APIs
      .replace(/^\s*\/\/.*$/gm, "");
    if (/\bDeno\b/.test(code)) offenders.push(specifier);
  }
  assert.deepEqual(offenders, []);
});
