"""Measurements across one direction of a lab link with iperf3: TCP goodput, UDP loss."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

from testbed import proc
from testbed.backends import LabEnd

IPERF_PORT = 5201


@dataclass(frozen=True)
class Goodput:
    bits_per_second: float
    seconds: float


@dataclass(frozen=True)
class UdpLoss:
    packets: int
    lost: int

    @property
    def loss_pct(self) -> float:
        return 100.0 * self.lost / self.packets if self.packets else 0.0


class _Server:
    def __init__(self, end: LabEnd, port: int):
        self.end, self.port = end, port

    def __enter__(self):
        self.proc = proc.spawn(["iperf3", "-s", "-1", "-B", self.end.ip, "-p", str(self.port)], netns=self.end.netns)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            listening = proc.run(["ss", "-Hltn", f"sport = :{self.port}"], netns=self.end.netns).stdout
            if listening.strip():
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"iperf3 server on {self.end.node} exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise RuntimeError(f"iperf3 server on {self.end.node} did not start listening within 5 s")

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=5)


def _client(src: LabEnd, dst: LabEnd, port: int, args: list[str], seconds: float) -> dict:
    argv = ["iperf3", "-c", dst.ip, "-B", src.ip, "-p", str(port), "-J", "-t", f"{seconds:g}", *args]
    result = proc.run(argv, netns=src.netns, timeout=seconds + 30)
    data = json.loads(result.stdout)
    if "error" in data:
        raise RuntimeError(f"iperf3 {src.node}->{dst.node}: {data['error']}")
    return data


def tcp_goodput(src: LabEnd, dst: LabEnd, seconds: float = 5.0, port: int = IPERF_PORT) -> Goodput:
    """Receiver-side TCP goodput from ``src`` to ``dst``, omitting the first second (slow start)."""
    with _Server(dst, port):
        data = _client(src, dst, port, ["-O", "1"], seconds)
    received = data["end"]["sum_received"]
    return Goodput(received["bits_per_second"], received["seconds"])


def udp_loss(src: LabEnd, dst: LabEnd, packets: int = 2500, rate_bps: int = 1_000_000,
             size: int = 200, port: int = IPERF_PORT) -> UdpLoss:
    """Send about ``packets`` UDP datagrams of ``size`` bytes and count how many were lost."""
    seconds = max(1.0, packets * size * 8 / rate_bps)
    with _Server(dst, port):
        data = _client(src, dst, port, ["-u", "-b", str(rate_bps), "-l", str(size)], seconds)
    total = data["end"]["sum"]
    return UdpLoss(int(total["packets"]), int(total["lost_packets"]))
