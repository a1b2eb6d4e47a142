"""Fixtures that start real router processes on loopback and always clean up.

``cluster`` gives a RouterCluster: add routers and links, start them, and every
process group is killed at teardown, even when the test fails.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from routerlab import RouterCluster


@pytest.fixture
def cluster(tmp_path: Path):
    c = RouterCluster(tmp_path)
    try:
        yield c
    finally:
        c.cleanup()
