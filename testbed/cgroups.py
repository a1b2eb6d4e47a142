"""One cgroup (v2) per node of a namespace lab, so that every process started in a node can be found
and killed, wherever it went since.

A node's processes are otherwise found by their network namespace: a process that moved itself to
another namespace, or one reparented to init after its parent died and then moved, is no longer
there. Cgroup membership is inherited by every child and kept through setns, re-parenting and exec:
a node's cgroup holds everything started in it, and ``cgroup.kill`` SIGKILLs the whole cgroup at once,
children forked during the kill included.

The cgroup of the namespace ``tbed-<lab>-<node>`` is ``<cgroup2 mount>/testbed/tbed-<lab>-<node>``.
What enters a node through :func:`testbed.proc.in_netns` (every command, ``testbed exec``, what is
deployed) first joins it (:func:`enter_argv`); a backend joins the node's first process (a Mininet
host's shell) with :func:`join`. Where there is no writable cgroup2 hierarchy (:func:`root` is None),
nothing joins and the namespace sweep (testbed.sweep) is the only one.
"""
from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Optional, Sequence

#: the folder under the cgroup2 mount that holds the testbed's cgroups
TOP = "testbed"
#: ``sh`` program that joins the cgroup whose ``cgroup.procs`` is ``$0``, then runs its arguments
_JOIN = 'echo $$ 2>/dev/null >"$0"; exec "$@"'


@functools.lru_cache(maxsize=1)
def root() -> Optional[Path]:
    """``<cgroup2 mount>/testbed``, created if need be; None if this machine has no cgroup2 hierarchy
    we may create cgroups in (cgroup v1 only, a read-only mount in a container, not root) or its kernel
    is older than 5.14 (no ``cgroup.kill``)."""
    mount = _cgroup2_mount()
    if mount is None or not (mount / "cgroup.procs").exists():
        return None
    top = mount / TOP
    try:
        top.mkdir(exist_ok=True)
    except OSError:
        return None
    return top if (top / "cgroup.kill").exists() else None


def _cgroup2_mount() -> Optional[Path]:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        before, _, after = line.partition(" - ")
        if after.split(" ", 1)[0] == "cgroup2" and "rw" in before.split()[5].split(","):
            return Path(before.split()[4])
    return None


def path(group: str) -> Optional[Path]:
    top = root()
    return top / group if top is not None else None


def create(group: str) -> None:
    """Make the cgroup ``group`` (nothing without cgroup2)."""
    where = path(group)
    if where is not None:
        where.mkdir(exist_ok=True)


def join(group: str, pid: int) -> None:
    """Move ``pid`` into ``group`` (its later children are born there); nothing if it does not exist."""
    where = path(group)
    if where is not None and where.is_dir():
        try:
            (where / "cgroup.procs").write_text(str(pid))
        except ProcessLookupError:
            pass


def enter_argv(group: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run by a shell that first joins ``group`` if it exists (so does all it starts)."""
    where = path(group)
    if where is None:
        return list(argv)
    return ["sh", "-c", _JOIN, str(where / "cgroup.procs"), *argv]


def pids(group: str) -> list[int]:
    where = path(group)
    try:
        return [int(p) for p in (where / "cgroup.procs").read_text().split()] if where is not None else []
    except FileNotFoundError:
        return []


def populated(group: str) -> bool:
    where = path(group)
    try:
        return where is not None and "populated 1" in (where / "cgroup.events").read_text()
    except FileNotFoundError:
        return False


def kill(group: str, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL every process in ``group`` at once (``cgroup.kill``), wait until it is empty, remove it.
    Returns the pids it held. A group that does not exist holds nothing."""
    where = path(group)
    if where is None or not where.is_dir():
        return []
    held: list[int] = []
    deadline = time.monotonic() + timeout_s
    while True:  # again while something joins between the kill and the removal (a `testbed exec` typed then)
        held += [p for p in pids(group) if p not in held]
        (where / "cgroup.kill").write_text("1")
        while populated(group) and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            remove(group)
            return held
        except OSError:
            if time.monotonic() >= deadline:
                raise


def remove(group: str) -> None:
    """Remove an empty cgroup (an error names what still runs in it)."""
    where = path(group)
    if where is None or not where.is_dir():
        return
    try:
        where.rmdir()
    except OSError as exc:
        left = pids(group)
        raise OSError(f"cgroup {where} cannot be removed ({exc.strerror}): processes {left} still in it") from exc


def names(prefix: str) -> list[str]:
    """The testbed cgroups whose name starts with ``prefix``."""
    top = root()
    if top is None:
        return []
    return sorted(p.name for p in top.iterdir() if p.is_dir() and p.name.startswith(prefix))
