#!/usr/bin/env bash
# The diamond's congestion story at wide-area round-trip times beside 0 ms, and the AQM example (issue 29):
#   diamond (0 ms) and wan-diamond (25 ms / 40 ms one way), congestion awareness on and off;
#   aqm-diamond with fq_codel, then with a 1000-packet pfifo, congestion awareness on and off.
# Usage: bench/wan_runs.sh OUT_DIR [BACKEND]   (as root; prints the figures table at the end)
set -euo pipefail
out=${1:?usage: bench/wan_runs.sh OUT_DIR [BACKEND]}
backend=${2:-mininet}
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
mkdir -p "$out"
sed 's/^    qdisc: fq_codel$/    queue: 1000/; s/^name: aqm-diamond$/name: aqm-diamond-pfifo/' \
  "$root/topologies/aqm-diamond.yaml" >"$out/aqm-diamond-pfifo.yaml"
run() {  # NAME TOPOLOGY AWARE
  "$py" -m testbed.cli run "$2" --backend "$backend" --results "$out/$1" \
    --router-setting "congestion_aware=$3" >"$out/$1.log" 2>&1 || true
  tail -1 "$out/$1.log"
}
for aware in true false; do
  run "diamond-aware-$aware" "$root/topologies/diamond.yaml" "$aware"
  run "wan-diamond-aware-$aware" "$root/topologies/wan-diamond.yaml" "$aware"
  run "aqm-fq_codel-aware-$aware" "$root/topologies/aqm-diamond.yaml" "$aware"
  run "aqm-pfifo-aware-$aware" "$out/aqm-diamond-pfifo.yaml" "$aware"
done
"$py" "$root/bench/wan_figures.py" "$out"/*/*/
