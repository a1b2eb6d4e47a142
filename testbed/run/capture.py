"""Packet capture: one tcpdump per captured data-link interface, nanosecond timestamps.

Packets are written as they arrive (`-U`), so an interrupted run keeps what was
captured; stopping sends SIGINT so tcpdump closes the file cleanly and reports
what the kernel dropped, which goes into `pcap/capture.json`.
"""
from __future__ import annotations

import re
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from testbed import proc
from testbed.backends import Lab
from testbed.run.rundir import write_json

READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
_STAT = re.compile(r"(\d+) packets? (captured|received by filter|dropped by kernel)")


@dataclass
class CaptureTarget:
    node: str
    ifname: str
    netns: str
    link: int
    peer: str
    file: Path
    log: Path
    process: Optional[subprocess.Popen] = field(default=None, repr=False)

    def stats(self) -> dict:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        found = {kind: int(n) for n, kind in _STAT.findall(text)}
        return {
            "packets_captured": found.get("captured"),
            "packets_received_by_filter": found.get("received by filter"),
            "packets_dropped_by_kernel": found.get("dropped by kernel"),
        }


def capture_targets(lab: Lab, link_indexes: list[int], pcap_dir: Path) -> list[CaptureTarget]:
    targets = []
    for index in link_indexes:
        link = lab.links[index]
        for end, other in ((link.a, link.b), (link.b, link.a)):
            stem = f"{end.node}-{end.ifname}"
            targets.append(CaptureTarget(end.node, end.ifname, end.netns, index, f"{other.node}:{other.ifname}",
                                         pcap_dir / f"{stem}.pcap", pcap_dir / f".{stem}.tcpdump.log"))
    return targets


class Captures:
    def __init__(self, targets: list[CaptureTarget], snaplen: int, index_file: Path):
        self.targets = targets
        self.snaplen = snaplen
        self.index_file = index_file

    def start(self) -> None:
        for t in self.targets:
            with open(t.log, "wb") as log:
                t.process = proc.spawn(
                    ["tcpdump", "-i", t.ifname, "-w", str(t.file), "-s", str(self.snaplen), "-U", "-n",
                     "--time-stamp-precision=nano"],
                    netns=t.netns, stderr=log,
                )
        deadline = time.monotonic() + READY_TIMEOUT_S
        for t in self.targets:
            while "listening on" not in t.log.read_text(errors="replace"):
                if t.process.poll() is not None:
                    raise RuntimeError(f"tcpdump on {t.node}:{t.ifname} exited with {t.process.returncode}: "
                                       f"{t.log.read_text(errors='replace').strip()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tcpdump on {t.node}:{t.ifname} did not start within {READY_TIMEOUT_S:g} s")
                time.sleep(0.02)
        self._write_index()

    def stop(self) -> None:
        """Stop every capture cleanly (SIGINT), then record the statistics. Safe to call twice."""
        running = [t for t in self.targets if t.process is not None and t.process.poll() is None]
        for t in running:
            t.process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for t in running:
            try:
                t.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                t.process.kill()
                t.process.wait()
        self._write_index()

    def _write_index(self) -> None:
        write_json(self.index_file, {"captures": [
            {"file": t.file.name, "node": t.node, "ifname": t.ifname, "link": t.link, "peer": t.peer,
             **t.stats()} for t in self.targets]})
