"""How long a small packet waits behind a paced TCP transfer on a rate-shaped veth, with the
testbed's shaping (testbed/links/shaping.py: htb + pfifo, gso_max_size 1500) and with the kernel's
default 64 KiB generic segmentation offload put back.

    .venv/bin/python bench/link_gso_burst.py [--rate-mbit 100] [--pacing-mbit 80] [--seconds 3]

Two network namespaces joined by a veth; the sender's end shaped by the testbed's own tc
commands; a TCP transfer paced at ``--pacing-mbit`` (SO_MAX_PACING_RATE, as the router paces
its stream connections) and 100 pings a second beside it. Prints the ping round-trip
percentiles for both settings. Needs root; removes what it creates.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from testbed.kernel import KernelCapabilities  # noqa: E402
from testbed.links.shaping import plan, rebuild_commands  # noqa: E402
from testbed.spec.resolve import Shaping  # noqa: E402

NS_A, NS_B = "tbbench-gso-a", "tbbench-gso-b"
DEV_A, DEV_B = "tbgsoa", "tbgsob"
ADDR_A, ADDR_B = "10.250.7.1", "10.250.7.2"
CAPS = KernelCapabilities({"htb": True, "tbf": True, "netem": False, "pfifo": True, "bfifo": True}, True)


def sh(*argv: str, check: bool = True) -> str:
    return subprocess.run(argv, check=check, capture_output=True, text=True).stdout


def in_ns(ns: str, *argv: str, check: bool = True) -> str:
    return sh("ip", "netns", "exec", ns, *argv, check=check)


def build(rate_bps: int) -> None:
    for ns in (NS_A, NS_B):
        sh("ip", "netns", "add", ns)
        in_ns(ns, "ip", "link", "set", "lo", "up")
    sh("ip", "link", "add", DEV_A, "netns", NS_A, "type", "veth", "peer", "name", DEV_B, "netns", NS_B)
    for ns, dev, addr in ((NS_A, DEV_A, ADDR_A), (NS_B, DEV_B, ADDR_B)):
        in_ns(ns, "ip", "addr", "add", f"{addr}/30", "dev", dev)
        in_ns(ns, "ip", "link", "set", dev, "up")
    for argv in rebuild_commands(DEV_A, plan(Shaping(bw_bps=rate_bps, queue_packets=100), CAPS)):
        in_ns(NS_A, *argv)


def remove() -> None:
    for ns in (NS_A, NS_B):
        sh("ip", "netns", "del", ns, check=False)


def receiver(ready: threading.Event) -> subprocess.Popen:
    code = ("import socket\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            f"s.bind(('{ADDR_B}',5001));s.listen(4)\n"
            "while True:\n c,_=s.accept()\n while c.recv(1<<20): pass\n c.close()\n")
    proc = subprocess.Popen(["ip", "netns", "exec", NS_B, sys.executable, "-c", code])
    time.sleep(0.5)
    ready.set()
    return proc


def transfer(pacing_bps: int, seconds: float) -> None:
    code = ("import socket,struct,time\n"
            f"s=socket.create_connection(('{ADDR_B}',5001))\n"
            f"s.setsockopt(socket.SOL_SOCKET,47,struct.pack('=Q',{pacing_bps // 8}))\n"
            f"end=time.time()+{seconds}\nb=b'x'*(1<<16)\n"
            "while time.time()<end: s.sendall(b)\n")
    in_ns(NS_A, sys.executable, "-c", code)


def pings(seconds: float) -> list:
    out = in_ns(NS_A, "ping", "-i", "0.01", "-c", str(int(seconds * 100)), ADDR_B, check=False)
    return sorted(float(x) for x in re.findall(r"time=([0-9.]+) ms", out))


def measure(pacing_bps: int, seconds: float) -> list:
    t = threading.Thread(target=transfer, args=(pacing_bps, seconds + 0.5))
    t.start()
    time.sleep(0.3)
    rtts = pings(seconds)
    t.join()
    return rtts


def pct(v: list, q: float) -> float:
    return v[min(len(v) - 1, int(q * len(v)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate-mbit", type=float, default=100)
    ap.add_argument("--pacing-mbit", type=float, default=80)
    ap.add_argument("--seconds", type=float, default=3)
    args = ap.parse_args()
    remove()
    try:
        build(int(args.rate_mbit * 1e6))
        ready = threading.Event()
        rx = receiver(ready)
        ready.wait()
        try:
            print(f"htb {args.rate_mbit:g} Mbit/s + pfifo 100; TCP paced at {args.pacing_mbit:g} Mbit/s; "
                  f"ping every 10 ms for {args.seconds:g} s")
            for label, gso in (("testbed (gso_max_size 1500)", None), ("kernel default (gso_max_size 65536)", 65536)):
                if gso is not None:
                    in_ns(NS_A, "ip", "link", "set", "dev", DEV_A, "gso_max_size", str(gso))
                rtts = measure(int(args.pacing_mbit * 1e6), args.seconds)
                print(f"  {label:38s} ping rtt p50 {pct(rtts, .5):.3f} ms  p99 {pct(rtts, .99):.3f} ms  "
                      f"max {rtts[-1]:.3f} ms  ({len(rtts)} replies)")
        finally:
            rx.kill()
            rx.wait()
    finally:
        remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
