"""`testbed suite run suites/smoke.yaml`, for real: the shipped smoke suite runs in every CI run.

One night of two repetitions (of the suite's three: a third proves nothing more here, and costs CI about a
minute) on Mininet, its load limit raised for CI (:data:`CI_LOAD_LIMIT`): the machine checks itself (load,
steal, every link's goodput), each
repetition is a normal results folder that meets its expectations, the figures reach the history, every
metric gets a verdict (inconclusive: there is no earlier night), and the JUnit file and the trend page are
written. The figures are checked against what the topology makes true from first principles. The night runs in
this process (the CLI through typer's CliRunner) so that its analyses use the session's warm Spark; `suite run`
in a process of its own: the resume and dry-run test at the end.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from tests.conftest import needs_mininet
from tests.spark.spark_browser import MISSING_REASON, chromium_or_none, rendered_plots

pytestmark = [needs_mininet, pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server")]

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "suites" / "smoke.yaml"
MS = 10**6
#: repetitions of the night (``--repetitions``): more than one, so that the plan, the progress, the history
#: and the judgements are shown to hold every repetition apart (the shipped plan's three: the dry run below)
REPETITIONS = 2


def run_testbed(*args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


#: the machine check's load limit of the night run here, per CPU, instead of the shipped 0.7: the tests before
#: it (Spark's) leave the 1-minute load average above 0.7 for about a minute after they end, and waiting for it to
#: decay (20-40 s of CI, nothing else running) proves nothing that tests/suite/test_suite_night.py
#: (test_waiting_for_the_load_to_settle) does not; the check itself still runs and is asserted below
CI_LOAD_LIMIT = 2.0


def ci_smoke(folder: Path) -> Path:
    """The shipped smoke suite with its load limit at :data:`CI_LOAD_LIMIT`, written into ``folder``."""
    text = SMOKE.read_text()
    for old, new in (("  load_per_cpu_max: 0.7\n", f"  load_per_cpu_max: {CI_LOAD_LIMIT}\n"),
                     ("topology: ../topologies/", f"topology: {ROOT / 'topologies'}/")):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = folder / SMOKE.name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def night(spark, tmp_path_factory):
    """The night, `testbed suite run` in this process (typer's CliRunner), its analyses in the session's Spark,
    as the shared real runs' are (tests/realruns.py): no JVM start and cold first analysis of its own."""
    from typer.testing import CliRunner

    from testbed.cli.app import app

    results = tmp_path_factory.mktemp("smoke")
    suite = ci_smoke(tmp_path_factory.mktemp("suite"))
    proc = CliRunner().invoke(app, ["suite", "run", str(suite), "--results", str(results), "--history",
                                    str(results / "history"), "--repetitions", str(REPETITIONS), "--json"])
    assert proc.stdout.strip(), (f"exit {proc.exit_code}, no summary: {proc.stderr[-4000:]}", proc.exc_info)
    return proc, json.loads(proc.stdout), results


def test_the_night_is_valid_and_passes(night):
    proc, summary, _ = night
    assert summary["valid"], summary["problems"]
    assert summary["status"] == "pass" and proc.exit_code == 0, (summary["problems"], proc.stderr[-3000:])
    checks = summary["checks"]
    assert checks["load_limit"] == CI_LOAD_LIMIT and checks["load_per_cpu"] <= checks["load_limit"]
    assert checks["steal_pct"] <= checks["steal_limit_pct"]
    links = checks["links"]["diamond"]
    assert links["ok"] and len(links["report"]["links"]) == 8  # 4 links, both directions
    # the progress said how far the night was and what was left
    assert f"[{REPETITIONS}/{REPETITIONS}] diamond-short#" in proc.stderr and "left" in proc.stderr


def test_every_repetition_is_a_complete_results_folder_meeting_its_expectations(night):
    _, summary, results = night
    reps = summary["repetitions"]
    assert sorted(r["repetition"] for r in reps) == list(range(1, REPETITIONS + 1))
    for r in reps:
        assert r["recorded"] and r["expect_passed"], r
        run = Path(r["run_dir"])
        assert run.parent.parent.parent == results / "suites" / "smoke"
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["status"] == "completed"
        # the folder holds the case's effective topology (the overrides merged), not the diamond's own
        assert "duration: 18s" in (run / "topology.yaml").read_text()
        assert (run / "report" / "summary.json").exists() and (run / "report" / "check.json").exists()


def test_the_figures_are_what_the_topology_makes_true(night):
    _, summary, _ = night
    for r in summary["repetitions"]:
        f = r["figures"]
        p50, p99 = f["latency.p50 for priority real_time"], f["latency.p99 for priority real_time"]
        # the strict scheduler keeps realtime's tail within the expectation while bulk fills the bottleneck: at
        # most the tc queue (30 frames, 60 ms at 6 Mbit/s) and a batch on the wire (suites/smoke.yaml)
        assert 0 < p50 <= p99 <= 100 * MS, f
        assert f["loss for flow zpub.realtime"] <= 1.0
        # the monitor needs at most two 250 ms intervals to see a whole interval of overload, then r1 pins the
        # flow and its next message (every 50 ms) takes the new path (tests/run/test_congestion_e2e.py)
        assert 0 < f["reroute.time for flow zpub.pub1"] <= 2 * 250 * MS + 100 * MS, f
        assert 0 <= f["loss for flow bulk"] <= 100


def test_the_history_holds_every_figure_of_the_night(night):
    from spark.history import read_history
    from spark.session import get_spark

    _, summary, results = night
    df = read_history(get_spark(), str(results / "history"), "smoke")
    assert len(df) == REPETITIONS * 5 and set(df["night"]) == {summary["night"]}
    assert set(df["case"]) == {"diamond-short"} and df["valid"].all() and df["expect_passed"].all()
    assert set(df["variant"]) == {""} and set(df["machine"]) == {summary["machine"]}
    row = df[(df["key"] == "latency.p99 for priority real_time") & (df["repetition"] == 1)].iloc[0]
    rep1 = next(r for r in summary["repetitions"] if r["repetition"] == 1)
    assert row["value"] == pytest.approx(rep1["figures"]["latency.p99 for priority real_time"])
    assert row["git_revision"] == summary["git_revision"]


def test_a_first_night_has_no_baseline_so_every_verdict_is_inconclusive(night):
    _, summary, _ = night
    assert len(summary["judgements"]) == 5 and summary["baseline_nights"] == []
    assert {j["status"] for j in summary["judgements"]} == {"inconclusive"}
    assert all("no baseline" in j["reason"] for j in summary["judgements"])


def test_junit_has_a_case_per_metric_and_the_expectations(night):
    _, summary, results = night
    root = ET.parse(results / "suites" / "smoke" / summary["night"] / "junit.xml").getroot()
    names = sorted(tc.get("name") for tc in root.iter("testcase"))
    assert names == sorted([j["key"] for j in summary["judgements"]] + ["expectations"])
    assert root.get("failures") == "0"


@pytest.mark.skipif(chromium_or_none() is None, reason=MISSING_REASON)
def test_the_trend_page_renders(night):
    _, summary, results = night
    page = results / "suites" / "smoke" / summary["night"] / "trend.html"
    total, ok, failed, dom = rendered_plots(page)
    assert total == 5 and not failed and len(ok) == 5
    assert summary["night"] in dom


def test_a_finished_night_cannot_be_resumed_and_the_dry_run_lists_the_plan(night):
    _, summary, results = night
    proc = run_testbed("suite", "run", str(SMOKE), "--results", str(results), "--resume")
    assert proc.returncode == 2 and "no unfinished night of suite smoke" in proc.stderr
    proc = run_testbed("suite", "run", str(SMOKE), "--dry-run", "--seed", "3")
    assert proc.returncode == 0 and proc.stdout.count("diamond-short#") == 3
