"""Where one analysis spends its time, step by step: wall time, CPU time of the whole process tree and the
number of Spark jobs of each step (each progress line of `python -m spark analyze`).

    sudo .venv/bin/python bench/analyze_steps.py RUN_DIR [--tree TREE]

Analyses a fresh copy of RUN_DIR (its report/ and parquet/ left out) in this process, with the source tree TREE
(default: this one) first on ``sys.path``, its Spark session started here (a cold JVM with the analysis' own
options). The CPU time is that of a cpuacct control group (cgroup v1) holding this process, its JVM and Spark's
Python workers; the jobs are those Spark's status tracker knows of (adaptive execution runs each shuffle's
stages as jobs of their own). A step's line is printed when the next one starts.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cpuacct import cpuacct_group, group_cpu_s, require_cpuacct  # bench/, this script's folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    args = ap.parse_args()
    require_cpuacct()
    sys.path.insert(0, str(args.tree.resolve()))
    os.environ["PYTHONPATH"] = str(args.tree.resolve())  # Spark's Python workers import the same tree
    from spark.cli import _analyze_folder
    from spark.session import get_spark

    with cpuacct_group(f"testbed-steps-{os.getpid()}") as group, \
            tempfile.TemporaryDirectory(prefix="analyze-steps-") as tmp:
        (group / "cgroup.procs").write_text(str(os.getpid()))  # the whole process (``tasks`` would move one thread)
        copy = Path(tmp) / "run"
        shutil.copytree(args.run_dir, copy, ignore=shutil.ignore_patterns("report", "parquet"))
        started = time.monotonic()
        spark = get_spark(master="local[*]", log_file=Path(tmp) / "spark.log")
        tracker = spark.sparkContext.statusTracker()
        last = {"t": started, "cpu": 0.0, "jobs": 0, "step": "starting Spark"}
        print("| step | wall s | CPU s | Spark jobs |\n|---|---|---|---|")

        def progress(step: str) -> None:
            now, used, jobs = time.monotonic(), group_cpu_s(group), len(tracker.getJobIdsForGroup(None))
            print(f"| {last['step']} | {now - last['t']:.1f} | {used - last['cpu']:.1f} | {jobs - last['jobs']} |",
                  flush=True)
            last.update(t=now, cpu=used, jobs=jobs, step=step)

        progress.last = ""  # what ElapsedLog offers (the stage in progress)
        _analyze_folder(spark, str(copy), 1.0, None, progress)
        progress("")
        print(f"\ntotal: wall {time.monotonic() - started:.1f} s, CPU {group_cpu_s(group):.1f} s, Spark jobs "
              f"{last['jobs']}, 1-minute load {os.getloadavg()[0]:.1f}")
        spark.stop()  # its JVM outlives it: killed with the group

if __name__ == "__main__":
    main()
