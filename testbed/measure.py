"""Measurements across one direction of a lab link with iperf3: TCP goodput, UDP loss."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from testbed import proc
from testbed.backends import LabEnd
from testbed.probe import parse_arrivals

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
        self.log = tempfile.TemporaryFile()
        self.proc = proc.spawn(["iperf3", "-s", "-1", "-B", self.end.ip, "-p", str(self.port)], netns=self.end.netns,
                               stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            listening = proc.run(["ss", "-Hltn", f"sport = :{self.port}"], netns=self.end.netns).stdout
            if listening.strip():
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"iperf3 server on {self.end.node} exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise RuntimeError(f"iperf3 server on {self.end.node} did not start listening within 5 s")

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=5)
        self.log.close()


def _client(src: LabEnd, dst: LabEnd, port: int, args: list[str], seconds: float) -> dict:
    argv = ["iperf3", "-c", dst.ip, "-B", src.ip, "-p", str(port), "-J", "-t", f"{seconds:g}", *args]
    result = proc.run(argv, netns=src.netns, timeout=seconds + 30, check=False)
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise proc.CommandError(result.argv, result.returncode, result.stderr, result.stdout) from None
    if "error" in data:
        raise RuntimeError(f"iperf3 {src.node}->{dst.node}: {data['error']}")
    return data


def tcp_goodput(src: LabEnd, dst: LabEnd, seconds: float = 5.0, port: int = IPERF_PORT) -> Goodput:
    """Receiver-side TCP goodput from ``src`` to ``dst``, omitting the first second (slow start)."""
    with _Server(dst, port) as server:
        try:
            data = _client(src, dst, port, ["-O", "1"], seconds)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; iperf3 server said: {server.output().strip()[-500:]}") from None
    received = data["end"]["sum_received"]
    return Goodput(received["bits_per_second"], received["seconds"])


def udp_loss(src: LabEnd, dst: LabEnd, packets: int = 2500, interval_ms: float = 1.0,
             port: int = 9200) -> UdpLoss:
    """Send ``packets`` sequenced UDP datagrams from ``src`` to ``dst`` and count the ones lost."""
    seconds = packets * interval_ms / 1000
    receiver = proc.spawn([sys.executable, "-m", "testbed.probe", "recv", dst.ip, str(port), f"{seconds + 1.5:g}"],
                          netns=dst.netns, stdout=subprocess.PIPE)
    try:
        time.sleep(0.3)
        proc.run([sys.executable, "-m", "testbed.probe", "send", dst.ip, str(port), f"{interval_ms:g}",
                  str(packets)], netns=src.netns, timeout=seconds + 30)
        out, _ = receiver.communicate(timeout=seconds + 30)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    received = {seq for seq, _ in parse_arrivals(out.decode())}
    return UdpLoss(packets, packets - len(received))
