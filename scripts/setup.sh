#!/usr/bin/env bash
# Installs whatever the testbed needs and is missing: Debian packages, a running Docker
# engine, a virtualenv whose Python can import Mininet, the Python dependencies and the
# Docker node image. Idempotent; a second call only checks and returns within a second or so.
#
# Usage: scripts/setup.sh            (sourced or run by ./run.sh and ./test.sh)
#
# TESTBED_DOCKER_REQUIRED=0 makes a Docker engine that will not start, or a node image that
# cannot be built, a warning instead of a failure (./run.sh sets it unless the docker backend
# is asked for: the default Mininet run needs neither). The test suite needs both.
set -euo pipefail
DOCKER_REQUIRED="${TESTBED_DOCKER_REQUIRED:-1}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/apt.sh
. "$ROOT/scripts/lib/apt.sh"
VENV="$ROOT/.venv"
SYSTEM_PYTHON=/usr/bin/python3

# Debian packages: what the orchestrator drives (ip, tc, iptables, Mininet, captures,
# traffic measurement, sshd for deployment, the Docker engine and debootstrap for the
# Docker backend's node image, sudo as lab machines of the ssh backend have it, user-mode Linux
# and kmod for the impairment appliance: delay, jitter, loss models, AQM queues where this kernel
# lacks them, docs/impairments.md, tshark to read captures with the router protocol's dissector,
# docs/wireshark.md) and what the tests use (promtool; headless Chromium to
# check that reports render).
APT_PACKAGES=(
  iproute2 iptables iputils-ping ethtool procps mininet tcpdump iperf3 openssh-server
  python3 python3-venv python3-pip prometheus docker.io debootstrap sudo user-mode-linux kmod tshark
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
# PySpark 4 needs Java 17 or later. (No pipe from `java`: without Java it exits 127, and
# under pipefail the assignment would end this script.)
java_says="$(java -version 2>&1 || true)"
java_major="$(sed -n 's/.*version "\([0-9]*\).*/\1/p' <<<"$java_says")"
java_major="${java_major%%$'\n'*}"
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
  missing+=(openjdk-17-jre-headless)
fi
# Optional packages found unavailable are not looked up again while the apt lists stay the
# same (a second call stays fast); scripts/lib/apt.sh forgets the answer when they change.
forget_stale_unavailable
optional=()
for pkg in "${OPTIONAL_APT_PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  [ "$status" = "install ok installed" ] && continue
  remembered_unavailable "$pkg" && continue
  optional+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ] || [ "${#optional[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >&2
fi
if [ "${#missing[@]}" -gt 0 ]; then
  # wireshark-common (with tshark) asks whether non-root users may capture: no (root captures; reading
  # files needs no privilege)
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  log "installing Debian packages: ${missing[*]}"
  apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
for pkg in "${optional[@]}"; do
  if apt_available "$pkg"; then
    log "installing $pkg"
    apt-get install -y -q --no-install-recommends "$pkg" >&2
  else
    log "note: $pkg is not available from this machine's apt sources; the tests that need it will skip"
    remember_unavailable "$pkg"
  fi
done

# The Docker engine: left as it is where one answers. Otherwise started through systemd where
# it runs, or else (containers, CI machines) as a background dockerd that outlives this script,
# with no bridge, no iptables rules and no ip_forward of its own: nodes use `--network none`
# and our veths, and Docker's changes (FORWARD policy DROP, NAT, forwarding on) would change
# how this machine forwards traffic.
docker_answers() { timeout 10 docker info >/dev/null 2>&1; }
docker_problem() {
  if [ "$DOCKER_REQUIRED" = 1 ]; then log "$1"; exit 1; fi
  log "warning: $1 (only the docker backend needs it; going on)"
}
DOCKERD_LOG=/var/log/testbed-dockerd.log
if ! docker_answers; then
  if [ -d /run/systemd/system ]; then
    log "starting the Docker engine (systemctl start docker)"
    systemctl start docker
  elif pgrep -x dockerd >/dev/null; then
    log "waiting for the Docker engine that is starting (dockerd runs, does not answer yet)"
  else
    log "starting the Docker engine: dockerd --bridge=none --iptables=false --ip6tables=false --ip-forward=false (log $DOCKERD_LOG)"
    setsid nohup dockerd --bridge=none --iptables=false --ip6tables=false --ip-forward=false >>"$DOCKERD_LOG" 2>&1 </dev/null &
  fi
  for _ in $(seq 60); do
    docker_answers && break
    sleep 0.5
  done
  docker_answers || docker_problem "the Docker engine does not answer after 30 s: see $DOCKERD_LOG (or journalctl -u docker)"
fi

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

# The Docker backend's node image, built offline (debootstrap from this machine's Debian mirror)
# unless the image of the current recipe exists. Running image.py as a file prints its tag in
# milliseconds (no import of the package).
node_image="$("$VENV/bin/python" "$ROOT/testbed/backends/docker/image.py")"
if docker_answers && ! docker image inspect "$node_image" >/dev/null 2>&1; then
  log "building the Docker node image $node_image (once; about a minute with a fast mirror)"
  if ! "$VENV/bin/testbed" image build >&2; then
    docker_problem "building the node image failed (above); fix it and run ./scripts/setup.sh again"
  fi
fi
