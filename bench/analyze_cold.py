"""The cost of one analysis in a fresh process (a JVM of its own, as `testbed run` and `testbed analyze` start
one), under different JVM options for the driver: wall time and the CPU time of the whole process tree.

    .venv/bin/python bench/analyze_cold.py RUN_DIR                       # ours against HotSpot's default
    .venv/bin/python bench/analyze_cold.py RUN_DIR --repeats 3 --options=-XX:TieredStopAtLevel=1 \\
        --options=-XX:TieredStopAtLevel=4

Each repetition analyses a fresh copy of RUN_DIR (its report/ and parquet/ removed) with
`python -m spark analyze`, the options interleaved (A B A B ...), the driver's options given as the last
`--conf spark.driver.extraJavaOptions=...` (PYSPARK_SUBMIT_ARGS), which overrides the analysis' own. The CPU
time is that of a cpuacct control group (cgroup v1) holding the analysis, its JVM and Spark's Python workers:
on a loaded machine it moves far less than the wall time. Prints a Markdown table of medians and each
repetition's figures, and checks every repetition's summary.json is the same (its step times apart).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cpuacct import cpuacct_group, group_cpu_s, require_cpuacct  # noqa: E402  (bench/, this script's folder)
from spark.session import DRIVER_JAVA_OPTIONS  # noqa: E402

HOTSPOT_DEFAULT = "-XX:TieredStopAtLevel=4"


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def analyse_once(run_dir: Path, java_options: Optional[str], work: Path, label: str, tree: Path = ROOT,
                 master: Optional[str] = None) -> Tuple[float, float, dict]:
    """(wall s, CPU s, summary.json with its ``timings_s``) of one analysis of a fresh copy of ``run_dir`` in its
    own control group, by the source tree ``tree`` (``PYTHONPATH``); ``java_options``: the driver's (None: the
    analysis' own); ``master``: ``--master`` (None: the analysis' default)."""
    copy = work / label
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("report", "parquet"))
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    if java_options is not None:
        env["PYSPARK_SUBMIT_ARGS"] = f"--conf spark.driver.extraJavaOptions={java_options} pyspark-shell"
    with cpuacct_group(f"testbed-bench-{os.getpid()}-{label}") as group:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "spark", "analyze", str(copy),
                                 *(["--master", master] if master else [])], cwd=tree, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())))
        out, _ = proc.communicate()
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"analyze with {java_options!r} exited {proc.returncode}:\n{out[-3000:]}")
        time.sleep(1)  # the JVM's and the workers' exit, inside the group
        cpu = group_cpu_s(group)
    summary = json.loads((copy / "report" / "summary.json").read_text())
    shutil.rmtree(copy, ignore_errors=True)
    return wall, cpu, summary


def first_difference(a, b, where: str = "summary") -> str:
    """Where two JSON values first differ, and how."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if a.get(k) != b.get(k):
                return first_difference(a.get(k), b.get(k), f"{where}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{where}[{i}]")
    return f"{where}: {json.dumps(a)[:300]} against {json.dumps(b)[:300]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--options", action="append", help=f"driver JVM options (default: ours, {DRIVER_JAVA_OPTIONS!r}, "
                                                       f"and HotSpot's default, {HOTSPOT_DEFAULT!r})")
    args = ap.parse_args()
    require_cpuacct()
    options = args.options or [DRIVER_JAVA_OPTIONS, HOTSPOT_DEFAULT]
    results: Dict[str, List[Tuple[float, float, float]]] = {o: [] for o in options}
    reference = None
    with tempfile.TemporaryDirectory(prefix="analyze-cold-") as tmp:
        for rep in range(args.repeats):
            for i, opt in enumerate(options):
                load = _load()
                wall, cpu, summary = analyse_once(args.run_dir, opt, Path(tmp), f"r{rep}o{i}")
                summary.pop("timings_s", None)  # the analysis' own step times: the rest must not depend on the JVM
                results[opt].append((wall, cpu, load))
                print(f"repetition {rep + 1}, {opt}: wall {wall:.1f} s, CPU {cpu:.1f} s (load {load:.1f})",
                      file=sys.stderr)
                if reference is None:
                    reference = summary
                elif summary != reference:
                    raise SystemExit(f"the figures differ with {opt!r}: {first_difference(reference, summary)}")
    print(f"\n{args.run_dir}: {args.repeats} repetitions, interleaved\n")
    print("| driver JVM options | wall s (median) | CPU s (median) | each: wall / CPU s (1-min load) |")
    print("|---|---|---|---|")
    for opt, rows in results.items():
        each = ", ".join(f"{w:.1f} / {c:.1f} ({l:.1f})" for w, c, l in rows)
        print(f"| `{opt}` | {statistics.median(r[0] for r in rows):.1f} | "
              f"{statistics.median(r[1] for r in rows):.1f} | {each} |")


if __name__ == "__main__":
    main()
