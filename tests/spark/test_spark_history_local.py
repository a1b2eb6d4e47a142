"""The history read without Spark (`suite run --dry-run`'s quick look) is the history Spark reads: on the real
smoke history (tests/spark/data/smoke-history, five nights of suites/smoke.yaml)."""
from __future__ import annotations

from pathlib import Path

import pandas.testing as pdt

from spark.history import empty_history, read_history, read_local_history

DATA = str(Path(__file__).parent / "data" / "smoke-history")


def test_local_read_equals_sparks(spark, tmp_path):
    for suite in ("smoke", None, "another"):
        pdt.assert_frame_equal(read_local_history(DATA, suite), read_history(spark, DATA, suite))
    assert len(read_local_history(DATA, "smoke")) == 125
    missing = str(tmp_path / "none")
    pdt.assert_frame_equal(read_local_history(missing), empty_history())
    pdt.assert_frame_equal(read_history(spark, missing), empty_history())
