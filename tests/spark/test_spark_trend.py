"""The trend page of a regression suite: a synthetic history shaped like real nights (4 nights × 5
repetitions, one night whose self-checks failed, tonight a +70 % p99 regression), rendered in headless
Chromium with every plot loaded, nothing loaded from outside, the verdicts in order with their figures."""
from __future__ import annotations

import math
import re
from typing import Dict, List, Optional

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from spark.expectations import fmt_value
from spark.trend import STATUS_ORDER, plot_id, regression_threshold, render_trend, trend_figure, write_trend
from spark_browser import CHROMIUM, MISSING_REASON, external_urls, rendered_plots

MS = 1_000_000
S = 1_000_000_000
SUITE = "diamond-nightly"
CASE = "diamond-on"
ODD_CASE = "odd<case>&"
P99 = "latency.p99 for priority realtime"
LOSS = "loss for flow bulk"
REROUTE = "reroute.time for flow zpub.pub1"
REACTION = "reaction.time for flow zpub.pub1"
NIGHTS = ["20261120T201500Z-a1b2c3", "20261121T201500Z-d4e5f6", "20261122T201500Z-0a1b2c", "20261123T201500Z-3fa2c1"]
TONIGHT = NIGHTS[-1]
INVALID = NIGHTS[1]
BASELINE = [NIGHTS[0], NIGHTS[2]]
#: spread of the repetitions around each night's median: ±15 %
SPREAD = np.array([-0.15, -0.07, 0.0, 0.07, 0.15])
P99_MEDIANS = {NIGHTS[0]: 30 * MS, NIGHTS[1]: 34 * MS, NIGHTS[2]: 31 * MS, TONIGHT: 31 * MS * 1.7}

KEYS = {P99: ("latency.p99", "priority realtime", True), LOSS: ("loss", "flow bulk", True),
        REROUTE: ("reroute.time", "flow zpub.pub1", True), REACTION: ("reaction.time", "flow zpub.pub1", True)}


def _values(key: str, night: str) -> List[float]:
    i = NIGHTS.index(night)
    if key == P99:
        return list(P99_MEDIANS[night] * (1 + SPREAD))
    if key == LOSS:
        return list(57.0 + np.array([-1.0, -0.5, 0.0, 0.5, 1.0]) + 0.1 * i)
    if key == REROUTE:
        values = list(0.42 * S + np.array([-0.03, -0.01, 0.0, 0.01, 0.03]) * S)
        if i == 2:
            values[3] = math.nan
        return values
    return [math.nan] * 5


def _row(case: str, key: str, night: str, rep: int, value: float, variant: str = "") -> Dict:
    metric, target, worse = KEYS[key]
    day = f"{night[:4]}-{night[4:6]}-{night[6:8]}"
    return dict(suite=SUITE, case=case, metric=metric, target=target, key=key, value=value, higher_is_worse=worse,
                repetition=rep, run_id=f"{night}-{case}-{rep}", run_dir=f"/results/{night}/{case}/{rep}",
                night=night, started_ns=1_795_000_000 * S + NIGHTS.index(night) * 86_400 * S, date=day,
                git_revision="abc1234" if night != TONIGHT else "def5678", router_version="0.9.1",
                machine="lab-01", variant=variant, valid=night != INVALID, expect_passed=True)


def history(nights: Optional[List[str]] = None, variant_night: Optional[str] = None) -> pd.DataFrame:
    rows = []
    for night in nights or NIGHTS:
        variant = "congestion_aware=false" if night == variant_night else ""
        for key in KEYS:
            rows += [_row(CASE, key, night, rep, v, variant) for rep, v in enumerate(_values(key, night))]
        rows += [_row(ODD_CASE, LOSS, night, rep, v, variant) for rep, v in enumerate(_values(LOSS, night))]
    return pd.DataFrame(rows)


def _judgement(case: str, key: str, status: str, reason: str, baseline: List[str], **figures) -> Dict:
    metric, target, worse = KEYS[key]
    out = dict(case=case, key=key, metric=metric, target=target, status=status, reason=reason, p_value=0.5,
               q_value=0.6, effect=0.01, effect_kind="relative", min_effect=0.2, tonight_median=None,
               baseline_median=None, ci_low=-1.0, ci_high=1.2, n_tonight=5, n_baseline=5 * len(baseline),
               baseline_nights=baseline, higher_is_worse=worse)
    out.update(figures)
    return out


def judgements(baseline: List[str] = BASELINE) -> List[Dict]:
    base_p99 = float(np.median([v for n in baseline for v in _values(P99, n)])) if baseline else None
    return [
        _judgement(CASE, LOSS, "pass", "within the minimum effect of 1pt", baseline, effect=0.2,
                   effect_kind="absolute", min_effect=1.0, tonight_median=57.3, baseline_median=57.1),
        _judgement(CASE, REACTION, "inconclusive", "not measured tonight", baseline, p_value=None, q_value=None,
                   effect=None, ci_low=None, ci_high=None, n_tonight=0, n_baseline=0),
        _judgement(CASE, P99, "regression", "p99 up 70 % on the baseline, past the minimum effect of 20 %",
                   baseline, p_value=0.0039, q_value=0.0117, effect=0.7, ci_low=17.0e6, ci_high=26.5e6,
                   tonight_median=P99_MEDIANS[TONIGHT], baseline_median=base_p99),
        _judgement(ODD_CASE, LOSS, "improvement", "loss <b>down</b> & steady", baseline, effect=-0.02),
        _judgement(CASE, REROUTE, "pass", "no change", baseline, tonight_median=0.42 * S, baseline_median=0.42 * S),
    ]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = write_trend(tmp_path_factory.mktemp("trend") / "nightly" / "trend.html", history(), judgements(),
                       TONIGHT, SUITE)
    return path, path.read_text()


def _verdict_rows(html: str) -> List[str]:
    return re.findall(r'<tr class="verdict[^"]*" data-status="[^"]*">.*?</tr>', html)


def _measured_plots() -> set:
    return {plot_id(CASE, P99), plot_id(CASE, LOSS), plot_id(CASE, REROUTE), plot_id(ODD_CASE, LOSS)}


@pytest.mark.skipif(CHROMIUM is None, reason=MISSING_REASON)
def test_every_plot_renders_in_headless_chromium(page):
    path, _ = page
    total, ok, failed, _dom = rendered_plots(path)
    assert failed == set()
    assert ok == _measured_plots()
    assert total == 4


def test_page_is_self_contained(page):
    _, html = page
    assert external_urls(html) == set()
    assert "http://" not in html and "https://" not in html
    for pid in _measured_plots():
        assert f'<img class="plot" id="{pid}" ' in html and "data:image/png;base64," in html


def test_header_names_tonight_and_counts_each_status(page):
    _, html = page
    header = html.split("<h2>", 1)[0]
    for fact in (SUITE, TONIGHT, "2026-11-23", "def5678", "lab-01"):
        assert fact in header, fact
    assert '<span class="regression">1 regression</span>' in header
    assert '<span class="pass">2 pass</span>' in header
    assert '<span class="improvement">1 improvement</span>' in header
    assert '<span class="inconclusive">1 inconclusive</span>' in header


def test_regression_row_has_its_figures(page):
    _, html = page
    row = _verdict_rows(html)[0]
    j = next(j for j in judgements() if j["status"] == "regression")
    assert 'data-status="regression"' in row and f"<td class=\"\">{CASE}</td>" in row and P99 in row
    # the interval of the median difference is in the metric's unit (ns -> ms), the effect relative
    assert "+70.0 % [+17.000ms, +26.500ms] (min 20.0 %)" in row
    assert "0.0039 / 0.0117" in row
    assert fmt_value("latency.p99", j["tonight_median"]) == "52.700ms" and "52.700ms" in row
    assert fmt_value("latency.p99", j["baseline_median"]) in row
    assert "5 / 10" in row and "past the minimum effect of 20 %" in row
    assert "REGRESSION" in row


def test_verdict_table_puts_regressions_first(page):
    _, html = page
    statuses = [re.search(r'data-status="([^"]*)"', r).group(1) for r in _verdict_rows(html)]
    assert statuses == ["regression", "inconclusive", "improvement", "pass", "pass"]
    assert [STATUS_ORDER.index(s) for s in statuses] == sorted(STATUS_ORDER.index(s) for s in statuses)
    passes = [r for r in _verdict_rows(html) if 'data-status="pass"' in r]
    assert LOSS in passes[0] and REROUTE in passes[1]
    assert "+0.200 pt" in passes[0] and "(min 1.000 pt)" in passes[0]


def test_invalid_night_is_labelled(page):
    _, html = page
    row = re.search(rf'<tr data-night="{INVALID}">.*?</tr>', html).group(0)
    assert "self-checks failed" in row
    for night in NIGHTS:
        if night != INVALID:
            assert "self-checks failed" not in re.search(rf'<tr data-night="{night}">.*?</tr>', html).group(0)
    assert re.search(rf'<tr data-night="{TONIGHT}">.*?<td>tonight</td></tr>', html)
    assert re.search(rf'<tr data-night="{NIGHTS[0]}">.*?<td>baseline</td></tr>', html)


def test_invalid_night_is_greyed_in_the_plot():
    fig = trend_figure(history(), judgements(), TONIGHT, SUITE, CASE, P99)
    ax = fig.axes[0]
    spans = [p for p in ax.patches if p.get_gid() == "invalid-night"]
    assert len(spans) == 1 and spans[0].get_x() == pytest.approx(0.55)
    assert "self-checks failed" in [t.get_text() for t in ax.texts]
    invalid = next(c for c in ax.collections if c.get_gid() == "invalid")
    assert len(invalid.get_offsets()) == 5
    labels = ax.get_xticklabels()
    assert labels[1].get_text() == "2026-11-21\nd4e5f6" and labels[1].get_color() == "#9e9e9e"


def test_not_measured_metric_is_a_note_not_a_plot(page):
    _, html = page
    assert re.search(r'<p class="note not-measured" data-key="reaction.time for flow zpub.pub1">'
                     r"reaction.time for flow zpub.pub1: not measured on any night", html)
    assert plot_id(CASE, REACTION) not in html
    assert "not measured tonight" in html


def test_case_names_and_reasons_are_escaped(page):
    _, html = page
    assert "odd&lt;case&gt;&amp;" in html
    assert "<h2>case odd&lt;case&gt;&amp;</h2>" in html
    assert "odd<case>" not in html
    assert "loss &lt;b&gt;down&lt;/b&gt; &amp; steady" in html and "<b>down</b>" not in html


def test_plot_shows_baseline_band_threshold_and_tonight_in_red():
    fig = trend_figure(history(), judgements(), TONIGHT, SUITE, CASE, P99)
    ax = fig.axes[0]
    base = np.array([v for n in BASELINE for v in _values(P99, n)]) / MS
    band = next(p for p in ax.patches if p.get_gid() == "baseline-band")
    ys = [band.get_y(), band.get_y() + band.get_height()]
    assert min(ys) == pytest.approx(base.min()) and max(ys) == pytest.approx(base.max())
    median = next(l for l in ax.lines if l.get_gid() == "baseline-median")
    assert median.get_ydata()[0] == pytest.approx(np.median(base))
    threshold = next(l for l in ax.lines if l.get_gid() == "threshold")
    assert threshold.get_ydata()[0] == pytest.approx(np.median(base) * 1.2)
    assert threshold.get_linestyle() == "--"
    tonight = next(l for l in ax.lines if l.get_gid() == "tonight-marker")
    assert tonight.get_xdata()[0] == 3 and tonight.get_color() == "#c62828"
    assert any(t.get_text().startswith("tonight: REGRESSION (+70.0 %)") for t in ax.texts)
    points = next(c for c in ax.collections if c.get_gid() == "tonight")
    assert np.allclose(np.sort(points.get_offsets()[:, 1]), np.sort(_values(P99, TONIGHT)) / MS)
    medians = next(l for l in ax.lines if l.get_gid() == "medians")
    # the invalid night has no median on the line
    assert list(medians.get_xdata()) == [0, 2, 3]
    assert ax.get_ylabel() == "latency.p99 (ms)"
    plt.close(fig)


def test_threshold_moves_in_the_worse_direction():
    assert regression_threshold(dict(baseline_median=100.0, min_effect=0.2, effect_kind="relative",
                                     higher_is_worse=True)) == pytest.approx(120.0)
    assert regression_threshold(dict(baseline_median=100.0, min_effect=0.2, effect_kind="relative",
                                     higher_is_worse=False)) == pytest.approx(80.0)
    assert regression_threshold(dict(baseline_median=57.0, min_effect=1.0, effect_kind="absolute",
                                     higher_is_worse=True)) == pytest.approx(58.0)
    assert regression_threshold(dict(baseline_median=None, min_effect=1.0, effect_kind="absolute")) is None


def test_units_in_axis_labels_and_partly_missing_night_noted():
    for key, label in ((LOSS, "loss (%)"), (REROUTE, "reroute.time (ms)")):
        fig = trend_figure(history(), judgements(), TONIGHT, SUITE, CASE, key)
        assert fig.axes[0].get_ylabel() == label
        if key == REROUTE:
            assert fig.axes[0].get_xticklabels()[2].get_text() == "2026-11-22\n0a1b2c\n1 not measured"
            points = next(c for c in fig.axes[0].collections if c.get_gid() == "points")
            assert len(points.get_offsets()) == 5 + 4   # nights 1 and 3 (one value missing); 2 is invalid
        plt.close(fig)


def test_another_variant_has_its_own_marker_and_is_named():
    hist = history(variant_night=NIGHTS[2])
    fig = trend_figure(hist, judgements(), TONIGHT, SUITE, CASE, P99)
    ax = fig.axes[0]
    variant = next(c for c in ax.collections if c.get_gid() == "variant-points")
    assert len(variant.get_offsets()) == 5 and variant.get_label() == "variant congestion_aware=false"
    medians = next(l for l in ax.lines if l.get_gid() == "medians")
    assert list(medians.get_xdata()) == [0, 3]
    plt.close(fig)
    html = render_trend(hist, judgements(), TONIGHT, SUITE)
    assert re.search(rf'<tr data-night="{NIGHTS[2]}">.*?<td>congestion_aware=false</td>', html)


def test_single_night_renders_without_a_baseline(tmp_path):
    hist = history(nights=[TONIGHT])
    js = judgements(baseline=[])
    for j in js:
        j.update(status="inconclusive", reason="no baseline night yet", baseline_median=None)
    path = write_trend(tmp_path / "trend.html", hist, js, TONIGHT, SUITE, title="first night")
    html = path.read_text()
    assert "<h1>first night</h1>" in html and external_urls(html) == set()
    assert '<span class="inconclusive">5 inconclusive</span>' in html
    fig = trend_figure(hist, js, TONIGHT, SUITE, CASE, P99)
    gids = {a.get_gid() for a in fig.axes[0].get_children()}
    assert not gids & {"baseline-band", "baseline-iqr", "baseline-median", "threshold"}
    assert "tonight" in gids
    plt.close(fig)
    if CHROMIUM is not None:
        total, ok, failed, _dom = rendered_plots(path)
        assert failed == set() and ok == _measured_plots() and total == 4


def test_history_without_a_needed_column_is_refused_with_the_columns_named():
    with pytest.raises(ValueError, match=r"lacks the column\(s\) night"):
        render_trend(history().drop(columns=["night"]), judgements(), TONIGHT, SUITE)


def test_only_the_suites_own_nights_are_shown():
    other = history().assign(suite="another-suite", case="other-case", night="20261124T201500Z-ffffff")
    html = render_trend(pd.concat([history(), other]), judgements(), TONIGHT, SUITE)
    assert "other-case" not in html and "ffffff" not in html
    assert render_trend(history().drop(columns=["suite"]), judgements(), TONIGHT, SUITE).count("<tr data-night=") == 4
