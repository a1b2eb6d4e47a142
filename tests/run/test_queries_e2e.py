"""`testbed run topologies/queries.yaml` end to end (issue 15): r1 queries svc/lookup 20 times a second,
the queryables on r2 (nearest) and r3 answer in 100 ms, the scenario kills r2's router at 12 s and
restarts it at 22 s. The run must end PASS on the topology's own expectations (no timeout, none past
its timeout, at least one failover, p99 <= 250 ms), and the report must show the three phases."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import needs_mininet

pytestmark = [needs_mininet, pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server")]

ROOT = Path(__file__).resolve().parents[2]


def test_queries_fail_over_when_the_nearest_queryable_router_is_killed(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(ROOT / "topologies/queries.yaml"),
                           "--results", str(tmp_path / "results"), "--json"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = Path(json.loads(proc.stdout.strip().splitlines()[-1])["run_dir"])
    summary = json.loads((run_dir / "report/summary.json").read_text())
    [flow] = summary["queries"]["flows"]
    assert flow["queries"] == 600 and flow["outcomes"]["ok"] + flow["outcomes"]["shutdown"] == 600
    assert flow["timeouts"] == 0 and flow["past_timeout"] == 0 and flow["failovers"] >= 1
    before, down, after = flow["phases"]
    assert (before["label"], down["label"], after["label"]) == ("start", "kill_router r2", "restart_router r2")
    assert set(down["served_by"]) == {"r3"} and before["served_by"]["r2"] > 0 and after["served_by"].get("r2", 0) > 0
    html = (run_dir / "report/report.html").read_text()
    assert 'id="queries"' in html and "kill_router r2" in html
