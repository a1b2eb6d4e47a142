"""Lab benchmarks: shaping accuracy (TCP goodput vs configured rate) and bring-up/tear-down time.

    sudo .venv/bin/python bench/lab_bench.py accuracy [--seconds 10] [--repeat 3]
    sudo .venv/bin/python bench/lab_bench.py bringup topologies/ring50.yaml [--repeat 3]

Prints a Markdown table for docs/benchmarks.md. Needs root and Mininet.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

from testbed import kernel
from testbed.lab import LabSession
from testbed.measure import tcp_goodput
from testbed.spec import load_spec, load_spec_text

PAIR = """
name: bench-{mbit}
nodes: {{a: {{}}, b: {{}}}}
links:
  - endpoints: [a, b]
    bw: {mbit}mbit
"""


def machine() -> str:
    import os

    return f"{platform.node()} · {os.cpu_count()} cores · kernel {platform.release()} · {platform.python_version()}"


def accuracy(rates: list[int], seconds: float, repeat: int) -> None:
    caps = kernel.probe()
    print(f"machine: {machine()}\n")
    print("| configured | TCP goodput (median of runs) | ratio | runs |")
    print("|---|---|---|---|")
    for mbit in rates:
        with LabSession(load_spec_text(PAIR.format(mbit=mbit)), caps) as lab:
            link = lab.links[0]
            runs = [tcp_goodput(link.a, link.b, seconds=seconds).bits_per_second for _ in range(repeat)]
        med = statistics.median(runs)
        ratios = ", ".join(f"{r / (mbit * 1e6):.3f}" for r in runs)
        print(f"| {mbit} Mbit/s | {med / 1e6:.2f} Mbit/s | {med / (mbit * 1e6):.3f} | {ratios} |")


def bringup(path: str, repeat: int) -> None:
    caps = kernel.probe()
    spec = load_spec(path)
    print(f"machine: {machine()}\n")
    print(f"topology {spec.name}: {len(spec.nodes)} nodes, {len(spec.links)} links, every link shaped\n")
    print("| run | bring-up (s) | tear-down (s) |")
    print("|---|---|---|")
    ups, downs = [], []
    for i in range(repeat):
        session = LabSession(spec, caps)
        t0 = time.monotonic()
        session.open()
        t1 = time.monotonic()
        session.close()
        t2 = time.monotonic()
        ups.append(t1 - t0)
        downs.append(t2 - t1)
        print(f"| {i + 1} | {t1 - t0:.2f} | {t2 - t1:.2f} |")
    print(f"| median | {statistics.median(ups):.2f} | {statistics.median(downs):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    a = sub.add_parser("accuracy")
    a.add_argument("--rates", default="10,50,100")
    a.add_argument("--seconds", type=float, default=10)
    a.add_argument("--repeat", type=int, default=3)
    b = sub.add_parser("bringup")
    b.add_argument("topology")
    b.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.what == "accuracy":
        accuracy([int(r) for r in args.rates.split(",")], args.seconds, args.repeat)
    else:
        bringup(args.topology, args.repeat)


if __name__ == "__main__":
    main()
