"""trend.html: every metric of a regression suite over the nights, with tonight's verdicts on top.

One self-contained page (plots are inline PNG; no external URL). Per case and metric key one plot: x = the
suite's nights in order, every repetition's figure as a point (tonight's highlighted), each night's median
as a line, the baseline nights' band (min–max and IQR), the baseline median and the regression threshold
(the baseline median moved by the minimum effect in the worse direction). Nights whose self-checks failed
are greyed and labelled, repetitions of another variant than tonight's have a hollow diamond marker, and
tonight is marked red for a regression, green for an improvement.

Inputs: the history (one row per night × repetition × metric key, see ``REQUIRED_COLUMNS`` and
``OPTIONAL_COLUMNS``) and tonight's judgements (one dict per case × key). A relative ``effect`` and
``min_effect`` are fractions (0.2 = 20 %); absolute ones are in the metric's unit (ns, percentage points,
bit/s, count).
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from runfolder.expectations import METRICS  # noqa: E402

from .htmlpage import PLOT_CHECK_SCRIPT, escape, png  # noqa: E402
from .expectations import fmt_value  # noqa: E402

__all__ = ["render_trend", "write_trend", "trend_figure", "plot_id", "axis_unit", "regression_threshold",
           "Night", "STATUS_ORDER", "REQUIRED_COLUMNS", "OPTIONAL_COLUMNS"]

#: verdict table order: regressions first
STATUS_ORDER: Tuple[str, ...] = ("regression", "inconclusive", "improvement", "pass")
REQUIRED_COLUMNS: Tuple[str, ...] = ("case", "key", "metric", "value", "night")
#: columns the page reads when present, and what it assumes when they are missing
OPTIONAL_COLUMNS: Dict[str, Any] = {"suite": "", "target": "", "higher_is_worse": True, "repetition": 0,
                                    "date": "", "git_revision": "", "router_version": "", "machine": "",
                                    "variant": "", "valid": True}

Judgement = Mapping[str, Any]

_STATUS_COLOR = {"regression": "#c62828", "improvement": "#2e7d32"}
_NEUTRAL = "#444444"
_POINT_COLOR = "#4a7ab5"
_MEDIAN_COLOR = "#1f3b63"
_INVALID_COLOR = "#9e9e9e"
_VARIANT_COLOR = "#7b1fa2"
_MAX_TICK_LABELS = 16

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1250px;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ccc;padding-bottom:.2em}h3{margin-bottom:.2em}
table{border-collapse:collapse;margin:.5em 0;font-size:.88em}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.n{text-align:right;overflow-wrap:anywhere}tr.regression{background:#fdecea}
.regression{color:#b00020;font-weight:600}.improvement{color:#176f2c;font-weight:600}.inconclusive{color:#8a5a00}
.pass{color:#555}.invalid{color:#8a5a00;font-weight:600}img.plot{max-width:100%;display:block;margin:.5em 0}
.note{color:#555;font-size:.9em}.counts span{margin-right:1.2em}
"""



# --- the data -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Night:
    """One night of the suite, as the history describes it."""

    id: str
    date: str
    valid: bool
    variants: Tuple[str, ...]
    git_revision: str
    router_version: str
    machine: str

    @property
    def short_id(self) -> str:
        return self.id.rsplit("-", 1)[-1] if "-" in self.id else self.id[-6:]

    @property
    def label(self) -> str:
        return f"{self.date or self.id[:8]}\n{self.short_id}"


@dataclass(frozen=True)
class _Trend:
    """Everything one page is drawn from."""

    rows: pd.DataFrame
    nights: List[Night]
    tonight: str
    verdicts: Dict[Tuple[str, str], Judgement]

    @property
    def position(self) -> Dict[str, int]:
        return {n.id: i for i, n in enumerate(self.nights)}

    def night(self, night_id: str) -> Optional[Night]:
        return next((n for n in self.nights if n.id == night_id), None)


def _normalise(history: pd.DataFrame, suite: str) -> pd.DataFrame:
    missing = [c for c in REQUIRED_COLUMNS if c not in history.columns]
    if missing:
        raise ValueError(f"the history lacks the column(s) {', '.join(missing)}: the trend page needs one row per "
                         f"night × repetition × metric key with {', '.join(REQUIRED_COLUMNS)}")
    rows = history[history["suite"] == suite].copy() if "suite" in history.columns else history.copy()
    for column, default in OPTIONAL_COLUMNS.items():
        if column not in rows.columns:
            rows[column] = default
    rows["value"] = pd.to_numeric(rows["value"], errors="coerce").astype("float64")
    rows["variant"] = rows["variant"].fillna("").astype(str)
    rows["valid"] = rows["valid"].fillna(True).astype(bool)
    rows["night"] = rows["night"].astype(str)
    return rows.reset_index(drop=True)


def _text(values: pd.Series) -> str:
    """The first non-empty text of a column."""
    for v in values:
        if v is not None and not (isinstance(v, float) and math.isnan(v)) and str(v) != "":
            return str(v)
    return ""


def _nights(rows: pd.DataFrame, tonight: str) -> List[Night]:
    out = [Night(id=str(nid), date=_text(g["date"]), valid=bool(g["valid"].all()),
                 variants=tuple(sorted(set(g["variant"]))), git_revision=_text(g["git_revision"]),
                 router_version=_text(g["router_version"]), machine=_text(g["machine"]))
           for nid, g in rows.groupby("night", sort=True)]
    if tonight not in {n.id for n in out}:
        out.append(Night(tonight, "", True, (), "", "", ""))
        out.sort(key=lambda n: n.id)
    return out


def _trend(history: pd.DataFrame, judgements: Sequence[Judgement], night: str, suite: str) -> _Trend:
    rows = _normalise(history, suite)
    verdicts = {(str(j.get("case")), str(j.get("key"))): j for j in judgements}
    return _Trend(rows=rows, nights=_nights(rows, night), tonight=night, verdicts=verdicts)


def _num(value: Any) -> Optional[float]:
    """A finite float, or None (for None, NaN and anything not a number)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def axis_unit(metric: str) -> Tuple[str, float]:
    """(unit label, divisor from the stored unit): ms for durations (ns), Mbit/s for bandwidth (bit/s)."""
    return {"duration": ("ms", 1e6), "percent": ("%", 1.0), "bandwidth": ("Mbit/s", 1e6),
            "count": ("count", 1.0)}.get(METRICS.get(metric, ""), ("", 1.0))


def regression_threshold(j: Judgement) -> Optional[float]:
    """The baseline median moved by the minimum effect in the worse direction (metric's unit), or None."""
    median, effect = _num(j.get("baseline_median")), _num(j.get("min_effect"))
    if median is None or effect is None:
        return None
    sign = 1.0 if j.get("higher_is_worse", True) else -1.0
    if j.get("effect_kind") == "relative":
        return median * (1.0 + sign * effect)
    return median + sign * effect


def plot_id(case: str, key: str) -> str:
    """The id of the plot of ``case`` × ``key`` (an HTML id without spaces, unique per pair)."""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{case} {key}".lower()).strip("-")[:60]
    digest = hashlib.blake2s(f"{case}\0{key}".encode(), digest_size=4).hexdigest()
    return f"trend-{slug}-{digest}"


# --- formatting ---------------------------------------------------------------------------------------------


def _mpl(text: str) -> str:
    """Text for matplotlib, with no mathtext ($...$) in case names."""
    return text.replace("$", r"\$")


def _fmt(metric: str, value: Any) -> str:
    return fmt_value(metric, _num(value))


def _fmt_effect(metric: str, kind: Any, value: Any, signed: bool = True) -> str:
    v = _num(value)
    if v is None:
        return "–"
    sign = ("+" if v >= 0 else "-") if signed else ""
    if kind == "relative":
        return f"{sign}{abs(v) * 100:.1f} %"
    if METRICS.get(metric) == "percent":
        return f"{sign}{abs(v):.3f} pt"
    return f"{sign}{fmt_value(metric, abs(v))}"


def _fmt_p(value: Any) -> str:
    v = _num(value)
    return "–" if v is None else f"{v:.3g}"


def _status_span(status: Any) -> str:
    s = str(status or "inconclusive")
    return f'<span class="{escape(s)}">{escape(s.upper())}</span>'


# --- the plot -----------------------------------------------------------------------------------------------


def _series(t: _Trend, case: str, key: str) -> pd.DataFrame:
    return t.rows[(t.rows["case"] == case) & (t.rows["key"] == key)]


def _main_variant(t: _Trend, case: str) -> str:
    """Tonight's variant of the case (its most common), "" when tonight has no rows."""
    tonight = t.rows[(t.rows["case"] == case) & (t.rows["night"] == t.tonight)]["variant"]
    return str(tonight.mode().iloc[0]) if not tonight.empty else ""


def _offsets(n: int) -> np.ndarray:
    return np.linspace(-0.18, 0.18, n) if n > 1 else np.zeros(n)


def _draw_points(ax: Axes, t: _Trend, series: pd.DataFrame, scale: float, main: str, status: str) -> None:
    pos, valid = t.position, {n.id: n.valid for n in t.nights}
    groups: Dict[str, List[Tuple[float, float]]] = {}
    for night_id, g in series.sort_values("repetition").groupby("night", sort=False):
        xs = pos[night_id] + _offsets(len(g))
        for x, (_, r) in zip(xs, g.iterrows()):
            if _num(r["value"]) is None:
                continue
            kind = ("invalid" if not valid[night_id] else f"variant:{r['variant']}" if r["variant"] != main
                    else "tonight" if night_id == t.tonight else "points")
            groups.setdefault(kind, []).append((x, r["value"] / scale))
    for kind, pts in groups.items():
        x, y = np.array(pts).T
        sc = ax.scatter(x, y, zorder=3, **_point_style(kind, status))
        sc.set_gid(kind if not kind.startswith("variant:") else "variant-points")


def _point_style(kind: str, status: str) -> Dict[str, Any]:
    if kind == "invalid":
        return dict(s=16, color=_INVALID_COLOR, alpha=0.8, label="self-checks failed")
    if kind.startswith("variant:"):
        name = kind.split(":", 1)[1] or "as shipped"
        return dict(s=30, marker="D", facecolors="none", edgecolors=_VARIANT_COLOR, label=_mpl(f"variant {name}"))
    if kind == "tonight":
        return dict(s=46, color=_STATUS_COLOR.get(status, _POINT_COLOR), edgecolors="black", linewidths=0.8,
                    label="tonight")
    return dict(s=18, color=_POINT_COLOR, alpha=0.75, label="repetitions")


def _night_medians(t: _Trend, series: pd.DataFrame, scale: float, main: str) -> Tuple[np.ndarray, np.ndarray]:
    """(x, median) of every valid night with figures of the main variant."""
    valid = {n.id for n in t.nights if n.valid}
    ok = series[series["night"].isin(valid) & (series["variant"] == main) & series["value"].notna()]
    med = ok.groupby("night")["value"].median()
    pos = t.position
    x = np.array([pos[n] for n in med.index], dtype="float64")
    return x, med.to_numpy(dtype="float64") / scale


def _draw_medians(ax: Axes, t: _Trend, series: pd.DataFrame, scale: float, main: str) -> None:
    x, y = _night_medians(t, series, scale, main)
    if len(x):
        line, = ax.plot(x, y, "-", marker="_", markersize=14, color=_MEDIAN_COLOR, lw=1.3, zorder=4,
                        label="night median")
        line.set_gid("medians")


def _draw_baseline(ax: Axes, series: pd.DataFrame, j: Optional[Judgement], scale: float) -> None:
    if not j:
        return
    base = series[series["night"].isin([str(n) for n in (j.get("baseline_nights") or [])])]["value"].dropna()
    if len(base):
        lo, q1, q3, hi = np.percentile(base.to_numpy(dtype="float64") / scale, [0, 25, 75, 100])
        ax.axhspan(lo, hi, color="#9ecae1", alpha=0.25, lw=0, zorder=1, label="baseline min–max").set_gid(
            "baseline-band")
        ax.axhspan(q1, q3, color="#6baed6", alpha=0.3, lw=0, zorder=1, label="baseline IQR").set_gid("baseline-iqr")
    median = _num(j.get("baseline_median"))
    if median is None and len(base):
        median = float(base.median())
    if median is not None:
        ax.axhline(median / scale, color="#08519c", lw=1, zorder=2, label="baseline median").set_gid(
            "baseline-median")
    threshold = regression_threshold(j)
    if threshold is not None:
        ax.axhline(threshold / scale, color=_STATUS_COLOR["regression"], ls="--", lw=1, zorder=2,
                   label="regression threshold").set_gid("threshold")


def _draw_invalid(ax: Axes, t: _Trend) -> None:
    for i, n in enumerate(t.nights):
        if not n.valid:
            ax.axvspan(i - 0.45, i + 0.45, color=_INVALID_COLOR, alpha=0.15, lw=0, zorder=0).set_gid("invalid-night")
            ax.annotate("self-checks failed", (i, 0.98), xycoords=("data", "axes fraction"), rotation=90,
                        fontsize=7, va="top", ha="center", color="#616161")


def _missing(series: pd.DataFrame) -> Dict[str, int]:
    """Night -> how many of its repetitions were not measured (nights with some)."""
    counts = series[series["value"].isna()].groupby("night").size()
    return {str(n): int(c) for n, c in counts.items()}


def _draw_tonight(ax: Axes, t: _Trend, j: Optional[Judgement]) -> None:
    status = str((j or {}).get("status") or "")
    color = _STATUS_COLOR.get(status, _NEUTRAL)
    x = t.position[t.tonight]
    marker = ax.axvline(x, color=color, ls="-" if status in _STATUS_COLOR else ":", lw=1.2, alpha=0.6, zorder=2)
    marker.set_gid("tonight-marker")
    text = f"tonight: {status.upper()}" if status in _STATUS_COLOR else "tonight"
    if status in _STATUS_COLOR and j is not None:
        text += f" ({_fmt_effect(str(j.get('metric', '')), j.get('effect_kind'), j.get('effect'))})"
    ax.annotate(_mpl(text), (x, 1.01), xycoords=("data", "axes fraction"), fontsize=8, ha="center", va="bottom",
                color=color, fontweight="bold" if status in _STATUS_COLOR else "normal")


def _tick_label(night: Night, missing: int) -> str:
    return night.label + (f"\n{missing} not measured" if missing else "")


def _set_axes(ax: Axes, t: _Trend, j: Optional[Judgement], metric: str, title: str, missing: Dict[str, int]) -> None:
    n = len(t.nights)
    step = max(1, math.ceil(n / _MAX_TICK_LABELS))
    baseline = {str(b) for b in ((j or {}).get("baseline_nights") or [])}
    labels = [_tick_label(night, missing.get(night.id, 0)) if (i % step == 0 or night.id == t.tonight or i == n - 1)
              else "" for i, night in enumerate(t.nights)]
    ax.set_xticks(range(n))
    ax.set_xticklabels(labels, fontsize=7)
    for tick, night in zip(ax.get_xticklabels(), t.nights):
        tick.set_color(_INVALID_COLOR if not night.valid else "#08519c" if night.id in baseline else "black")
        if night.id == t.tonight:
            tick.set_fontweight("bold")
    ax.set_xlim(-0.6, n - 0.4)
    unit, _ = axis_unit(metric)
    ax.set_ylabel(_mpl(f"{metric} ({unit})" if unit else metric))
    ax.set_xlabel("night (date, id; blue: baseline nights, grey: self-checks failed)", fontsize=8)
    ax.set_title(_mpl(title), fontsize=10, loc="left", pad=14)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _figure(t: _Trend, case: str, key: str) -> Figure:
    series = _series(t, case, key)
    j = t.verdicts.get((case, key))
    metric = _metric(t, case, key)
    _, scale = axis_unit(metric)
    main = _main_variant(t, case)
    fig, ax = plt.subplots(figsize=(10.5, 3.8))
    _draw_invalid(ax, t)
    _draw_baseline(ax, series, j, scale)
    _draw_points(ax, t, series, scale, main, str((j or {}).get("status") or ""))
    _draw_medians(ax, t, series, scale, main)
    _draw_tonight(ax, t, j)
    _set_axes(ax, t, j, metric, f"{case}: {key}", _missing(series))
    return fig


def trend_figure(history: pd.DataFrame, judgements: Sequence[Judgement], night: str, suite: str, case: str,
                 key: str) -> Figure:
    """The plot of one case × key as a matplotlib figure (the caller closes it)."""
    return _figure(_trend(history, judgements, night, suite), case, key)


# --- the page -----------------------------------------------------------------------------------------------


def _metric(t: _Trend, case: str, key: str) -> str:
    series = _series(t, case, key)
    if not series.empty:
        return str(series["metric"].iloc[0])
    j = t.verdicts.get((case, key)) or {}
    return str(j.get("metric") or key.split(" for ", 1)[0])


def _cases(t: _Trend) -> List[str]:
    return sorted(set(t.rows["case"].astype(str)) | {c for c, _ in t.verdicts})


def _keys(t: _Trend, case: str) -> List[str]:
    return sorted(set(t.rows.loc[t.rows["case"] == case, "key"].astype(str)) | {k for c, k in t.verdicts if c == case})


def _status_rank(j: Judgement) -> int:
    status = str(j.get("status"))
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER)


def _ordered(judgements: Sequence[Judgement]) -> List[Judgement]:
    return sorted(judgements, key=lambda j: (_status_rank(j), str(j.get("case")), str(j.get("key"))))


def _header(t: _Trend, suite: str, title: str, judgements: Sequence[Judgement]) -> str:
    n = t.night(t.tonight)
    facts = [("night", t.tonight), ("date", n.date if n else ""), ("git revision", n.git_revision if n else ""),
             ("machine", n.machine if n else ""), ("router", n.router_version if n else ""),
             ("variant", ", ".join(v or "as shipped" for v in n.variants) if n else "")]
    out = [f"<h1>{escape(title)}</h1>",
           f'<p>suite <b>{escape(suite)}</b>; tonight: ' + "; ".join(f"{escape(k)} <b>{escape(v or '–')}</b>" for k, v in facts)
           + "</p>"]
    if n is not None and not n.valid:
        out.append('<p class="invalid">Tonight\'s self-checks failed: its figures and verdicts are not to be '
                   "trusted.</p>")
    counts = {s: sum(1 for j in judgements if j.get("status") == s) for s in STATUS_ORDER}
    out.append('<p class="counts">' + "".join(f'<span class="{s}">{counts[s]} {escape(s)}</span>' for s in STATUS_ORDER)
               + "</p>")
    return "".join(out)


def _verdict_row(j: Judgement) -> str:
    metric, kind = str(j.get("metric") or ""), j.get("effect_kind")
    status = str(j.get("status") or "inconclusive")
    # the bootstrap interval of the median difference is in the metric's own unit, whatever the effect's kind
    ci = f"[{_fmt_effect(metric, 'absolute', j.get('ci_low'))}, {_fmt_effect(metric, 'absolute', j.get('ci_high'))}]"
    effect = (f"{_fmt_effect(metric, kind, j.get('effect'))} {ci} "
              f"(min {_fmt_effect(metric, kind, j.get('min_effect'), signed=False)})")
    cells = [("", j.get("case")), ("", j.get("key")), ("", None), ("n", effect),
             ("n", f"{_fmt_p(j.get('p_value'))} / {_fmt_p(j.get('q_value'))}"),
             ("n", _fmt(metric, j.get("tonight_median"))), ("n", _fmt(metric, j.get("baseline_median"))),
             ("n", f"{j.get('n_tonight', '–')} / {j.get('n_baseline', '–')}"), ("", j.get("reason"))]
    tds = "".join(f'<td class="{cls}">{_status_span(status) if i == 2 else escape(v)}</td>'
                  for i, (cls, v) in enumerate(cells))
    return f'<tr class="verdict {escape(status)}" data-status="{escape(status)}">{tds}</tr>'


def _verdict_table(judgements: Sequence[Judgement]) -> str:
    if not judgements:
        return "<p>No verdicts tonight.</p>"
    heads = ["case", "metric", "status", "effect [CI] (min effect)", "p / q", "tonight median", "baseline median",
             "repetitions tonight / baseline", "reason"]
    # fixed column shares: the reason (a sentence with every figure) gets the room, the figures stay on a line
    widths = [8, 13, 8, 15, 8, 7, 7, 6, 28]
    cols = "<colgroup>" + "".join(f'<col style="width:{w}%">' for w in widths) + "</colgroup>"
    return ('<table id="verdicts" style="table-layout:fixed;width:100%">' + cols + "<tr>"
            + "".join(f"<th>{escape(h)}</th>" for h in heads) + "</tr>"
            + "".join(_verdict_row(j) for j in _ordered(judgements)) + "</table>")


def _nights_table(t: _Trend) -> str:
    baseline = {str(b) for j in t.verdicts.values() for b in (j.get("baseline_nights") or [])}
    heads = ["night", "date", "git revision", "router", "machine", "variant", "self-checks", "role"]
    rows = []
    for n in reversed(t.nights):
        role = "tonight" if n.id == t.tonight else "baseline" if n.id in baseline else ""
        checks = "passed" if n.valid else '<span class="invalid">self-checks failed</span>'
        cells = [escape(n.id), escape(n.date), escape(n.git_revision), escape(n.router_version), escape(n.machine),
                 escape(", ".join(v or "as shipped" for v in n.variants)), checks, escape(role)]
        rows.append(f'<tr data-night="{escape(n.id)}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ('<table id="nights"><tr>' + "".join(f"<th>{escape(h)}</th>" for h in heads) + "</tr>" + "".join(rows)
            + "</table>")


def _key_section(t: _Trend, case: str, key: str) -> str:
    j = t.verdicts.get((case, key))
    out = [f"<h3>{escape(key)}</h3>"]
    if j is not None:
        out.append(f'<p class="note">tonight: {_status_span(j.get("status"))} {escape(j.get("reason"))}</p>')
    if _series(t, case, key)["value"].notna().any():
        out.append(png(_figure(t, case, key), plot_id(case, key), f"{case}: {key} over the nights"))
    else:
        out.append(f'<p class="note not-measured" data-key="{escape(key)}">{escape(key)}: not measured on any night '
                   "(every repetition's figure is missing), so there is nothing to plot.</p>")
    return "".join(out)


def _case_section(t: _Trend, case: str) -> str:
    return f"<h2>case {escape(case)}</h2>" + "".join(_key_section(t, case, k) for k in _keys(t, case))


def render_trend(history: pd.DataFrame, judgements: Sequence[Judgement], night: str, suite: str,
                 title: Optional[str] = None) -> str:
    """The trend page as one HTML string: tonight's verdicts, then every case × key over the nights."""
    t = _trend(history, judgements, night, suite)
    title = title or f"testbed trend: {suite}"
    body = [_header(t, suite, title, judgements), "<h2>Tonight's verdicts</h2>", _verdict_table(judgements),
            '<p class="note">Effect: tonight\'s median against the baseline median (relative in %, or in the '
            "metric's unit), with its confidence interval; a regression needs it past the minimum effect in the "
            "worse direction and a q value (p value corrected for the number of tests) below the suite's level. "
            "In the plots: points are repetitions, the line joins each night's median, the band is the baseline "
            "nights' range (darker: their interquartile range), the dashed red line the regression threshold.</p>"]
    body += [_case_section(t, c) for c in _cases(t)]
    body += ["<h2>Nights</h2>", _nights_table(t)]
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{_CSS}</style></head><body>" + "\n".join(body) + PLOT_CHECK_SCRIPT + "</body></html>\n")


def write_trend(path: Union[str, Path], history: pd.DataFrame, judgements: Sequence[Judgement], night: str,
                suite: str, title: Optional[str] = None) -> Path:
    """Write the trend page to ``path`` (its folder is made); returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_trend(history, judgements, night, suite, title), encoding="utf-8")
    return out
