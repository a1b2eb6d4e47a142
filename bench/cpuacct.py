"""The CPU time of a process tree, from a cpuacct control group (cgroup v1) of its own: the benchmarks' way of
measuring an analysis' cost on a loaded machine, where the wall time moves far more. Needs root."""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Iterator

CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def require_cpuacct() -> None:
    """Exit with what is missing unless the cpuacct controller can be used here."""
    if not (CPUACCT / "tasks").exists():
        raise SystemExit(f"needs the cgroup v1 cpuacct controller at {CPUACCT} (and root) to count the CPU time")


@contextlib.contextmanager
def cpuacct_group(name: str) -> Iterator[Path]:
    """A cpuacct control group of its own for the block (its CPU time: :func:`group_cpu_s`), removed however the
    block ends: this process moved back to the root group if it had joined it, anything else still in it (a JVM
    that outlives its driver, Spark's Python workers) killed."""
    group = CPUACCT / name
    group.mkdir()
    try:
        yield group
    finally:
        me = str(os.getpid())
        if me in (group / "cgroup.procs").read_text().split():
            (CPUACCT / "cgroup.procs").write_text(me)
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), 9)
        for _ in range(50):  # the killed processes' exit
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.2)


def group_cpu_s(group: Path) -> float:
    return int((group / "cpuacct.usage").read_text()) / 1e9
