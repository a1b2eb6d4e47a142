"""Does the link verification blame the right direction? A 10 Mbit/s link between two SSH-only lab machines
(tests/backends/sshlab.py, r1:eth1-r2:eth1, as tests/run/test_ssh_run_e2e.py's pair) with r2's own firewall
dropping a fifth of what arrives on r2:eth1: only left->right (r1->r2) loses anything, so only left->right
may miss. Runs the verification ``--repeat`` times on one lab, with ``--load`` busy loops on this machine's
CPUs (nice 0, as the rest of a CI suite would make), and counts the runs where right->left missed too.

    sudo .venv/bin/python bench/verify_attribution_bench.py [--repeat 20] [--load 2] [--json out.jsonl]

Prints one line per verification (each check of each direction: ok or not, measured) and the counts.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.backends import BackendOptions  # noqa: E402
from testbed.lab.session import LabSession  # noqa: E402
from testbed.links.verify import verify_links  # noqa: E402
from testbed.spec import load_spec_text  # noqa: E402
from tests.backends.sshlab import SshLab  # noqa: E402

PAIR = """
name: attrib
backend: ssh
duration: 4s
nodes:
  left: {host: r1}
  right: {host: r2}
links:
  - endpoints: ["left:eth1", "right:eth1"]
    bw: 10mbit
"""
DROP = ["-i", "eth1", "-m", "statistic", "--mode", "random", "--probability", "0.2", "-j", "DROP"]
BUSY = "while True: pass"


def _short(check: dict) -> str:
    measured = check["measured"]
    value = "-" if measured is None else (f"{measured / 1e6:.2f}M" if check["unit"] == "bit/s" else f"{measured:.2f}")
    return f"{check['quantity']}={'ok' if check['ok'] else 'MISS'}:{value}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--load", type=int, default=0, help="busy loops to run meanwhile")
    parser.add_argument("--no-drop", action="store_true", help="control: without r2's firewall rule")
    parser.add_argument("--json", type=Path, help="append every report here, one JSON line each")
    args = parser.parse_args()
    spec = load_spec_text(PAIR)
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.load)]
    blamed = missed_left = 0
    try:
        with SshLab() as lab, tempfile.TemporaryDirectory() as scratch:
            inventory = lab.write_inventory(Path(scratch) / "lab.ini")
            session = LabSession(spec, backend=BackendOptions("ssh", inventory=str(inventory)))
            built = session.open()
            if not args.no_drop:
                lab.run("r2", ["iptables", "-w", "-I", "INPUT", *DROP], check=True)
            try:
                for i in range(args.repeat):
                    t0 = time.monotonic()
                    report = verify_links(built, session.access).to_json()
                    load1 = os.getloadavg()[0]
                    directions = {d["direction"]: d for d in report["links"]}
                    left, right = directions["left->right"], directions["right->left"]
                    missed_left += not left["ok"]
                    blamed += not right["ok"]
                    print(f"{i + 1:2d} {time.monotonic() - t0:5.1f}s load1={load1:.2f} | left->right "
                          f"{' '.join(map(_short, left['checks']))} | right->left "
                          f"{' '.join(map(_short, right['checks']))}", flush=True)
                    if args.json:
                        with args.json.open("a") as out:
                            out.write(json.dumps({"load": args.load, "load1": load1, "report": report}) + "\n")
            finally:
                lab.run("r2", ["iptables", "-w", "-D", "INPUT", *DROP], check=False)
                session.close()
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print(f"busy loops {args.load}: left->right missed {missed_left}/{args.repeat}, "
          f"right->left (not impaired) missed {blamed}/{args.repeat}")


if __name__ == "__main__":
    main()
