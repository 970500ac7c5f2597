#!/usr/bin/env bash
# The operator console in a real browser (issue 15): headless Chromium from Debian, driven by
# npm:playwright-core, against `lockd serve` (tests/browser/console_browser.ts). Installs
# Chromium when it is missing (about 35 s); the test itself takes about 15 s. Screenshots go to
# $LOCKD_SCREENSHOT_DIR, printed below.
set -uo pipefail
cd "$(dirname "$0")/.."
DENO=(npx -y deno@2.9.6)

if ! command -v chromium >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  echo "+ apt-get install -y chromium"
  { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || exit 1
fi
chromium --version 2>/dev/null | tail -n 1

shots="${LOCKD_SCREENSHOT_DIR:-${TMPDIR:-/tmp}/lockd-console-screenshots}"
mkdir -p "$shots"
echo "console screenshots: $shots"
LOCKD_SCREENSHOT_DIR="$shots" "${DENO[@]}" test --allow-all tests/browser/console_browser.ts
