"""testbed.sweep: a process that ignores SIGTERM and forks every 20 ms is killed with all it forked,
and the sweep names what it cannot kill."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from testbed import sweep
from tests import spawner


@pytest.fixture
def spawned(tmp_path):
    """A running spawner (tests/spawner.py) and its marker; whatever is left of it is killed afterwards."""
    mark = spawner.marker()
    child = subprocess.Popen(spawner.argv(mark, spawner.link_sleep(tmp_path, mark), moving=False), start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while len(spawner.processes(mark)) < 20:  # it has forked a good many: it is busy forking
            assert child.poll() is None and time.monotonic() < deadline, "the spawner did not start forking"
            time.sleep(0.02)
        yield mark
    finally:
        left = spawner.kill_all(mark)
        child.wait(timeout=30)
        assert left == [], f"the teardown could not kill {left}"


def test_sweep_converges_on_a_process_that_keeps_forking(spawned):
    signalled = sweep.sweep(lambda: spawner.processes(spawned), "the spawner", grace_s=0.2)
    assert len(signalled) >= 20
    assert spawner.processes(spawned) == []  # none is left the moment it returns: nothing to wait for


def test_sweep_names_what_it_cannot_kill(monkeypatch):
    ghost = os.getpid() + 10_000_000  # a pid that cannot exist: "found" every time, never killed
    monkeypatch.setattr(sweep, "alive", lambda pid: True)
    with pytest.raises(sweep.SweepError, match=f"1 process\\(es\\) of the ghost still alive after 0.3 s.*{ghost}"):
        sweep.sweep(lambda: [ghost], "the ghost", grace_s=0.05, deadline_s=0.3)
