"""Does the link verification blame the right direction? The 10 Mbit/s link between two SSH-only lab machines
of tests/run/test_ssh_run_e2e.py (r1:eth1-r2:eth1 of tests/backends/sshlab.py) with r2's own firewall dropping a
fifth of what arrives on r2:eth1: only left->right (r1->r2) loses anything, so only left->right may miss.
Runs the verification ``--repeat`` times on one lab, with ``--load`` busy loops on this machine's CPUs (nice 0,
as the rest of a CI suite would make), and counts the runs where right->left missed too.

    sudo .venv/bin/python bench/verify_attribution_bench.py [--repeat 20] [--load 2] [--interleave] [--json F]

``--interleave`` alternates the verification as it is with one whose rates ignore the reverse direction's loss
(a TCP probe wherever no loss is asked of the direction itself, as before the fix), in one sitting. Prints one
line per verification (each check of each direction: ok or not, measured; the retransmission timeouts r2's
TCP took meanwhile: right->left's sender is r2) and the counts.
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
from testbed.links import verify  # noqa: E402
from testbed.spec import load_spec_text  # noqa: E402
from tests.backends.sshlab import SshLab  # noqa: E402
from tests.run.test_ssh_run_e2e import PAIR_RUN  # noqa: E402 - the test's link

DROP = ["-i", "eth1", "-m", "statistic", "--mode", "random", "--probability", "0.2", "-j", "DROP"]
BUSY = "while True: pass"


def _short(check: dict) -> str:
    measured = check["measured"]
    value = "-" if measured is None else (f"{measured / 1e6:.2f}M" if check["unit"] == "bit/s" else f"{measured:.2f}")
    return f"{check['quantity']}={'ok' if check['ok'] else 'MISS'}:{value}"


def _tcp_timeouts(lab: SshLab, host: str) -> int:
    """TcpExt TCPTimeouts of the host's network namespace (its retransmission timeouts so far)."""
    lines = [line.split() for line in lab.run(host, ["cat", "/proc/net/netstat"], check=True).stdout.splitlines()]
    for names, values in zip(lines[::2], lines[1::2]):
        if names[0] == "TcpExt:":
            return int(dict(zip(names, values))["TCPTimeouts"])
    return -1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20, help="verifications (of each kind with --interleave)")
    parser.add_argument("--load", type=int, default=0, help="busy loops to run meanwhile")
    parser.add_argument("--interleave", action="store_true", help="alternate with the rates as before the fix")
    parser.add_argument("--no-drop", action="store_true", help="control: without r2's firewall rule")
    parser.add_argument("--json", type=Path, help="append every report here, one JSON line each")
    args = parser.parse_args()
    spec = load_spec_text(PAIR_RUN)
    kinds = ["now", "before"] if args.interleave else ["now"]
    counts = {kind: {"left": 0, "right": 0} for kind in kinds}
    as_is = verify.way_back_loss_pct
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.load)]
    try:
        with SshLab() as lab, tempfile.TemporaryDirectory() as scratch:
            inventory = lab.write_inventory(Path(scratch) / "lab.ini")
            session = LabSession(spec, backend=BackendOptions("ssh", inventory=str(inventory)))
            built = session.open()
            if not args.no_drop:
                lab.run("r2", ["iptables", "-w", "-I", "INPUT", *DROP], check=True)
            try:
                for i in range(args.repeat):
                    for kind in kinds:
                        verify.way_back_loss_pct = as_is if kind == "now" else (lambda *a: None)
                        timeouts = _tcp_timeouts(lab, "r2")
                        t0 = time.monotonic()
                        report = verify.verify_links(built, session.access).to_json()
                        took, load1 = time.monotonic() - t0, os.getloadavg()[0]
                        timeouts = _tcp_timeouts(lab, "r2") - timeouts
                        directions = {d["direction"]: d for d in report["links"]}
                        left, right = directions["left->right"], directions["right->left"]
                        counts[kind]["left"] += not left["ok"]
                        counts[kind]["right"] += not right["ok"]
                        print(f"{i + 1:2d} {kind:6s} {took:5.1f}s load1={load1:.2f} r2-RTOs={timeouts} | "
                              f"left->right {' '.join(map(_short, left['checks']))} | right->left "
                              f"{' '.join(map(_short, right['checks']))}", flush=True)
                        if args.json:
                            with args.json.open("a") as out:
                                out.write(json.dumps({"kind": kind, "load": args.load, "load1": load1,
                                                      "r2_rtos": timeouts, "report": report}) + "\n")
            finally:
                verify.way_back_loss_pct = as_is
                lab.run("r2", ["iptables", "-w", "-D", "INPUT", *DROP], check=False)
                session.close()
    finally:
        for p in busy:
            p.kill()
            p.wait()
    for kind, count in counts.items():
        print(f"{kind}: busy loops {args.load}, {'no drop' if args.no_drop else 'r2 drops 20% in'}: "
              f"left->right missed {count['left']}/{args.repeat}, right->left (not impaired) missed "
              f"{count['right']}/{args.repeat}")


if __name__ == "__main__":
    main()
