"""Client-library tests run against a real router process (see tests/router/routerlab.py); traffic
processes started by the tests (``procs``) are killed at the end whatever happens."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from testbed.proc import kill_tree

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "router"))

from routerlab import RouterCluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def router(tmp_path: Path):
    c = RouterCluster(tmp_path)
    try:
        r = c.add("r1")
        c.start()
        yield r
    finally:
        c.cleanup()


class Procs:
    """Traffic processes in their own process groups, killed at the end whatever happens."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: Dict[str, subprocess.Popen] = {}

    def start(self, plan: dict) -> subprocess.Popen:
        path = self.tmp / f"{plan['name']}.json"
        path.write_text(json.dumps(plan))
        err = open(self.tmp / f"{plan['name']}.stderr", "wb")
        p = subprocess.Popen([sys.executable, "-m", "traffic", plan["role"], "--plan", str(path)], cwd=str(ROOT),
                             stdout=err, stderr=err, start_new_session=True)
        err.close()
        self.procs[plan["name"]] = p
        return p

    def wait(self, name: str, timeout: float) -> int:
        return self.procs[name].wait(timeout)

    def stderr(self, name: str) -> str:
        return (self.tmp / f"{name}.stderr").read_text(errors="replace")

    def cleanup(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                kill_tree(p.pid)
                p.wait(10)


@pytest.fixture
def procs(tmp_path):
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.cleanup()
