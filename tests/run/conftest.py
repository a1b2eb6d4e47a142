"""The diamond's congestion story without congestion-awareness, run once for the session (tests/realruns.py):
the short diamond (tests/conftest.py short_diamond: the smoke suite's case, the story in 18 s) with
--no-congestion-aware. test_congestion_e2e.py sets it beside the session's aware-on run of the same topology
(tests/conftest.py short_diamond_run); it is also test_run_e2e.py's Mininet run (paths stay on the
least-weight routes without congestion-awareness, which its payload test relies on). Read only."""
from __future__ import annotations

import pytest

from tests import realruns
from tests.conftest import analysed_short_diamond


@pytest.fixture(scope="session")
def short_diamond_aware_off(spark, tmp_path_factory) -> realruns.AnalysedRun:
    return analysed_short_diamond(tmp_path_factory, "short-diamond-aware-off", "--no-congestion-aware")
