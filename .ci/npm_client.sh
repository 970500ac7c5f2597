#!/usr/bin/env bash
# The TypeScript client as Node and Bun users get it: `deno task npm:pack` builds the npm
# tarball from mod.ts (tsc from npm), it is installed into an empty Node project, and the
# client's lock contract (npm/test/contract.mjs, the same file Deno runs in deno task test)
# runs under Node (node:test) and under Bun (bun test, Bun installed from npm), against real
# lockd servers on port 0; so does the package README's example, and a TypeScript program
# type-checks against the shipped .d.ts. About a minute on a cold npm cache.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
DENO=(npx -y deno@2.9.6)
BUN_VERSION=1.4.5
NPM=(npm --no-audit --no-fund --loglevel=error)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
echo '{ "name": "scratch", "version": "1.0.0", "private": true }' >package.json

# npm/README.md's install steps as written (the block after <!-- npm-install -->): `deno task
# npm:pack` in the checkout, then `npm install` of the tarball here, with this checkout's path in
# place of /path/to/lockd. A README naming another tarball than npm:pack makes fails here.
steps=$(sed -n '/^<!-- npm-install -->$/,/^```$/p' "$repo/npm/README.md" | sed '/^<!--/d;/^```/d')
echo "--- npm/README.md's install steps:"
echo "$steps"
deno() { (cd "$repo" && "${DENO[@]}" "$@"); }
eval "${steps//\/path\/to\/lockd/$repo}"
echo "--- the installed package: Apache-2.0, LICENSE shipped"
test "$(node -p 'require("./node_modules/lockd-client/package.json").license')" = Apache-2.0
cmp node_modules/lockd-client/LICENSE "$repo/LICENSE"
cp "$repo"/npm/test/*.mjs "$repo"/npm/test/types_check.mts .

# The tests spawn `deno run ... main.ts serve`: give them the pinned deno binary itself.
LOCKD_DENO=$("${DENO[@]}" eval 'console.log(Deno.execPath())')
export LOCKD_DENO LOCKD_REPO="$repo" NO_COLOR=1

echo "--- Node $(node --version): contract and README example"
timeout 300 node --test contract.test.mjs readme_example.test.mjs

echo "--- TypeScript: a program using the package type-checks against its .d.ts"
cat >tsconfig.json <<JSON
{
  "compilerOptions": {
    "module": "nodenext", "moduleResolution": "nodenext", "target": "es2022", "lib": ["es2022"],
    "strict": true, "noEmit": true, "types": ["node"],
    "typeRoots": ["$repo/dist/npm/tools/node_modules/@types"]
  },
  "files": ["types_check.mts"]
}
JSON
"$repo/dist/npm/tools/node_modules/.bin/tsc" -p tsconfig.json

echo "--- Bun $BUN_VERSION: contract and README example"
mkdir bun && (cd bun && echo '{ "private": true }' >package.json && "${NPM[@]}" install "bun@$BUN_VERSION")
timeout 300 bun/node_modules/.bin/bun test ./contract.test.mjs ./readme_example.test.mjs
