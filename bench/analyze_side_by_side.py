"""Two versions of the analysis on the same run, interleaved: which is faster, phase by phase, in wall and CPU time.

    git archive 5bd07ad | tar -x -C /tmp/before                       # the older version's tree
    flock /tmp/bench.lock .venv/bin/python bench/analyze_side_by_side.py RUN /tmp/before . --rounds 3

(``flock``: one benchmark at a time on a shared machine; any lock file will do.)

Round by round, each tree (``PYTHONPATH=TREE``) analyses a fresh copy of RUN (its report/ and parquet/ left out)
in a fresh `python -m spark analyze` process (a cold JVM, as `testbed run` starts one), so the two see the
machine's load alike; the CPU time is that of the whole process tree (analysis, JVM, Python workers) in a cpuacct
control group (``analyze_cold.analyse_once``). Prints per analysis the wall and CPU time, summary.json's
`timings_s` and the 1-minute load average before it, then the medians per tree, and whether the two trees'
summary.json are equal (every key but `timings_s`).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.analyze_cold import analyse_once  # noqa: E402
from bench.cpuacct import require_cpuacct  # noqa: E402
from bench.analyze_remote import differences  # noqa: E402


def analyse(run: Path, tree: Path, master: Optional[str], work: Path, label: str) -> Dict[str, float]:
    load = os.getloadavg()[0]
    wall, cpu, summary = analyse_once(run, None, work, label, tree, master)
    return {"wall": wall, "cpu": cpu, **summary.pop("timings_s"), "load": load, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("trees", type=Path, nargs=2, help="the two versions' source trees (before, after)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default=None, help="--master of the analyses (default: the analysis' own)")
    args = parser.parse_args()
    require_cpuacct()
    got: Dict[Path, List[Dict[str, float]]] = {t: [] for t in args.trees}
    with tempfile.TemporaryDirectory(prefix="analyze-side-") as tmp:
        for r in range(args.rounds):
            for i, tree in enumerate(args.trees):
                got[tree].append(analyse(args.run, tree.resolve(), args.master, Path(tmp), f"r{r}t{i}"))
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
