"""`testbed clean`: remove what crashed or killed labs left behind, and nothing else.

Ours is recognisable: lab state folders under the state root, namespaces named with
:data:`testbed.netns.PREFIX`, lab holder processes (`testbed.labd`) and the processes
living in our namespaces. A lab whose owner process is alive is left alone unless
``include_running`` is set; then its owner is asked to stop (SIGTERM) first.
"""
from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed import labstate, mgmt, netns
from testbed.backends.mininet import release_namespaces
from testbed.deploy.deployer import DEFAULT_INSTALL_ROOT

STOP_TIMEOUT_S = 60.0


@dataclass
class CleanReport:
    labs: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)
    kept_running: list[str] = field(default_factory=list)

    @property
    def nothing(self) -> bool:
        return not (self.labs or self.namespaces or self.processes or self.interfaces or self.folders)


def stop_owner(state: labstate.LabState, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM a lab's owner and wait until it has removed the lab. True if it did in time."""
    try:
        os.kill(state.owner_pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if labstate.load(state.name) is None:
            return True
        if not state.owner_alive():
            return labstate.load(state.name) is None
        time.sleep(0.05)
    return False


def _kill(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def force_down(state: labstate.LabState, report: CleanReport) -> None:
    """Remove a lab from its state alone (its owner is dead or did not stop)."""
    if state.owner_alive():
        _kill(state.owner_pid, signal.SIGKILL)
    present = [n for n in state.netns if netns.exists(n)]
    report.processes += release_namespaces(present)
    report.namespaces += present
    labstate.remove(state.name)
    report.labs.append(state.name)


def take_down(state: labstate.LabState, report: CleanReport) -> None:
    """Stop a lab through its owner if alive, or from its state if the owner is gone or stuck."""
    if state.owner_alive() and stop_owner(state):
        report.labs.append(state.name)
        return
    force_down(state, report)


def clean(include_running: bool = False) -> CleanReport:
    report = CleanReport()
    live_netns: set[str] = set()
    for state in labstate.all_states():
        if state.owner_alive() and not include_running:
            report.kept_running.append(state.name)
            live_netns.update(state.netns)
            continue
        take_down(state, report)
    # Holders whose state folder is gone (killed between writing and removing it). A holder
    # younger than a few seconds may be a concurrent `testbed up` that has not written it yet.
    owners = {s.owner_pid for s in labstate.all_states()}
    for pid in _holder_pids():
        if pid not in owners and _age_s(pid) > HOLDER_GRACE_S and _kill(pid, signal.SIGKILL):
            report.processes.append(pid)
    # Namespaces of ours that no live lab claims (state lost, a probe interrupted, ...); a kernel
    # probe's scratch namespace belongs to its process while that process lives.
    orphans = [n for n in netns.list_names() if n not in live_netns and not _live_probe(n)]
    if orphans:
        report.processes += release_namespaces(orphans)
        report.namespaces += orphans
    # The management path's root-namespace ends, firewall chain, SSH keys and SSH
    # connection multiplexers of labs that are gone.
    live = set(report.kept_running)
    report.interfaces += mgmt.release_leftovers(live)
    for pid in _ssh_mux_pids(exclude_labs=live):
        if _kill(pid, signal.SIGTERM):
            report.processes.append(pid)
    # What deployment installed on Mininet nodes (their files are on this machine).
    install_root = Path(DEFAULT_INSTALL_ROOT)
    if install_root.is_dir():
        for folder in install_root.iterdir():
            if folder.is_dir() and folder.name not in live:
                shutil.rmtree(folder, ignore_errors=True)
                report.folders.append(str(folder))
    return report


def _ssh_mux_pids(exclude_labs: set[str]) -> list[int]:
    """SSH ControlMaster processes whose control socket lives in a lab's SSH folder."""
    prefix = str(mgmt.SSH_ROOT) + "/"
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("ssh: " + prefix) and "[mux]" in cmd:
            lab = cmd[len("ssh: " + prefix):].split("/", 1)[0]
            if lab not in exclude_labs:
                pids.append(int(entry.name))
    return pids


HOLDER_GRACE_S = 10.0


def _age_s(pid: int) -> float:
    ticks = labstate.process_start_ticks(pid)
    if ticks is None:
        return 0.0
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - ticks / os.sysconf("SC_CLK_TCK")


def _live_probe(name: str) -> bool:
    prefix = f"{netns.PREFIX}probe-"
    if not name.startswith(prefix) or not name[len(prefix):].isdigit():
        return False
    return labstate.process_start_ticks(int(name[len(prefix):])) is not None


def _holder_pids() -> list[int]:
    me = os.getpid()
    return [int(e.name) for e in Path("/proc").iterdir()
            if e.name.isdigit() and int(e.name) != me and labstate.process_is_holder(int(e.name))]
