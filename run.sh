#!/usr/bin/env bash
# The main job: set up what is missing, then `testbed run` on the default example topology.
# Extra arguments go to `testbed run` (e.g. ./run.sh --json).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The default run is on Mininet: Docker problems are only warnings, unless the docker backend is asked for.
docker_required=0
for arg in "$@"; do
  case "$arg" in docker|--backend=docker) docker_required=1 ;; esac
done
TESTBED_DOCKER_REQUIRED=$docker_required "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/testbed" run topologies/diamond.yaml "$@"
