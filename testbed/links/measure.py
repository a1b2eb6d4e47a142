"""Measurements across one direction of a lab link, through the nodes' access: TCP goodput with
iperf3 or with the standard-library meter (testbed/links/meter.py, put on the sending and receiving node:
all a lab machine of the ssh backend is sure to have is python3), the rate a shaper delivers to
paced UDP, UDP loss with sequenced datagrams, and UDP round trips.

Functions that take ``meter_ready=True`` expect the meter already put on both nodes with
:func:`put_meter` (so that several measurements can run at once without copying it over itself).
"""
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
from testbed.links.meter import goodput_from_samples, parse_arrivals, parse_round_trips, parse_samples

IPERF_PORT = 5201
METER_SCRIPT = Path(__file__).resolve().parent / "meter.py"


class EndAccess(NamedTuple):
    """One end of a lab link and the access to its node (and the node's python3, for the meter)."""

    access: Any  # NodeAccess
    end: LabEnd
    python: str = "python3"


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


def _node_file(ep: EndAccess, name: str) -> str:
    return f"{ep.access.work_dir}/measure/{name}"


class _Server:
    def __init__(self, ep: EndAccess, port: int):
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


def _client(src: EndAccess, dst: EndAccess, port: int, args: list[str], seconds: float) -> dict:
    argv = ["iperf3", "-c", dst.end.ip, "-B", src.end.ip, "-p", str(port), "-J", "-t", f"{seconds:g}", *args]
    result = src.access.run(argv, timeout=seconds + 30, check=False)
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise proc.CommandError(result.argv, result.returncode, result.stderr, result.stdout) from None
    if "error" in data:
        raise RuntimeError(f"iperf3 {src.end.node}->{dst.end.node}: {data['error']}")
    return data


def tcp_goodput(src: EndAccess, dst: EndAccess, seconds: float = 5.0, port: int = IPERF_PORT) -> Goodput:
    """Receiver-side TCP goodput from ``src`` to ``dst``, omitting the first second (slow start)."""
    with _Server(dst, port) as server:
        try:
            data = _client(src, dst, port, ["-O", "1"], seconds)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; iperf3 server said: {server.output().strip()[-500:]}") from None
    received = data["end"]["sum_received"]
    return Goodput(received["bits_per_second"], received["seconds"])


def put_meter(ep: EndAccess) -> str:
    """Put the meter script on the node; returns its path there."""
    path = _node_file(ep, "meter.py")
    ep.access.put(METER_SCRIPT, path)
    return path


def _udp_bound(ep: EndAccess, port: int) -> bool:
    """Whether a UDP socket is bound to ``port`` on the node (read from /proc: `ss` is not on every lab
    machine)."""
    text = ep.access.run(["cat", "/proc/net/udp"], check=False).stdout
    suffix = f":{port:04X}"
    return any(len(f) > 1 and f[1].endswith(suffix) for f in (line.split() for line in text.splitlines()[1:]))


def _wait_bound(ep: EndAccess, port: int, receiver, timeout_s: float = 10.0) -> None:
    """Until the meter's receiver has bound its UDP port (a datagram sent before would count as lost)."""
    deadline = time.monotonic() + timeout_s
    while not _udp_bound(ep, port):
        if receiver.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the UDP probe receiver on {ep.end.node} did not bind port {port}")
        time.sleep(0.02)


def _meter(ep: EndAccess, ready: bool) -> str:
    return _node_file(ep, "meter.py") if ready else put_meter(ep)


def udp_arrivals(src: EndAccess, dst: EndAccess, packets: int, interval_ms: float = 1.0, port: int = 9200,
                 during: Optional[Callable[[], None]] = None, *, settle_s: Optional[float] = None,
                 max_burst: int = 0, meter_ready: bool = False) -> list[tuple[int, int, int]]:
    """Send ``packets`` sequenced, timestamped UDP datagrams from ``src`` to ``dst`` (calling ``during``
    while they flow, if given); returns ``(seq, arrival ns, send ns)`` of every one received.

    The receiver listens 1.5 s longer than the sending should take; with ``settle_s`` it is stopped
    instead ``settle_s`` after the sender ends (enough for what is still queued or delayed on the
    link), however long the sending took. ``max_burst``: see the meter's ``send``."""
    seconds = packets * interval_ms / 1000
    listen = seconds + 1.5 if settle_s is None else 2 * seconds + 30
    out = _node_file(dst, f"meter-recv-{port}.txt")
    dst.access.run(["rm", "-f", out])
    receiver = dst.access.spawn([dst.python, _meter(dst, meter_ready), "recv", dst.end.ip, str(port),
                                 f"{listen:g}"], log=out)
    try:
        _wait_bound(dst, port, receiver)
        sender = src.access.spawn([src.python, _meter(src, meter_ready), "send", dst.end.ip, str(port),
                                   f"{interval_ms:g}", str(packets), *([str(max_burst)] if max_burst else [])])
        try:
            if during is not None:
                during()
            sender.wait(timeout=seconds + 30)
        finally:
            proc.stop_process(sender, 5, sig=signal.SIGKILL)
        if settle_s is not None and receiver.poll() is None:
            time.sleep(settle_s)
            receiver.send_signal(signal.SIGTERM)  # it writes what it received and ends
        receiver.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    finally:
        proc.stop_process(receiver, 5, sig=signal.SIGKILL)
    return parse_arrivals(dst.access.run(["cat", out]).stdout)


def udp_loss(src: EndAccess, dst: EndAccess, packets: int = 2500, interval_ms: float = 1.0,
             port: int = 9200, *, settle_s: Optional[float] = None, max_burst: int = 0,
             meter_ready: bool = False) -> UdpLoss:
    """Send ``packets`` sequenced UDP datagrams from ``src`` to ``dst`` and count the ones lost."""
    received = {seq for seq, _, _ in udp_arrivals(src, dst, packets, interval_ms, port, settle_s=settle_s,
                                                   max_burst=max_burst, meter_ready=meter_ready)}
    return UdpLoss(packets, packets - len(received))


@dataclass(frozen=True)
class UdpRate:
    """What a direction delivered of paced UDP offered at ``offered_bps`` (on the wire)."""

    bits_per_second: float  # UDP payload received per second, over the measured window
    seconds: float
    offered_bps: float  # what the sender really offered, on the wire (it may fall short of what was asked)


@dataclass(frozen=True)
class RoundTrips:
    sent: int
    rtts_ns: list[int]  # one per reply, in order of arrival

    @property
    def min_ns(self) -> Optional[int]:
        return min(self.rtts_ns) if self.rtts_ns else None


def _counted(src: EndAccess, dst: EndAccess, recv_argv: list[str], send_argv: list[str], port: int,
             what: str, tcp: bool, timeout_s: float) -> tuple[list[tuple[int, int]], str]:
    """Run a counting receiver on ``dst`` and a sender on ``src`` until the receiver has what it wants
    (then the sender is stopped); the receiver's samples and what the sender printed."""
    log = _node_file(dst, f"meter-{what}-{port}.txt")
    send_log = _node_file(src, f"meter-{what}-send-{port}.txt")
    dst.access.run(["rm", "-f", log])
    src.access.run(["rm", "-f", send_log])
    receiver = dst.access.spawn(recv_argv, log=log)
    sender = None
    try:
        if not tcp:  # a TCP sender retries its connect until the receiver listens
            _wait_bound(dst, port, receiver)
        sender = src.access.spawn(send_argv, log=send_log)
        deadline = time.monotonic() + timeout_s
        while receiver.poll() is None and time.monotonic() < deadline:
            if sender.poll() is not None:  # it failed (said why), or sent all it would: last arrivals
                try:
                    receiver.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
                break
            time.sleep(0.05)
        if receiver.poll() is None:
            receiver.send_signal(signal.SIGTERM)  # it writes what it has
            receiver.wait(timeout=5)
        if sender.poll() is None:
            sender.send_signal(signal.SIGTERM)  # it prints what it sent
            sender.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    finally:
        proc.stop_process(receiver, 5, sig=signal.SIGKILL)
        if sender is not None:
            proc.stop_process(sender, 5, sig=signal.SIGKILL)
    text = dst.access.run(["cat", log], check=False).stdout
    printed = src.access.run(["cat", send_log], check=False).stdout
    try:
        samples = parse_samples(text)
    except ValueError:
        raise RuntimeError(f"the {what} receiver on {dst.end.node} wrote: {text.strip()[-300:]}") from None
    if sender is not None and sender.poll() not in (0, None, -signal.SIGTERM):
        raise RuntimeError(f"the {what} sender on {src.end.node} failed ({sender.poll()}): "
                           f"{printed.strip()[-300:]}")
    return samples, printed


def tcp_goodput_metered(src: EndAccess, dst: EndAccess, *, seconds: float = 2.0, warmup_s: float = 0.5,
                        port: int = 5301, meter_ready: bool = False) -> Goodput:
    """Receiver-side TCP goodput from ``src`` to ``dst`` with the standard-library meter (no iperf3 needed):
    the bytes received over ``seconds`` that start ``warmup_s`` after the first byte (so slow start and
    the initial burst of the shaper's bucket do not count)."""
    total = warmup_s + seconds + 0.2
    samples, _ = _counted(
        src, dst,
        [dst.python, _meter(dst, meter_ready), "tcp-recv", dst.end.ip, str(port), f"{total:g}"],
        [src.python, _meter(src, meter_ready), "tcp-send", dst.end.ip, str(port), f"{total + 10:g}"],
        port, "tcp", True, total + 30)
    try:
        bps, measured = goodput_from_samples(samples, warmup_s, seconds)
    except ValueError as exc:
        raise RuntimeError(f"TCP {src.end.node}->{dst.end.node}: {exc}") from None
    return Goodput(bps, measured)


def udp_delivered_rate(src: EndAccess, dst: EndAccess, offered_bps: float, *, seconds: float = 2.0,
                       warmup_s: float = 0.5, payload: int = 1472, port: int = 5401,
                       meter_ready: bool = False) -> UdpRate:
    """The UDP payload rate ``dst`` receives while ``src`` offers paced ``payload``-byte datagrams at
    ``offered_bps`` (on the wire), over ``seconds`` after ``warmup_s``. Offered above a shaper's rate,
    this is the rate it delivers, with no congestion control in the way."""
    total = warmup_s + seconds + 0.2
    samples, printed = _counted(
        src, dst,
        [dst.python, _meter(dst, meter_ready), "udp-count", dst.end.ip, str(port), f"{total:g}"],
        [src.python, _meter(src, meter_ready), "udp-blast", dst.end.ip, str(port), f"{offered_bps:.0f}",
         f"{total + 10:g}", str(payload)],
        port, "udp", False, total + 30)
    try:
        bps, measured = goodput_from_samples(samples, warmup_s, seconds)
    except ValueError as exc:
        raise RuntimeError(f"UDP {src.end.node}->{dst.end.node}: {exc}") from None
    try:
        count, took = printed.split()[-2:]
        offered = int(count) * (payload + 42) * 8 / float(took)
    except ValueError:
        offered = float("nan")  # the sender said nothing (killed): what arrived is measured all the same
    return UdpRate(bps, measured, offered)


def udp_round_trips(src: EndAccess, dst: EndAccess, count: int = 100, interval_ms: float = 10.0,
                    port: int = 5501, meter_ready: bool = False) -> RoundTrips:
    """Round trips of ``count`` paced UDP datagrams from ``src`` to an echo server on ``dst`` and back
    (the request crosses ``src``->``dst``, the reply ``dst``->``src``)."""
    log = _node_file(dst, f"meter-echo-{port}.log")
    server = dst.access.spawn([dst.python, _meter(dst, meter_ready), "echo-server", dst.end.ip, str(port),
                               f"{count * interval_ms / 1000 + 60:g}"], log=log)
    try:
        result = src.access.run([src.python, _meter(src, meter_ready), "echo", dst.end.ip, str(port),
                                 f"{interval_ms:g}", str(count)], check=False,
                                timeout=count * interval_ms / 1000 + 30)
    finally:
        proc.stop_process(server, 5)
    if result.returncode != 0:
        raise RuntimeError(f"UDP echo {src.end.node}->{dst.end.node}: {(result.stderr or result.stdout).strip()}")
    return RoundTrips(count, parse_round_trips(result.stdout))
