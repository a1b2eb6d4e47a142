"""The diamond's congestion runs, made once for the session (tests/realruns.py): topologies/diamond.yaml for
:data:`CONGESTION_RUN_S` with congestion-awareness on and off. test_congestion_e2e.py compares them; the
aware-off run is also test_run_e2e.py's Mininet run (paths stay on the least-weight routes without
congestion-awareness, which its payload test relies on). Read only."""
from __future__ import annotations

import pytest

from tests import realruns

DIAMOND = realruns.ROOT / "topologies" / "diamond.yaml"
#: long enough for every phase of the diamond's scenario: bulk 10-40 s, pub1 until 30 s, pub2 from 30 s
CONGESTION_RUN_S = 45


def _diamond_run(tmp_path_factory, aware: str) -> realruns.AnalysedRun:
    if realruns.missing():
        pytest.skip(realruns.missing())
    results = tmp_path_factory.mktemp(f"congestion-{aware}")
    return realruns.run_and_analyze(DIAMOND, results, "--duration", str(CONGESTION_RUN_S), f"--{aware}")


@pytest.fixture(scope="session")
def diamond_aware_on(spark, tmp_path_factory) -> realruns.AnalysedRun:
    return _diamond_run(tmp_path_factory, "congestion-aware")


@pytest.fixture(scope="session")
def diamond_aware_off(spark, tmp_path_factory) -> realruns.AnalysedRun:
    return _diamond_run(tmp_path_factory, "no-congestion-aware")
