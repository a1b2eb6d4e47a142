"""The verdict and the trend page on a real history: five nights of `suites/smoke.yaml` measured on this
machine kind (bench/suite_bench.py, docs/benchmarks.md "Regression suites"): four identical nights of the
shipped router, then one with `--router-setting congestion_aware=false`. Judged with the smoke suite's metrics and
minimum effects as they are now, the broken night is flagged and the identical ones are not."""
from __future__ import annotations

from pathlib import Path

import pytest

from spark.history import history_nights, read_history, select_baseline
from spark.regression import judge_night
from spark.trend import write_trend
from spark_browser import MISSING_REASON, chromium_or_none, rendered_plots
from runfolder.expectations import METRICS
from testbed.suite.spec import load_suite

ROOT = Path(__file__).resolve().parents[2]
HISTORY = Path(__file__).parent / "data" / "smoke-history"


@pytest.fixture(scope="module")
def history(spark):
    return read_history(spark, str(HISTORY), "smoke")


@pytest.fixture(scope="module")
def suite():
    return load_suite(ROOT / "suites" / "smoke.yaml")


def verdicts(history, suite, night: str) -> dict:
    metrics = {(c.name, m.key): (m.min_effect, METRICS[m.metric]) for c in suite.cases.values() for m in c.metrics}
    baseline = select_baseline(history, suite="smoke", before_night=night, machine="bench", variant="",
                               last_nights=suite.spec.baseline.last_nights)
    return {j.key: j for j in judge_night(history, night, metrics, baseline, suite.spec.alpha)}, baseline


def test_the_history_is_what_the_bench_measured(history):
    nights = history_nights(history)
    assert len(nights) == 5 and list(nights["variant"]) == ["", "", "", "", "congestion_aware=false"]
    assert nights["valid"].all() and len(history) == 5 * 5 * 5  # nights × repetitions × metrics


def test_the_broken_router_is_flagged_with_metric_effect_and_p_value(history, suite):
    night = sorted(history["night"].unique())[-1]
    judged, baseline = verdicts(history, suite, night)
    assert len(baseline) == 4  # the identical nights; the broken night itself is never a baseline
    p99 = judged["latency.p99 for priority real_time"]
    assert p99.status == "regression" and p99.effect > 1.0 and p99.q_value < 0.001, p99.reason
    assert "beyond every baseline night's median" in p99.reason
    assert judged["latency.p50 for priority real_time"].status == "regression"
    bulk = judged["loss for flow bulk"]
    assert bulk.status == "regression" and bulk.effect_kind == "absolute" and bulk.effect > 40  # points
    # without congestion-awareness pub1 never leaves the bottleneck: its reroute time is gone
    gone = judged["reroute.time for flow zpub.pub1"]
    assert gone.status == "regression" and "the figure disappeared" in gone.reason
    # realtime still loses nothing: that figure is not what broke
    assert judged["loss for flow zpub.realtime"].status == "pass"


def test_identical_nights_are_not_flagged(history, suite):
    identical = sorted(history[history["variant"] == ""]["night"].unique())
    flagged = []
    for night in identical[1:]:
        judged, _ = verdicts(history, suite, night)
        assert len(judged) == 5
        flagged += [f"{night}: {j.key}: {j.status}" for j in judged.values() if j.status in ("regression",
                                                                                         "improvement")]
    assert flagged == []


@pytest.mark.skipif(chromium_or_none() is None, reason=MISSING_REASON)
def test_the_trend_page_of_five_nights_renders(history, suite, tmp_path):
    night = sorted(history["night"].unique())[-1]
    judged, _ = verdicts(history, suite, night)
    page = write_trend(tmp_path / "trend.html", history, [j.to_json() for j in judged.values()], night, "smoke")
    total, ok, failed, dom = rendered_plots(page)
    assert total == 5 and not failed
    assert dom.count('data-status="regression"') == 4 and "congestion_aware=false" in dom
