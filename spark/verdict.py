"""The run's verdict, first: what summary.json's ``verdict`` holds and the banner that opens report.html.

The verdict is the topology's expectations and the clock check, evaluated by ``spark.expectations`` when the
run is analysed (``testbed check`` evaluates them again, possibly against another file, and gates on them).
A verdict is PASS when every expectation and the clock check passed (a skipped clock check is not a failure),
FAIL otherwise; with no verdicts at all (the expectations could not be read) there is none.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from runfolder.wording import plural

from .expectations import CLOCK_METRIC, Verdict, fmt_value
from .htmlpage import escape

__all__ = ["verdict_summary", "verdict_banner", "VERDICT_CSS"]


def _show(v: Verdict, x: Optional[float]) -> Optional[str]:
    """A figure of ``v`` in its metric's unit (the clock check's are shares, shown as percentages)."""
    if x is None:
        return None
    return f"{x * 100:.3f}%" if v.metric == CLOCK_METRIC else fmt_value(v.metric, x)


def _figures(v: Verdict) -> dict:
    """The measured value, limit and margin as a person reads them (in the metric's unit)."""
    return {"measured": _show(v, v.measured), "limit": _show(v, v.limit), "margin": _show(v, v.margin)}


def verdict_summary(verdicts: Optional[Sequence[Verdict]], why_none: str = "") -> dict:
    """summary.json's ``verdict``: ``passed`` (None when there is no verdict, ``reason`` says why), the failed
    expectations' texts, and every expectation and the clock check with measured value, limit and margin (as
    numbers in the metric's unit and as text)."""
    if verdicts is None:
        return {"passed": None, "reason": why_none or "the expectations could not be read", "failed": [],
                "expectations": [], "clock_check": None}
    expectations = [v for v in verdicts if v.metric != CLOCK_METRIC]
    clock = next((v for v in verdicts if v.metric == CLOCK_METRIC), None)

    def entry(v: Verdict) -> dict:
        return {**v.as_dict(), "shown": _figures(v)}

    return {"passed": all(v.passed for v in verdicts), "reason": None,
            "failed": [v.expectation for v in verdicts if not v.passed],
            "expectations": [entry(v) for v in expectations],
            "clock_check": None if clock is None else entry(clock)}


VERDICT_CSS = """
.verdict{padding:.8em 1.2em;margin:0 0 1em;border-radius:6px;font-size:1.1em}
.verdict.pass{background:#e3f4e6;border:2px solid #176f2c}
.verdict.fail{background:#fbe4e7;border:2px solid #b00020}
.verdict.none{background:#fff4dc;border:2px solid #8a5a00;color:#8a5a00}.verdict b.word{font-size:1.5em;margin-right:.4em}
.verdict ul{margin:.4em 0 0;font-size:.9em;color:#222;font-weight:normal}
"""


def _failure_line(v: Verdict) -> str:
    f = _figures(v)
    if v.measured is None:
        why = v.message.split("not measured: ", 1)[-1]
        return f"<li><b>{escape(v.expectation)}</b>: not measured ({escape(why)})</li>"
    return (f"<li><b>{escape(v.expectation)}</b>: measured {escape(f['measured'])}, limit {escape(f['limit'])}, "
            f"margin {escape(f['margin'])} (past the limit by {escape(_show(v, abs(v.margin or 0.0)))})</li>")


def verdict_banner(verdicts: Optional[List[Verdict]], why_none: str = "") -> str:
    """The first thing in report.html: PASS or FAIL, how many expectations were met, and each failed one with
    its measured value, limit and margin (negative: past the limit)."""
    if verdicts is None:
        return (f'<div class="verdict none" id="verdict"><b class="word">NO VERDICT</b>'
                f'{escape(why_none or "the expectations could not be read")}</div>')
    expectations = [v for v in verdicts if v.metric != CLOCK_METRIC]
    clock = next((v for v in verdicts if v.metric == CLOCK_METRIC), None)
    failed = [v for v in verdicts if not v.passed]
    met = sum(1 for v in expectations if v.passed and not v.skipped)
    unmeasured = [v for v in expectations if v.skipped]
    what = (f"{met} of {plural(len(expectations), 'expectation')} met" if expectations
            else "no expectations in the topology")
    if unmeasured:
        what += f", {len(unmeasured)} not measurable (a shortened run)"
    if clock is not None:
        what += "; clock check " + ("not measured" if clock.skipped else "passed" if clock.passed else "FAILED")
    word, cls = ("FAIL", "fail") if failed else ("PASS", "pass")
    items = "".join(_failure_line(v) for v in failed) + "".join(
        f"<li><b>{escape(v.expectation)}</b>: {escape(v.message.split(': ', 1)[-1])}</li>" for v in unmeasured)
    return (f'<div class="verdict {cls}" id="verdict"><b class="word">{word}</b>{escape(what)}'
            + (f"<ul>{items}</ul>" if items else "") + "</div>")
