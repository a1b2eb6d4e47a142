"""The statistical verdict of a night: is a metric tonight worse (or better) than in the baseline nights?

A metric is a **regression** (or an **improvement**) only when both hold:

* tonight's repetitions differ from the baseline's: two-sided Mann–Whitney U test, significant at ``alpha``
  (in ``judge_night``: on the Benjamini–Hochberg adjusted q-value over all tests of the night);
* the change of the medians reaches the metric's minimum effect (``MinEffect``), in the worse (better)
  direction.

With two or more baseline nights, tonight's median must also lie beyond every baseline night's median: the
test counts each repetition as independent, but the repetitions of one night share that night's machine, so
a night merely unlike the others must not be called (``_between_nights``). A figure the baseline measured in
most repetitions and tonight mostly did not (a reroute that no longer happens) is a **regression**.

Otherwise it is a **pass** (the change is below the minimum effect, significant or not) or **inconclusive**
(the change reaches the minimum effect but is not significant; too few values; more than half of the
repetitions did not measure the metric; no baseline nights yet; a relative effect over a baseline median
of 0). The p-value is exact for small samples (scipy's ``auto``; with ties, an exact or seeded permutation
test, because the normal approximation is far too optimistic for 5 values with ties). Every judgement
carries a seeded bootstrap 95 % confidence interval of the median difference tonight − baseline.

Pure Python (numpy, scipy, pandas); no Spark.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Literal, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["MinEffect", "Judgement", "judge", "judge_night", "summarize", "format_amount", "STATUSES",
           "MIN_VALUES"]

STATUSES: Tuple[str, ...] = ("regression", "improvement", "pass", "inconclusive")
#: fewer values than this tonight or in the baseline: no verdict
MIN_VALUES = 3
#: ties and one sample at most this large: permutation test instead of the normal approximation
_SMALL = 8
_PERMUTATIONS = 20000
_BOOTSTRAP = 4000


def format_amount(value: Optional[float], metric_kind: str, signed: bool = False) -> str:
    """A figure in its metric's unit for a person: ns → ms/s, bit/s → Mbit/s, percent, count."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    sign = ("+" if value >= 0 else "-") if signed else ("-" if value < 0 else "")
    v = abs(float(value))
    if metric_kind == "duration":
        for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
            if v >= scale:
                return f"{sign}{v / scale:.4g} {unit}"
        return f"{sign}{v:.4g} ns"
    if metric_kind == "percent":
        return f"{sign}{v:.3g} {'pt' if signed else '%'}"
    if metric_kind == "bandwidth":
        for scale, unit in ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
            if v >= scale:
                return f"{sign}{v / scale:.4g} {unit}"
        return f"{sign}{v:.4g} bit/s"
    return f"{sign}{v:.4g}"


@dataclass(frozen=True)
class MinEffect:
    """The smallest change of a metric worth calling a regression: ``relative`` (0.2 = 20 % of the baseline
    median) or ``absolute`` in the metric's unit (ns, percentage points, count, bit/s)."""

    kind: Literal["relative", "absolute"]
    amount: float

    def __post_init__(self) -> None:
        if self.kind not in ("relative", "absolute"):
            raise ValueError(f"minimum effect kind {self.kind!r}: use 'relative' or 'absolute'")
        if not (isinstance(self.amount, (int, float)) and math.isfinite(self.amount) and self.amount > 0):
            raise ValueError(f"minimum effect {self.amount!r}: must be a number above zero")

    def describe(self, metric_kind: str) -> str:
        """``20 %`` or ``1 pt`` / ``50 ms`` / ``2`` / ``1 Mbit/s``."""
        if self.kind == "relative":
            return f"{self.amount * 100:.4g} %"
        return format_amount(self.amount, metric_kind, signed=True).lstrip("+")


@dataclass
class Judgement:
    """The verdict on one metric key of one case tonight; see the module docstring."""

    case: str
    key: str
    metric: str
    target: str
    status: str
    reason: str
    p_value: Optional[float]
    q_value: Optional[float]
    #: relative: (median tonight − median baseline) / |median baseline|; absolute: the difference
    effect: Optional[float]
    effect_kind: str
    min_effect: float
    tonight_median: Optional[float]
    baseline_median: Optional[float]
    #: bootstrap 95 % CI of median(tonight) − median(baseline), in the metric's unit
    ci_low: Optional[float]
    ci_high: Optional[float]
    n_tonight: int
    n_baseline: int
    baseline_nights: List[str] = field(default_factory=list)
    higher_is_worse: bool = True

    def to_json(self) -> Dict[str, Any]:
        """A dict for JSON: NaN and numpy numbers become None and plain floats."""
        out = asdict(self)
        for name, value in out.items():
            if isinstance(value, (float, np.floating)):
                out[name] = None if math.isnan(value) else float(value)
            elif isinstance(value, np.integer):
                out[name] = int(value)
        out["baseline_nights"] = [str(n) for n in self.baseline_nights]
        return out


@dataclass
class _Comparison:
    """The figures of one test before the verdict (the significance needs every test of the night)."""

    tonight: np.ndarray
    baseline: np.ndarray
    missing_tonight: int
    missing_baseline: int
    tonight_median: Optional[float] = None
    baseline_median: Optional[float] = None
    effect: Optional[float] = None
    p_value: Optional[float] = None
    ci: Tuple[Optional[float], Optional[float]] = (None, None)
    #: a verdict known without the test (too few values, ...): its reason, and its status
    early: Optional[str] = None
    early_status: str = "inconclusive"


def _clean(values: Iterable[Any]) -> Tuple[np.ndarray, int]:
    raw = [np.nan if v is None else float(v) for v in values]
    arr = np.asarray(raw, dtype=float)
    finite = arr[~np.isnan(arr)]
    return finite, int(arr.size - finite.size)


def _p_value(a: np.ndarray, b: np.ndarray, seed: int) -> float:
    """Two-sided Mann–Whitney U; 1.0 when all values are equal (the test has nothing to rank)."""
    both = np.concatenate([a, b])
    if np.all(both == both[0]):
        return 1.0
    ties = np.unique(both).size < both.size
    if ties and min(a.size, b.size) <= _SMALL:
        method: Any = stats.PermutationMethod(n_resamples=_PERMUTATIONS, rng=np.random.default_rng(seed))
    else:
        method = "auto"
    p = float(stats.mannwhitneyu(a, b, alternative="two-sided", method=method).pvalue)
    return 1.0 if math.isnan(p) else min(p, 1.0)


def _bootstrap_ci(a: np.ndarray, b: np.ndarray, seed: int) -> Tuple[float, float]:
    """Percentile bootstrap 95 % CI of median(a) − median(b), each sample resampled on its own."""
    rng = np.random.default_rng(seed)
    ma = np.median(a[rng.integers(0, a.size, (_BOOTSTRAP, a.size))], axis=1)
    mb = np.median(b[rng.integers(0, b.size, (_BOOTSTRAP, b.size))], axis=1)
    low, high = np.percentile(ma - mb, [2.5, 97.5])
    return float(low), float(high)


def _effect(tonight_median: float, baseline_median: float, kind: str) -> Optional[float]:
    diff = tonight_median - baseline_median
    if kind == "absolute":
        return diff
    if baseline_median == 0:
        return 0.0 if diff == 0 else None
    return diff / abs(baseline_median)


def _compare(tonight: Sequence[Any], baseline: Sequence[Any], min_effect: MinEffect, seed: int) -> _Comparison:
    a, missing_a = _clean(tonight)
    b, missing_b = _clean(baseline)
    c = _Comparison(a, b, missing_a, missing_b)
    total_a, total_b = a.size + missing_a, b.size + missing_b
    if total_a and missing_a * 2 > total_a and b.size >= MIN_VALUES and b.size * 2 >= total_b:
        # the baseline measured it and tonight mostly did not: the behaviour it measures is gone (a reroute
        # that no longer happens, a flow that no longer arrives): worse, whatever the direction of the figure
        c.early_status = "regression"
        c.early = (f"the figure disappeared: measured in {a.size} of {total_a} repetitions tonight but in "
                   f"{b.size} of {total_b} in the baseline (look at why: e.g. no reroute happened)")
        if b.size:
            c.baseline_median = float(np.median(b))
        return c
    for name, values, missing in (("tonight", a, missing_a), ("in the baseline", b, missing_b)):
        total = values.size + missing
        if total and missing * 2 > total:
            c.early = (f"{missing} of {total} repetitions {name} did not measure the metric; too few to judge "
                       "(look at why the figure is missing)")
            return c
    if a.size < MIN_VALUES or b.size < MIN_VALUES:
        c.early = (f"too few values: {a.size} tonight and {b.size} in the baseline (at least {MIN_VALUES} each "
                   "are needed; run more repetitions or wait for more baseline nights)")
        if a.size:
            c.tonight_median = float(np.median(a))
        if b.size:
            c.baseline_median = float(np.median(b))
        return c
    c.tonight_median, c.baseline_median = float(np.median(a)), float(np.median(b))
    c.effect = _effect(c.tonight_median, c.baseline_median, min_effect.kind)
    c.p_value = _p_value(a, b, seed)
    c.ci = _bootstrap_ci(a, b, seed)
    return c


def _fmt_effect(effect: Optional[float], kind: str, metric_kind: str) -> str:
    if effect is None:
        return "–"
    if kind == "relative":
        return f"{'+' if effect >= 0 else '-'}{abs(effect) * 100:.1f} %"
    return format_amount(effect, metric_kind, signed=True)


def _decide(c: _Comparison, min_effect: MinEffect, higher_is_worse: bool, alpha: float, q_value: Optional[float],
            metric_kind: str, corrected: bool) -> Tuple[str, str]:
    """(status, reason) of a comparison, given the q-value (the p-value when judged alone)."""
    if c.early is not None:
        return c.early_status, c.early
    assert c.tonight_median is not None and c.baseline_median is not None and c.p_value is not None
    medians = (f"median {format_amount(c.tonight_median, metric_kind)} tonight vs "
               f"{format_amount(c.baseline_median, metric_kind)} baseline")
    counts = f"{c.tonight.size} vs {c.baseline.size} values"
    missing = c.missing_tonight + c.missing_baseline
    if missing:
        counts += f", {missing} repetition{'s' if missing > 1 else ''} without the figure left out"
    sig = f"p = {c.p_value:.3g}" + (f", q = {q_value:.3g}" if corrected and q_value is not None else "")
    if c.effect is None:
        return "inconclusive", (f"{medians}: the baseline median is 0, so a relative change is undefined "
                                f"({sig}, {counts}); give this metric an absolute minimum effect")
    change = _fmt_effect(c.effect, min_effect.kind, metric_kind)
    wanted = min_effect.describe(metric_kind)
    ci = (f"95 % CI of the difference [{format_amount(c.ci[0], metric_kind, signed=True)}, "
          f"{format_amount(c.ci[1], metric_kind, signed=True)}]")
    if abs(c.effect) < min_effect.amount:
        return "pass", f"{change} ({medians}) is below the minimum effect of {wanted} ({sig}, {counts})"
    significant = q_value is not None and q_value <= alpha
    if not significant:
        test = "q" if corrected else "p"
        return "inconclusive", (f"{change} ({medians}) reaches the minimum effect of {wanted} but is not "
                                f"significant ({sig}; {test} ≤ {alpha:g} needed; {counts}; {ci}); more "
                                "repetitions would tell")
    worse = (c.effect > 0) == higher_is_worse
    status = "regression" if worse else "improvement"
    word = "worse" if worse else "better"
    return status, (f"{change} {word} ({medians}), at least the minimum effect of {wanted} and significant "
                    f"({sig} ≤ {alpha:g}, {counts}; {ci})")


def _judgement(c: _Comparison, status: str, reason: str, q_value: Optional[float], min_effect: MinEffect,
               higher_is_worse: bool, case: str, key: str, metric: str, target: str,
               baseline_nights: Sequence[str]) -> Judgement:
    return Judgement(
        case=case, key=key, metric=metric, target=target, status=status, reason=reason, p_value=c.p_value,
        q_value=q_value, effect=c.effect, effect_kind=min_effect.kind, min_effect=float(min_effect.amount),
        tonight_median=c.tonight_median, baseline_median=c.baseline_median, ci_low=c.ci[0], ci_high=c.ci[1],
        n_tonight=int(c.tonight.size), n_baseline=int(c.baseline.size), baseline_nights=list(baseline_nights),
        higher_is_worse=bool(higher_is_worse))


def judge(tonight: Sequence[Optional[float]], baseline: Sequence[Optional[float]], min_effect: MinEffect,
          higher_is_worse: bool, alpha: float = 0.05, *, metric_kind: str = "count", case: str = "",
          key: str = "", metric: str = "", target: str = "", baseline_nights: Sequence[str] = (),
          seed: int = 0) -> Judgement:
    """Judge one metric alone: tonight's repetitions against the baseline's (``None``/NaN = not measured).

    The p-value decides (``q_value`` = ``p_value``); ``judge_night`` corrects for the night's many tests.
    ``metric_kind`` (duration, percent, bandwidth, count) only formats the reason. A relative minimum effect
    over a baseline median of 0 is undefined: equal medians (both 0) pass, any other change is
    inconclusive and the reason asks for an absolute minimum effect. ``seed`` makes the bootstrap (and a
    sampled permutation test) reproducible.
    """
    c = _compare(tonight, baseline, min_effect, seed)
    status, reason = _decide(c, min_effect, higher_is_worse, alpha, c.p_value, metric_kind, corrected=False)
    return _judgement(c, status, reason, c.p_value, min_effect, higher_is_worse, case, key, metric, target,
                      baseline_nights)


def _describe_key(rows: pd.DataFrame, key: str) -> Tuple[str, str, bool]:
    if not rows.empty:
        first = rows.iloc[0]
        return str(first["metric"]), str(first["target"]), bool(first["higher_is_worse"])
    metric, _, target = key.partition(" for ")
    return metric, target, True


def judge_night(history: pd.DataFrame, night: str, metrics: Mapping[Tuple[str, str], Tuple[MinEffect, str]],
                baseline_nights: List[str], alpha: float = 0.05) -> List[Judgement]:
    """Judge every (case, key) of ``metrics`` (→ (minimum effect, metric kind)) tonight against the rows of
    ``baseline_nights``; significance is decided on Benjamini–Hochberg q-values over all tests of the night.
    Sorted by case and key. Without baseline nights every metric is inconclusive."""
    missing_cols = {"night", "case", "key", "value"} - set(history.columns)
    if missing_cols:
        raise ValueError(f"history lacks the columns {', '.join(sorted(missing_cols))}")
    tonight_rows = history[history["night"] == night]
    base_rows = history[history["night"].isin(list(baseline_nights))]
    order = [c for c in ("night", "repetition") if c in history.columns]
    pending = []
    for index, ((case, key), (min_effect, kind)) in enumerate(sorted(metrics.items())):
        mine = tonight_rows[(tonight_rows["case"] == case) & (tonight_rows["key"] == key)].sort_values(order)
        base = base_rows[(base_rows["case"] == case) & (base_rows["key"] == key)].sort_values(order)
        metric, target, worse_up = _describe_key(mine if not mine.empty else base, key)
        c = _compare(mine["value"].tolist(), base["value"].tolist(), min_effect, seed=index)
        if not baseline_nights:
            c.early = "no baseline nights yet: the history has no earlier valid night to compare with"
        elif mine.empty:
            c.early = f"no figures tonight (night {night} has no repetition of case {case} with this metric)"
        elif base.empty:
            c.early = f"the baseline nights ({', '.join(baseline_nights)}) have no figures of this metric"
        if c.early is not None:
            c.p_value, c.effect, c.ci = None, None, (None, None)
            if not baseline_nights or mine.empty or base.empty:
                c.early_status = "inconclusive"
        pending.append((case, key, metric, target, worse_up, min_effect, kind, c, _night_medians(base)))
    tested = [i for i, p in enumerate(pending) if p[-2].p_value is not None]
    q_values: Dict[int, float] = {}
    if tested:
        qs = stats.false_discovery_control([pending[i][-2].p_value for i in tested], method="bh")
        q_values = {i: float(q) for i, q in zip(tested, np.atleast_1d(qs))}
    out = []
    for i, (case, key, metric, target, worse_up, min_effect, kind, c, medians) in enumerate(pending):
        q = q_values.get(i)
        status, reason = _decide(c, min_effect, worse_up, alpha, q, kind, corrected=len(tested) > 1)
        if status in ("regression", "improvement"):
            status, reason = _between_nights(status, reason, c, medians, kind)
        out.append(_judgement(c, status, reason, q, min_effect, worse_up, case, key, metric, target,
                              baseline_nights))
    return out


def _night_medians(rows: pd.DataFrame) -> List[float]:
    """The median of each baseline night's measured values."""
    if rows.empty or "night" not in rows.columns:
        return []
    return [float(v) for v in rows.dropna(subset=["value"]).groupby("night")["value"].median().tolist()]


def _between_nights(status: str, reason: str, c: _Comparison, medians: List[float], kind: str) -> Tuple[str, str]:
    """Repetitions of one night share that night's machine: the test above counts each as independent, so a
    night that is merely unlike the others could pass it. With two or more baseline nights, tonight's median
    must also lie beyond every baseline night's median (in the direction of the change) to be called."""
    if len(medians) < 2 or c.tonight_median is None:
        return status, reason
    low, high = min(medians), max(medians)
    beyond = c.tonight_median > high if (c.effect or 0) > 0 else c.tonight_median < low
    if beyond:
        return status, reason + (f"; beyond every baseline night's median ({format_amount(low, kind)} to "
                                 f"{format_amount(high, kind)})")
    return "inconclusive", (f"tonight's median {format_amount(c.tonight_median, kind)} lies within the spread of "
                            f"the baseline nights' medians ({format_amount(low, kind)} to {format_amount(high, kind)}), "
                            f"so it may be the night, not the code; the repetitions alone say {status}: {reason}")


def summarize(judgements: Iterable[Union[Judgement, Mapping[str, Any]]]) -> Dict[str, int]:
    """How many judgements have each status (every status present, 0 if none)."""
    out = {s: 0 for s in STATUSES}
    for j in judgements:
        status = j.status if isinstance(j, Judgement) else str(j["status"])
        out[status] = out.get(status, 0) + 1
    return out
