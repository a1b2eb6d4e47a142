"""`testbed clean`: remove what crashed or killed labs left behind, and nothing else.

Ours is recognisable: namespaces named with :data:`testbed.netns.PREFIX`, lab state
folders under the state root, holder processes running `testbed.labd`, and the
processes living in our namespaces. Labs whose holder is alive are left alone
unless ``include_running`` is set.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed import labstate, netns
from testbed.backends.mininet import release_namespaces


@dataclass
class CleanReport:
    labs: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    kept_running: list[str] = field(default_factory=list)

    @property
    def nothing(self) -> bool:
        return not (self.labs or self.namespaces or self.processes)


def stop_holder(pid: int, timeout_s: float = 60.0) -> bool:
    """SIGTERM a lab holder and wait for it to finish tearing down. True if it exited in time."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not labstate.process_is_holder(pid):
            return True
        time.sleep(0.05)
    return False


def kill_holder(pid: int) -> None:
    if labstate.process_is_holder(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def force_down(state: labstate.LabState, report: CleanReport) -> None:
    kill_holder(state.holder_pid)
    present = [n for n in state.netns if netns.exists(n)]
    report.processes += release_namespaces(present) or []
    report.namespaces += present
    labstate.remove(state.name)
    report.labs.append(state.name)


def clean(include_running: bool = False) -> CleanReport:
    report = CleanReport()
    live_netns: set[str] = set()
    for state in labstate.all_states():
        if state.holder_alive() and not include_running:
            report.kept_running.append(state.name)
            live_netns.update(state.netns)
            continue
        if state.holder_alive():
            stop_holder(state.holder_pid, timeout_s=30)
        force_down(state, report)
    # Holders whose state folder is gone.
    for pid in _holder_pids():
        if not any(s.holder_pid == pid for s in labstate.all_states()):
            kill_holder(pid)
            report.processes.append(pid)
    # Namespaces of ours that no live lab claims (state lost, probe interrupted, ...).
    orphans = [n for n in netns.list_names() if n not in live_netns]
    if orphans:
        report.processes += release_namespaces(orphans) or []
        report.namespaces += orphans
    return report


def _holder_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and labstate.process_is_holder(int(entry.name)):
            pids.append(int(entry.name))
    return pids
