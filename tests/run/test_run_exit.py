"""`testbed run`'s exit status and --json outcome from how the run ended and its verdict (docs/cli.md: 0 success,
1 a check fails, 2 bad input). Nothing is built: the experiment and the analysis are stand-ins (tests/conftest.py
recorded_run); the real runs that end this way are tests/run/test_drivers_e2e.py's (stock Zenoh: FAIL, exit 1)
and tests/run/test_queries_e2e.py's (PASS, exit 0)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import testbed.cli.app as cli

TRIANGLE = str(Path(__file__).resolve().parents[2] / "topologies" / "triangle.yaml")


@pytest.mark.parametrize("status, verdict, args, code, said", [
    ("completed", True, [], 0, "PASS"),
    ("completed", False, [], 1, "FAIL"),              # an expectation missed
    ("completed", None, [], 1, None),                 # the analysis failed: no verdict is not a pass
    ("completed", None, ["--no-analyze"], 0, None),   # no verdict asked for
    ("failed", None, [], 1, None),                    # never analysed
])
def test_run_exits_by_how_it_ended_and_its_verdict(recorded_run, monkeypatch, tmp_path, status, verdict, args,
                                                   code, said):
    import testbed.run.analysis as analysis
    import testbed.run.experiment as experiment

    analysed = []

    def analyze_and_check(run_dir, master, progress, out=None):
        analysed.append(run_dir)
        return verdict, None if verdict is not None else "stand-in: the analysis broke"

    monkeypatch.setattr(experiment, "run_experiment", lambda *a: experiment.RunOutcome(
        tmp_path, status, None if status == "completed" else "stand-in: the lab broke"))
    monkeypatch.setattr(analysis, "analyze_and_check", analyze_and_check)
    result = CliRunner().invoke(cli.app, ["run", TRIANGLE, "--json", *args])
    assert result.exit_code == code, result.output
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["status"] == status and outcome["verdict"] == said, outcome
    assert analysed == ([tmp_path] if status == "completed" and "--no-analyze" not in args else [])
