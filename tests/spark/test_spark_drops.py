"""Where lost messages were last seen, per subscriber: a flow with two subscribers, a loss on one branch."""
from __future__ import annotations

import json

import pytest

from spark.cli import analyze_command
from spark.testing import write_run
from spark_builders import Y_LOST_EVERYWHERE, Y_LOST_ON_R5_BRANCH, y_run


@pytest.fixture(scope="module")
def y(spark, tmp_path_factory):
    rd = write_run(y_run(), tmp_path_factory.mktemp("runs"))
    assert analyze_command(str(rd)) == 0
    return rd, json.loads((rd / "report/summary.json").read_text())


def test_a_loss_on_one_branch_is_attributed_to_that_branch(y, spark):
    rd, _s = y
    lost = {(r["node"], r["seq"]): r["last_seen"]
            for r in spark.read.parquet(str(rd / "parquet/lost_messages")).collect()}
    # r4 got message 7; r5 did not: it arrived at r2 and was never forwarded toward r5. The r4 branch saw it
    # later (arriving at r4), which says nothing about the way to r5.
    assert lost == {("r5", Y_LOST_ON_R5_BRANCH): "r1>r2 at r2",
                    ("r4", Y_LOST_EVERYWHERE): None, ("r5", Y_LOST_EVERYWHERE): None}


def test_loss_figures_per_subscriber(y):
    _rd, s = y
    f = next(f for f in s["flows"] if f["flow"] == "f")
    assert (f["sent"], f["expected"], f["delivered"], f["lost"]) == (30, 60, 57, 3)
    assert sorted((r["node"], r["last_seen"] or "", r["count"]) for r in s["lost_by_last_seen"]) == [
        ("r4", "", 1), ("r5", "", 1), ("r5", "r1>r2 at r2", 1)]
