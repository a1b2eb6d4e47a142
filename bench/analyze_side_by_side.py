"""Two versions of the analysis on the same run, interleaved: which is faster, phase by phase.

    git archive 5bd07ad | tar -x -C /tmp/before                       # the older version's tree
    .venv/bin/python bench/analyze_side_by_side.py RUN /tmp/before . --rounds 3

Round by round, each tree (``PYTHONPATH=TREE``) analyses RUN in a fresh `python -m spark analyze RUN --master
local[2]` process, so the two see the machine's load alike. Prints per analysis the wall time, summary.json's
`timings_s` and the 1-minute load average after it, then the medians per tree, and whether the two trees'
summary.json are equal (every key but `timings_s`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.analyze_remote import differences  # noqa: E402
from runfolder.layout import LAYOUT  # noqa: E402


def analyse(run: Path, tree: Path, master: str) -> Dict[str, float]:
    t = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "spark", "analyze", str(run), "--master", master], cwd=tree,
                          env={**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"},
                          capture_output=True, text=True)
    wall = time.monotonic() - t
    if done.returncode != 0:
        raise SystemExit(f"{tree}: analyze exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    summary = json.loads((run / LAYOUT.summary).read_text())
    return {"wall": wall, **summary.pop("timings_s"), "load": os.getloadavg()[0], "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("trees", type=Path, nargs=2, help="the two versions' source trees (before, after)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    got: Dict[Path, List[Dict[str, float]]] = {t: [] for t in args.trees}
    for r in range(args.rounds):
        for tree in args.trees:
            got[tree].append(analyse(args.run, tree.resolve(), args.master))
            m = got[tree][-1]
            print(f"round {r + 1} {tree}: " + ", ".join(f"{k} {v:.1f}" for k, v in m.items() if k != "summary"),
                  flush=True)
    print(f"\nmedians over {args.rounds} rounds ({os.cpu_count()} cores):")
    for tree, runs in got.items():
        keys = [k for k in runs[0] if k not in ("summary", "load")]
        print(f"  {tree}: " + ", ".join(f"{k} {statistics.median(r[k] for r in runs):.1f} s" for k in keys)
              + f"; load {min(r['load'] for r in runs):.1f}-{max(r['load'] for r in runs):.1f}")
    a, b = (got[t][-1]["summary"] for t in args.trees)
    diff = differences(a, b)
    print("summary.json: " + ("equal" if not diff else f"{len(diff)} figures differ: {', '.join(diff[:8])}"))


if __name__ == "__main__":
    main()
