"""Kill every process of a set that may go on forking while it is killed, and say which survived.

Why a single pass is not enough: a pass lists the processes (e.g. those in a network namespace) and
then signals them. Whatever one of them forks between the listing and its own death is in no list:
it is reparented to init and goes on running in a namespace whose name is already deleted. A process
that ignores SIGTERM and forks every few milliseconds escapes every single pass.

:func:`sweep` converges instead: after a grace period for SIGTERM it *freezes* (SIGSTOP) every process
found, and looks again; a process that is stopped, or has a stop signal pending, cannot complete a
fork (the kernel aborts a fork that races with a group-wide signal), so once a look finds nothing that
is not already stopped, the set is closed. Then SIGKILL kills the stopped set, and the whole is repeated
(a process may enter afresh, e.g. with ``ip netns exec``) until a look finds nothing, within a deadline;
what is still there then is named in :class:`SweepError`. The children of every process found are found
with it (/proc/PID/task/*/children), so a child that moved to another namespace is not missed while
its parent lives; one whose parent died first is the case cgroups exist for (testbed.cgroups).

Standard library only, and runnable as a script: the ssh backend sends this file's source to a lab
machine and runs it there with python3 (see testbed.backends.ssh.hoststate), so the remote sweep is
this same code.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Callable, Iterable

#: how long the processes get to exit after SIGTERM before they are frozen and killed
GRACE_S = 2.0
#: how long a sweep may take in all before it gives up and names what survived
DEADLINE_S = 30.0
POLL_S = 0.02


class SweepError(RuntimeError):
    """Processes survived a sweep (their pid and command line are in the message and in ``survivors``)."""

    def __init__(self, what: str, survivors: dict[int, str], deadline_s: float = DEADLINE_S) -> None:
        self.survivors = survivors
        names = ", ".join(f"{pid} ({cmd or '?'})" for pid, cmd in sorted(survivors.items()))
        super().__init__(f"{len(survivors)} process(es) of {what} still alive after {deadline_s:g} s of "
                         f"killing: {names}; they may be stuck in the kernel (state D): see `ps -o pid,stat,cmd`")


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a zombie is dead: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def parent(pid: int) -> int:
    """The parent's pid (0 if ``pid`` is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(k) for k in f.read().split()]
        except OSError:
            continue
    return found


def with_descendants(pids: Iterable[int]) -> set[int]:
    """``pids`` and every live process below them."""
    found: set[int] = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo += children(pid)
    return {p for p in found if alive(p)}


def _protected() -> set[int]:
    """This process and its ancestors: never ours to stop (e.g. `testbed clean` typed inside a node)."""
    mine, pid = set(), os.getpid()
    while pid > 1 and pid not in mine:
        mine.add(pid)
        pid = parent(pid)
    return mine | {1}


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def sweep(find: Callable[[], Iterable[int]], what: str = "the lab", *, grace_s: float = GRACE_S,
          deadline_s: float = DEADLINE_S) -> list[int]:
    """SIGTERM every process ``find()`` returns (with its descendants), give them ``grace_s`` to exit,
    then freeze and SIGKILL what is left until ``find()`` finds nothing. Returns every pid signalled;
    raises :class:`SweepError` naming the survivors if some are still alive after ``deadline_s``."""
    protected = _protected()

    def look() -> set[int]:
        return with_descendants(p for p in find() if p not in protected) - protected

    seen: set[int] = set()
    found = look()
    seen |= found
    for pid in found:
        _signal(pid, signal.SIGTERM)
    start = time.monotonic()
    while found and time.monotonic() - start < grace_s:
        time.sleep(POLL_S)
        found = look()
        seen |= found
    stopped: set[int] = set()
    while found:
        if time.monotonic() - start > deadline_s:
            raise SweepError(what, {p: cmdline(p) for p in found}, deadline_s)
        new = found - stopped
        if new:  # freeze the newcomers, then look again for what they forked before they stopped
            for pid in new:
                _signal(pid, signal.SIGSTOP)
            stopped |= new
        else:  # nothing found that is not frozen: none of them can fork any more
            for pid in stopped:
                _signal(pid, signal.SIGKILL)
            stopped = {p for p in stopped if alive(p)}
            time.sleep(POLL_S)
        found = look()
        seen |= found
    return sorted(seen)


def _main(argv: list[str]) -> int:
    """``python3 sweep.py FOLDER ENV_MARK...``: sweep the processes whose environment holds every mark
    (``NAME=value``) or whose command line names something under ``FOLDER``, and print the pids
    signalled (the ssh backend's sweep, run on the lab machine); exit 3 and the survivors if some live."""
    folder, marks = argv[0].rstrip("/") + "/", {m.encode() for m in argv[1:]}

    def find() -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = set(f.read().split(b"\0"))
            except OSError:
                continue
            if marks <= env or folder in cmdline(int(entry)):
                found.append(int(entry))
        return found

    try:
        print(" ".join(map(str, sweep(find, " ".join(argv[1:])))))
    except SweepError as exc:
        print(exc)
        return 3
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(_main(sys.argv[1:]))
