#!/usr/bin/env bash
# Installs whatever the testbed needs and is missing: Debian packages, a virtualenv
# whose Python can import Mininet, and the Python dependencies. Idempotent; a second
# call only checks and returns within a few seconds.
#
# Usage: scripts/setup.sh            (sourced or run by ./run.sh and ./test.sh)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
SYSTEM_PYTHON=/usr/bin/python3

# Debian packages: what the orchestrator drives (ip, tc, iptables, Mininet, captures,
# traffic measurement, sshd for deployment) and what the tests use (promtool;
# headless Chromium to check that reports render).
APT_PACKAGES=(
  iproute2 iptables iputils-ping ethtool procps mininet tcpdump iperf3 openssh-server
  python3 python3-venv python3-pip prometheus
)
# Installed where the distribution has them (Debian does; Ubuntu ships Chromium only as a
# snap): without them the report-rendering tests skip and say why.
OPTIONAL_APT_PACKAGES=(chromium chromium-driver)

log() { printf 'setup: %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  log "must run as root (it installs packages, and the testbed needs root for namespaces and tc)"
  exit 2
fi

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  [ "$status" = "install ok installed" ] || missing+=("$pkg")
done
# PySpark 4 needs Java 17 or later.
java_major="$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)"
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
  missing+=(openjdk-17-jre-headless)
fi
# Optional packages found unavailable once are not looked up again (a second call stays fast).
unavailable_list="/var/lib/testbed/unavailable-packages"
optional=()
for pkg in "${OPTIONAL_APT_PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  [ "$status" = "install ok installed" ] && continue
  grep -qx "$pkg" "$unavailable_list" 2>/dev/null && continue
  optional+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ] || [ "${#optional[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >&2
fi
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
for pkg in "${optional[@]}"; do
  if apt-cache show "$pkg" >/dev/null 2>&1 && apt-cache policy "$pkg" | grep -q 'Candidate: [0-9]'; then
    log "installing $pkg"
    apt-get install -y -q --no-install-recommends "$pkg" >&2
  else
    log "note: $pkg is not available here; the tests that need it will skip"
    mkdir -p "$(dirname "$unavailable_list")" && echo "$pkg" >> "$unavailable_list"
  fi
done

# The virtualenv uses Debian's Python (the one the mininet package installs its module
# for) and sees its dist-packages; our own dependencies are installed inside it.
if ! "$VENV/bin/python" -c 'import mininet' >/dev/null 2>&1; then
  log "creating virtualenv $VENV from $SYSTEM_PYTHON"
  rm -rf "$VENV"
  "$SYSTEM_PYTHON" -m venv --system-site-packages "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
fi

stamp="$VENV/.deps-stamp"
want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "installing Python dependencies (pyproject.toml changed or first run)"
  if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT[test]" > "$VENV/pip-install.log" 2>&1; then
    cat "$VENV/pip-install.log" >&2; log "pip install failed (log above)"; exit 1
  fi
  echo "$want" > "$stamp"
fi
