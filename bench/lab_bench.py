"""Lab benchmarks: shaping accuracy (TCP goodput vs configured rate) and bring-up/tear-down time.

    sudo .venv/bin/python bench/lab_bench.py accuracy [--backend mininet] [--seconds 10] [--repeat 3]
    sudo .venv/bin/python bench/lab_bench.py bringup topologies/ring50.yaml [--backends mininet,docker] [--repeat 3]

Prints a Markdown table for docs/benchmarks.md. Needs root and the backends' needs (docs/backends.md).
`bringup` measures the backends in turn, in the same session, on the same topology.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

from testbed.backends import get_backend
from testbed.lab.session import LabSession
from testbed.links.measure import EndAccess, tcp_goodput
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


def accuracy(rates: list[int], seconds: float, repeat: int, backend: str) -> None:
    print(f"machine: {machine()} · backend {backend}\n")
    print("| configured | TCP goodput (median of runs) | ratio | runs |")
    print("|---|---|---|---|")
    for mbit in rates:
        session = LabSession(load_spec_text(PAIR.format(mbit=mbit)), backend=backend)
        with session as lab:
            link = lab.links[0]
            a, b = EndAccess(session.access("a"), link.a), EndAccess(session.access("b"), link.b)
            runs = [tcp_goodput(a, b, seconds=seconds).bits_per_second for _ in range(repeat)]
        med = statistics.median(runs)
        ratios = ", ".join(f"{r / (mbit * 1e6):.3f}" for r in runs)
        print(f"| {mbit} Mbit/s | {med / 1e6:.2f} Mbit/s | {med / (mbit * 1e6):.3f} | {ratios} |")


def open_and_close(spec, caps, backend: str) -> tuple[float, float]:
    """Seconds to bring the lab up (LabSession.open) and to tear it down (close)."""
    session = LabSession(spec, caps, backend=backend)
    t0 = time.monotonic()
    session.open()
    t1 = time.monotonic()
    session.close()
    return t1 - t0, time.monotonic() - t1


def bringup(path: str, repeat: int, backends: list[str]) -> None:
    spec = load_spec(path)
    print(f"machine: {machine()}\n")
    print(f"topology {spec.name}: {len(spec.nodes)} nodes, {len(spec.links)} links, every link shaped\n")
    print("| backend | run | bring-up (s) | per node (ms) | tear-down (s) |")
    print("|---|---|---|---|---|")
    for backend in backends:
        ups, downs = [], []
        caps = get_backend(backend).probe()  # as `testbed run` does, before building
        for i in range(repeat):
            up, down = open_and_close(spec, caps, backend)
            ups.append(up)
            downs.append(down)
            print(f"| {backend} | {i + 1} | {up:.2f} | {1000 * up / len(spec.nodes):.0f} | {down:.2f} |")
        up = statistics.median(ups)
        print(f"| {backend} | median | {up:.2f} | {1000 * up / len(spec.nodes):.0f} | {statistics.median(downs):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    a = sub.add_parser("accuracy")
    a.add_argument("--rates", default="10,50,100")
    a.add_argument("--seconds", type=float, default=10)
    a.add_argument("--repeat", type=int, default=3)
    a.add_argument("--backend", default="mininet")
    b = sub.add_parser("bringup")
    b.add_argument("topology")
    b.add_argument("--repeat", type=int, default=3)
    b.add_argument("--backends", default="mininet,docker")
    args = parser.parse_args()
    if args.what == "accuracy":
        accuracy([int(r) for r in args.rates.split(",")], args.seconds, args.repeat, args.backend)
    else:
        bringup(args.topology, args.repeat, args.backends.split(","))


if __name__ == "__main__":
    main()
