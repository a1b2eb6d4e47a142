"""A process that keeps forking while it is being killed, bounded so that a failing test cannot leak it.

Every process of it carries a marker unique to the test in its command line (:func:`processes` finds
them, :func:`kill_all` kills them in a test's teardown, whatever happened). Bounds: the whole runs under
``timeout -s KILL 60`` (which kills its process group, and no process of the spawner leaves that group),
the spawner dies with that ``timeout`` (``setpriv --pdeathsig KILL``), it forks about 1 700 times
at most in all (:data:`MAX_ROUNDS` rounds of 2-3 forks, two relays of :data:`RELAY_HOPS` hops of 2), and
each of its children sleeps 30 s at most. It ignores SIGTERM, and so do its children (an ignored signal
stays ignored across fork and exec). It starts two *relays*, chains of processes each of which lives
20 ms, starts its successor and exits (a process that forks between a sweep's listing and its kill
escapes it), then every 30 ms, in turn:

* a child (``sleep 30``);
* a grandchild whose parent exits at once, so that init adopts it;
* with ``moving=True``, a child that moves to a network namespace of its own (``unshare --net``),
  where a sweep by namespace no longer sees it.
"""
from __future__ import annotations

import os
import shutil
import signal
import time
import uuid
from pathlib import Path

from testbed.sweep import alive, cmdline

MAX_ROUNDS = 300
RELAY_HOPS = 250
LIFETIME_S = 60

SCRIPT = r"""
trap '' TERM HUP INT
sleeper=$1 moving=$2 n=0
relay() { "$sleeper" 0.02; if [ "$1" -gt 0 ]; then ( relay $(($1 - 1)) ) & fi; }
( relay {hops} ) &
( relay {hops} ) &
while [ "$n" -lt {rounds} ]; do
  n=$((n + 1))
  case $((n % 3)) in
    0) ( exec "$sleeper" 30 ) & ;;
    1) ( ( exec "$sleeper" 30 ) & ) ;;
    2) if [ "$moving" = 1 ]; then ( exec unshare --net "$sleeper" 30 ) & fi ;;
  esac
  "$sleeper" 0.03
done
wait
""".replace("{rounds}", str(MAX_ROUNDS)).replace("{hops}", str(RELAY_HOPS))


def marker() -> str:
    return f"tbspawn{uuid.uuid4().hex[:12]}"


def argv(mark: str, sleeper: str, moving: bool) -> list[str]:
    """The spawner's command line. Its sleeps run as ``sleeper``, a link to ``sleep`` named after ``mark``
    (:func:`link_sleep`), so that their command line carries the marker too."""
    return ["timeout", "-s", "KILL", str(LIFETIME_S), "setpriv", "--pdeathsig", "KILL",
            "sh", "-c", SCRIPT, mark, sleeper, "1" if moving else "0"]


def link_sleep(folder: Path, mark: str) -> str:
    """Make ``folder/mark``, a link to this machine's ``sleep``, and return its path."""
    sleeper = folder / mark
    sleeper.symlink_to(shutil.which("sleep"))
    return str(sleeper)


def processes(mark: str) -> list[int]:
    """Live processes (not zombies) whose command line carries ``mark``, other than this one."""
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc")
            if p.isdigit() and int(p) != me and mark in cmdline(int(p)) and alive(int(p))]


def kill_all(mark: str, timeout_s: float = 20.0) -> list[int]:
    """SIGKILL every process carrying ``mark``, again until none is left (a teardown: nothing of a failed
    test may stay; once the spawner is dead, a pass or two more find what it forked meanwhile). Returns
    those still alive after ``timeout_s`` (none, unless the kernel holds one)."""
    deadline = time.monotonic() + timeout_s
    while (left := processes(mark)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    return left


def wait_until_gone(mark: str, timeout_s: float = 15.0) -> list[int]:
    """Poll until no process carries ``mark`` (a killed process may take a moment to die); what is left."""
    deadline = time.monotonic() + timeout_s
    while (left := processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def netns_inode(pid: int) -> "int | None":
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None
