"""Packet capture: one tcpdump per captured data-link interface, nanosecond timestamps.

tcpdump runs on the node (through its access) and writes there; packets are written as they
arrive (`-U`), so an interrupted run keeps what was captured. Stopping sends SIGINT so
tcpdump closes the file cleanly and reports what the kernel dropped; then every pcap and
tcpdump log is fetched into the run's `pcap/` folder and the statistics go into
`pcap/capture.json`.
"""
from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from runfolder.layout import LAYOUT
from testbed import proc
from testbed.backends import Lab
from testbed.proc import stop_process
from testbed.run.rundir import node_results_dir, write_json

READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
_STAT = re.compile(r"(\d+) packets? (captured|received by filter|dropped by kernel)")


@dataclass
class CaptureTarget:
    node: str
    ifname: str
    access: Any  # the node's NodeAccess
    link: int
    peer: str
    file: Path  # in the results folder
    log: Path  # in the results folder
    process: Any = field(default=None, repr=False)

    @property
    def remote_dir(self) -> str:
        return node_results_dir(self.access, LAYOUT.pcap_dir)

    @property
    def remote_file(self) -> str:
        return f"{self.remote_dir}/{self.file.name}"

    @property
    def remote_log(self) -> str:
        return f"{self.remote_dir}/{self.log.name}"

    def remote_log_text(self) -> str:
        return self.access.run(["cat", self.remote_log], check=False).stdout

    def stats(self) -> dict:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        found = {kind: int(n) for n, kind in _STAT.findall(text)}
        return {
            "packets_captured": found.get("captured"),
            "packets_received_by_filter": found.get("received by filter"),
            "packets_dropped_by_kernel": found.get("dropped by kernel"),
        }


def capture_targets(lab: Lab, link_indexes: list[int], pcap_dir: Path,
                    access: Callable[[str], Any]) -> list[CaptureTarget]:
    """One target per end of every captured link; ``access(node)`` gives the node's access."""
    targets = []
    for index in link_indexes:
        link = lab.links[index]
        for end, other in ((link.a, link.b), (link.b, link.a)):
            targets.append(CaptureTarget(end.node, end.ifname, access(end.node), index,
                                         f"{other.node}:{other.ifname}",
                                         pcap_dir / LAYOUT.pcap_name(end.node, end.ifname),
                                         pcap_dir / LAYOUT.tcpdump_log_name(end.node, end.ifname)))
    return targets


class Captures:
    def __init__(self, targets: list[CaptureTarget], snaplen: int, index_file: Path):
        self.targets = targets
        self.snaplen = snaplen
        self.index_file = index_file

    def _per_node(self, fn: Callable[["CaptureTarget"], Any], targets: list["CaptureTarget"]) -> list[Any]:
        """``fn`` of every target: nodes at the same time, a node's own targets one after the other (over
        one management connection, as before)."""
        by_node: dict[str, list[CaptureTarget]] = {}
        for t in targets:
            by_node.setdefault(t.node, []).append(t)
        return [r for results in proc.in_parallel(lambda ts: [fn(t) for t in ts], list(by_node.values()))
                for r in results]

    def start(self) -> None:
        def spawn(t: CaptureTarget) -> None:
            t.access.run(["mkdir", "-p", t.remote_dir])
            t.process = t.access.spawn(
                ["tcpdump", "-i", t.ifname, "-w", t.remote_file, "-s", str(self.snaplen), "-U", "-n",
                 "--time-stamp-precision=nano"], log=t.remote_log)

        self._per_node(spawn, self.targets)
        deadline = time.monotonic() + READY_TIMEOUT_S
        for t in self.targets:
            while "listening on" not in (text := t.remote_log_text()):
                if t.process.poll() is not None:
                    raise RuntimeError(f"tcpdump on {t.node}:{t.ifname} exited with {t.process.poll()}: "
                                       f"{text.strip()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tcpdump on {t.node}:{t.ifname} did not start within {READY_TIMEOUT_S:g} s")
                time.sleep(0.02)
        self._write_index()

    def stop(self) -> None:
        """Stop every capture cleanly (SIGINT), fetch what it wrote, record the statistics. Safe to call twice."""
        running = [t for t in self.targets if t.process is not None and t.process.poll() is None]
        for t in running:
            t.process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for t in running:
            stop_process(t.process, max(0.1, deadline - time.monotonic()), sig=None)
        def fetch(t: CaptureTarget) -> list[str]:
            failed = []
            for remote, local in ((t.remote_file, t.file), (t.remote_log, t.log)):
                try:
                    t.access.fetch(remote, local)
                except OSError as exc:
                    failed.append(f"{t.node}:{remote}: {exc}")
            return failed

        errors = [e for failed in self._per_node(fetch, [t for t in self.targets if t.process is not None])
                  for e in failed]
        self._write_index()
        if errors:
            raise RuntimeError(f"could not fetch captures: {'; '.join(errors)}")

    def _write_index(self) -> None:
        write_json(self.index_file, {"captures": [
            {"file": t.file.name, "node": t.node, "ifname": t.ifname, "link": t.link, "peer": t.peer,
             **t.stats()} for t in self.targets]})
