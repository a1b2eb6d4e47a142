"""Duration options on the command line (`run --duration/--scrape-interval/--ready-timeout`, `analyze --window`):
the topology's duration grammar (20s, 500ms, 1m30s) or a bare number of seconds, as before. Nothing is built:
the run itself is replaced by a stand-in that records the options it was given."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import testbed.cli.app as cli
from runfolder.units import UnitError, parse_seconds

ROOT = Path(__file__).resolve().parents[1]
TRIANGLE = str(ROOT / "topologies" / "triangle.yaml")


@pytest.mark.parametrize("text, seconds", [
    ("20", 20.0), ("0.5", 0.5), (".5", 0.5), ("20s", 20.0), ("20 s", 20.0), ("500ms", 0.5), ("1m30s", 90.0),
    ("2m", 120.0), ("1h", 3600.0), ("250us", 0.00025), ("0", 0.0), ("0s", 0.0), (7, 7.0),
])
def test_parse_seconds(text, seconds):
    assert parse_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text, message", [
    ("-5", "'-5': a duration cannot be negative (examples: 5ms, 1.5s, 250us, 2m); a bare number is seconds"),
    ("20x", "'20x' is not a duration (examples: 5ms, 1.5s, 250us, 2m); unknown unit 'x' (known: ns, us, ms, s, m, "
            "h); a bare number is seconds"),
    ("nan", "'nan' is not a duration"),
    ("inf", "'inf' is not a duration"),
    ("", "'' is not a duration"),
])
def test_parse_seconds_refuses(text, message):
    with pytest.raises(UnitError) as info:
        parse_seconds(text)
    assert str(info.value).startswith(message)


def _plain(output: str) -> str:
    """The CLI's output without colours, the error box and line wrapping."""
    return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", output).replace("│", " ").split())


@pytest.mark.parametrize("args, field, seconds", [
    (["--duration", "20s"], "duration_s", 20.0),
    (["--duration", "20"], "duration_s", 20.0),
    (["--duration", "1m30s"], "duration_s", 90.0),
    (["--duration", "2.5"], "duration_s", 2.5),
    (["--scrape-interval", "500ms"], "scrape_interval_s", 0.5),
    (["--scrape-interval", "2"], "scrape_interval_s", 2.0),
    (["--ready-timeout", "1m"], "ready_timeout_s", 60.0),
    (["--ready-timeout", "45"], "ready_timeout_s", 45.0),
])
def test_run_takes_durations_in_the_spec_grammar_or_seconds(recorded_run, args, field, seconds):
    result = CliRunner().invoke(cli.app, ["run", TRIANGLE, *args])
    assert result.exit_code == 2 and "stand-in: nothing is run" in result.output, result.output
    assert getattr(recorded_run["options"], field) == pytest.approx(seconds)


@pytest.mark.parametrize("args, message", [
    (["--duration", "20x"], "Invalid value for '--duration': '20x' is not a duration"),
    (["--duration", "-3s"], "Invalid value for '--duration': '-3s': a duration cannot be negative"),
    (["--duration", "0s"], "--duration must be positive"),
    (["--scrape-interval", "50ms"], "--scrape-interval must be at least 0.1 s"),
    (["--ready-timeout", "soon"], "Invalid value for '--ready-timeout': 'soon' is not a duration"),
])
def test_run_refuses_bad_durations(recorded_run, args, message):
    result = CliRunner().invoke(cli.app, ["run", TRIANGLE, *args])
    assert result.exit_code == 2, result.output
    assert message in _plain(result.output), result.output
    assert "options" not in recorded_run


@pytest.mark.parametrize("window, seconds", [("500ms", 0.5), ("2", 2.0), ("1s", 1.0)])
def test_analyze_window_takes_a_duration(monkeypatch, window, seconds):
    import spark.cli

    seen = {}
    monkeypatch.setattr(spark.cli, "analyze_command", lambda run_dir, master=None, window_s=1.0, **_: seen.update(
        window_s=window_s) or 0)
    result = CliRunner().invoke(cli.app, ["analyze", "/nonexistent", "--window", window])
    assert result.exit_code == 0, result.output
    assert seen["window_s"] == pytest.approx(seconds)


def test_spark_module_window_takes_a_duration(monkeypatch, capsys):
    import spark.__main__ as spark_main

    seen = {}
    monkeypatch.setattr(spark_main, "analyze_command", lambda run_dir, master, window_s, share, **_: seen.update(
        window_s=window_s) or 0)
    assert spark_main.main(["analyze", "/nonexistent", "--window", "250ms"]) == 0
    assert seen["window_s"] == pytest.approx(0.25)
    with pytest.raises(SystemExit) as info:
        spark_main.main(["analyze", "/nonexistent", "--window", "5q"])
    assert info.value.code == 2
    assert "argument --window: '5q' is not a duration" in capsys.readouterr().err
