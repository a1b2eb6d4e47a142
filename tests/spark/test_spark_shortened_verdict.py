"""A run shorter than its topology: the expectations it could not measure are "not measurable" in the verdict
(issue 27.3), as its manifest recorded them before anything was built, instead of a FAIL on '0 of 0 deliveries
lost'. The run folder here is written by hand: a topology, a manifest and a summary, no Spark."""
from __future__ import annotations

import json
from pathlib import Path

from spark.cli import check_command
from spark.expectations import evaluate, parse_expectations, shortened_expectations
from spark.verdict import verdict_banner

S = 10**9
TOPOLOGY = "name: t\nduration: 60s\nexpect:\n  - \"loss <= 1% for flow a\"\n  - \"loss <= 2% for flow b\"\n"
SHORTENED = {"duration_ns": 20 * S, "topology_duration_ns": 60 * S, "items": [],
             "unmeasurable": {"loss <= 2% for flow b": "flow b sends nothing before the end"}}


def _flow(name: str, expected: int, delivered: int) -> dict:
    lost = expected - delivered
    return {"flow": name, "priority": 5, "sent": expected, "expected": expected, "delivered": delivered, "lost": lost,
            "loss_pct": 100.0 * lost / expected if expected else None, "latency": None}


SUMMARY = {"flows": [_flow("a", 400, 400), _flow("b", 0, 0)], "flow_groups": [], "priorities": [],
           "overall": _flow("all", 400, 400)}


def write_run(folder: Path, shortened: bool) -> Path:
    (folder / "report").mkdir(parents=True)
    (folder / "topology.yaml").write_text(TOPOLOGY)
    (folder / "manifest.json").write_text(json.dumps({"run_id": "t", "extra": {"shortened": SHORTENED}
                                                      if shortened else {}}))
    (folder / "report" / "summary.json").write_text(json.dumps(SUMMARY))
    return folder


def test_not_measurable_instead_of_a_fake_fail(tmp_path, capsys):
    run = write_run(tmp_path / "short", shortened=True)
    assert check_command(str(run)) == 0
    out = capsys.readouterr().out
    assert "PASS loss <= 1% for flow a: measured 0.000%" in out
    assert "SKIP loss <= 2% for flow b: not measurable: flow b sends nothing before the end (the run lasted 20s, " \
           "not the topology's 60s)" in out
    assert "check: 1 of 2 expectations met, 1 not measurable (a shortened run)" in out
    verdicts = json.loads((run / "report" / "check.json").read_text())["verdicts"]
    assert verdicts[1]["skipped"] is True and verdicts[1]["measured"] is None
    assert "<skipped" in (run / "report" / "junit.xml").read_text()


def test_a_full_run_that_sent_nothing_still_fails(tmp_path, capsys):
    """Only what the shortened run said beforehand is excused: a flow of a full run that sent nothing fails."""
    run = write_run(tmp_path / "full", shortened=False)
    assert check_command(str(run)) == 1
    assert "FAIL loss <= 2% for flow b: not measured" in capsys.readouterr().out


def test_the_banner_says_it():
    unmeasurable = shortened_expectations({"extra": {"shortened": SHORTENED}})
    verdicts = evaluate(parse_expectations(TOPOLOGY, "t"), SUMMARY, unmeasurable)
    banner = verdict_banner(verdicts)
    assert ">PASS<" in banner and "1 of 2 expectations met, 1 not measurable (a shortened run)" in banner
    assert "<b>loss &lt;= 2% for flow b</b>: not measurable: flow b sends nothing" in banner
    assert shortened_expectations({"extra": {}}) == {} and shortened_expectations(None) == {}
