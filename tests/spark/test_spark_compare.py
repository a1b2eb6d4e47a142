"""`testbed compare`: two runs' summaries side by side."""
from __future__ import annotations

import json

from spark.compare import compare_command, compare_rows


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
    page = (tmp_path / "b" / "report" / "compare.html").read_text()
    assert "<table>" in page and "aware on" in page and "http" not in page.split("<body>")[1]
    (tmp_path / "c").mkdir()
    assert compare_command(str(tmp_path / "a"), str(tmp_path / "c")) == 2
    assert "testbed analyze" in capsys.readouterr().out
