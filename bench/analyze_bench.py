"""End-to-end `analyze` time of a 60 s diamond run, Spark start-up included.

    .venv/bin/python bench/analyze_bench.py                  # synthetic 60 s diamond run, local[2], 3 runs
    .venv/bin/python bench/analyze_bench.py --run-dir DIR    # a real results folder (copied; the original is untouched)

Each repetition is a fresh `python -m spark analyze` process (a new JVM and SparkSession), timed from
process start to exit. Prints JSON with every repetition's time and phase timings.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runfolder.layout import LAYOUT  # noqa: E402
from spark.testing import diamond_run, write_run  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", help="results folder to analyse (default: a synthetic 60 s diamond run)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="analyze-bench-") as tmp:
        if args.run_dir:
            rd = Path(tmp) / Path(args.run_dir).name
            shutil.copytree(args.run_dir, rd, ignore=shutil.ignore_patterns("parquet", "report"))
            source = f"real: {args.run_dir}"
        else:
            rd = write_run(diamond_run(acks=True), Path(tmp))
            source = "synthetic 60 s diamond (spark.testing.diamond_run)"
        pcap_packets = None
        times, phases = [], []
        for _ in range(args.repeat):
            shutil.rmtree(rd / LAYOUT.parquet_dir, ignore_errors=True)
            shutil.rmtree(rd / LAYOUT.report_dir, ignore_errors=True)
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "spark", "analyze", str(rd), "--master", args.master],
                                  cwd=ROOT, capture_output=True, text=True)
            times.append(time.perf_counter() - t)
            if proc.returncode != 0:
                print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
                return 1
            summary = json.loads((rd / LAYOUT.summary).read_text())
            phases.append(summary.get("timings_s", {}))
            pcap_packets = sum(c["packets"] for c in summary["input"]["captures"])
        size = sum(p.stat().st_size for p in rd.rglob("*") if p.is_file() and "parquet" not in p.parts
                   and "report" not in p.parts)
    out = {"benchmark": "analyze end to end", "source": source, "master": args.master, "cpus": os.cpu_count(),
           "load_avg_1m": os.getloadavg()[0], "run_bytes": size, "pcap_packets": pcap_packets,
           "seconds": [round(t, 2) for t in times], "median_s": round(statistics.median(times), 2),
           "target_s": 45, "phase_seconds_last": phases[-1] if phases else {}}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
