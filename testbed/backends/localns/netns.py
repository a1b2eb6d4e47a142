"""Named network namespaces: create, attach, list, find the processes inside, delete."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from testbed import cgroups, proc, sweep

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


def hold(names: list[str]) -> list[int]:
    """Open file descriptors on the named namespaces (those that exist): while one is open its
    namespace lives on, named or not, and its inode number cannot be given to another."""
    fds = []
    for name in names:
        try:
            fds.append(os.open(NETNS_DIR / name, os.O_RDONLY))
        except FileNotFoundError:
            continue
    return fds


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


def kill_processes_in(names: list[str], inodes: Optional[set[int]] = None,
                      grace_s: float = sweep.GRACE_S) -> list[int]:
    """Kill every process of the given nodes: those living in their namespaces (``inodes``, looked up by
    name unless given: a name may be deleted already), and those in their cgroups (testbed.cgroups:
    started in the node, wherever they are now). Returns the PIDs signalled.

    Repeated until none is left (testbed.sweep: SIGTERM, ``grace_s``, then freeze and SIGKILL). One listing
    then one kill was not enough: what a listed process forked between the two was in neither, and what
    had left the namespace was in none. Raises :class:`~testbed.sweep.SweepError` naming the survivors.
    """
    if inodes is None:
        inodes = {i for i in (inode(n) for n in names) if i is not None}

    def find() -> list[int]:
        return (pids_in(inodes) if inodes else []) + [p for n in names for p in cgroups.pids(n)]

    return sweep.sweep(find, "namespaces " + ", ".join(names), grace_s=grace_s)


def delete(name: str) -> None:
    """Delete the namespace's name (it is freed once no process is in it); gone already is fine (a
    concurrent `clean` may have deleted it first)."""
    if exists(name):
        try:
            proc.run(["ip", "netns", "delete", name])
        except proc.CommandError:
            if exists(name):
                raise
