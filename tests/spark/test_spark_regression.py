"""The statistical verdict of a night, on figures shaped like the diamond topology's runs (no Spark)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from spark.regression import MinEffect, judge, judge_night, summarize

MS = 1e6
S = 1e9
TWENTY_PERCENT = MinEffect("relative", 0.2)


def lognormal(rng: np.random.Generator, median: float, n: int, spread: float = 0.15) -> list:
    return list(median * rng.lognormal(0.0, spread, n))


def spread_quantiles(median: float, n: int, spread: float = 0.15) -> list:
    """n values evenly over a lognormal's quantiles: a deterministic baseline with that spread."""
    return list(median * np.exp(spread * stats.norm.ppf((np.arange(n) + 0.5) / n)))


# --- judge ---------------------------------------------------------------------------------------------

def test_clear_regression_of_p99():
    rng = np.random.default_rng(11)
    baseline = lognormal(rng, 30 * MS, 15)
    tonight = lognormal(rng, 48 * MS, 5)  # +60 %
    j = judge(tonight, baseline, TWENTY_PERCENT, higher_is_worse=True, metric_kind="duration",
              case="diamond", key="latency.p99 for priority realtime", metric="latency.p99",
              target="priority realtime")
    assert j.status == "regression"
    assert j.p_value is not None and j.p_value < 0.01
    assert j.q_value == j.p_value
    assert 0.4 < j.effect < 0.8 and j.effect_kind == "relative" and j.min_effect == 0.2
    assert (j.n_tonight, j.n_baseline) == (5, 15)
    assert j.tonight_median == pytest.approx(np.median(tonight))
    assert j.baseline_median == pytest.approx(np.median(baseline))
    assert 0 < j.ci_low < j.ci_high
    assert "ms" in j.reason and "worse" in j.reason and "20 %" in j.reason and "p = " in j.reason
    data = json.loads(json.dumps(j.to_json()))
    assert data["status"] == "regression" and data["key"] == "latency.p99 for priority realtime"


def test_significant_shift_below_the_minimum_effect_passes():
    baseline = [x * MS for x in np.linspace(29.5, 30.5, 15)]
    tonight = [x * MS for x in np.linspace(32.6, 33.4, 5)]  # +10 %, every value above the baseline
    j = judge(tonight, baseline, TWENTY_PERCENT, True, metric_kind="duration")
    assert j.p_value < 0.001
    assert j.effect == pytest.approx(0.10, abs=0.01)
    assert j.status == "pass" and "below the minimum effect of 20 %" in j.reason


def test_big_noisy_shift_with_three_values_is_inconclusive():
    baseline = spread_quantiles(30 * MS, 15)
    tonight = [22 * MS, 45 * MS, 61 * MS]  # median +50 %, but one value below the baseline's median
    j = judge(tonight, baseline, TWENTY_PERCENT, True, metric_kind="duration")
    assert j.effect > 0.4
    assert j.p_value > 0.05
    assert j.status == "inconclusive" and "not significant" in j.reason and "3 vs 15 values" in j.reason
    # 3 against 3: the exact test cannot reach 5 % whatever the shift
    j3 = judge([60 * MS, 61 * MS, 62 * MS], baseline[:3], TWENTY_PERCENT, True)
    assert j3.p_value == pytest.approx(0.1) and j3.status == "inconclusive"


def test_too_few_values():
    j = judge([40 * MS, 41 * MS], spread_quantiles(30 * MS, 15), TWENTY_PERCENT, True)
    assert j.status == "inconclusive" and j.p_value is None
    assert "too few values: 2 tonight and 15 in the baseline" in j.reason


def test_improvement_of_reroute_time():
    rng = np.random.default_rng(3)
    baseline = list(rng.uniform(0.40 * S, 0.45 * S, 15))
    tonight = list(rng.uniform(0.25 * S, 0.29 * S, 5))
    j = judge(tonight, baseline, TWENTY_PERCENT, True, metric_kind="duration")
    assert j.status == "improvement" and j.effect < -0.3 and "better" in j.reason
    assert j.ci_high < 0


def test_throughput_lower_is_worse():
    rng = np.random.default_rng(5)
    baseline = lognormal(rng, 8e6, 15, 0.05)
    lower = judge(lognormal(rng, 5.5e6, 5, 0.05), baseline, TWENTY_PERCENT, higher_is_worse=False,
                  metric_kind="bandwidth")
    assert lower.status == "regression" and lower.effect < -0.2 and "Mbit/s" in lower.reason
    assert not lower.higher_is_worse
    higher = judge(lognormal(rng, 11e6, 5, 0.05), baseline, TWENTY_PERCENT, higher_is_worse=False,
                   metric_kind="bandwidth")
    assert higher.status == "improvement"


def test_absolute_minimum_effect_in_points_for_loss():
    rng = np.random.default_rng(8)
    one_point = MinEffect("absolute", 1.0)
    assert one_point.describe("percent") == "1 pt"
    baseline = list(rng.normal(57.0, 0.8, 15))  # bulk loss 55–60 %
    j = judge(list(rng.normal(60.0, 0.8, 5)), baseline, one_point, True, metric_kind="percent")
    assert j.status == "regression" and j.effect_kind == "absolute"
    assert j.effect == pytest.approx(j.tonight_median - j.baseline_median) and 2 < j.effect < 4
    assert "pt" in j.reason
    small = judge(list(rng.normal(57.6, 0.3, 5)), baseline, one_point, True, metric_kind="percent")
    assert small.status == "pass"
    # realtime loss 0–0.5 %: +0.2 points is below one point, though it is +200 % relative
    realtime = judge([0.3, 0.25, 0.35, 0.3, 0.28], [0.1, 0.0, 0.12, 0.08, 0.1, 0.15], one_point, True,
                     metric_kind="percent")
    assert realtime.status == "pass"


def test_relative_effect_over_a_zero_baseline():
    zeros = [0.0] * 15
    j = judge([0.2, 0.4, 0.3, 0.5, 0.3], zeros, TWENTY_PERCENT, True, metric_kind="percent")
    assert j.status == "inconclusive" and j.effect is None
    assert "baseline median is 0" in j.reason and "absolute minimum effect" in j.reason
    same = judge([0.0] * 5, zeros, TWENTY_PERCENT, True, metric_kind="percent")
    assert same.status == "pass" and same.effect == 0.0


def test_identical_constant_samples():
    j = judge([2.0] * 5, [2.0] * 15, TWENTY_PERCENT, True, metric_kind="count")
    assert j.status == "pass" and j.effect == 0.0 and j.p_value == 1.0
    assert (j.ci_low, j.ci_high) == (0.0, 0.0)
    # constant but different: every reroute count went from 1 to 3 (ties everywhere; exact permutation test)
    up = judge([3.0] * 5, [1.0] * 15, MinEffect("absolute", 1.0), True, metric_kind="count")
    assert up.status == "regression" and up.p_value == pytest.approx(2 / math.comb(20, 5))


def test_missing_values_are_dropped_and_counted():
    baseline = spread_quantiles(30 * MS, 15)
    tonight = [48 * MS, None, 50 * MS, float("nan"), 47 * MS]
    j = judge(tonight, baseline, TWENTY_PERCENT, True, metric_kind="duration")
    assert j.n_tonight == 3 and j.status == "regression"
    assert "2 repetitions without the figure left out" in j.reason
    # a figure the baseline measured and tonight mostly did not (a reroute that no longer happens): regression
    vanished = judge([48 * MS, None, None, None, 50 * MS], baseline, TWENTY_PERCENT, True)
    assert vanished.status == "regression" and vanished.p_value is None
    assert "the figure disappeared: measured in 2 of 5 repetitions tonight but in 15 of 15" in vanished.reason
    # ... but not when the baseline hardly measured it either
    both_missing = judge([48 * MS, None, None, None, 50 * MS], baseline[:4] + [None] * 5, TWENTY_PERCENT, True)
    assert both_missing.status == "inconclusive" and "3 of 5 repetitions tonight did not measure" in both_missing.reason
    base_missing = judge([48 * MS] * 5, baseline[:4] + [None] * 5, TWENTY_PERCENT, True)
    assert base_missing.status == "inconclusive" and "in the baseline did not measure" in base_missing.reason


def test_false_positive_rate_on_the_same_distribution():
    """200 nights drawn from the baseline's own distribution (p99 ~30 ms, 15 % spread): below 5 % flagged."""
    rng = np.random.default_rng(2026)
    draws = [(lognormal(rng, 30 * MS, 5), lognormal(rng, 30 * MS, 15)) for _ in range(200)]
    flagged = sum(judge(t, b, TWENTY_PERCENT, True, seed=i).status in ("regression", "improvement")
                  for i, (t, b) in enumerate(draws))
    assert flagged / len(draws) < 0.05
    # the simulation can see false positives: without a minimum effect the test alone flags about alpha
    tiny = MinEffect("relative", 1e-9)
    bare = sum(judge(t, b, tiny, True, seed=i).status in ("regression", "improvement")
               for i, (t, b) in enumerate(draws))
    assert 0 < bare / len(draws) < 0.10
    assert flagged <= bare


def test_bootstrap_ci_contains_the_true_shift():
    shift = 15 * MS
    rng = np.random.default_rng(77)
    baseline = lognormal(rng, 30 * MS, 25)
    tonight = [v + shift for v in lognormal(rng, 30 * MS, 10)]
    j = judge(tonight, baseline, TWENTY_PERCENT, True, metric_kind="duration")
    assert j.ci_low < shift < j.ci_high and j.ci_low > 0
    again = judge(tonight, baseline, TWENTY_PERCENT, True, metric_kind="duration")
    assert (again.ci_low, again.ci_high) == (j.ci_low, j.ci_high)  # seeded
    covered = 0
    for i in range(100):
        b = lognormal(rng, 30 * MS, 25)
        t = [v + shift for v in lognormal(rng, 30 * MS, 10)]
        r = judge(t, b, TWENTY_PERCENT, True, seed=i)
        covered += r.ci_low <= shift <= r.ci_high
    assert covered >= 85


def test_min_effect_validation_and_description():
    assert TWENTY_PERCENT.describe("duration") == "20 %"
    assert MinEffect("absolute", 50 * MS).describe("duration") == "50 ms"
    assert MinEffect("absolute", 1e6).describe("bandwidth") == "1 Mbit/s"
    assert MinEffect("absolute", 2).describe("count") == "2"
    with pytest.raises(ValueError, match="above zero"):
        MinEffect("relative", 0)
    with pytest.raises(ValueError, match="'relative' or 'absolute'"):
        MinEffect("percent", 0.2)  # type: ignore[arg-type]


# --- judge_night ---------------------------------------------------------------------------------------

BASE_NIGHTS = ["20261118T201500Z-a1a1a1", "20261119T201500Z-b2b2b2", "20261120T201500Z-c3c3c3",
               "20261121T201500Z-d4d4d4", "20261122T201500Z-e5e5e5"]
TONIGHT = "20261123T201500Z-3fa2c1"
P99 = "latency.p99 for priority realtime"
BULK = "loss for flow bulk"
REROUTE = "reroute.time for all flows"
RT_LOSS = "loss for priority realtime"
KEYS = {P99: ("latency.p99", "priority realtime"), BULK: ("loss", "flow bulk"),
        REROUTE: ("reroute.time", "all flows"), RT_LOSS: ("loss", "priority realtime")}


def rows(night: str, figures: dict, case: str = "diamond") -> list:
    out = []
    for key, values in figures.items():
        metric, target = KEYS[key]
        for rep, value in enumerate(values, start=1):
            out.append({"suite": "diamond-nightly", "case": case, "metric": metric, "target": target, "key": key,
                        "value": value, "higher_is_worse": True, "repetition": rep, "night": night,
                        "variant": "", "valid": True})
    return out


def night_history(tonight_p99: list, seed: int = 1) -> pd.DataFrame:
    """Five baseline nights × 3 repetitions (15 values per key) and tonight's 5 repetitions."""
    rng = np.random.default_rng(seed)
    p99 = spread_quantiles(30 * MS, 15)
    out = []
    for i, night in enumerate(BASE_NIGHTS):
        out += rows(night, {P99: p99[i::5], BULK: list(rng.uniform(55, 60, 3)),
                            REROUTE: list(rng.uniform(0.40 * S, 0.45 * S, 3)),
                            RT_LOSS: list(rng.uniform(0.0, 0.5, 3))})
    out += rows(TONIGHT, {P99: tonight_p99, BULK: list(rng.uniform(55, 60, 5)),
                          REROUTE: list(rng.uniform(0.40 * S, 0.45 * S, 5)),
                          RT_LOSS: list(rng.uniform(0.0, 0.5, 5))})
    return pd.DataFrame(out)


METRICS = {("diamond", P99): (TWENTY_PERCENT, "duration"), ("diamond", BULK): (MinEffect("absolute", 2.0), "percent"),
           ("diamond", REROUTE): (TWENTY_PERCENT, "duration"), ("diamond", RT_LOSS): (MinEffect("absolute", 1.0),
                                                                                        "percent")}
BORDERLINE = [37 * MS, 38 * MS, 39 * MS, 36 * MS, 30 * MS]  # +23 %, p ≈ 0.026 alone


def test_bh_correction_changes_a_borderline_call():
    history = night_history(BORDERLINE)
    alone = judge(BORDERLINE, spread_quantiles(30 * MS, 15), TWENTY_PERCENT, True)
    assert alone.status == "regression" and 0.01 < alone.p_value < 0.05

    judgements = {j.key: j for j in judge_night(history, TONIGHT, METRICS, BASE_NIGHTS)}
    p99 = judgements[P99]
    assert p99.p_value == pytest.approx(alone.p_value)
    assert p99.q_value > 0.05 and p99.q_value >= p99.p_value
    assert p99.status == "inconclusive" and "q = " in p99.reason
    expected_q = stats.false_discovery_control([judgements[k].p_value for k in sorted(judgements)], method="bh")
    assert [judgements[k].q_value for k in sorted(judgements)] == pytest.approx(list(expected_q))
    # a clear regression survives the correction
    clear = {j.key: j for j in judge_night(night_history([48 * MS, 50 * MS, 47 * MS, 52 * MS, 49 * MS]), TONIGHT,
                                           METRICS, BASE_NIGHTS)}
    assert clear[P99].status == "regression" and clear[P99].q_value < 0.05


def test_judge_night_fields_and_summary():
    history = night_history([48 * MS, 50 * MS, 47 * MS, 52 * MS, 49 * MS])
    judgements = judge_night(history, TONIGHT, METRICS, BASE_NIGHTS[1:])
    assert [(j.case, j.key) for j in judgements] == sorted(METRICS)
    by_key = {j.key: j for j in judgements}
    assert by_key[P99].metric == "latency.p99" and by_key[P99].target == "priority realtime"
    assert by_key[P99].n_tonight == 5 and by_key[P99].n_baseline == 12
    assert by_key[P99].baseline_nights == BASE_NIGHTS[1:]
    assert by_key[BULK].effect_kind == "absolute" and by_key[BULK].min_effect == 2.0
    counts = summarize(judgements)
    assert counts["regression"] == 1 and sum(counts.values()) == 4
    assert summarize([j.to_json() for j in judgements]) == counts
    json.dumps([j.to_json() for j in judgements])


def test_judge_night_without_baseline_or_figures():
    history = night_history(BORDERLINE)
    judgements = judge_night(history, TONIGHT, METRICS, [])
    assert {j.status for j in judgements} == {"inconclusive"}
    assert all("no baseline nights yet" in j.reason for j in judgements)
    assert all(j.p_value is None and j.q_value is None for j in judgements)

    extra = dict(METRICS)
    extra[("diamond-slow", P99)] = (TWENTY_PERCENT, "duration")  # a case whose repetitions all failed
    by_case = {j.case: j for j in judge_night(history, TONIGHT, extra, BASE_NIGHTS) if j.key == P99}
    assert by_case["diamond-slow"].status == "inconclusive" and "no figures tonight" in by_case["diamond-slow"].reason
    assert by_case["diamond-slow"].metric == "latency.p99" and by_case["diamond-slow"].target == "priority realtime"


def _night_rows(night: str, values, key: str = "latency.p99 for priority real_time") -> list:
    return [{"night": night, "case": "diamond", "key": key, "metric": "latency.p99", "target": "priority real_time",
             "higher_is_worse": True, "repetition": i + 1, "value": v} for i, v in enumerate(values)]


def test_a_night_unlike_the_others_is_not_called_unless_beyond_every_baseline_night():
    """Repetitions of one night share its machine: the test counts them as independent, so tonight must also
    lie beyond every baseline night's median. Four baseline nights near 30 ms and one slow night at 40 ms;
    tonight at 38 ms is significant against the pooled 25 values and 20 % up, but within the nights' spread."""
    key = "latency.p99 for priority real_time"
    nights = {"n1": [29.5, 30, 30.2, 29.8, 30.5], "n2": [31, 30.8, 31.2, 31.1, 30.9], "n3": [30, 29, 31, 30.4, 29.6],
              "n4": [30.1, 30.3, 29.9, 30.6, 29.7], "n5": [40, 39.5, 40.5, 41, 39]}
    tonight = [38, 38.2, 37.9, 38.1, 38.3]
    rows = [r for n, v in nights.items() for r in _night_rows(n, [x * MS for x in v])]
    rows += _night_rows("t", [x * MS for x in tonight])
    history = pd.DataFrame(rows)
    metrics = {("diamond", key): (TWENTY_PERCENT, "duration")}
    (j,) = judge_night(history, "t", metrics, list(nights))
    assert j.p_value < 0.05 and j.effect >= 0.2
    assert j.status == "inconclusive" and "within the spread of the baseline nights' medians" in j.reason
    assert "the repetitions alone say regression" in j.reason
    # beyond every night's median: called, and the reason says so
    rows = rows[:-5] + _night_rows("t", [x * MS for x in (50, 51, 49, 52, 50.5)])
    (j,) = judge_night(pd.DataFrame(rows), "t", metrics, list(nights))
    assert j.status == "regression" and "beyond every baseline night's median" in j.reason
