"""Congestion-aware QoS routing proven end to end on the diamond, with `testbed run` and the analysis:
the default scenario with congestion-awareness on and off, side by side."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spark.compare import compare_command
from tests.conftest import needs_mininet

pytestmark = [needs_mininet, pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server")]

ROOT = Path(__file__).resolve().parents[2]
DIAMOND = ROOT / "topologies" / "diamond.yaml"
#: long enough for every phase of the default scenario: bulk 10-40 s, pub1 until 30 s, pub2 from 30 s
DURATION_S = 45
DATA_FLOWS = ("zpub.pub1", "bulk")


def run_diamond(results: Path, *extra: str) -> tuple[Path, dict]:
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(DIAMOND), "--duration", str(DURATION_S),
                           "--results", str(results), "--json", *extra],
                          capture_output=True, text=True, timeout=900)
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["status"] == "completed" and outcome["report"], proc.stderr[-3000:]
    run_dir = Path(outcome["run_dir"])
    return run_dir, json.loads((run_dir / "report" / "summary.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    results = tmp_path_factory.mktemp("congestion")
    return {"on": run_diamond(results, "--congestion-aware"), "off": run_diamond(results, "--no-congestion-aware")}


def flow(summary: dict, name: str) -> dict:
    return next(f for f in summary["flows"] if f["flow"] == name)


def test_data_flows_leave_the_congested_link_within_two_monitor_intervals(runs):
    run_dir, s = runs["on"]
    spec = json.loads((run_dir / "manifest.json").read_text())["spec"]
    interval_ns = spec["router_settings"]["r2"]["monitor_interval"]
    interval_ns = interval_ns if isinstance(interval_ns, int) else int(float(interval_ns.rstrip("ms")) * 1e6)
    bulk_start_ns = s["t0_ns"] + 10 * 10**9  # congestion onset: the bulk flow starts (topology)
    moved = {r["flow"]: r for r in s["reroutes"]}
    for name in DATA_FLOWS:
        assert name in moved, f"{name} never left the congested path"
        r = moved[name]
        assert (r["old_path"], r["new_path"]) == ("r1>r2>r4", "r1>r3>r4")
        assert r["time_ns"] - bulk_start_ns <= 2 * interval_ns + 10**8, \
            f"{name} moved {(r['time_ns'] - bulk_start_ns) / 1e9:.2f} s after onset"
    assert s["episodes"], "the routers reported the congestion"


def test_realtime_never_reroutes_and_no_flow_moves_twice_in_an_episode(runs):
    _, s = runs["on"]
    assert flow(s, "zpub.realtime")["reroutes"] == 0
    assert not [r for r in s["reroutes"] if r["flow"] == "zpub.realtime"]
    for episode in s["episodes"]:
        assert all(n <= 1 for n in episode["reroutes"].values()), episode
    assert sum(1 for r in s["reroutes"] if r["flow"] in DATA_FLOWS) == len(DATA_FLOWS)


def test_data_started_after_the_congestion_takes_the_default_path(runs):
    from spark.pcap import decode_pcap_file

    run_dir, s = runs["on"]
    pub2 = flow(s, "zpub.pub2")
    assert pub2["reroutes"] == 0 and pub2["loss_pct"] <= 1.0
    captures = json.loads((run_dir / "pcap" / "capture.json").read_text())["captures"]
    on_link = {}
    for c in captures:
        ids = {obs[2] for obs in decode_pcap_file(str(run_dir / "pcap" / c["file"])).observations}
        on_link.setdefault(c["link"], set()).update(ids)
    assert pub2["flow_id"] in on_link[0] and pub2["flow_id"] in on_link[1]  # r1-r2, r2-r4: the default path
    assert pub2["flow_id"] not in on_link[2] | on_link[3]


def test_without_congestion_awareness_the_damage_shows_side_by_side(runs, capsys):
    on_dir, on = runs["on"]
    off_dir, off = runs["off"]
    assert off["reroutes"] == [] and off["episodes"] == []
    assert flow(off, "bulk")["loss_pct"] > 10 * max(flow(on, "bulk")["loss_pct"], 0.5)
    assert on["overall"]["loss_pct"] < 1.0
    rt_on = next(p for p in on["priorities"] if p["priority"] == 1)["latency"]["p99_ns"]
    rt_off = next(p for p in off["priorities"] if p["priority"] == 1)["latency"]["p99_ns"]
    assert rt_off > rt_on, "realtime suffers more when the routers ignore congestion"
    assert compare_command(str(off_dir), str(on_dir), label_a="aware off", label_b="aware on") == 0
    assert (on_dir / "report" / "compare.html").exists()
    assert "aware off" in capsys.readouterr().out
