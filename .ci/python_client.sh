#!/usr/bin/env bash
# The Python client (clients/python): installed the way its README says (pip, no build isolation,
# Debian's setuptools and wheel, inside a venv that sees them), then its unittest suite runs
# against the installed copy, with real lockd servers on port 0. About 15 s.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
if ! /usr/bin/python3 -c 'import pip, setuptools, wheel, venv' 2>/dev/null; then
  apt-get update -qq
  apt-get install -y -qq python3 python3-pip python3-setuptools python3-wheel python3-venv >/dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -m venv --system-site-packages --without-pip "$work/venv"
# From a copy: setuptools writes build/ and *.egg-info/ beside the sources it builds.
cp -r clients/python "$work/src"
"$work/venv/bin/python" -m pip install --quiet --no-index --no-build-isolation "$work/src"
# The tests spawn `deno run ... main.ts serve`: give them the pinned deno binary itself.
LOCKD_DENO=$(npx -y deno@2.9.6 eval 'console.log(Deno.execPath())')
export LOCKD_DENO LOCKD_EXPECT_INSTALLED=1 NO_COLOR=1
# From the tests directory, so `import lockd` finds the installed package, not the sources.
cd clients/python/tests
timeout 300 "$work/venv/bin/python" -m unittest discover -s . -t .
