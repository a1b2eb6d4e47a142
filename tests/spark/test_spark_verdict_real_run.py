"""The verdict first (issue 27.4): summary.json's ``verdict`` and report.html's opening banner, from real
analysed runs (tests/spark/data/compare-real: the diamond 45 s with congestion awareness on, which meets
topologies/diamond.yaml's expectations, and off, which misses two of them and cannot measure a third).
The banner's place in a whole report.html is tested on a real run in test_spark_real_run.py."""
from __future__ import annotations

import json
import re
from pathlib import Path

from jsonschema import Draft202012Validator

from spark.expectations import clock_check, evaluate, parse_expectations
from spark.schema import SUMMARY_SCHEMA
from spark.verdict import verdict_banner, verdict_summary
from runfolder.wording import plural

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data" / "compare-real"
DIAMOND = (ROOT / "topologies" / "diamond.yaml").read_text()


def _verdicts(run: str):
    summary = json.loads((DATA / run / "report" / "summary.json").read_text())
    return evaluate(parse_expectations(DIAMOND, "diamond.yaml"), summary) + [clock_check(summary)]


def _schema_errors(verdict: dict) -> list:
    """The verdict against its part of summary.schema.json (these summaries predate it; the whole summary of
    a run analysed now is validated in test_spark_report.py and test_spark_real_run.py)."""
    schema = {**SUMMARY_SCHEMA["properties"]["verdict"], "$defs": SUMMARY_SCHEMA["$defs"]}
    return [e.message for e in Draft202012Validator(schema).iter_errors(verdict)]


def test_a_failing_run_opens_with_fail_and_each_failed_expectation_with_its_figures():
    verdicts = _verdicts("aware-off")
    html = verdict_banner(verdicts)
    assert html.startswith('<div class="verdict fail" id="verdict"><b class="word">FAIL</b>')
    assert "2 of 5 expectations met; clock check passed" in html
    items = re.findall(r"<li>(.*?)</li>", html)
    assert len(items) == 3
    # measured, limit and margin in the metric's unit, as check prints them
    assert items[0] == ("<b>latency.p99 &lt;= 50ms for priority real_time</b>: measured 182.208ms, limit 50.000ms, "
                        "margin -132.208ms (past the limit by 132.208ms)")
    assert items[1].startswith("<b>reroute.time &lt;= 3s for flow zpub.pub1</b>: not measured (flow zpub.pub1: "
                               "no reroute happened")
    assert "reroutes_per_episode" in items[2] and "not measured" in items[2]
    # nothing about the passing ones
    assert "zpub.realtime" not in html and "zpub.pub2" not in html


def test_a_passing_run_opens_with_pass_and_lists_nothing():
    html = verdict_banner(_verdicts("aware-on"))
    assert html == ('<div class="verdict pass" id="verdict"><b class="word">PASS</b>5 of 5 expectations met; '
                    "clock check passed</div>")


def test_summary_verdict_carries_every_expectation_and_the_clock_check():
    off = verdict_summary(_verdicts("aware-off"))
    assert _schema_errors(off) == []
    assert off["passed"] is False and off["reason"] is None
    assert off["failed"] == ["latency.p99 <= 50ms for priority real_time", "reroute.time <= 3s for flow zpub.pub1",
                             "reroutes_per_episode <= 1"]
    assert len(off["expectations"]) == 5 and off["clock_check"]["metric"] == "clock_error_share"
    p99 = off["expectations"][0]
    assert p99["limit"] == 50e6 and round(p99["measured"] / 1e6, 3) == 182.208 and p99["margin"] < 0
    assert p99["shown"] == {"measured": "182.208ms", "limit": "50.000ms", "margin": "-132.208ms"}
    assert off["clock_check"]["shown"] == {"measured": "0.000%", "limit": "10.000%", "margin": "10.000%"}
    on = verdict_summary(_verdicts("aware-on"))
    assert _schema_errors(on) == [] and on["passed"] is True and on["failed"] == []


def test_no_verdict_when_the_expectations_cannot_be_read():
    why = "the expectations cannot be read: topology.yaml: not YAML"
    assert verdict_summary(None, why) == {"passed": None, "reason": why, "failed": [], "expectations": [],
                                          "clock_check": None}
    assert _schema_errors(verdict_summary(None, why)) == []
    assert verdict_banner(None, why) == ('<div class="verdict none" id="verdict"><b class="word">NO VERDICT</b>'
                                         f"{why}</div>")


def test_plural():
    assert [plural(n, "expectation") for n in (0, 1, 2)] == ["0 expectations", "1 expectation", "2 expectations"]
    assert plural(1, "delivery", "deliveries") == "1 delivery" and plural(3, "delivery", "deliveries") == "3 deliveries"
