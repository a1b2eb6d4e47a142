"""Named network namespaces: create, attach, list, find the processes inside, delete."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from testbed import proc

NETNS_DIR = Path("/run/netns")
#: Every namespace this project creates starts with this prefix (see `testbed clean`).
PREFIX = "tbed-"


def handle_netns(node) -> str:
    """The namespace name of a :class:`~testbed.backends.base.LabNode` of a namespace-based backend."""
    try:
        return node.handle["netns"]
    except KeyError:
        raise KeyError(f"node {node.name!r} has no network namespace in its handle ({node.handle})") from None


def name_for(lab: str, node: str) -> str:
    """The namespace name of node ``node`` of lab ``lab`` (the same for every namespace-based backend)."""
    return f"{PREFIX}{lab}-{node}"


def exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def add(name: str) -> None:
    proc.run(["ip", "netns", "add", name])


def attach(name: str, pid: int) -> None:
    """Give the network namespace of process ``pid`` a name (bind mount under /run/netns)."""
    proc.run(["ip", "netns", "attach", name, str(pid)])


def list_names(prefix: str = PREFIX) -> list[str]:
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))


def inode(name: str) -> int | None:
    try:
        return os.stat(NETNS_DIR / name).st_ino
    except FileNotFoundError:
        return None


def pids_in(inodes: set[int]) -> list[int]:
    """PIDs of every process whose network namespace is one of ``inodes``."""
    found: list[int] = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if os.stat(entry / "ns" / "net").st_ino in inodes:
                found.append(int(entry.name))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def kill_processes_in(names: list[str], grace_s: float = 2.0) -> list[int]:
    """SIGTERM, then SIGKILL, every process living in the given namespaces. Returns the PIDs seen."""
    inodes = {i for i in (inode(n) for n in names) if i is not None}
    if not inodes:
        return []
    victims = pids_in(inodes)
    for pid in victims:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and pids_in(inodes):
        time.sleep(0.05)
    for pid in pids_in(inodes):
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and pids_in(inodes):
        time.sleep(0.05)
    return victims


def delete(name: str) -> None:
    if exists(name):
        proc.run(["ip", "netns", "delete", name])


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
