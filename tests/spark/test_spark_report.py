"""The report of a synthetic 60 s diamond run: summary.json against its schema, every plot rendered in
headless Chromium, nothing loaded from outside the file, junit.xml with one case per expectation."""
from __future__ import annotations

import json
from xml.etree import ElementTree as ET

import pytest

from spark.cli import analyze_command, check_command
from spark.report import PLOT_IDS
from spark.schema import schema_errors
from spark.testing import T0_NS, diamond_run, write_run
from spark_browser import CHROMIUM, MISSING_REASON, external_urls, rendered_plots

MS = 1_000_000


@pytest.fixture(scope="module")
def diamond(spark, tmp_path_factory):
    rd = write_run(diamond_run(bulk_rate_hz=100, acks=False), tmp_path_factory.mktemp("runs"))
    assert analyze_command(str(rd)) == 0
    return rd


def test_summary_validates_against_its_schema(diamond):
    summary = json.loads((diamond / "report/summary.json").read_text())
    assert schema_errors(summary) == []


def test_schema_validator_rejects_what_is_wrong(diamond):
    summary = json.loads((diamond / "report/summary.json").read_text())
    summary["flows"][0]["sent"] = "many"
    del summary["overall"]["lost"]
    summary["surprise"] = 1
    errors = schema_errors(summary)
    assert any(e.startswith("$.flows[0].sent: 'many' is not of type") for e in errors), errors
    assert any("'lost' is a required property" in e for e in errors), errors
    assert any("'surprise' was unexpected" in e for e in errors), errors


def test_synthetic_diamond_figures(diamond):
    s = json.loads((diamond / "report/summary.json").read_text())
    pub1 = next(f for f in s["flows"] if f["flow"] == "zpub.pub1")
    assert pub1["lost"] == 20 and pub1["reroutes"] == 1
    r = next(r for r in s["reroutes"] if r["flow"] == "zpub.pub1")
    assert (r["old_path"], r["new_path"], r["cause"], r["cause_link"]) == ("r1>r2>r4", "r1>r3>r4", "overload",
                                                                         "r2>r4")
    assert (r["detection_node"], r["detection_event"]) == ("r2", "congestion_detected")
    assert r["lost"] == 20
    # narrowed at 20 s (applied 2 ms later), detected at 21.45 s, first message on r1-r3-r4 at 21.5 s
    onset, detection, first_new = T0_NS + 20_002 * MS, T0_NS + 21_450 * MS, T0_NS + 21_500 * MS + 100_000
    assert (r["onset_ns"], r["detection_ns"], r["time_ns"]) == (onset, detection, first_new)
    assert (r["reroute_time_ns"], r["detection_time_ns"], r["reaction_time_ns"]) == (
        first_new - onset, detection - onset, first_new - detection)
    bulk = next(r for r in s["reroutes"] if r["flow"] == "bulk")
    assert (bulk["onset_ns"], bulk["detection_ns"]) == (onset, detection)
    assert sorted(r["flow"] for r in s["reroutes"]) == ["bulk", "zpub.pub1"]


@pytest.mark.skipif(CHROMIUM is None, reason=MISSING_REASON)
def test_every_plot_renders_in_headless_chromium(diamond):
    total, ok, failed, _dom = rendered_plots(diamond / "report/report.html")
    assert failed == set()
    assert set(PLOT_IDS) <= ok
    assert total == len(ok)


def test_report_is_self_contained(diamond):
    html = (diamond / "report/report.html").read_text()
    assert external_urls(html) == set()
    for plot in PLOT_IDS:
        assert f'id="{plot}"' in html


def test_check_writes_junit_with_one_case_per_expectation(diamond, tmp_path, capsys):
    exp = tmp_path / "expect.yaml"
    exp.write_text("expect:\n"
                   "  - latency.p99 <= 1ms for priority realtime\n"
                   "  - loss <= 1% for flow zpub.pub1\n"
                   "  - reroute.time <= 3s for flow zpub.pub1\n"
                   "  - reroutes_per_episode <= 1\n"
                   "  - {metric: delivery, op: '>=', value: 99%, flow: zpub.realtime}\n")
    junit = tmp_path / "junit.xml"
    assert check_command(str(diamond), str(exp), str(junit)) == 1
    out = capsys.readouterr().out
    assert "FAIL latency.p99 <= 1ms for priority real_time: measured 4.300ms, past the limit 1.000ms by 3.300ms" in out
    assert "FAIL loss <= 1% for flow zpub.pub1: measured 4.000%, past the limit 1.000% by 3.000%" in out
    assert "PASS reroute.time <= 3s for flow zpub.pub1" in out
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = suite.findall("testcase")
    # and the clock check, not measured (the synthetic manifest has no clocks): skipped, not failed
    assert len(cases) == 6 and suite.get("failures") == "2" and suite.get("skipped") == "1"
    assert cases[-1].get("name") == "clock error <= 10% of latency p50" and cases[-1].find("skipped") is not None
    assert [c.get("name") for c in cases if c.find("failure") is not None] == [
        "latency.p99 <= 1ms for priority real_time", "loss <= 1% for flow zpub.pub1"]
    # the topology's own expectations pass
    assert check_command(str(diamond)) == 0
    assert (diamond / "report/junit.xml").exists()


def test_missing_run_folder_is_bad_input(tmp_path):
    assert analyze_command(str(tmp_path / "nope")) == 2
    assert check_command(str(tmp_path / "nope")) == 2
    assert check_command(str(tmp_path)) == 2  # no summary.json yet


def test_unreadable_expectations_are_bad_input(diamond, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- latency.p77 <= 5ms\n")
    assert check_command(str(diamond), str(bad)) == 2
    assert "latency.p77" in capsys.readouterr().err


def test_python_m_spark_check(diamond, capsys):
    from spark.__main__ import main

    assert main(["check", str(diamond)]) == 0
    assert "5 of 5 expectations met" in capsys.readouterr().out


def test_a_zpub_entry_is_measured_as_its_flows_together(diamond, tmp_path, capsys):
    exp = tmp_path / "expect.yaml"
    exp.write_text("- loss <= 1% for flow zpub\n- latency.max <= 4ms for flow zpub\n")
    assert check_command(str(diamond), str(exp)) == 1
    out = capsys.readouterr().out
    # pub1 lost 20 of 500, pub2 and realtime nothing: 20 of 2200 deliveries
    assert "PASS loss <= 1% for flow zpub: measured 0.909%" in out
    assert "FAIL latency.max <= 4ms for flow zpub: measured 4.300ms" in out
