"""A scenario narrows a link below the data rate at run time: the orchestrator tells the routers at both
ends (admin API), the event log records it, and the data moves off the link (seen in the captures).

Before the routers were told, their congestion monitors kept the deploy-time capacity (20 Mbit/s here):
a 7 Mbit/s flow squeezed to 4 Mbit/s by tc never looked congested, and nothing moved.

The run is 10 s: 5 s of the flow on its path before the narrowing at 6 s, then 4 s in which r2 must find the
link congested (within two 250 ms monitor intervals) and the flow (~730 frames a second) must show on the
detour more than 100 times.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import needs_mininet

pytestmark = [needs_mininet, pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server")]

TOPOLOGY = """
name: tbt-narrow
duration: 10s
defaults:
  link: {bw: 20mbit, queue: 30}
  router: {congestion_aware: true, monitor_interval: 250ms}
nodes: {r1: {}, r2: {}, r3: {}, r4: {}}
links:
  - {endpoints: ["r1:eth1", "r2:eth1"], weight: 10}
  - {endpoints: ["r2:eth2", "r4:eth1"], weight: 10}
  - {endpoints: ["r1:eth2", "r3:eth1"], weight: 20}
  - {endpoints: ["r3:eth2", "r4:eth2"], weight: 20}
traffic:
  - {profile: constant, name: data, from: r1, to: [r4], rate: 7mbit, size: 1200b, priority: data,
     congestion_control: drop, start: 1s}
scenario:
  - {at: 6s, action: set_link, link: r2-r4, bw: 4mbit}
capture:
  links: all
"""


def test_narrowed_link_is_told_to_the_routers_and_the_data_moves(tmp_path):
    from spark.pcap import decode_pcap_file

    topo = tmp_path / "narrow.yaml"
    topo.write_text(TOPOLOGY)
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(topo), "--no-analyze", "--results",
                           str(tmp_path / "results"), "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    run_dir = Path(json.loads(proc.stdout.strip().splitlines()[-1])["run_dir"])
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    narrowed = next(e for e in events if e["event"] == "set_link")
    assert narrowed["ok"] and narrowed["bw_bps"] == 4_000_000
    told = {(u["router"], u["neighbour"]): u for u in narrowed["routers_told"]}
    assert set(told) == {("r2", "r4"), ("r4", "r2")} and all(u["applied"] for u in told.values()), told
    assert told[("r2", "r4")]["answer"]["capacity_bps"] == 4_000_000

    r2 = [json.loads(line) for line in (run_dir / "nodes" / "r2" / "events.jsonl").read_text().splitlines()]
    changed = [e for e in r2 if e["event"] == "link_capacity_changed"]
    assert changed, "r2's router never logged the new capacity"
    detected = [e for e in r2 if e["event"] == "congestion_detected" and e["ts_ns"] >= narrowed["ts_ns"]]
    assert detected, "r2 never found its narrowed link congested"

    flow_id = json.loads((run_dir / "traffic" / "flows.json").read_text())["flows"][0]["flow_id"]

    def seen(pcap: str, after_ns: int) -> int:
        decoded = decode_pcap_file(str(run_dir / "pcap" / pcap))
        return sum(1 for obs in decoded.observations if obs[2] == flow_id and obs[1] > after_ns)

    t0 = json.loads((run_dir / "manifest.json").read_text())["traffic_start_ns"]
    assert seen("r1-eth2.pcap", t0) - seen("r1-eth2.pcap", narrowed["ts_ns"]) == 0, \
        "the data used the detour before the link was narrowed"
    assert seen("r1-eth2.pcap", detected[0]["ts_ns"]) > 100, "the data did not move to r1-r3-r4"
