"""`testbed suite` on the command line: bad options are refused with exit 2 and a message saying what to do,
before anything is built."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "suites" / "smoke.yaml")


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("args,message", [
    (["--router-setting", "congestion_awre=false"], "--router-setting: no router setting congestion_awre"),
    (["--router-setting", "congestion_aware=maybe"], "--router-setting: congestion_aware: Input should be a valid boolean"),
    (["--router-setting", "congestion_aware"], "write KEY=VALUE"),
    (["--cases", "diamond-short,nope"], "--cases: no case nope in"),
    (["--night", "/tmp/x"], "--night is for --resume"),
    (["--baseline-night", "a", "--baseline-revision", "b"], "not both"),
    (["--repetitions", "0"], "--repetitions must be at least 1"),
    (["--baseline-last", "0"], "--baseline-last must be at least 1"),
])
def test_bad_options(args, message):
    result = invoke("suite", "run", SMOKE, "--dry-run", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_resume_without_an_unfinished_night(tmp_path):
    result = invoke("suite", "run", SMOKE, "--results", str(tmp_path), "--resume")
    assert result.exit_code == 2 and "no unfinished night of suite smoke" in result.output


def test_a_bad_suite_file_is_exit_2_with_its_line(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("name: s\ncases:\n  a: {topology: nope.yaml, metrics: ['loss 1pt']}\n")
    for verb in (["suite", "validate", str(bad)], ["suite", "run", str(bad), "--dry-run"]):
        result = invoke(*verb)
        assert result.exit_code == 2 and f"{bad}:3 cases.a.topology" in result.output, result.output


def test_validate_and_dry_run():
    result = invoke("suite", "validate", SMOKE)
    assert result.exit_code == 0
    assert "diamond-short: diamond.yaml, 3 repetitions of 18 s on mininet, overrides duration, traffic, scenario, " \
           "expect" in result.output
    assert "loss for flow zpub.realtime: minimum effect 1 pt" in result.output
    result = invoke("suite", "run", SMOKE, "--dry-run", "--repetitions", "4", "--seed", "5")
    assert result.exit_code == 0 and result.output.count("diamond-short#") == 4
    assert result.output == invoke("suite", "run", SMOKE, "--dry-run", "--repetitions", "4", "--seed", "5").output


def test_a_shorter_case_is_listed_by_validate_and_before_a_run(tmp_path):
    """What a case's shorter duration leaves out of its topology, at the topology's lines (issue 27.3)."""
    diamond = ROOT / "topologies" / "diamond.yaml"
    line = next(i for i, text in enumerate(diamond.read_text().splitlines(), 1) if "pub2_start: 30s" in text)
    suite = tmp_path / "s.yaml"
    suite.write_text(f"name: s\ncases:\n  short: {{topology: {diamond}, duration: 20s, metrics: ['loss 1pt']}}\n")
    head = "case short's duration 20s: a 20s run instead of the topology's 60s leaves out or cuts short 5 items:"
    item = f"{diamond}:{line} traffic[0].pub2_start: flow zpub.pub2 never sends: it starts at 30s, not before the " \
           "end (20s)"
    result = invoke("suite", "validate", str(suite))
    assert result.exit_code == 0, result.output
    assert f"\n    {head}\n" in result.output and f"\n      {item}\n" in result.output
    result = invoke("suite", "run", str(suite), "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"warning: {head}\n") and f"\n  {item}\n" in result.output
    assert "short#1" in result.output


def test_dry_run_says_settle_wall_time_history_and_baseline():
    """Beside the order (issue 27.4): the settle wait, an estimate of the night's wall time (self-checks: the
    steal sample and the diamond's 4 links; each repetition its 18 s and the first-guess overhead), where the
    history goes and whether it holds a baseline - read from the real smoke history (tests/spark/data)."""
    from testbed.suite.runner import FIRST_GUESS_OVERHEAD_S

    history = str(ROOT / "tests" / "spark" / "data" / "smoke-history")
    result = invoke("suite", "run", SMOKE, "--dry-run", "--history", history, "--machine", "bench")
    assert result.exit_code == 0, result.output
    tail = result.output.splitlines()[-4:]
    assert tail[0] == ("settle: before measuring, waits up to 3 min 00 s for the 1-minute load to fall to 0.7 per "
                       "CPU (no wait when it is already there)")
    assert FIRST_GUESS_OVERHEAD_S == 45.0  # 3 x (18 s + 45 s) = 3 min 09 s; 5 s + 4 links x 5 s = 25 s
    assert tail[1] == ("wall time: about 3 min 34 s (self-checks 25 s, 3 repetitions 3 min 09 s; up to 6 min 34 s "
                       "with the whole settle wait)")
    assert tail[2] == f"history: {history}"
    # the history's 5 nights ran on machine bench; the last one is a variant (congestion_aware=false)
    assert tail[3] == ("baseline: 4 nights of machine bench (20261123T202454Z-6a064e, 20261123T202955Z-c2c9ea, "
                       "20261123T203526Z-dde393, 20261123T204041Z-61976e)")
    other = invoke("suite", "run", SMOKE, "--dry-run", "--history", history, "--machine", "elsewhere")
    assert other.output.splitlines()[-1] == (
        "baseline: none yet (5 nights in the history, none a valid night of machine elsewhere as shipped): "
        "tonight's figures are recorded, not judged")
    pinned = invoke("suite", "run", SMOKE, "--dry-run", "--history", history, "--machine", "bench",
                    "--baseline-night", "20261123T202955Z-c2c9ea")
    assert pinned.output.splitlines()[-1] == "baseline: 1 night of machine bench (20261123T202955Z-c2c9ea)"
