"""`testbed compare` of two or more real analysed runs (tests/spark/data/compare-real/, see its README): the
diamond with our router's congestion-awareness off and on and on stock Zenoh side by side, the first the
reference; figures a run's summary does not provide are "n/a" with the reason, never 0; bad input exits 2;
runs of different scenarios are compared with a warning naming what differs."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from spark.compare import compare_command, compare_runs
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "compare-real"


@pytest.fixture(autouse=True)
def in_a_folder_of_its_own(tmp_path, monkeypatch):
    """compare writes compare.html into the current folder: the test's own (its subprocesses' too)."""
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    return tmp_path / "here"


@pytest.fixture
def runs(tmp_path) -> dict:
    """A copy of the real runs (nothing is written into them)."""
    for name in ("aware-off", "aware-on", "zenoh", "hol"):
        shutil.copytree(DATA / name, tmp_path / name)
    return {name: str(tmp_path / name) for name in ("aware-off", "aware-on", "zenoh", "hol")}


def _figure(doc: dict, group: str, name: str, figure: str) -> dict:
    return next(f for f in doc["figures"] if (f["group"], f["name"], f["figure"]) == (group, name, figure))


def test_three_runs_side_by_side_from_the_command_line(runs):
    out = run_cli("compare", runs["aware-off"], runs["aware-on"], runs["zenoh"])
    lines = out.stdout.splitlines()
    # labels from the manifests: our router (no router_driver: a run from before drivers) with its
    # congestion-awareness, and the zenoh driver
    assert lines[:3] == ["A: testbed aware off (diamond-20261125T040743Z)  (the reference)",
                         "B: testbed aware on (diamond-20261125T040623Z)",
                         "C: zenoh (diamond-20261125T050158Z)"]
    assert lines[3].split() == ["figure", "A", "B", "C", "B", "vs", "A", "C", "vs", "A"]
    realtime = next(line for line in lines if line.startswith("priority   real_time          latency p99"))
    # stock Zenoh keeps the realtime flow on the congested path like our router without awareness
    assert realtime.split()[4:] == ["182.208", "ms", "33.230", "ms", "239.537", "ms", "−148.977", "ms", "better",
                                    "+57.329", "ms", "worse"]
    # zenoh: no metrics, no event log -> n/a with the reason, never 0
    drops = next(line for line in lines if line.startswith("run        all traffic        router drops"))
    assert drops.split()[5:] == ["12531", "0", "n/a[3]", "−12531", "better"]
    assert "[3] n/a in zenoh: not available: router driver zenoh provides no metrics" in lines
    assert "[2] n/a in zenoh: not available: router driver zenoh provides no event log" in lines
    # our router without congestion-awareness runs no congestion monitor: no episodes to count, not 0
    episodes = next(line for line in lines if line.startswith("run        all traffic        congestion episodes"))
    assert episodes.split()[5:] == ["n/a[1]", "1", "n/a[2]"]
    assert "[1] n/a in testbed aware off: congestion monitor off (congestion_aware: false)" in lines
    # rerouting is how the aware run wins: no verdict; a loss within the tolerance (53.380% vs 53.248%): none
    reroutes = next(line for line in lines if line.startswith("run        all traffic        reroutes"))
    assert reroutes.split()[4:] == ["0", "2", "0"]
    loss = next(line for line in lines if line.startswith("run        all traffic        loss"))
    assert loss.split()[4:] == ["53.380%", "0.000%", "53.248%", "−53.380", "pt", "better"]
    assert lines[-2].startswith("no verdict for a change within 2% of the reference's value or 0.1 ms")
    # each flow's paths in every run, against the reference
    i = lines.index(next(line for line in lines if line.startswith("paths      bulk")))
    assert lines[i].endswith("testbed aware off: r1>r2>r4")
    assert lines[i + 1].strip() == "testbed aware on: r1>r2>r4 then r1>r3>r4  differs"
    assert lines[i + 2].strip() == "zenoh: r1>r2>r4  same"
    assert lines[-1] == f"comparison: {Path.cwd() / 'compare.html'}"  # the current folder, not a run's
    assert "warning" not in out.stderr  # the same scenario: no warning


def test_json_lists_every_runs_figures(runs, tmp_path):
    out = run_cli("compare", runs["aware-off"], runs["aware-on"], runs["zenoh"], "--json",
                  "--out", str(tmp_path / "c.html"))
    doc = json.loads(out.stdout)
    assert doc["reference"] == "testbed aware off"
    assert [(r["label"], r["router_driver"], r["congestion_aware"], r["topology"]) for r in doc["runs"]] == [
        ("testbed aware off", "testbed", "off", "diamond"), ("testbed aware on", "testbed", "on", "diamond"),
        ("zenoh", "zenoh", None, "diamond")]
    p99 = _figure(doc, "priority", "real_time", "latency p99")
    assert {k: round(v["value"], 3) for k, v in p99["runs"].items()} == {
        "testbed aware off": 182.208, "testbed aware on": 33.230, "zenoh": 239.537}
    assert p99["changes"]["testbed aware on"]["verdict"] == "better"
    assert p99["changes"]["zenoh"]["verdict"] == "worse"
    drops = _figure(doc, "run", "all traffic", "router drops")["runs"]["zenoh"]
    assert drops == {"value": None, "available": False,
                     "reason": "not available: router driver zenoh provides no metrics"}
    episodes = _figure(doc, "run", "all traffic", "congestion episodes")
    assert episodes["runs"]["testbed aware off"] == {
        "value": None, "available": False, "reason": "congestion monitor off (congestion_aware: false)"}
    assert episodes["runs"]["testbed aware on"]["value"] == 1
    assert episodes["changes"]["testbed aware on"] == {"change": None, "verdict": ""}
    reroutes = _figure(doc, "run", "all traffic", "reroutes")
    assert reroutes["lower_is_better"] is None and reroutes["changes"]["testbed aware on"] == {
        "change": 2, "verdict": ""}
    loss = _figure(doc, "run", "all traffic", "loss")
    assert round(loss["tolerance"], 4) == round(0.02 * 53.380, 4)  # 2% of the reference's 53.380%
    assert loss["changes"]["zenoh"]["verdict"] == "" and loss["changes"]["testbed aware on"]["verdict"] == "better"
    pub1 = next(p for p in doc["paths"] if p["flow"] == "zpub.pub1")
    assert pub1["runs"]["testbed aware on"]["paths"] == ["r1>r2>r4", "r1>r3>r4"]
    assert pub1["verdicts"] == {"testbed aware on": "differs", "zenoh": "same"}
    assert doc["warnings"] == [] and doc["html"] == str(tmp_path / "c.html")
    assert (tmp_path / "c.html").exists()


def test_html_shows_every_run_and_its_paths(runs, capsys):
    assert compare_runs([runs["aware-off"], runs["aware-on"], runs["zenoh"]]) == 0
    page = Path("compare.html").read_text()
    assert not Path(runs["zenoh"], "report", "compare.html").exists()
    body = page.split("<body>")[1]
    assert "http" not in body  # self-contained
    for label in ("testbed aware off", "testbed aware on", "zenoh"):
        assert f"<th>{label}</th>" in body
    assert "<th>change<br>testbed aware on</th><th>change<br>zenoh</th>" in body
    assert "r1&gt;r2&gt;r4 then r1&gt;r3&gt;r4 <span class='tag'>(differs)</span>" in body
    assert "title='not available: router driver zenoh provides no metrics'>n/a<sup>" in body
    assert "n/a in <b>zenoh</b>: not available: router driver zenoh provides no event log" in body


def test_two_runs_as_before_with_label_a_and_b_or_label(runs, capsys):
    assert compare_command(runs["aware-off"], runs["aware-on"], label_a="aware off", label_b="aware on") == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header == ["figure", "aware", "off", "aware", "on", "change"]
    assert out.count("  same") == 2 and out.count("  differs") == 2  # zpub.pub2 and realtime stayed
    assert Path("compare.html").exists()
    assert compare_runs([runs["aware-off"], runs["aware-on"]], labels=["off", "on"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == ["figure", "off", "on", "change"]


@pytest.mark.parametrize("args, message", [
    (["aware-off"], "two or more analysed runs"),
    (["aware-off", "unanalysed"], "run `testbed analyze"),
    (["aware-off", "empty"], "empty is not a results folder (has neither manifest.json nor report/summary.json)"),
    (["aware-off", "missing"], "missing is not a results folder (does not exist)"),
    (["aware-off", "aware-on", "--label", "x"], "--label given 1 time for 2 runs"),
    (["aware-off", "aware-on", "zenoh", "--label", "x", "--label", "y"], "--label given 2 times for 3 runs"),
    (["aware-off", "aware-on", "--label", "x", "--label", "x"], "labels must differ"),
    (["aware-off", "aware-on", "--label", "x", "--label", "y", "--label-a", "z"], "not both"),
])
def test_bad_input_exits_2_saying_why(runs, tmp_path, args, message):
    shutil.copytree(DATA / "aware-on", tmp_path / "unanalysed", ignore=shutil.ignore_patterns("report"))
    (tmp_path / "empty").mkdir()
    argv = [str(tmp_path / a) if a in runs or a in ("unanalysed", "empty", "missing") else a for a in args]
    out = run_cli("compare", *argv, check=False)
    assert out.returncode == 2, out
    assert message in out.stderr and "Traceback" not in out.stderr


def test_other_scenarios_compare_with_a_warning_naming_what_differs(runs, capsys, tmp_path):
    assert compare_runs([runs["aware-off"], runs["hol"]], as_json=True) == 0
    captured = capsys.readouterr()
    warning = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1
    assert "topology name (diamond vs hol)" in warning[0] and "traffic (" in warning[0]
    assert "scenario (2 vs 0 timeline entries)" in warning[0]
    assert json.loads(captured.out)["warnings"] == [warning[0][len("warning: "):]]
    # the same topology with another traffic rate: named too
    changed = tmp_path / "faster"
    shutil.copytree(runs["aware-on"], changed)
    manifest = json.loads((changed / "manifest.json").read_text())
    manifest["spec"]["spec"]["traffic"][1]["rate"] = "9mbit"
    (changed / "manifest.json").write_text(json.dumps(manifest))
    assert compare_runs([runs["aware-off"], runs["aware-on"], str(changed)]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "is not the same scenario" in err
    assert f"traffic ({manifest['spec']['spec']['traffic'][1]['name']} differs) differs" in err


def test_default_labels_are_unique(runs, tmp_path, capsys):
    again = tmp_path / "again"
    shutil.copytree(runs["aware-off"], again)
    no_manifest = tmp_path / "bare"
    shutil.copytree(runs["aware-on"], no_manifest)
    (no_manifest / "manifest.json").unlink()
    assert compare_runs([runs["aware-off"], str(again), str(no_manifest)], as_json=True) == 0
    labels = [r["label"] for r in json.loads(capsys.readouterr().out)["runs"]]
    # the same run twice: nothing differs, so its run id, then a number; no manifest: the run id
    assert labels == ["diamond-20261125T040743Z", "diamond-20261125T040743Z #2", "diamond-20261125T040623Z"]


def test_default_labels_name_what_differs(runs, tmp_path, capsys):
    """Two runs of our router: the awareness alone; the backend or the duration when those differ; the
    router's name when it differs (test_three_runs_side_by_side_from_the_command_line)."""
    assert compare_runs([runs["aware-off"], runs["aware-on"]], as_json=True) == 0
    assert [r["label"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["aware off", "aware on"]
    shorter = tmp_path / "shorter"
    shutil.copytree(runs["aware-on"], shorter)
    manifest = json.loads((shorter / "manifest.json").read_text())
    manifest["options"]["duration_ns"] = 20 * 10**9
    manifest["backend"] = manifest["options"]["backend"] = "docker"
    (shorter / "manifest.json").write_text(json.dumps(manifest))
    assert compare_runs([runs["aware-on"], str(shorter)], as_json=True) == 0
    assert [r["label"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["mininet 45s", "docker 20s"]
    assert compare_runs([runs["aware-off"], runs["hol"]], as_json=True) == 0
    assert [r["label"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["diamond 45s", "hol 30s"]


def test_a_loss_changes_by_percentage_points(runs, capsys):
    """On the page and on the console alike (the console said only "better")."""
    assert compare_runs([runs["aware-off"], runs["aware-on"]]) == 0
    page = Path("compare.html").read_text()
    # all traffic: 53.380% lost without awareness, 0.000% with it
    assert "<td class='better'>−53.380 pt better</td>" in page
    loss = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("run        all traffic        loss"))
    assert loss.split()[4:] == ["53.380%", "0.000%", "−53.380", "pt", "better"]


def test_sections_a_summary_marks_unavailable_or_lacks_are_na_never_0(runs, capsys):
    """Section markers wherever they are (a whole section, one flow's paths, every reroute count), and a
    section an older summary does not have."""
    path = Path(runs["zenoh"], "report", "summary.json")
    summary = json.loads(path.read_text())
    no_paths = {"available": False, "reason": "the captures could not be searched"}
    summary["reroutes"] = no_paths  # the flows still say 0 reroutes: shown n/a all the same
    summary["flows"][0]["paths"] = no_paths
    del summary["resources"]
    path.write_text(json.dumps(summary))
    assert compare_runs([runs["aware-on"], runs["zenoh"]], as_json=True) == 0
    doc = json.loads(capsys.readouterr().out)
    for group, name in (("run", "all traffic"), ("flow", "bulk"), ("priority", "data_low")):
        zenoh = _figure(doc, group, name, "reroutes")["runs"]["zenoh"]
        assert zenoh == {"value": None, "available": False, "reason": "the captures could not be searched"}
    assert _figure(doc, "run", "all traffic", "longest reroute time")["runs"]["zenoh"]["available"] is False
    memory = _figure(doc, "run", "all traffic", "router memory max")["runs"]["zenoh"]
    assert memory["reason"] == "no resources in this run's summary (testbed-summary/6)"
    bulk = next(p for p in doc["paths"] if p["flow"] == "bulk")
    assert bulk["runs"]["zenoh"] == {"paths": None, "available": False,
                                     "reason": "the captures could not be searched"}
    assert bulk["verdicts"]["zenoh"] == ""
    assert compare_runs([runs["aware-on"], runs["zenoh"]]) == 0
    text = capsys.readouterr().out
    assert "zenoh: n/a[" in text and "n/a in zenoh: the captures could not be searched" in text
