"""Measurements across one direction of a lab link, through the nodes' access: TCP goodput with
iperf3, UDP loss with the sequenced probe (testbed/probe.py, put on the sending and receiving node)."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

from testbed import proc
from testbed.backends import LabEnd
from testbed.probe import parse_arrivals

IPERF_PORT = 5201
PROBE_SCRIPT = Path(__file__).resolve().parent / "probe.py"


class Endpoint(NamedTuple):
    """One end of a lab link and the access to its node."""

    access: Any  # NodeAccess
    end: LabEnd


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


def _node_file(ep: Endpoint, name: str) -> str:
    return f"{ep.access.work_dir}/measure/{name}"


class _Server:
    def __init__(self, ep: Endpoint, port: int):
        self.ep, self.port = ep, port
        self.log = _node_file(ep, f"iperf3-server-{port}.log")

    def __enter__(self):
        self.ep.access.run(["rm", "-f", self.log])
        self.proc = self.ep.access.spawn(["iperf3", "-s", "-1", "-B", self.ep.end.ip, "-p", str(self.port)],
                                         log=self.log)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if self.ep.access.run(["ss", "-Hltn", f"sport = :{self.port}"]).stdout.strip():
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"iperf3 server on {self.ep.end.node} exited with {self.proc.poll()}: "
                                   f"{self.output()}")
            time.sleep(0.05)
        raise RuntimeError(f"iperf3 server on {self.ep.end.node} did not start listening within 5 s")

    def output(self) -> str:
        return self.ep.access.run(["cat", self.log], check=False).stdout

    def __exit__(self, *exc):
        proc.stop_process(self.proc, 5, sig=signal.SIGKILL)


def _client(src: Endpoint, dst: Endpoint, port: int, args: list[str], seconds: float) -> dict:
    argv = ["iperf3", "-c", dst.end.ip, "-B", src.end.ip, "-p", str(port), "-J", "-t", f"{seconds:g}", *args]
    result = src.access.run(argv, timeout=seconds + 30, check=False)
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise proc.CommandError(result.argv, result.returncode, result.stderr, result.stdout) from None
    if "error" in data:
        raise RuntimeError(f"iperf3 {src.end.node}->{dst.end.node}: {data['error']}")
    return data


def tcp_goodput(src: Endpoint, dst: Endpoint, seconds: float = 5.0, port: int = IPERF_PORT) -> Goodput:
    """Receiver-side TCP goodput from ``src`` to ``dst``, omitting the first second (slow start)."""
    with _Server(dst, port) as server:
        try:
            data = _client(src, dst, port, ["-O", "1"], seconds)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; iperf3 server said: {server.output().strip()[-500:]}") from None
    received = data["end"]["sum_received"]
    return Goodput(received["bits_per_second"], received["seconds"])


def put_probe(ep: Endpoint) -> str:
    """Put the probe script on the node; returns its path there."""
    path = _node_file(ep, "probe.py")
    ep.access.put(PROBE_SCRIPT, path)
    return path


def _wait_bound(ep: Endpoint, port: int, receiver, timeout_s: float = 10.0) -> None:
    """Until the probe's receiver has bound its UDP port (a datagram sent before would count as lost)."""
    deadline = time.monotonic() + timeout_s
    while not ep.access.run(["ss", "-Hlun", f"sport = :{port}"]).stdout.strip():
        if receiver.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the UDP probe receiver on {ep.end.node} did not bind port {port}")
        time.sleep(0.02)


def udp_arrivals(src: Endpoint, dst: Endpoint, packets: int, interval_ms: float = 1.0, port: int = 9200,
                 during: Optional[Callable[[], None]] = None) -> list[tuple[int, int, int]]:
    """Send ``packets`` sequenced, timestamped UDP datagrams from ``src`` to ``dst`` (calling ``during``
    while they flow, if given); returns ``(seq, arrival ns, send ns)`` of every one received."""
    seconds = packets * interval_ms / 1000
    out = _node_file(dst, f"probe-recv-{port}.txt")
    dst.access.run(["rm", "-f", out])
    receiver = dst.access.spawn(["python3", put_probe(dst), "recv", dst.end.ip, str(port), f"{seconds + 1.5:g}"],
                                log=out)
    try:
        _wait_bound(dst, port, receiver)
        sender = src.access.spawn(["python3", put_probe(src), "send", dst.end.ip, str(port), f"{interval_ms:g}",
                                   str(packets)])
        try:
            if during is not None:
                during()
            sender.wait(timeout=seconds + 30)
        finally:
            proc.stop_process(sender, 5, sig=signal.SIGKILL)
        receiver.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    finally:
        proc.stop_process(receiver, 5, sig=signal.SIGKILL)
    return parse_arrivals(dst.access.run(["cat", out]).stdout)


def udp_loss(src: Endpoint, dst: Endpoint, packets: int = 2500, interval_ms: float = 1.0,
             port: int = 9200) -> UdpLoss:
    """Send ``packets`` sequenced UDP datagrams from ``src`` to ``dst`` and count the ones lost."""
    received = {seq for seq, _, _ in udp_arrivals(src, dst, packets, interval_ms, port)}
    return UdpLoss(packets, packets - len(received))
