"""`testbed clean`: remove what crashed or killed labs left behind, and nothing else.

Ours is recognisable: lab state folders under the state root (each recording its backend and
what that backend was about to create), lab holder processes (`testbed.lab.holder`), and what each
backend lists as its own leftovers (namespaces named ``tbed-*``, containers labelled with a
lab's name, management interfaces ...). A lab whose owner process is alive is left alone
unless ``include_running`` is set; then its owner is asked to stop (SIGTERM) first.

A node's processes are killed until none is left, found by namespace, cgroup, container or environment
markers depending on the backend (testbed.sweep, testbed.cgroups, docs/cli.md); a process that cannot be
killed is named and its lab kept for the next `clean`.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from testbed.lab import state as labstate
from testbed.backends import BACKENDS, BackendError, BackendOptions, get_backend

STOP_TIMEOUT_S = 60.0


@dataclass
class CleanReport:
    labs: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # "namespace tbed-x-r1", "container ...", "process 123" ...
    processes: list[int] = field(default_factory=list)  # holder processes killed
    kept_running: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what could not be looked at or removed, and why
    salvaged: list[dict] = field(default_factory=list)  # runs whose nodes' files were brought back first

    @property
    def nothing(self) -> bool:
        return not (self.labs or self.removed or self.processes)


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


def _backend(name: str, inventory: Optional[str] = None, check_host_keys: bool = True, all_labs: bool = False):
    """A backend to clean with; the ssh backend reaches the machines of ``inventory`` (else the recorded one)."""
    if name != "ssh":
        return get_backend(name)
    backend = get_backend(BackendOptions(name, inventory=inventory, check_host_keys=check_host_keys))
    backend.clean_all_controllers = all_labs
    return backend


def force_down(state: labstate.LabState, report: CleanReport, inventory: Optional[str] = None,
               check_host_keys: bool = True) -> None:
    """Remove a lab from its state alone (its owner is dead or did not stop), through its backend.

    A run's lab is salvaged first (what its nodes hold goes into its results folder) and its manifest
    marked crashed. If the backend cannot remove everything (e.g. the Docker engine is down), the
    lab state is kept, so that a later `clean` tries again, and the reason is reported.
    """
    if state.owner_alive():
        _kill(state.owner_pid, signal.SIGKILL)
    if state.backend:
        backend = _backend(state.backend, inventory, check_host_keys)
        if state.run_dir:  # a run died: first bring what its nodes hold into its folder
            from testbed.backends import Lab
            from testbed.run.salvage import mark_crashed, salvage_run

            run_dir = Path(state.run_dir)
            salvaged = salvage_run(run_dir, Lab.from_json(state.lab), backend) if state.lab else []
            mark_crashed(run_dir, salvaged)
            report.salvaged.append({"run_dir": state.run_dir, "files": salvaged})
        try:
            report.removed += backend.release(state.name, state.plan, state.lab)
        except BackendError as exc:
            report.problems.append(f"lab {state.name}: {exc}")
            return
    labstate.remove(state.name)
    report.labs.append(state.name)


def take_down(state: labstate.LabState, report: CleanReport, inventory: Optional[str] = None,
              check_host_keys: bool = True) -> None:
    """Stop a lab through its owner if alive, or from its state if the owner is gone or stuck."""
    if state.owner_alive() and stop_owner(state):
        report.labs.append(state.name)
        return
    force_down(state, report, inventory, check_host_keys)


def clean(include_running: bool = False, inventory: Optional[str] = None, check_host_keys: bool = True) -> CleanReport:
    """Remove what dead labs left. With ``inventory`` (the ssh backend's lab machines), also put back the
    machines of that inventory that hold a lab of this controller that no live process owns (even when this
    machine's state is gone); with ``include_running`` as well, the labs other controllers recorded there."""
    report = CleanReport()
    for state in labstate.all_states():
        if state.owner_alive() and not include_running:
            report.kept_running.append(state.name)
            continue
        try:
            take_down(state, report, inventory, check_host_keys)
        except Exception as exc:  # noqa: BLE001 - one lab that cannot be removed must not stop the others
            report.problems.append(f"lab {state.name}: {exc}")
    # Holders whose state folder is gone (killed between writing and removing it). A holder
    # younger than a few seconds may be a concurrent `testbed up` that has not written it yet.
    owners = {s.owner_pid for s in labstate.all_states()}
    for pid in _holder_pids():
        if pid not in owners and _age_s(pid) > HOLDER_GRACE_S and _kill(pid, signal.SIGKILL):
            report.processes.append(pid)
    # What each backend finds of its own that no live lab claims (state lost, a crash mid-build ...).
    live = set(report.kept_running)
    for name in BACKENDS:
        try:
            report.removed += _backend(name, inventory, check_host_keys, include_running).release_leftovers(live)
        except BackendError as exc:
            report.problems.append(f"{name}: {exc}")
    return report


HOLDER_GRACE_S = 10.0


def _age_s(pid: int) -> float:
    ticks = labstate.process_start_ticks(pid)
    if ticks is None:
        return 0.0
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - ticks / os.sysconf("SC_CLK_TCK")


def _holder_pids() -> list[int]:
    me = os.getpid()
    return [int(e.name) for e in Path("/proc").iterdir()
            if e.name.isdigit() and int(e.name) != me and labstate.process_is_holder(int(e.name))]
