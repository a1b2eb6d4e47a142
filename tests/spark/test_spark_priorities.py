"""One table of priority names (the router codec's) and one spelling in everything a user reads."""
from __future__ import annotations

import json

import pytest

from router.codec import PRIORITY_NAMES
from spark.cli import analyze_command, check_command
from spark.testing import write_run
from spark_builders import small_run
from runfolder.priorities import Priority
from runfolder.expectations import parse_expectation


@pytest.fixture(scope="module")
def summary(spark, tmp_path_factory):
    rd = write_run(small_run("prio"), tmp_path_factory.mktemp("runs"))
    assert analyze_command(str(rd)) == 0
    return rd, json.loads((rd / "report/summary.json").read_text())


def test_summary_spells_every_priority_as_the_codec(summary):
    _rd, s = summary
    codec = set(PRIORITY_NAMES.values())
    names = ({f["priority_name"] for f in s["flows"]} | {p["priority_name"] for p in s["priorities"]}
             | {d["priority_name"] for d in s["router_drops"]})
    assert names - {"all"} <= codec
    realtime = {p["priority_name"] for p in s["priorities"] if p["priority"] == 1}
    realtime |= {f["priority_name"] for f in s["flows"] if f["priority"] == 1}
    realtime |= {d["priority_name"] for d in s["router_drops"] if d["priority_name"] in ("realtime", "real_time")}
    assert realtime == {PRIORITY_NAMES[1]}


def test_report_and_check_use_the_same_spelling(summary, capsys):
    rd, _s = summary
    assert check_command(str(rd)) == 0
    out = capsys.readouterr().out
    assert f"latency.p99 <= 10ms for priority {PRIORITY_NAMES[1]}" in out
    html = (rd / "report/report.html").read_text()
    assert ">realtime<" not in html and f">{PRIORITY_NAMES[1]}<" in html


def test_topologies_accept_both_spellings_and_name_priorities_as_the_codec():
    for text in ("realtime", "real_time", "RealTime", "real-time", "1"):
        e = parse_expectation({"metric": "jitter", "op": "<=", "value": "1ms", "priority": text})
        assert e.priority == Priority.REAL_TIME == 1
        assert e.describe() == f"jitter <= 1ms for priority {PRIORITY_NAMES[1]}"
    assert [p.label for p in Priority] == [PRIORITY_NAMES[p] for p in range(8)]
    assert parse_expectation({"metric": "jitter", "op": "<=", "value": "1ms", "priority": "data_low"}
                                      ).to_json()["priority"] == "data_low"
