"""Client-library tests run against a real router process (see tests/router/routerlab.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "router"))

from routerlab import RouterCluster  # noqa: E402


@pytest.fixture
def router(tmp_path: Path):
    c = RouterCluster(tmp_path)
    try:
        r = c.add("r1")
        c.start()
        yield r
    finally:
        c.cleanup()
