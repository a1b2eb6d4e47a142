"""The nodes' clocks (manifest ``clocks``) in the analysis: one-way latencies corrected by the offsets of the
publisher's and the subscriber's clocks, interpolated between the readings before and after the run, each
flow's latency figures carrying ``clock_error_ns``, the summary's ``clocks`` section, the clock check in the
verdicts (junit.xml, check.json, report.html), for measured clocks, same-host clocks and runs without clocks."""
from __future__ import annotations

import json
import shutil
import sys
from xml.etree import ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from spark.clockcorrection import NodeClock, RunClocks, correct_latencies, flow_clock_errors, read_clocks
from spark.cli import analyze_command, check_command
from spark.expectations import clock_check, clock_error_max_share
from spark.schema import schema_errors
from spark.testing import T0_NS, write_run
from spark_builders import (CLOCK_BOUND_NS, CLOCKED_DURATION_S, CLOCKED_LATENCY_NS, MS, R1_OFFSET_NS, R2_OFFSET_NS,
                            S, US, clock_readings, clocked_run)
from runfolder.expectations import ExpectationError
from runfolder.records import ClockReading, clocks_json
from testbed.clocksync import (CLOCK_LOOP_CODE, clock_loop_argv, exchange_offset, same_host_reading,
                               subprocess_channel)

#: in the drifting run, r2's clock gains 0.6 ms over the 10 s (60 ppm); r1 stays 2 ms behind
R2_DRIFT_NS = 600 * US
DRIFTING = {"r1": (R1_OFFSET_NS, R1_OFFSET_NS), "r2": (R2_OFFSET_NS, R2_OFFSET_NS + R2_DRIFT_NS)}
#: bound(r1) + bound(r2) = 0.2 ms + (0.2 ms + r2's whole 0.6 ms change)
DRIFTING_CLOCK_ERROR_NS = CLOCK_BOUND_NS + CLOCK_BOUND_NS + R2_DRIFT_NS


def summary_of(rd):
    return json.loads((rd / "report/summary.json").read_text())


def flow(summary, name):
    return next(f for f in summary["flows"] if f["flow"] == name)


# ---------------------------------------------------------------- the clock model (no Spark)


def reading(node, offset, at_ns, bound=CLOCK_BOUND_NS, method="exchange"):
    return ClockReading(node, method, offset, bound, 2 * bound, at_ns, 16, "test")


def test_offsets_are_interpolated_between_the_readings_and_held_outside():
    c = NodeClock("r2", reading("r2", 5 * MS, T0_NS), reading("r2", 5 * MS + 600 * US, T0_NS + 10 * S))
    t = np.array([T0_NS - S, T0_NS, T0_NS + 5 * S, T0_NS + 10 * S, T0_NS + 11 * S], dtype="int64")
    assert c.offset_at(t).tolist() == [5 * MS, 5 * MS, 5 * MS + 300 * US, 5 * MS + 600 * US, 5 * MS + 600 * US]
    assert c.drift_ppm == pytest.approx(60.0)
    assert c.bound_ns == CLOCK_BOUND_NS + 600 * US  # the worst case of a clock that stepped: the whole change
    # a node timestamp is 5.3 ms ahead of the controller time it was read at: the offset is the one then
    assert c.offset_at_node_time(np.array([T0_NS + 5 * S + 5 * MS + 300 * US]))[0] == pytest.approx(5.3e6, abs=0.1)
    # only before: that reading, no drift, no interpolation term
    only = NodeClock("r2", reading("r2", 5 * MS, T0_NS, bound=150 * US), None)
    assert only.offset_at(t).tolist() == [5 * MS] * 5 and only.drift_ppm is None and only.bound_ns == 150 * US
    # the larger of the two bounds
    assert NodeClock("n", reading("n", 0, 0, bound=10), reading("n", 0, S, bound=30)).bound_ns == 30
    same = NodeClock("h", same_host_reading("h", 0), same_host_reading("h", S))
    assert (same.bound_ns, same.measured, same.method) == (0, False, "same-host") and not same.offset_at(t).any()


def test_latencies_are_corrected_by_both_ends_and_get_their_error_bound():
    clocks = RunClocks({"r1": NodeClock("r1", reading("r1", R1_OFFSET_NS, T0_NS), None),
                        "r2": NodeClock("r2", reading("r2", R2_OFFSET_NS, T0_NS), None)})
    true_send = T0_NS + np.arange(4) * 50 * MS
    # f: r1 -> r2, g: r2 -> r1, h: r1 -> r1 (one clock at both ends), x: from a node without a reading
    rows = [("f", "r2", R1_OFFSET_NS, R2_OFFSET_NS), ("g", "r1", R2_OFFSET_NS, R1_OFFSET_NS),
            ("h", "r1", R1_OFFSET_NS, R1_OFFSET_NS), ("x", "r2", 0, R2_OFFSET_NS)]
    d = pd.concat([pd.DataFrame({"flow": f, "node": sub, "seq": np.arange(4), "send_ns": true_send + po,
                                 "recv_ns": true_send + CLOCKED_LATENCY_NS + so}) for f, sub, po, so in rows],
                  ignore_index=True)
    d["latency_ns"] = d["recv_ns"] - d["send_ns"]
    publishers = {"f": "r1", "g": "r2", "h": "r1", "x": "r9"}
    out = correct_latencies(d, publishers, clocks)
    got = out.groupby("flow")["latency_ns"].agg(["min", "max"])
    assert got.loc["f"].tolist() == got.loc["g"].tolist() == got.loc["h"].tolist() == [CLOCKED_LATENCY_NS] * 2
    assert got.loc["x"].tolist() == [CLOCKED_LATENCY_NS + R2_OFFSET_NS] * 2  # no reading for r9: as logged
    raw = out.groupby("flow")["raw_latency_ns"].first()
    assert (raw["f"], raw["g"]) == (CLOCKED_LATENCY_NS + 7 * MS, CLOCKED_LATENCY_NS - 7 * MS)
    flows = [{"name": "f", "publisher": "r1", "subscribers": ["r2"]}, {"name": "h", "publisher": "r1",
                                                                       "subscribers": ["r1"]},
             {"name": "x", "publisher": "r9", "subscribers": ["r2"]}]
    assert flow_clock_errors(flows, clocks) == {"f": 2 * CLOCK_BOUND_NS, "h": 0, "x": None}
    assert flow_clock_errors(flows, None) == {"f": None, "h": None, "x": None}


def test_manifest_clocks_are_read_and_their_problems_said():
    clocks, problems = read_clocks({"clocks": clock_readings(DRIFTING)})
    assert problems == [] and clocks.measured and set(clocks.nodes) == {"r1", "r2"}
    assert clocks.summary()["max_bound_ns"] == CLOCK_BOUND_NS + R2_DRIFT_NS
    clocks, problems = read_clocks({"clocks": clock_readings(DRIFTING, after=False)})
    assert clocks.nodes["r2"].after is None and "no readings after the run" in problems[0]
    assert read_clocks({"run_id": "old"}) == (None, [])
    clocks, problems = read_clocks({"clocks": {"before": {"r1": {"node": "r1"}}}})
    assert clocks is None and problems[0].startswith("clocks unreadable, latencies not corrected: clocks.before.r1")


def clock_summary(clocks, *flows):
    return {"clocks": clocks, "flows": [{"flow": n, "latency": None if p50 is None else
                                         {"p50_ns": p50, "clock_error_ns": err}} for n, p50, err in flows]}


MEASURED = {"measured": True, "max_bound_ns": 200 * US, "nodes": []}


def test_clock_check_around_its_threshold():
    s = clock_summary(MEASURED, ("f", 5 * MS, 400 * US), ("g", 10 * MS, 400 * US))
    v = clock_check(s)  # 8 % of f's p50: inside the default 10 %
    assert (v.passed, v.skipped, v.measured, v.expectation) == (True, False, pytest.approx(0.08),
                                                                 "clock error <= 10% of latency p50")
    assert v.message.startswith("PASS clock error <= 10% of latency p50: measured 8.000% (limit 10.000%, margin "
                                "2.000%; worst flow f: clock error ±400.0us against p50 5.000ms")
    assert clock_check(s, 0.081).passed and not clock_check(s, 0.079).passed
    v = clock_check(s, 0.05)
    assert v.message.startswith("FAIL clock error <= 5% of latency p50: measured 8.000%, past the limit 5.000% by "
                                "3.000%")
    # same host: passes, saying so; no clocks: not measured, not a failure
    v = clock_check(clock_summary({"measured": False, "max_bound_ns": 0, "nodes": []}, ("f", 5 * MS, 0)))
    assert v.passed and not v.skipped and "same host" in v.message
    v = clock_check(clock_summary(None, ("f", 5 * MS, None)))
    assert v.passed and v.skipped and v.measured is None and "not measured" in v.message
    # a node without a reading, or a p50 the correction made negative: fails
    v = clock_check(clock_summary(MEASURED, ("f", 5 * MS, None)))
    assert not v.passed and "no clock reading for a node of flow f" in v.message
    v = clock_check(clock_summary(MEASURED, ("f", -1 * MS, 400 * US)))
    assert not v.passed and "not positive" in v.message


def test_the_threshold_from_the_topology():
    """Spelled as the spec reads it (testbed.spec: a percentage above 0)."""
    assert clock_error_max_share("name: x\nclock_error_max_share: 5%\n", "t.yaml") == pytest.approx(0.05)
    assert clock_error_max_share({"clock_error_max_share": "25%"}, "t.yaml") == pytest.approx(0.25)
    assert clock_error_max_share("name: x\n", "t.yaml") is None
    for bad, why in (("0%", "above 0%"), ("0.1", "no % sign"), ("120%", "over 100%"), ("lots", "")):
        with pytest.raises(ExpectationError, match=f"t.yaml: clock_error_max_share: .*{why}"):
            clock_error_max_share(f"clock_error_max_share: {bad}\n", "t.yaml")
    from spark.__main__ import _share

    assert _share("15%") == pytest.approx(0.15)


# ---------------------------------------------------------------- whole runs through Spark


@pytest.fixture(scope="module")
def drifting(spark, tmp_path_factory):
    """r1 2 ms behind the controller, r2 5 ms ahead and gaining 60 ppm; bounds 0.2 ms."""
    rd = write_run(clocked_run("drifting", offsets=DRIFTING), tmp_path_factory.mktemp("clocks"))
    assert analyze_command(str(rd)) == 0
    return rd


def test_latencies_are_corrected_exactly_with_drift_interpolated(drifting):
    s = summary_of(drifting)
    assert schema_errors(s) == [] and s["schema"] == "testbed-summary/6"
    for name in ("f", "g"):
        lat = flow(s, name)["latency"]
        # logged: f 5 + 7 ms (+ up to 0.6 ms of drift), g 5 - 7 ms: corrected, every one of them 5 ms
        assert lat["min_ns"] == pytest.approx(CLOCKED_LATENCY_NS, abs=2)
        assert lat["max_ns"] == pytest.approx(CLOCKED_LATENCY_NS, abs=2)
        assert lat["clock_error_ns"] == DRIFTING_CLOCK_ERROR_NS == 1000 * US
    assert s["overall"]["latency"]["clock_error_ns"] == DRIFTING_CLOCK_ERROR_NS
    assert all(p["latency"]["clock_error_ns"] == DRIFTING_CLOCK_ERROR_NS for p in s["priorities"])
    nodes = {n["node"]: n for n in s["clocks"]["nodes"]}
    assert s["clocks"]["measured"] is True and s["clocks"]["max_bound_ns"] == 800 * US
    assert (nodes["r2"]["offset_before_ns"], nodes["r2"]["offset_after_ns"]) == (5 * MS, 5 * MS + R2_DRIFT_NS)
    assert (nodes["r2"]["bound_ns"], nodes["r1"]["bound_ns"]) == (800 * US, 200 * US)
    assert nodes["r2"]["drift_ppm"] == pytest.approx(60.0) and nodes["r1"]["drift_ppm"] == 0
    assert nodes["r1"]["method"] == "exchange" and s["input"]["problems"] == []


def test_the_clock_check_fails_past_its_share_and_passes_within(drifting, tmp_path, capsys):
    # 1.0 ms against p50 5 ms: 20 %, past the default 10 %
    assert check_command(str(drifting)) == 1
    out = capsys.readouterr().out
    assert "PASS latency.p50 <= 6ms for flow f: measured 5.000ms" in out
    assert ("FAIL clock error <= 10% of latency p50: measured 20.000%, past the limit 10.000% by 10.000% "
            "(worst flow ") in out
    assert ": clock error ±1.000ms against p50 5.000ms; largest node bound 800.0us)" in out
    assert "check: 1 of 1 expectation met, clock check FAILED; FAILED: clock error <= 10% of latency p50" in out
    suite = ET.parse(drifting / "report/junit.xml").getroot().find("testsuite")
    case = next(c for c in suite.findall("testcase") if c.get("classname").endswith(".clocks"))
    assert case.get("name") == "clock error <= 10% of latency p50" and suite.get("failures") == "1"
    assert case.find("failure").get("type") == "clock error too large"
    check = json.loads((drifting / "report/check.json").read_text())
    assert check["passed"] is False and check["verdicts"][-1]["metric"] == "clock_error_share"
    # around the threshold, given to the check
    assert check_command(str(drifting), clock_error_max_share=0.199) == 1
    assert check_command(str(drifting), clock_error_max_share=0.201) == 0
    capsys.readouterr()
    # or written in the topology
    topo = drifting / "topology.yaml"
    saved = topo.read_text()
    try:
        topo.write_text(saved + "clock_error_max_share: 25%\n")
        assert check_command(str(drifting)) == 0
        assert "PASS clock error <= 25% of latency p50: measured 20.000%" in capsys.readouterr().out
    finally:
        topo.write_text(saved)


def test_the_report_shows_the_clocks_and_the_latencies_error(drifting):
    html = (drifting / "report/report.html").read_text()
    assert "<h2>Clocks</h2>" in html and "drift ppm" in html and "+60.000" in html
    assert "clock error ± ms" in html and "±1.000" in html
    assert "clock error &lt;= 10% of latency p50" in html and "FAIL" in html


def test_offsets_read_by_the_real_exchange_correct_the_latencies(spark, tmp_path):
    """The clocks read for real: the exchange with a local clock loop shifted as each node's clock is, and the
    logs written on those clocks: the latencies come out within their clock error of the true 5 ms."""
    python = shutil.which("python3") or sys.executable
    offsets = {"r1": R1_OFFSET_NS, "r2": R2_OFFSET_NS}
    readings = {}
    for when in ("before", "after"):
        readings[when] = {}
        for node, off in offsets.items():
            code = CLOCK_LOOP_CODE.replace("time.time_ns()", f"(time.time_ns()+{off})")
            with subprocess_channel(clock_loop_argv(python, code)) as ch:
                r = exchange_offset(ch, node, rounds=8)
            # as if read at the start and at the end of the run's clock
            at = T0_NS if when == "before" else T0_NS + int(CLOCKED_DURATION_S * S)
            readings[when][node] = ClockReading(**{**r.to_json(), "at_ns": at})
            assert abs(r.offset_ns - off) <= r.bound_ns
    run = clocked_run("live-clocks", offsets={n: (o, o) for n, o in offsets.items()})
    run.clocks = clocks_json(readings["before"], readings["after"])
    rd = write_run(run, tmp_path)
    assert analyze_command(str(rd)) == 0
    s = summary_of(rd)
    for name in ("f", "g"):
        lat = flow(s, name)["latency"]
        err = lat["clock_error_ns"]
        assert 0 < err < 2 * MS
        assert abs(lat["p50_ns"] - CLOCKED_LATENCY_NS) <= err and abs(lat["max_ns"] - CLOCKED_LATENCY_NS) <= err
    assert {n["method"] for n in s["clocks"]["nodes"]} == {"exchange"}
    assert check_command(str(rd)) == 0


def test_same_host_clocks_need_no_correction(spark, tmp_path, capsys):
    rd = write_run(clocked_run("same-host", clocks="same-host"), tmp_path)
    assert analyze_command(str(rd)) == 0
    s = summary_of(rd)
    assert schema_errors(s) == []
    assert s["clocks"]["measured"] is False and s["clocks"]["max_bound_ns"] == 0
    assert {n["method"] for n in s["clocks"]["nodes"]} == {"same-host"}
    for name in ("f", "g"):
        lat = flow(s, name)["latency"]
        assert lat["p50_ns"] == lat["max_ns"] == CLOCKED_LATENCY_NS and lat["clock_error_ns"] == 0
    assert check_command(str(rd)) == 0
    out = capsys.readouterr().out
    assert "PASS clock error <= 10% of latency p50: same host: every node reads the controller's clock" in out
    html = (rd / "report/report.html").read_text()
    assert "same host" in html and "clock error ± ms" not in html


def test_a_run_without_clocks_is_analysed_as_before(spark, tmp_path, capsys):
    """An older run from two machines, no clocks in its manifest: nothing corrected, the clock error unknown,
    the clock check not measured (and not a failure)."""
    rd = write_run(clocked_run("old", clocks=None, expect=()), tmp_path)
    assert "clocks" not in json.loads((rd / "manifest.json").read_text())
    assert analyze_command(str(rd)) == 0
    s = summary_of(rd)
    assert schema_errors(s) == [] and s["clocks"] is None
    # as logged: f's subscriber 7 ms ahead of its publisher, g's 7 ms behind
    assert flow(s, "f")["latency"]["p50_ns"] == CLOCKED_LATENCY_NS + 7 * MS
    assert flow(s, "g")["latency"]["p50_ns"] == CLOCKED_LATENCY_NS - 7 * MS
    assert all(f["latency"]["clock_error_ns"] is None for f in s["flows"])
    assert s["overall"]["latency"]["clock_error_ns"] is None
    assert check_command(str(rd)) == 0
    out = capsys.readouterr().out
    assert "SKIP clock error <= 10% of latency p50: not measured: the manifest has no clock readings" in out
    assert "clock check not measured" in out
    suite = ET.parse(rd / "report/junit.xml").getroot().find("testsuite")
    assert suite.get("skipped") == "1" and suite.get("failures") == "0"
    assert suite.find("testcase").find("skipped") is not None
    html = (rd / "report/report.html").read_text()
    assert "NOT MEASURED" in html and "no clock readings" in html
