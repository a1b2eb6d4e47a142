#!/usr/bin/env bash
# The main job: set up what is missing, then `testbed run` on the default example topology.
# Extra arguments go to `testbed run` (e.g. ./run.sh --json).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/testbed" run topologies/diamond.yaml "$@"
