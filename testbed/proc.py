"""The one place where the orchestrator runs system commands (ip, tc, iptables, tcpdump...).

Every call checks the exit status and raises :class:`CommandError` with the command
line and the tool's own message, so a failing `tc` never passes silently.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
from dataclasses import dataclass
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, List, Mapping, Optional, Sequence, TypeVar

from testbed import cgroups
from testbed.sweep import children

_T = TypeVar("_T")
_R = TypeVar("_R")

#: how many independent commands run at once when many are to run (a lab's links, shaping, management
#: paths): each mostly waits for its process to start and end, so a few per core keep the cores busy
PARALLEL_COMMANDS = 4 * (os.cpu_count() or 1)


def in_parallel(fn: Callable[[_T], _R], items: Iterable[_T]) -> List[_R]:
    """``[fn(item) for item in items]``, :data:`PARALLEL_COMMANDS` at a time; every call is finished
    before the first error (in the items' order) is raised."""
    items = list(items)
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(PARALLEL_COMMANDS, len(items))) as pool:
        futures = [pool.submit(fn, item) for item in items]
    return [f.result() for f in futures]


class CommandError(RuntimeError):
    """A system command exited non-zero (or could not be started)."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str, stdout: str = "") -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        self.stdout = stdout
        detail = self.stderr or stdout.strip() or "no output"
        super().__init__(f"`{shlex.join(self.argv)}` failed (exit {returncode}): {detail}")


@dataclass(frozen=True)
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


def in_netns(netns: Optional[str], argv: Sequence[str]) -> list[str]:
    """Prefix ``argv`` so that it runs inside the named network namespace, and in the node's cgroup
    (named like the namespace, when the backend made one: see testbed.cgroups), so that whatever it
    starts can be found and killed even after it left the namespace."""
    if not netns:
        return list(argv)
    return cgroups.enter_argv(netns, ["ip", "netns", "exec", netns, *argv])


def run(
    argv: Sequence[str],
    *,
    netns: Optional[str] = None,
    check: bool = True,
    timeout: float = 60.0,
    input_text: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
) -> Result:
    """Run a command to completion (optionally inside ``netns``) and return its output.

    On a timeout the command is killed with every process it started (e.g. the program that
    ``nsenter`` forked into a container), so nothing of it goes on running.
    """
    full = in_netns(netns, argv)
    try:
        child = subprocess.Popen(
            full,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env) if env is not None else None,
            start_new_session=True,  # a Ctrl-C at the terminal is ours to handle, not every tc's
        )
    except FileNotFoundError as exc:
        raise CommandError(full, 127, f"{full[0]}: command not found ({exc})") from exc
    try:
        stdout, stderr = child.communicate(input_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(child.pid)
        child.communicate()
        raise CommandError(full, -1, f"timed out after {timeout:g} s") from None
    except BaseException:
        kill_tree(child.pid)
        child.wait()
        raise
    if check and child.returncode != 0:
        raise CommandError(full, child.returncode, stderr, stdout)
    return Result(full, child.returncode, stdout, stderr)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first seen first), from /proc."""
    found: list[int] = []
    todo = [pid]
    while todo:
        kids = children(todo.pop())
        found += kids
        todo += kids
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and everything below it (the lowest first, so none is orphaned and missed)."""
    for victim in [*reversed(descendants(pid)), pid]:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass


def succeeds(argv: Sequence[str], *, netns: Optional[str] = None, timeout: float = 30.0) -> bool:
    """True when the command exits 0 (used by capability probes)."""
    return run(argv, netns=netns, check=False, timeout=timeout).returncode == 0


def spawn(
    argv: Sequence[str],
    *,
    netns: Optional[str] = None,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
    env: Optional[Mapping[str, str]] = None,
) -> subprocess.Popen:
    """Start a long-running command in its own session (so its whole group can be killed)."""
    full = in_netns(netns, argv)
    try:
        return subprocess.Popen(
            full,
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    except FileNotFoundError as exc:
        raise CommandError(full, 127, f"{full[0]}: command not found ({exc})") from exc


def stop_process(process, timeout_s: float = 10.0, sig: Optional[int] = signal.SIGTERM) -> Optional[int]:
    """The one way a process is stopped: signal it (``sig``; None if it was signalled already), wait up
    to ``timeout_s``, SIGKILL it if it is still there; returns its exit status (None if unknown).

    Works on a :class:`subprocess.Popen` and on a backend's node process alike.
    """
    if process.poll() is not None:
        return process.poll()
    if sig is not None:
        process.send_signal(sig)
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
