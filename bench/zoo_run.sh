#!/usr/bin/env bash
# An imported Topology Zoo map run end to end (docs/import-export.md "An imported map, end to end"): the 24-site
# map of tests/convert/europe.py imported (delays from the great-circle distances, 10 Gbit/s links scaled to
# 10 Mbit/s), a 200 kbit/s real-time flow from Lisbon to Stockholm added, `testbed run` to its verdict. Prints
# the run's wall time, its verdict and where its report is.
#
#     sudo bench/zoo_run.sh [WORKDIR] [BACKEND]       # ~4 min on 2 cores
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${1:-/tmp/zoo-run}"
BACKEND="${2:-mininet}"
PY="$ROOT/.venv/bin/python"
mkdir -p "$WORK"
cd "$ROOT"
"$PY" -c "import sys; from pathlib import Path; from tests.convert.europe import write_europe; write_europe(Path(sys.argv[1]))" \
  "$WORK/europe.graphml"
"$PY" -m testbed.cli import "$WORK/europe.graphml" --out "$WORK/europe.yaml" --force
cat >> "$WORK/europe.yaml" <<'YAML'
duration: 10s
traffic:
  - {profile: constant, name: rt, from: lisbon, to: [stockholm], rate: 200kbit, size: 500b, priority: real_time}
expect:
  - {metric: loss, op: "<=", value: 1%, flow: rt}
  - {metric: latency.p99, op: "<=", value: 100ms, flow: rt}
YAML
start=$(date +%s)
set +e
"$PY" -m testbed.cli run "$WORK/europe.yaml" --backend "$BACKEND" --results "$WORK/results"
rc=$?
set -e
echo "zoo_run: testbed run exited $rc after $(( $(date +%s) - start )) s (backend $BACKEND, load average $(cut -d' ' -f1-3 /proc/loadavg))"
