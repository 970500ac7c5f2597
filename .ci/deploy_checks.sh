#!/usr/bin/env bash
# Checks of the operations kit in deploy/:
#   1. promtool check rules  deploy/prometheus/lockd-alerts.yml
#   2. promtool test rules   deploy/prometheus/lockd-alerts.test.yml
#   3. systemd-analyze verify        deploy/systemd/lockd.service (any warning fails), also with
#      the cluster-mode drop-in deploy/systemd/lockd-cluster.conf
#   4. systemd-analyze security --offline  (hardening exposure must stay at or below 2.0)
# The dashboard JSON and the metric names are checked by tests/deploy (deno test).
#
# Tools, installed only when missing (needs root and Debian's apt; CI runs as root):
#   - promtool: taken from Debian's `prometheus` package with `apt-get download` and
#     `dpkg-deb -x`. The package is NOT installed: installing it would create a user, pull in
#     a dozen JavaScript packages for the web UI, and start a Prometheus server through its
#     init script. promtool is a static Go binary, so the extracted copy runs on its own.
#     It is copied to /usr/local/bin (or $LOCKD_TOOLS_DIR) so later runs skip the download.
#   - systemd-analyze: from Debian's `systemd` package (already on these machines).
#   - openssl: Debian's `openssl` package, for the tests that run the TLS recipe of
#     docs/operations.md (tests/deploy/tls_recipe_test.ts, install_steps_test.ts) and make
#     odd certificates (tests/security/cert_checks_test.ts); OpenSSL 3.0 or later.
#
# Exits non-zero if any check fails. Prints each command before it runs.
set -uo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
tools_dir=${LOCKD_TOOLS_DIR:-/usr/local/bin}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

apt_updated=no
apt_update() {
  if [ "$apt_updated" = no ]; then
    echo "+ apt-get update -qq"
    apt-get update -qq || return 1
    apt_updated=yes
  fi
}

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "deploy checks: $1 is missing and installing it needs root" >&2
    exit 2
  fi
}

# --- promtool -----------------------------------------------------------------------------
PROMTOOL=$(command -v promtool || true)
if [ -z "$PROMTOOL" ] && [ -x "$tools_dir/promtool" ]; then
  PROMTOOL="$tools_dir/promtool"
fi
if [ -z "$PROMTOOL" ]; then
  need_root promtool
  apt_update || exit 2
  # apt downloads as user _apt: give it a directory it may write to.
  mkdir -p "$work/dl" && chmod 0755 "$work" && chown _apt "$work/dl" 2>/dev/null
  echo "+ apt-get download prometheus   (extracting usr/bin/promtool only)"
  (cd "$work/dl" && apt-get download -qq prometheus) || exit 2
  echo "+ dpkg-deb -x prometheus_*.deb; install usr/bin/promtool $tools_dir/promtool"
  dpkg-deb -x "$work"/dl/prometheus_*.deb "$work/pkg" || exit 2
  mkdir -p "$tools_dir"
  install -m 0755 "$work/pkg/usr/bin/promtool" "$tools_dir/promtool" || exit 2
  PROMTOOL="$tools_dir/promtool"
fi

# --- systemd-analyze ----------------------------------------------------------------------
if ! command -v systemd-analyze >/dev/null; then
  need_root systemd-analyze
  apt_update || exit 2
  echo "+ apt-get install -y --no-install-recommends systemd"
  apt-get install -y -qq --no-install-recommends systemd >/dev/null || exit 2
fi

# --- openssl (for deno task test) -----------------------------------------------------------
if ! command -v openssl >/dev/null; then
  need_root openssl
  apt_update || exit 2
  echo "+ apt-get install -y --no-install-recommends openssl"
  apt-get install -y -qq --no-install-recommends openssl >/dev/null || exit 2
fi

# --- checks -------------------------------------------------------------------------------
failed=()
passed=0
# check NAME CMD...: runs CMD (printing it first unless it is one of the functions below,
# which print the real command themselves) and records the result under NAME.
check() {
  local name=$1
  shift
  case $1 in *_unit) ;; *) echo "+ $*" ;; esac
  if "$@"; then
    passed=$((passed + 1))
  else
    echo "deploy checks: FAILED: $name" >&2
    failed+=("$name")
  fi
}

echo "promtool: $("$PROMTOOL" --version 2>&1 | head -n 1)"
check "promtool check rules" "$PROMTOOL" check rules deploy/prometheus/lockd-alerts.yml
check "promtool test rules" "$PROMTOOL" test rules deploy/prometheus/lockd-alerts.test.yml

# systemd-analyze verify insists that ExecStart's binary exists and is executable, and
# /usr/local/bin/lockd is not installed on a build machine. The trick: copy the unit into a
# temporary directory with sed, pointing /usr/local/bin/lockd at an executable stub in that
# directory, and verify the copy; everything else in the unit is verified as written.
# (--root=DIR does not help: it then also wants sysinit.target, /bin/kill, ... under DIR.)
# systemd-analyze exits 0 on unknown keys and bad values (it only prints a warning), so any
# output at all counts as a failure.
unit_dir="$work/systemd"
mkdir -p "$unit_dir"
printf '#!/bin/sh\nexit 0\n' >"$unit_dir/lockd-stub"
chmod 0755 "$unit_dir/lockd-stub"
sed "s#/usr/local/bin/lockd#$unit_dir/lockd-stub#g" deploy/systemd/lockd.service \
  >"$unit_dir/lockd.service"
verify_unit() {
  local out
  echo "+ systemd-analyze verify --man=no $unit_dir/lockd.service   (copy of deploy/systemd/lockd.service)"
  out=$(systemd-analyze verify --man=no "$unit_dir/lockd.service" 2>&1)
  local rc=$?
  [ -n "$out" ] && echo "$out"
  [ "$rc" -eq 0 ] && [ -z "$out" ]
}
check "systemd-analyze verify" verify_unit
# The cluster-mode drop-in, loaded from a lockd.service.d/ beside the copy (SYSTEMD_UNIT_PATH).
mkdir -p "$unit_dir/lockd.service.d"
sed "s#/usr/local/bin/lockd#$unit_dir/lockd-stub#g" deploy/systemd/lockd-cluster.conf \
  >"$unit_dir/lockd.service.d/cluster.conf"
verify_cluster_dropin() {
  local out
  echo "+ SYSTEMD_UNIT_PATH=$unit_dir: systemd-analyze verify --man=no $unit_dir/lockd.service   (with deploy/systemd/lockd-cluster.conf)"
  out=$(SYSTEMD_UNIT_PATH="$unit_dir:" systemd-analyze verify --man=no "$unit_dir/lockd.service" 2>&1)
  local rc=$?
  [ -n "$out" ] && echo "$out"
  [ "$rc" -eq 0 ] && [ -z "$out" ]
}
check "systemd-analyze verify (cluster drop-in)" verify_cluster_dropin
# --threshold is 10x the printed exposure (0.0 = locked down .. 10.0 = unprotected).
security_unit() {
  local out
  echo "+ systemd-analyze security --offline=yes --threshold=20 $unit_dir/lockd.service"
  out=$(systemd-analyze security --offline=yes --threshold=20 "$unit_dir/lockd.service" 2>&1)
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "$out"
  else
    grep -F 'Overall exposure level' <<<"$out"
  fi
  return "$rc"
}
check "systemd-analyze security" security_unit

if [ "${#failed[@]}" -ne 0 ]; then
  echo "deploy checks FAILED (${#failed[@]} of $((passed + ${#failed[@]}))): ${failed[*]}"
  exit 1
fi
echo "deploy checks OK ($passed of $passed)"
