"""The diamond on Mininet and on Docker: both pass its expectations, and `testbed compare` shows the same
paths and the same reroutes for every flow (the backend changes where nodes live, not what the network does)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import needs_mininet, run_cli, skip_unless_backend

pytestmark = [needs_mininet, pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server")]


def test_mininet_and_docker_runs_take_the_same_paths(tmp_path, request):
    skip_unless_backend("docker")
    # Mininet: the short diamond's shared run (tests/conftest.py short_diamond_run: `testbed run` on the default
    # backend, then the analysis and the check `testbed run` does, tests/realruns.py), the run
    # tests/spark/test_spark_real_run.py reads
    mininet = request.getfixturevalue("short_diamond_run")
    manifest = json.loads((mininet.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["backend"] == "mininet"
    assert mininet.passed, ("mininet", mininet.check_output)
    runs = {"mininet": mininet.run_dir}
    # Docker: the same, `testbed run diamond.yaml --backend docker` (tests/conftest.py short_diamond_docker_run:
    # the diamond's story in 18 s), analysed and checked the same way; the run tests/run/test_run_e2e.py reads
    docker = request.getfixturevalue("short_diamond_docker_run")
    assert json.loads((docker.run_dir / "manifest.json").read_text())["backend"] == "docker"
    assert docker.passed, ("docker", docker.check_output)
    runs["docker"] = docker.run_dir
    compare = run_cli("compare", str(runs["mininet"]), str(runs["docker"]), "--label-a", "mininet",
                      "--label-b", "docker", "--out", str(tmp_path / "compare.html"))
    summaries = {b: json.loads((d / "report" / "summary.json").read_text()) for b, d in runs.items()}
    flows = {b: {f["flow"]: f for f in s["flows"]} for b, s in summaries.items()}
    assert set(flows["mininet"]) == set(flows["docker"]) == {"zpub.pub1", "zpub.pub2", "zpub.realtime", "bulk"}
    for name in flows["mininet"]:
        on_mininet = [p["path"] for p in flows["mininet"][name]["paths"]]
        on_docker = [p["path"] for p in flows["docker"][name]["paths"]]
        assert on_mininet == on_docker, (name, on_mininet, on_docker)
        assert flows["mininet"][name]["reroutes"] == flows["docker"][name]["reroutes"], name
    # The data flows left the bottleneck; realtime stayed: the same story on both backends.
    assert [p["path"] for p in flows["docker"]["zpub.pub1"]["paths"]] == ["r1>r2>r4", "r1>r3>r4"]
    assert [p["path"] for p in flows["docker"]["zpub.realtime"]["paths"]] == ["r1>r2>r4"]
    assert "differs" not in compare.stdout and compare.stdout.count("  same") == 4, compare.stdout
