"""`testbed compare`: two runs' summaries side by side."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark.compare import compare_command, compare_rows


@pytest.fixture(autouse=True)
def in_a_folder_of_its_own(tmp_path, monkeypatch):
    """compare writes compare.html into the current folder: the test's own."""
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")


def summary(run_id: str, rt_p99_ms: float, data_loss: float, reroutes: int, reroute_ms=None) -> dict:
    def entry(p99, loss, rr):
        return {"latency": {"p50_ns": p99 * 5e5, "p99_ns": p99 * 1e6, "max_ns": p99 * 2e6}, "jitter": {"p50_ns": 5e5, "p99_ns": 1e6},
                "loss_pct": loss, "delivered": 100, "reroutes": rr}
    return {
        "run_id": run_id,
        "overall": entry(rt_p99_ms, data_loss, reroutes),
        "priorities": [{"priority": 1, "priority_name": "real_time", **entry(rt_p99_ms, 0.0, 0)},
                       {"priority": 5, "priority_name": "data", **entry(40.0, data_loss, reroutes)}],
        "flows": [{"flow": "zpub.pub1", **entry(40.0, data_loss, reroutes)}],
        "reroutes": [{"reroute_time_ns": reroute_ms * 1e6}] if reroute_ms else [],
    }


def test_rows_say_which_run_is_better():
    on, off = summary("on", 20.0, 0.5, 1, 1500), summary("off", 900.0, 12.0, 0)
    rows = {(r.group, r.name, r.figure): r for r in compare_rows(off, on)}
    rt = rows[("priority", "real_time", "latency p99")]
    assert (rt.a, rt.b, rt.verdict) == (900.0, 20.0, "better")
    loss = rows[("flow", "zpub.pub1", "loss")]
    assert (loss.a, loss.b, loss.verdict) == (12.0, 0.5, "better")
    assert rows[("run", "all traffic", "longest reroute time")].b == 1500.0
    assert rows[("run", "all traffic", "longest reroute time")].a is None


def test_command_writes_html_and_refuses_unanalysed_runs(tmp_path, capsys):
    for name, s in (("a", summary("off", 900.0, 12.0, 0)), ("b", summary("on", 20.0, 0.5, 1, 1500))):
        (tmp_path / name / "report").mkdir(parents=True)
        (tmp_path / name / "report" / "summary.json").write_text(json.dumps(s))
    assert compare_command(str(tmp_path / "a"), str(tmp_path / "b"), label_a="aware off", label_b="aware on") == 0
    out = capsys.readouterr().out
    assert "aware off" in out and "900.000 ms" in out and "better" in out
    page = Path("compare.html").read_text()  # the current folder's
    assert "<table>" in page and "aware on" in page and "http" not in page.split("<body>")[1]
    (tmp_path / "c").mkdir()
    assert compare_command(str(tmp_path / "a"), str(tmp_path / "c")) == 2
    assert "c is not a results folder" in capsys.readouterr().err
    (tmp_path / "c" / "manifest.json").write_text("{}")
    assert compare_command(str(tmp_path / "a"), str(tmp_path / "c")) == 2
    assert "run `testbed analyze" in capsys.readouterr().err


def test_paths_per_flow_side_by_side(tmp_path, capsys):
    """The same topology on two backends must take the same paths: compare shows them and says so."""
    from spark.compare import path_rows

    a, b = summary("mininet", 20.0, 0.0, 1), summary("docker", 22.0, 0.0, 1)
    a["flows"][0]["paths"] = [{"path": "r1>r2>r4", "messages": 100}, {"path": "r1>r3>r4", "messages": 300}]
    b["flows"][0]["paths"] = [{"path": "r1>r2>r4", "messages": 98}, {"path": "r1>r3>r4", "messages": 302}]
    rows = path_rows(a, b)
    assert [(r.flow, r.a, r.verdict) for r in rows] == [("zpub.pub1", ("r1>r2>r4", "r1>r3>r4"), "same")]
    b["flows"][0]["paths"] = [{"path": "r1>r2>r4", "messages": 400}]
    assert path_rows(a, b)[0].verdict == "differs"
    for name, s in (("a", a), ("b", b)):
        (tmp_path / name / "report").mkdir(parents=True)
        (tmp_path / name / "report" / "summary.json").write_text(json.dumps(s))
    assert compare_command(str(tmp_path / "a"), str(tmp_path / "b")) == 0
    out = capsys.readouterr().out
    assert "r1>r2>r4 then r1>r3>r4" in out and "differs" in out
    assert "<h2>Paths</h2>" in Path("compare.html").read_text()


def test_flow_paths_are_the_runs_of_one_path_without_blips():
    import pandas as pd

    from spark.reroutes import flow_paths

    rows = [("f", seq, 0, 0, (), "r1", ["r4"], "r1>r2>r4", True) for seq in range(20)]
    rows += [("f", 20, 0, 0, (), "r1", ["r4"], "r1>r3>r4", True)]  # a one-message blip
    rows += [("f", seq, 0, 0, (), "r1", ["r4"], "r1>r2>r4", True) for seq in range(21, 40)]
    rows += [("f", seq, 0, 0, (), "r1", ["r4"], "r1>r3>r4", True) for seq in range(40, 60)]
    rows += [("f", 60, 0, 0, (), "r1", ["r4"], "r1>r3", False)]  # incomplete: not counted
    paths = pd.DataFrame(rows, columns=["flow", "seq", "first_ns", "last_ns", "hops", "publisher", "receivers", "path",
                                        "complete"])
    # the blip is noise: merged away, its message counted on neither path
    assert flow_paths(paths) == {"f": [{"path": "r1>r2>r4", "messages": 39}, {"path": "r1>r3>r4", "messages": 20}]}


def test_changes_within_the_tolerance_and_reroutes_get_no_verdict():
    from spark.compare import Figure, Row

    def verdict(a, b, unit, lower=True):
        return Row("run", "all traffic", "x", (Figure(a), Figure(b)), unit, lower).verdict

    # 2% of the reference, or the unit's floor (0.1 ms, 0.1 percentage point, 1 MB; counts: none)
    assert verdict(53.380, 53.248, "%") == "" and verdict(53.380, 55.0, "%") == "worse"
    assert verdict(0.0, 0.09, "%") == "" and verdict(0.0, 0.2, "%") == "worse"
    assert verdict(1.0, 1.09, "ms") == "" and verdict(1.0, 0.85, "ms") == "better"
    assert verdict(900.0, 915.0, "ms") == "" and verdict(900.0, 20.0, "ms") == "better"
    assert verdict(28.795, 28.676, "MB") == ""
    assert verdict(0, 1, "msgs") == "worse" and verdict(10000, 10150, "msgs", False) == ""
    on, off = summary("on", 20.0, 0.5, 2), summary("off", 20.0, 0.5, 0)
    rows = {(r.group, r.name, r.figure): r for r in compare_rows(off, on)}
    reroutes = rows[("run", "all traffic", "reroutes")]
    assert (reroutes.a, reroutes.b, reroutes.lower_is_better, reroutes.verdict) == (0, 2, None, "")
    assert rows[("flow", "zpub.pub1", "reroutes")].verdict == ""


def _write(tmp_path, name, s, aware=None):
    (tmp_path / name / "report").mkdir(parents=True)
    (tmp_path / name / "report" / "summary.json").write_text(json.dumps(s))
    if aware is not None:
        spec = {"spec": {"name": "diamond"}, "router_settings": {n: {"congestion_aware": aware} for n in ("r1", "r2")}}
        (tmp_path / name / "manifest.json").write_text(json.dumps({"run_id": name, "spec": spec}))
    return str(tmp_path / name)


def test_congestion_episodes_of_our_router_with_the_monitor_off_are_na(tmp_path, capsys):
    from spark.compare import compare_runs

    off = _write(tmp_path, "off", {**summary("off", 900.0, 12.0, 0), "episodes": []}, aware=False)
    on = _write(tmp_path, "on", {**summary("on", 20.0, 0.5, 1), "episodes": [{"index": 0}]}, aware=True)
    assert compare_runs([off, on], as_json=True) == 0
    doc = json.loads(capsys.readouterr().out)
    episodes = next(f for f in doc["figures"] if f["figure"] == "congestion episodes")
    assert episodes["runs"] == {
        "aware off": {"value": None, "available": False,
                      "reason": "congestion monitor off (congestion_aware: false)"},
        "aware on": {"value": 1.0, "available": True, "reason": None}}


@pytest.mark.parametrize("content, says", [
    ([], "it is a list, not an object"),
    ({"flows": [{"loss_pct": 1.0}]}, "flows[0] has no 'flow'"),
    ({"flows": {"flow": "f"}}, "flows is an object, not a list"),
    ({"priorities": ["real_time"]}, "priorities[0] is a string, not an object"),
    ({"overall": [1, 2]}, "overall is a list, not an object"),
    ({"reroutes": [None]}, "reroutes[0] is null, not an object"),
    ({"router_drops": "none"}, "router_drops is a string, not a list"),
    ({"flows": [{"flow": "f", "paths": [{"messages": 3}]}]}, "flows[0].paths[0] is not {path, messages}"),
])
def test_a_malformed_summary_is_bad_input_naming_the_file(tmp_path, capsys, content, says):
    from spark.compare import compare_runs

    good = _write(tmp_path, "good", summary("good", 20.0, 0.5, 1))
    bad = tmp_path / "bad" / "report"
    bad.mkdir(parents=True)
    (bad / "summary.json").write_text(json.dumps(content))
    assert compare_runs([good, str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert f"{bad / 'summary.json'} is not a testbed summary compare can read: {says}" in err
    assert "Traceback" not in err
