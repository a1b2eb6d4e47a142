"""Size of a results folder per minute of run, by part (pcap, traffic logs, metrics, ...).

    sudo .venv/bin/python bench/run_bench.py topologies/diamond.yaml [--duration 60] [--analyze]

Runs `testbed run` once and prints a Markdown table for docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from runfolder.layout import LAYOUT


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else \
        (path.stat().st_size if path.exists() else 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("topology")
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument("--analyze", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="run-bench-") as results:
        cmd = [sys.executable, "-m", "testbed.cli", "run", args.topology, "--duration", f"{args.duration:g}",
               "--results", results, "--quiet", "--json"] + ([] if args.analyze else ["--no-analyze"])
        out = subprocess.run(cmd, capture_output=True, text=True)
        outcome = json.loads(out.stdout.strip().splitlines()[-1])
        run_dir = Path(outcome["run_dir"])
        manifest = json.loads((run_dir / LAYOUT.manifest).read_text())
        phases = {p["name"]: (p["end_ns"] - p["start_ns"]) / 1e9 for p in manifest["phases"]}
        minutes = phases["traffic"] / 60
        print(f"run {outcome['status']}; traffic phase {phases['traffic']:.1f} s; phases: "
              + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()) + "\n")
        print("| part | bytes | MB per minute of run |")
        print("|---|---|---|")
        total = 0
        for part in (LAYOUT.pcap_dir, LAYOUT.traffic_dir, LAYOUT.metrics_dir, LAYOUT.nodes_dir, LAYOUT.ansible_dir,
                     LAYOUT.events, LAYOUT.manifest, LAYOUT.lab, LAYOUT.parquet_dir, LAYOUT.report_dir):
            n = size(run_dir / part)
            total += n
            if n:
                print(f"| {part} | {n} | {n / minutes / 1e6:.2f} |")
        print(f"| **total** | {total} | {total / minutes / 1e6:.2f} |")


if __name__ == "__main__":
    main()
