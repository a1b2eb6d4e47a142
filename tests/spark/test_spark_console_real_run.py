"""`testbed analyze` of a real run's results folder (tests/spark/data/slow-reader-real, its own process and its
own Spark, as a user runs it): the console holds our progress lines and nothing of the JVM (its banner, log4j,
its warnings go to report/spark.log); report.html opens with the verdict and summary.json carries it (issue
27.4). The expectations are the test's, written beside the real run's files: one it meets, one it misses."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spark.bounds import CLOCK_CHECK_WHY
from spark.htmlpage import escape

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data" / "slow-reader-real"
EXPECT = """expect:
  - {metric: router.queued_bytes, op: "<=", value: 1MiB}
  - {metric: limits.slow_readers, op: "<=", value: 0}
"""
#: what analyze itself prints: progress lines, its one-line result, and the input problems it found
OURS = re.compile(r"^(\[ *\d+\.\ds\] |analyzed |input (error|warning): )")


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    pytest.importorskip("pyspark")
    run = tmp_path_factory.mktemp("runs") / "slow-reader"
    shutil.copytree(DATA, run)
    (run / "topology.yaml").write_text(EXPECT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "analyze", str(run)], capture_output=True,
                          text=True, timeout=600, cwd=ROOT, env={**env, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run, proc


def test_analyze_prints_nothing_of_the_jvm(analyzed):
    run, proc = analyzed
    foreign = [line for line in (proc.stdout + proc.stderr).splitlines() if not OURS.match(line)]
    assert foreign == [], "\n".join(foreign)
    assert f"(its log: {run / 'report' / 'spark.log'})" in proc.stdout
    log = (run / "report" / "spark.log").read_text()
    assert "log4j" in log or "WARN" in log, log[:2000]  # what Spark says went to its log


def test_elapsed_time_only_grows(analyzed):
    _, proc = analyzed
    seconds = [float(m.group(1)) for m in re.finditer(r"^\[ *(\d+\.\d)s\]", proc.stdout, re.M)]
    assert len(seconds) >= 5 and seconds == sorted(seconds)


def test_report_opens_with_the_verdict_and_summary_carries_it(analyzed):
    run, _ = analyzed
    body = (run / "report" / "report.html").read_text().split("<body>", 1)[1]
    banner = body.split("\n", 1)[0]
    assert banner.startswith('<div class="verdict fail" id="verdict"><b class="word">FAIL</b>1 of 2 expectations '
                             "met; clock check not measured<ul>"), banner
    # the router named one slow reader (test_spark_limits_real_run.py): measured, limit and margin
    assert re.findall(r"<li>(.*?)</li>", banner) == [
        "<b>limits.slow_readers &lt;= 0</b>: measured 1, limit 0, margin -1 (past the limit by 1)"]
    # the clock check's row says why every run has it
    assert f'clock error &lt;= 10% of latency p50<br><span class="note">{escape(CLOCK_CHECK_WHY)}</span>' in body
    verdict = json.loads((run / "report" / "summary.json").read_text())["verdict"]
    assert verdict["passed"] is False and verdict["failed"] == ["limits.slow_readers <= 0"]
    queued, slow = verdict["expectations"]
    assert queued["passed"] and queued["limit"] == 2**20 and 0 < queued["measured"] < 2**20
    assert (slow["measured"], slow["limit"], slow["margin"]) == (1, 0, -1)
    assert verdict["clock_check"]["skipped"] is True


def test_check_after_analyze_does_not_repeat_the_input_problems(analyzed, capsys):
    """`testbed run` prints analyze's input problems once: its check is told not to repeat them."""
    from spark.cli import check_command

    run, proc = analyzed
    assert "input error: manifest.json: missing" in proc.stderr
    assert check_command(str(run)) == 1
    assert "input error: manifest.json: missing" in capsys.readouterr().err
    assert check_command(str(run), show_input_problems=False) == 1
    assert "input " not in capsys.readouterr().err
