"""The ssh backend on the test lab of four SSH-only machines (tests/backends/sshlab.py, the diamond's cabling):
bring-up (pre-flight, record, addresses, shaping through Ansible) and tear-down (restore and compare), the
clock readings, and the data-plane verification.

    sudo .venv/bin/python bench/ssh_lab_bench.py [--repeat 3]

Prints a Markdown table for docs/benchmarks.md. Needs root, sshd and sudo (scripts/setup.sh installs them).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lab_bench import machine  # noqa: E402
from testbed.backends import BackendOptions
from testbed.lab.session import LabSession  # noqa: E402
from testbed.links.verify import verify_links  # noqa: E402
from testbed.spec import load_spec_text  # noqa: E402
from tests.backends.sshlab import SshLab  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    spec = load_spec_text((ROOT / "topologies" / "diamond.yaml").read_text().replace("name: diamond",
                                                                                      "name: benchssh"))
    ups, downs, verifies, bounds = [], [], [], []
    with SshLab() as lab, tempfile.TemporaryDirectory() as scratch:
        inventory = lab.write_inventory(Path(scratch) / "lab.ini")
        before = lab.snapshot()
        for _ in range(args.repeat):
            session = LabSession(spec, backend=BackendOptions("ssh", inventory=str(inventory)))
            t0 = time.monotonic()
            built = session.open()
            ups.append(time.monotonic() - t0)
            try:
                readings = session.backend.clocks(built)
                bounds += [r.bound_ns for r in readings.values()]
                t0 = time.monotonic()
                report = verify_links(built, session.access)
                verifies.append(time.monotonic() - t0)
                assert report.ok, report.failures()
            finally:
                t0 = time.monotonic()
                session.close()
                downs.append(time.monotonic() - t0)
            assert lab.snapshot() == before, "the machines were not put back"
    print(f"machine: {machine()} · 4 SSH-only machines (namespaces with their own sshd, sudo user)\n")
    print("| step | median | min | max | runs |")
    print("|---|---|---|---|---|")
    for name, values in (("bring-up (check, record, probe, addresses, shaping via Ansible)", ups),
                         ("tear-down (stop, restore, compare)", downs),
                         ("data-plane verification, 8 directions", verifies)):
        print(f"| {name} | {statistics.median(values):.2f} s | {min(values):.2f} s | {max(values):.2f} s | "
              f"{len(values)} |")
    print(f"| clock error bound per machine (exchange over TCP) | {statistics.median(bounds) / 1e3:.1f} us | "
          f"{min(bounds) / 1e3:.1f} us | {max(bounds) / 1e3:.1f} us | {len(bounds)} |")


if __name__ == "__main__":
    main()
