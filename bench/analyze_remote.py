"""The same synthetic diamond run analysed locally, on a standalone cluster and through Spark Connect.

    .venv/bin/python bench/analyze_remote.py                   # the 10x run (bulk flow at 4 000 msg/s)
    .venv/bin/python bench/analyze_remote.py --size 1 --rounds 2 --keep DIR

Each analysis is a fresh `python -m spark analyze RUN` process: `--master local[2]`; `--master spark://…` on a
standalone master with two one-core, 1 GB workers; `--remote sc://…` on a Spark Connect server running
`local[2]` (both started here by tests/spark/sparkservers.py and stopped at the end, however it ends). The
servers are started once and the analyses interleaved round by round (local, cluster, connect), so the three
see the machine's load alike. Prints each analysis' wall time and its phases (summary.json `timings_s`), the
1-minute load average after it, and whether its summary.json equals the local one figure by figure (every key
but `timings_s`; the differing paths otherwise).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.analyze_growth import write_size  # noqa: E402
from runfolder.layout import LAYOUT  # noqa: E402
from tests.spark.sparkservers import connect_server, standalone_cluster  # noqa: E402


def differences(a, b, at: str = "$") -> List[str]:
    """The JSON paths where ``a`` and ``b`` differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{at}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{at}[{i}]")]
    return [] if a == b else [at]


def analyse(rd: Path, where: List[str]) -> Tuple[float, dict]:
    """Wall seconds of one fresh analysis, and its summary.json."""
    t = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "spark", "analyze", str(rd), *where], cwd=ROOT,
                          capture_output=True, text=True)
    seconds = time.monotonic() - t
    if done.returncode != 0:
        raise SystemExit(f"analyze {' '.join(where)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return seconds, json.loads((rd / LAYOUT.summary).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=10, help="the bulk flow at 400 x SIZE msg/s (default 10)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--keep", type=Path, default=None, help="write (or reuse) the run in this folder")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="analyze-remote-"))
    root.mkdir(parents=True, exist_ok=True)
    rd = root / f"diamond-{args.size}x"
    if not (rd / LAYOUT.manifest).exists():
        write_size(args.size, root)
    work = root / "servers"
    work.mkdir(exist_ok=True)
    rows: List[Tuple[str, float, dict, List[str], float]] = []
    with standalone_cluster(work) as master, connect_server(work) as remote:
        ways: Dict[str, List[str]] = {"local[2]": ["--master", "local[2]"], "standalone cluster (2 x 1 core)":
                                      ["--master", master], "Spark Connect (local[2])": ["--remote", remote]}
        for _ in range(args.rounds):
            local = None
            for name, where in ways.items():
                seconds, summary = analyse(rd, where)
                timings = summary.pop("timings_s")
                local = summary if local is None else local
                rows.append((name, seconds, timings, differences(local, summary), os.getloadavg()[0]))
    print(f"run {rd} ({args.size}x); machine: {os.cpu_count()} cores")
    print("| analysis | wall s | ingest s | latency s | drops s | reroutes s | load (1 min) | summary.json vs local |")
    print("|---|---|---|---|---|---|---|---|")
    for name, seconds, t, diff, load in rows:
        same = "identical" if not diff else f"{len(diff)} differ: {', '.join(diff[:5])}"
        print(f"| {name} | {seconds:.1f} | {t.get('ingest', 0):.1f} | {t.get('latency', 0):.1f} | "
              f"{t.get('drops', 0):.1f} | {t.get('reroutes', 0):.1f} | {load:.1f} | {same} |")


if __name__ == "__main__":
    main()
