"""`testbed run` with other routers than ours (issue 16), end to end on Mininet: the diamond with stock
Zenoh (`--router zenoh`), the same diamond with the Zenoh router started by the generic command driver
from topologies/routers/zenoh-command.yaml, and a router that exits at its start (exit 2, its own words,
nothing left running)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import realruns
from tests.conftest import needs_mininet, short_diamond

pytestmark = [needs_mininet, pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server")]

ROOT = Path(__file__).resolve().parents[2]
DIAMOND = ROOT / "topologies" / "diamond.yaml"


def run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", "run", *args, "--json"], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def outcome(proc: subprocess.CompletedProcess) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_zenoh_run(run_dir: Path, driver: str, config_file: str) -> dict:
    """The report of a Zenoh run: latency and loss of every flow, each flow's path per link from the captures
    (all on the topology's preferred path r1-r2-r4: Zenoh's link-state has the link weights), and the router's
    metrics and events marked not available."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["router_driver"]["name"] == driver and manifest["router_driver"]["wire"] == "zenoh"
    assert not manifest["router_driver"]["metrics"] and not manifest["router_driver"]["events"]
    assert "congestion_aware" in manifest["router_driver"]["settings_ignored"]
    for node in ("r1", "r2", "r3", "r4"):
        folder = run_dir / "nodes" / node
        assert "zenohrouter ready" in (folder / "router.log").read_text()
        assert json.loads((folder / "launch.json").read_text())["driver"] == driver
        assert (folder / config_file).is_file()
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    search = summary["paths"]["header_search"]
    assert summary["paths"]["method"] == "header-search"
    assert search["validated"] == search["headers_found"] > 0 and search["rejected"] == 0
    flows = {f["flow"]: f for f in summary["flows"]}
    assert set(flows) == {"zpub.pub1", "zpub.pub2", "zpub.realtime", "bulk"}
    assert all(flows[name]["sent"] > 0 for name in ("zpub.pub1", "zpub.realtime", "bulk"))
    for name, flow in flows.items():
        if flow["sent"] == 0:  # zpub.pub2 starts at 30 s of the diamond (12 s of the short diamond)
            continue
        assert flow["latency"]["p99_ns"] > 0, name
        assert [p["path"] for p in flow["paths"]] == ["r1>r2>r4"], (name, flow["paths"])
        # every message of the flow that reached r4 was seen on both links of its path
        assert flow["paths"][0]["messages"] >= flow["delivered"] * 0.99, name
    assert flows["zpub.realtime"]["lost"] == 0
    assert summary["resources"]["available"] is False and "provides no metrics" in summary["resources"]["reason"]
    assert summary["router"]["events"]["available"] is False
    html = (run_dir / "report" / "report.html").read_text()
    assert "r1&gt;r2&gt;r4" in html or "r1>r2>r4" in html
    assert "not available" in html
    return summary


def test_the_diamond_with_stock_zenoh(tmp_path, spark):
    # The diamond's story in 18 s (tests/conftest.py short_diamond): every flow runs, pub2 from 12 s on, and the
    # bottleneck is overloaded from 4 s and narrowed from 8 s to 14 s, as in the 60 s diamond.
    # `testbed run --no-analyze`, then the analysis and the check `testbed run` does, in the session's Spark
    # (tests/realruns.py: no JVM start of its own; `testbed run`'s exit 1 on FAIL: tests/run/test_run_exit.py)
    analysed = realruns.run_and_analyze(short_diamond(tmp_path), tmp_path / "results", "--router", "zenoh")
    # stock Zenoh does not reroute: the topology's reroute expectation fails (the verdict FAIL), it is not skipped
    assert not analysed.passed, analysed.check_output
    verdicts = json.loads((analysed.run_dir / "report" / "check.json").read_text())["verdicts"]
    reroute = next(v for v in verdicts if v["metric"] == "reroute.time")
    assert reroute["passed"] is False and not reroute["skipped"], reroute
    summary = check_zenoh_run(analysed.run_dir, "zenoh", "zenoh.json5")
    assert summary["router"]["driver"] == "zenoh"
    assert {f["flow"]: f["sent"] > 0 for f in summary["flows"]}["zpub.pub2"]


def test_the_diamond_with_the_zenoh_router_started_by_the_command_driver(tmp_path, spark):
    """The same diamond through topologies/routers/zenoh-command.yaml; the scenario also kills r3's router
    (off the flows' path) at 8 s and restarts it at 12 s: the driver-independent kill and restart. Run and
    analysed as the stock Zenoh diamond is."""
    topology = tmp_path / "diamond.yaml"
    topology.write_text(DIAMOND.read_text().replace(
        "scenario:\n", "scenario:\n  - {at: 8s, action: kill_router, node: r3}\n"
                       "  - {at: 12s, action: restart_router, node: r3}\n", 1))
    run_dir = realruns.run_and_analyze(topology, tmp_path / "results", "--router",
                                       str(ROOT / "topologies/routers/zenoh-command.yaml"), "--duration", "20").run_dir
    check_zenoh_run(run_dir, "command", "zenoh-router.json5")
    r2 = (run_dir / "nodes" / "r2" / "zenoh-router.json5").read_text()
    assert '"tcp/127.0.0.1:7448"' in r2 and 'id: "7e570002"' in r2  # rendered from the template per node
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    applied = [(e["event"], e["node"]) for e in events if e["source"] == "scenario" and e.get("ok")
               and e["event"] in ("kill_router", "restart_router")]
    assert applied == [("kill_router", "r3"), ("restart_router", "r3")], events[-20:]
    log = (run_dir / "nodes" / "r3" / "router.log").read_text()
    assert log.count("zenohrouter ready") == 2  # started, killed (no goodbye), started again
    # r1 and r4 dialled the restarted r3 again (their transports to it came back up)
    r4 = (run_dir / "nodes" / "r4" / "router.log").read_text()
    assert r4.count("transport up router 7e570003") >= 2, r4[-2000:]


def test_a_router_that_exits_at_start_is_exit_2_with_its_own_words_and_nothing_left(tmp_path):
    """r3's router refuses its config and exits; the other three come up (they listen on the client port):
    the run ends with exit 2 naming r3 and the router's own words, and the three that started are stopped."""
    script = ('if [ "$0" = r3 ]; then echo "myrouter: cannot parse $1: line 3" >&2; exit 3; fi; '
              'exec {python} -c "import socket, time; s = socket.socket(); s.bind((\'127.0.0.1\', 7448)); '
              's.listen(); time.sleep(600)" myrouter-up')
    topology = tmp_path / "diamond-broken.yaml"
    topology.write_text(DIAMOND.read_text() + "\nrouter:\n  driver: command\n"
                        f"  command: {json.dumps(['sh', '-c', script, '{node}', '{config}'])}\n"
                        "  config: \"listen {{ listen | join(' ') }}\\n\"\n  client: zenoh\n")
    proc = run(str(topology), "--results", str(tmp_path / "results"), timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = outcome(proc)
    assert result["status"] == "failed"
    assert "r3: task 'start router' failed: router exited with status 3 at start" in result["error"]
    assert "myrouter: cannot parse" in result["error"] and "router.conf: line 3" in result["error"]
    for node in ("r1", "r2", "r4"):
        assert f"{node}: task" not in result["error"]
    leftovers = subprocess.run(["pgrep", "-f", "myrouter-up"], capture_output=True, text=True).stdout
    assert leftovers == "", "routers that came up were left running"
    manifest = json.loads((Path(result["run_dir"]) / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["router_driver"]["name"] == "command"
    log = (Path(result["run_dir"]) / "nodes" / "r3" / "router.log").read_text()
    assert "myrouter: cannot parse" in log  # collected all the same


def test_an_unknown_driver_is_refused_before_anything_is_built(tmp_path):
    proc = run(str(DIAMOND), "--router", "zenohd", "--results", str(tmp_path), timeout=60)
    assert proc.returncode == 2
    assert "unknown router driver 'zenohd'" in proc.stderr and "did you mean 'zenoh'" in proc.stderr
    assert not any(tmp_path.iterdir())
