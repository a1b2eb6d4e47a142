"""A night's plan, state, resume, time estimate, self-checks and outputs (no lab needed)."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from testbed.suite import selfcheck
from testbed.suite.night import NightState, RepetitionResult, find_unfinished, new_night_id, plan_order
from testbed.suite.outputs import night_status, suite_junit
from testbed.suite.runner import Eta, figures_of
from testbed.suite.spec import load_suite

ROOT = Path(__file__).resolve().parents[2]


def test_the_order_is_shuffled_complete_and_reproducible():
    reps = {"a": 5, "b": 5, "c": 3}
    order = plan_order(reps, seed=7)
    assert Counter(r.case for r in order) == Counter(reps)
    assert sorted({(r.case, r.number) for r in order}) == sorted((c, n) for c, k in reps.items()
                                                                  for n in range(1, k + 1))
    assert order == plan_order(reps, seed=7)
    assert order != plan_order(reps, seed=8)
    # shuffled, not case after case: some case is interrupted by another before its last repetition
    assert [r.case for r in order] != sorted(r.case for r in order)


def test_night_ids_sort_by_time_and_differ():
    a, b = new_night_id(1_700_000_000 * 10**9), new_night_id(1_700_000_001 * 10**9)
    assert a < b and a.startswith("20231114T221320Z-")
    assert new_night_id(10**18) != new_night_id(10**18)


def test_state_survives_a_restart_and_resume_skips_what_is_recorded(tmp_path):
    state = NightState.create(tmp_path, "smoke", "/x/smoke.yaml", {"a": 2, "b": 2}, "", seed=3)
    first, second, third = state.order[:3]
    state.record(RepetitionResult(first.case, first.number, "/r/1", "completed", expect_passed=True, wall_s=40,
                                  figures={"k": 1.0}))
    state.record(RepetitionResult(second.case, second.number, "/r/2", "failed", error="boom"))
    state.record(RepetitionResult(third.case, third.number, "/r/3", "completed", analysis_error="spark"))
    again = NightState.load(state.folder)
    assert again.order == state.order and again.seed == 3 and again.night == state.night
    assert again.results[first.label].figures == {"k": 1.0}
    # a failed run and a failed analysis run again; the recorded one does not
    assert again.pending() == state.order[1:]
    assert again.pending({"a"}) == [r for r in state.order[1:] if r.case == "a"]
    assert find_unfinished(tmp_path, "smoke") == state.folder
    assert find_unfinished(tmp_path, "other") is None
    again.finished = True
    again.save()
    assert find_unfinished(tmp_path, "smoke") is None


def test_a_damaged_state_file_says_which(tmp_path):
    (tmp_path / "night.json").write_text("{")
    with pytest.raises(ValueError, match="night.json: cannot read the night's state"):
        NightState.load(tmp_path)


def test_the_estimate_learns_from_finished_repetitions():
    suite = load_suite(ROOT / "suites" / "nightly.yaml")
    eta = Eta(suite)
    reps = plan_order({"diamond-on": 2, "diamond-router-restart": 1}, 1)
    assert eta.left_s(reps) == pytest.approx(2 * (60 + 45) + 45 + 45)  # first guess: traffic + 45 s
    eta.add("diamond-on", 100.0)
    eta.add("diamond-on", 110.0)
    # a case not yet run costs the night's wall time per second of traffic times its duration
    assert eta.cost("diamond-on") == 105.0
    assert eta.cost("diamond-router-restart") == pytest.approx(105.0 / 60 * 45)


SUMMARY = {
    "schema": "testbed-suite-summary/1", "suite": "smoke", "night": "n", "valid": True, "problems": [],
    "judgements": [
        {"case": "a", "key": "latency.p99 for priority realtime", "status": "regression",
         "reason": "p99 rose 70% (p 0.004)"},
        {"case": "a", "key": "loss for flow bulk", "status": "inconclusive", "reason": "no baseline nights yet"},
    ],
    "repetitions": [
        {"case": "a", "repetition": 1, "run_dir": "/r/1", "status": "completed", "error": None,
         "analysis_error": None, "expect_passed": True, "recorded": True},
        {"case": "a", "repetition": 2, "run_dir": "/r/2", "status": "completed", "error": None,
         "analysis_error": None, "expect_passed": False, "recorded": True},
    ],
}


def test_junit_has_a_case_per_metric_and_one_for_the_expectations():
    root = ET.fromstring(suite_junit(SUMMARY))
    cases = {tc.get("name"): tc for tc in root.iter("testcase")}
    assert set(cases) == {"latency.p99 for priority realtime", "loss for flow bulk", "expectations"}
    assert cases["latency.p99 for priority realtime"].find("failure").get("type") == "regression"
    assert cases["loss for flow bulk"].find("failure") is None
    assert "no baseline" in cases["loss for flow bulk"].find("system-out").text
    assert "#2: expectations failed (see /r/2/report/check.json)" in cases["expectations"].find("failure").text
    assert root.get("tests") == "3" and root.get("failures") == "2"


def test_an_invalid_night_skips_every_metric_it_planned_and_its_expectations():
    summary = {**SUMMARY, "valid": False, "judgements": [], "repetitions": [], "problems": ["the machine is busy"],
               "metrics": {"a": ["latency.p99 for priority realtime", "loss for flow bulk"]}}
    root = ET.fromstring(suite_junit(summary))
    cases = list(root.iter("testcase"))
    assert sorted(tc.get("name") for tc in cases) == ["expectations", "latency.p99 for priority realtime",
                                                      "loss for flow bulk"]
    assert all("invalid night: the machine is busy" in tc.find("skipped").get("message") for tc in cases)
    assert root.get("tests") == "3" and root.get("skipped") == "3" and root.get("failures") == "0"


def test_night_status():
    reps = SUMMARY["repetitions"]
    assert night_status(False, SUMMARY["judgements"], reps) == "invalid"
    assert night_status(True, SUMMARY["judgements"], reps) == "regression"
    assert night_status(True, SUMMARY["judgements"][1:], reps) == "failed"
    assert night_status(True, SUMMARY["judgements"][1:], reps[:1]) == "pass"


def test_figures_come_from_the_summary_as_the_expectations_read_them():
    case = load_suite(ROOT / "suites" / "smoke.yaml").cases["diamond-short"]
    summary = {
        "flows": [{"flow": "zpub.realtime", "priority": 1, "loss_pct": 0.25, "lost": 1, "expected": 400},
                  {"flow": "bulk", "priority": 6, "loss_pct": 57.0, "lost": 1, "expected": 2},
                  {"flow": "zpub.pub1", "priority": 5, "loss_pct": 0.0, "lost": 0, "expected": 200}],
        "priorities": [{"priority": 1, "latency": {"p50_ns": 2_000_000, "p99_ns": 30_000_000, "messages": 400}}],
        "reroutes": [{"flow": "zpub.pub1", "reroute_time_ns": 410_000_000, "lost": 0}],
    }
    figures = figures_of(case, summary)
    assert figures == {"latency.p99 for priority real_time": 30e6, "latency.p50 for priority real_time": 2e6,
                       "loss for flow zpub.realtime": 0.25, "reroute.time for flow zpub.pub1": 410e6,
                       "loss for flow bulk": 57.0}
    summary["reroutes"] = []
    assert figures_of(case, summary)["reroute.time for flow zpub.pub1"] is None


# -- self-checks ----------------------------------------------------------------------


def test_steal_is_read_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 1 2 3\n")
    before = selfcheck.read_cpu(str(stat))
    assert before == selfcheck.CpuSample(1000, 40)
    stat.write_text("cpu  200 0 100 1600 20 0 0 80 0 0\n")
    assert selfcheck.steal_share(before, selfcheck.read_cpu(str(stat))) == pytest.approx(4.0)
    assert selfcheck.steal_share(before, before) == 0.0
    real = selfcheck.read_cpu()
    assert real.total > 0 and real.steal >= 0


def test_waiting_for_the_load_to_settle():
    loads = iter([1.5, 1.2, 0.9, 0.6, 0.5])
    now = [0.0]

    def sleep(s):
        now[0] += s

    load, waited = selfcheck.wait_for_quiet(0.7, 60, read_load=lambda: next(loads), sleep=sleep,
                                            clock=lambda: now[0])
    assert (load, waited) == (0.6, 15.0)
    load, waited = selfcheck.wait_for_quiet(0.7, 10, read_load=lambda: 2.0, sleep=sleep, clock=lambda: now[0])
    assert load == 2.0 and waited == pytest.approx(10.0)
    assert 0 <= selfcheck.load_per_cpu() < 1000


class Checks:
    load_per_cpu_max = 1000.0
    settle = 0
    steal_max = 5.0
    verify_links = True


def test_a_link_that_misses_its_shaping_makes_the_night_invalid():
    lines = []
    result = selfcheck.check_night(Checks(), {"diamond": object()}, lines.append, steal_sample_s=0.1,
                                   verify=lambda spec: {"ok": False, "failures": ["r2->r4: goodput 5.1 Mbit/s of "
                                                                                  "9.6 (-47%)"], "seconds": 1})
    assert not result.valid
    assert result.problems == ["diamond: links miss their shaping: r2->r4: goodput 5.1 Mbit/s of 9.6 (-47%)"]
    assert json.loads(json.dumps(result.to_json()))["valid"] is False
    ok = selfcheck.check_night(Checks(), {"diamond": object()}, lines.append, steal_sample_s=0.1,
                               verify=lambda spec: {"ok": True, "failures": [], "seconds": 1})
    assert ok.valid and ok.links["diamond"]["ok"]


def test_a_busy_machine_makes_the_night_invalid_without_measuring_links():
    class Busy(Checks):
        load_per_cpu_max = 0.0001

    called = []
    result = selfcheck.check_night(Busy(), {"diamond": object()}, lambda line: None, steal_sample_s=0.1,
                                   verify=lambda spec: called.append(spec))
    assert not result.valid and "the machine is busy" in result.problems[0] and not called
