"""A night stopped part way resumes where it stopped, in the same order, without running again what it
recorded (the repetitions themselves are stubbed here: tests/suite/test_suite_smoke_e2e.py runs real ones)."""
from __future__ import annotations

from pathlib import Path

import pytest

from testbed.suite import runner
from testbed.suite.night import NightState, RepetitionResult, find_unfinished
from testbed.suite.selfcheck import NightCheck
from testbed.suite.spec import load_suite

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stubbed(monkeypatch):
    ran, finished = [], []
    plan = {"interrupt_at": None}

    def run_repetition(case, rep, state, caps, options, say):
        ran.append(rep.label)
        if len(ran) == plan["interrupt_at"]:
            return RepetitionResult(case.name, rep.number, f"/runs/{rep.label}", "interrupted", error="SIGINT")
        return RepetitionResult(case.name, rep.number, f"/runs/{rep.label}", "completed", expect_passed=True,
                                wall_s=60.0, figures={m.key: 1.0 for m in case.metrics})

    def finish(suite, state, options, valid, messages, say):
        finished.append(state.night)
        state.finished = True
        state.save()
        return runner.NightOutcome(state, "pass", {"status": "pass"}, messages)

    monkeypatch.setattr(runner, "run_repetition", run_repetition)
    monkeypatch.setattr(runner, "_finish", finish)
    monkeypatch.setattr("testbed.suite.selfcheck.check_night",
                        lambda checks, topologies, say: NightCheck(0.1, 0.7, 0.0, 0.0, 5.0))
    return ran, finished, plan


def test_an_interrupted_night_resumes_in_its_order(tmp_path, stubbed):
    ran, finished, plan = stubbed
    suite = load_suite(ROOT / "suites" / "nightly.yaml", repetitions=2)
    state = NightState.create(tmp_path, suite.name, "nightly.yaml", {n: c.repetitions for n, c in suite.cases.items()},
                              "", seed=11)
    options = runner.NightOptions(results_root=tmp_path, history=str(tmp_path / "history"))
    lines = []
    plan["interrupt_at"] = 5
    outcome = runner.run_night(suite, state, options, {}, lines.append)
    assert outcome.status == "interrupted" and not finished
    assert ran == [r.label for r in state.order[:5]]
    assert any("resume with --resume" in line for line in lines)
    assert find_unfinished(tmp_path, suite.name) == state.folder

    resumed = NightState.load(find_unfinished(tmp_path, suite.name))
    assert resumed.checks["valid"]  # the night's self-check is kept, not run again
    ran.clear()
    plan["interrupt_at"] = None
    outcome = runner.run_night(suite, resumed, options, {}, lines.append)
    # the interrupted repetition runs again, then the rest, in the night's order
    assert ran == [r.label for r in state.order[4:]]
    assert outcome.status == "pass" and finished == [state.night]
    assert all(r.recorded for r in NightState.load(state.folder).results.values())
    assert len(NightState.load(state.folder).results) == 12
    assert any(line.startswith("4 of 12 repetitions recorded; 8 to run, about ") for line in lines), lines


def test_cases_picks_some(tmp_path, stubbed):
    ran, _, _ = stubbed
    suite = load_suite(ROOT / "suites" / "nightly.yaml", repetitions=2)
    state = NightState.create(tmp_path, suite.name, "nightly.yaml", {"diamond-off": 2}, "", seed=2)
    options = runner.NightOptions(results_root=tmp_path, history=str(tmp_path / "h"), cases={"diamond-off"})
    runner.run_night(suite, state, options, {}, lambda line: None)
    assert sorted(ran) == ["diamond-off#1", "diamond-off#2"]
    assert {r.case for r in NightState.load(state.folder).order} == {"diamond-off"}
