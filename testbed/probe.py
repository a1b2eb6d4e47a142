"""A small UDP probe run inside lab nodes: paced sequenced datagrams and a receiver that logs arrivals.

    python3 probe.py send ADDR PORT INTERVAL_MS COUNT
    python3 probe.py recv ADDR PORT SECONDS     (prints `<seq> <arrival time_ns> <send time_ns>` per datagram)

Standard library only: it is put on the nodes (testbed.measure) and run with their python3.

Used to measure loss (iperf3's UDP mode aborts when its own set-up datagram is lost)
and the timing of link down/up.
"""
from __future__ import annotations

import socket
import sys
import time


def send(addr: str, port: int, interval_ms: float, count: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    start = time.monotonic()
    for seq in range(count):
        try:
            sock.sendto(seq.to_bytes(8, "big") + time.time_ns().to_bytes(8, "big") + bytes(48), (addr, port))
        except OSError:
            pass  # link down: the kernel may refuse to send; keep the pace
        pause = start + (seq + 1) * interval_ms / 1000 - time.monotonic()
        if pause > 0:
            time.sleep(pause)


def recv(addr: str, port: int, seconds: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((addr, port))
    sock.settimeout(0.1)
    end = time.monotonic() + seconds
    out = []
    while time.monotonic() < end:
        try:
            data, _ = sock.recvfrom(256)
        except socket.timeout:
            continue
        out.append(f"{int.from_bytes(data[:8], 'big')} {time.time_ns()} {int.from_bytes(data[8:16], 'big')}")
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()


def parse_arrivals(text: str) -> list[tuple[int, int, int]]:
    """``(seq, arrival time_ns, send time_ns)`` per datagram received."""
    return [(int(a), int(b), int(c)) for a, b, c in (line.split() for line in text.splitlines() if line.strip())]


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "send":
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
    elif mode == "recv":
        recv(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        sys.exit(f"unknown mode {mode!r}: use send or recv")
