"""`testbed run` through the impairment appliance when it goes wrong: the run's process killed with SIGKILL while
the appliance runs (then `testbed clean` leaves no process, tap or file of it), and the appliance dying in the
middle of the traffic (the run ends with exit 1 naming it, what the nodes held salvaged, its console log kept)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from testbed.lab import state as labstate
from testbed.links import appliance
from tests.conftest import needs_mininet
from tests.run.test_run_e2e import cli_argv, leftovers

pytestmark = [pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server"),
              pytest.mark.skipif(not appliance.installed(),
                                 reason=f"user-mode Linux is not installed ({appliance.INSTALL_HINT})"),
              needs_mininet]

#: two routers, one link through the appliance (forced, with a delay), a flow across it
TINY = """
name: {name}
duration: 60s
impairments: appliance
nodes: {{r1: {{}}, r2: {{}}}}
links:
  - {{endpoints: [r1, r2], delay: 5ms}}
traffic:
  - {{profile: zpub, node: r1, subscribers: [r2], start_delay: 1s}}
"""


def start_run(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    topo = tmp_path / f"{name}.yaml"
    topo.write_text(TINY.format(name=name))
    results = tmp_path / "results"
    run = subprocess.Popen(cli_argv("run", str(topo), "--no-analyze", "--no-verify-links", "--results", str(results),
                                    "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return run, results


def wait_for(what: str, ready, run: subprocess.Popen, timeout_s: float = 240.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = ready()
        if found:
            return found
        assert run.poll() is None, f"the run ended before {what}: {run.communicate()}"
        time.sleep(0.2)
    pytest.fail(f"the run never reached {what}")


def appliance_left(lab: str) -> list[str]:
    """The appliance's processes, taps (in this machine's namespace) and folder, if any is left."""
    found = [f"process {pid}" for pid in appliance.processes_of(appliance.umid_for(lab))]
    found += [f"tap {t}" for t in os.listdir("/sys/class/net") if t.startswith(appliance.tap_prefix(lab))]
    if (appliance.appliance_root() / lab).exists():
        found.append(f"folder {appliance.appliance_root() / lab}")
    return found


def appliance_running(lab: str) -> bool:
    """The lab is up, its state records the appliance carrying its link, and the appliance's processes run."""
    state = labstate.load(lab)
    return bool(state and state.status == "up" and (state.lab or {}).get("info", {}).get("appliance")
                and appliance.processes_of(appliance.umid_for(lab)))


def appliance_booting(lab: str) -> bool:
    """The lab is being built and the appliance's processes run (it boots, or its taps are being moved)."""
    state = labstate.load(lab)
    return bool(state and state.status == "building" and appliance.processes_of(appliance.umid_for(lab)))


#: the moments of a kill: while the appliance boots (the lab still being built), and once it carries the link
MOMENTS = {"while-it-boots": appliance_booting, "while-it-carries-the-link": appliance_running}


@pytest.mark.parametrize("moment", MOMENTS)
def test_kill_9_of_the_run_while_the_appliance_runs_then_clean_leaves_nothing(tmp_path, moment):
    lab = f"tbt-uml-k9{moment.split('-')[2][0]}"  # k9b, k9c
    run, _ = start_run(tmp_path, lab)
    try:
        wait_for(f"the appliance {moment.replace('-', ' ')}", lambda: MOMENTS[moment](lab), run)
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
        run.communicate()
    assert appliance.processes_of(appliance.umid_for(lab)), "the appliance runs on after its run (its own session)"
    clean = subprocess.run(cli_argv("clean", "--json"), capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert any(f"impairment appliance {appliance.umid_for(lab)}" in r for r in json.loads(clean.stdout)["removed"])
    assert appliance_left(lab) == []
    assert leftovers(lab) == []


def test_an_appliance_that_dies_mid_run_ends_the_run_naming_it_with_the_results_salvaged(tmp_path):
    lab = "tbt-uml-dies"
    run, results = start_run(tmp_path, lab)
    try:
        def traffic_going() -> bool:
            dirs = list(results.glob(f"{lab}-*")) if results.exists() else []
            manifest = dirs[0] / "manifest.json" if dirs else None
            if manifest is None or not manifest.exists():
                return False
            t0 = json.loads(manifest.read_text()).get("traffic_start_ns")
            return bool(t0) and time.time_ns() > t0 + 3_000_000_000  # the flow has sent for two seconds
        wait_for("its traffic", traffic_going, run)
        for pid in appliance.processes_of(appliance.umid_for(lab)):
            os.kill(pid, signal.SIGKILL)
        out, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 1, out + err[-4000:]
    outcome = json.loads(out.strip().splitlines()[-1])
    run_dir = Path(outcome["run_dir"])
    named = f"the impairment appliance {appliance.umid_for(lab)}"
    assert outcome["status"] == "failed" and named in outcome["error"] and "faults/appliance.log" in outcome["error"]
    assert named in err  # said on the progress output too
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and named in manifest["error"]
    assert next(p for p in manifest["phases"] if p["name"] == "traffic")["ok"] is False
    assert {"collect", "teardown"} <= {p["name"] for p in manifest["phases"]}
    assert (run_dir / "faults" / "appliance.log").stat().st_size > 0  # its console, kept
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "lab_fault" and e["parts"] == ["appliance"] for e in events)
    # what a failed run salvages: the routers' files, the traffic logs, the captures
    for node in ("r1", "r2"):
        assert (run_dir / "nodes" / node / "events.jsonl").stat().st_size > 0, node
    assert len((run_dir / "traffic" / "send-zpub.realtime.csv").read_text().splitlines()) > 10
    assert list((run_dir / "pcap").glob("*.pcap"))
    assert appliance_left(lab) == []
    assert leftovers(lab) == []
