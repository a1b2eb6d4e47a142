"""`testbed run` end to end on real labs: the results folder of contract 3, the flows' payload
headers in the captures of the links they crossed, and Ctrl-C in the middle of a run."""
from __future__ import annotations

import heapq
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.lab import state as labstate
from testbed.backends import get_backend
from testbed.backends.localns import netns
from testbed.spec import load_spec
from tests.conftest import BACKEND_PARAMS, needs_mininet, skip_unless_backend

pytestmark = [pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server")]


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "testbed.cli", *args]


def shortest_path(spec, src: str, dst: str) -> list[int]:
    """Link indexes of the least-weight path (what the routers should use without congestion)."""
    adj: dict[str, list[tuple[int, str, int]]] = {}
    for link in spec.resolved_links():
        adj.setdefault(link.a.node, []).append((link.weight, link.b.node, link.index))
        adj.setdefault(link.b.node, []).append((link.weight, link.a.node, link.index))
    queue, seen = [(0, src, [])], set()
    while queue:
        cost, node, path = heapq.heappop(queue)
        if node == dst:
            return path
        if node in seen:
            continue
        seen.add(node)
        for weight, nxt, index in adj.get(node, []):
            heapq.heappush(queue, (cost + weight, nxt, path + [index]))
    raise AssertionError(f"no path {src}->{dst}")


def leftovers(lab: str) -> list[str]:
    from testbed.backends.localns import mgmt
    from testbed.backends.localns.backend import NODE_ROOT

    found = [n for n in netns.list_names() if n.startswith(f"{netns.PREFIX}{lab}-")]
    if labstate.load(lab) is not None:
        found.append(f"lab state {lab}")
    tag = mgmt.lab_tag(lab)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [f"interface {line.split(':')[1].strip()}" for line in links.splitlines()
              if f"{mgmt.HOST_PREFIX}{tag}" in line]
    for folder in (mgmt.SSH_ROOT / lab, Path(NODE_ROOT) / lab):
        if folder.exists():
            found.append(f"folder {folder}")
    for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()):
        try:
            cmd = (Path(f"/proc/{pid}") / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"{NODE_ROOT}/{lab}/" in cmd or f"/ssh/{lab}/" in cmd or (f"/{lab}-" in cmd and "tcpdump" in cmd):
            found.append(f"process {pid}: {cmd[:120]}")
    return found


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def diamond_run(request):
    """The short diamond (tests/conftest.py short_diamond: 18 s, analysed afterwards, as `testbed run` analyses)
    run on each backend, shared with other tests: on Mininet the congestion comparison's aware-off run
    (tests/run/conftest.py short_diamond_aware_off), on Docker the backend comparison's run (tests/conftest.py
    short_diamond_docker_run, congestion-aware). Its results folder, the backend and the topology file it ran;
    read only."""
    backend = request.param
    skip_unless_backend(backend)
    run = request.getfixturevalue("short_diamond_aware_off" if backend == "mininet" else "short_diamond_docker_run")
    return run.run_dir, backend, run.run_dir.parent / "diamond.yaml"  # short_diamond wrote it beside the run


def test_results_folder_follows_contract_3(diamond_run):
    run_dir, backend, topology = diamond_run
    spec = load_spec(topology)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["error"] is None
    for key in ("spec", "versions", "git_revision", "kernel", "capabilities", "shaping", "backend", "phases",
                "started_ns", "ended_ns", "traffic_start_ns"):
        assert key in manifest, key
    assert manifest["spec"]["spec"]["name"] == "diamond" and len(manifest["spec"]["links"]) == 4
    assert manifest["backend"] == backend and manifest["backend_info"], manifest["backend_info"]
    if backend == "docker":
        assert manifest["backend_info"]["image_id"].startswith("sha256:") and manifest["backend_info"]["docker_engine"]
    assert manifest["capabilities"]["qdiscs"]["htb"] is True
    assert isinstance(manifest["capabilities"]["qdiscs"]["netem"], bool)
    assert len(manifest["shaping"]) == 2 * len(spec.links) and all("qdiscs" in s for s in manifest["shaping"])
    # no data-plane verification by default on the local backends; the clocks are this machine's
    assert [p["name"] for p in manifest["phases"]] == ["lab", "shape", "management", "clocks", "deploy", "capture",
                                                       "traffic", "collect", "teardown"]
    assert manifest["link_verification"] is None
    for when in ("before", "after"):
        assert {n: r["method"] for n, r in manifest["clocks"][when].items()} == {n: "same-host" for n in spec.nodes}
    assert all(p["ok"] for p in manifest["phases"]), manifest["phases"]
    assert (run_dir / "topology.yaml").read_text() == topology.read_text()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert {"lab_up", "routers_up", "run_end"} <= {e["event"] for e in events}
    assert all(isinstance(e["ts_ns"], int) for e in events)
    for node in spec.nodes:
        for name in ("router.json", "events.jsonl"):
            assert (run_dir / "nodes" / node / name).stat().st_size > 0, f"nodes/{node}/{name}"
        assert (run_dir / "nodes" / node / "router.log").exists()  # may be empty: nothing to warn about
        scrapes = [json.loads(line) for line in (run_dir / "metrics" / f"{node}.jsonl").read_text().splitlines()]
        assert len(scrapes) >= 10 and sum(s["ok"] for s in scrapes) >= len(scrapes) - 1
    flows = json.loads((run_dir / "traffic" / "flows.json").read_text())["flows"]
    assert {f["name"] for f in flows} == {"zpub.pub1", "zpub.pub2", "zpub.realtime", "bulk"}
    for flow in flows:
        send = (run_dir / "traffic" / f"send-{flow['name']}.csv").read_text().splitlines()
        assert send[0] == "seq,send_ns,size"
        for node in flow["subscribers"]:
            recv = (run_dir / "traffic" / f"recv-{flow['name']}-{node}.csv").read_text().splitlines()
            assert recv[0] == "seq,send_ns,recv_ns,size"
            if flow["name"] == "zpub.realtime":
                assert len(send) > 100 and len(recv) >= 0.95 * len(send)
    captures = json.loads((run_dir / "pcap" / "capture.json").read_text())["captures"]
    assert len(captures) == 2 * len(spec.links)
    assert all((run_dir / "pcap" / c["file"]).exists() for c in captures)
    assert leftovers("diamond") == []


def test_every_link_a_flow_crossed_has_its_payload_headers(diamond_run):
    from spark.pcap import decode_pcap_file

    run_dir, _, topology = diamond_run
    spec = load_spec(topology)
    flows = {f["name"]: f for f in json.loads((run_dir / "traffic" / "flows.json").read_text())["flows"]}
    captures = json.loads((run_dir / "pcap" / "capture.json").read_text())["captures"]
    seen: dict[str, set[int]] = {}
    for c in captures:
        decoded = decode_pcap_file(str(run_dir / "pcap" / c["file"]))
        seen[c["file"]] = {obs[2] for obs in decoded.observations}  # (stream, ts_ns, flow_id, ...)
    # Realtime is never rerouted and pub2 starts once the data has left the congested link
    # (tests/run/test_congestion_e2e.py): both keep the least-weight path, with congestion-awareness or without;
    # pub1 takes it until the congestion, and keeps to it where congestion-awareness is off.
    aware = json.loads((run_dir / "manifest.json").read_text())["spec"]["router_settings"]["r1"]["congestion_aware"]
    for name in ("zpub.pub1", "zpub.pub2", "zpub.realtime"):
        flow = flows[name]
        crossed = shortest_path(spec, flow["publisher"], flow["subscribers"][0])
        for c in captures:
            if c["link"] in crossed:
                assert flow["flow_id"] in seen[c["file"]], f"{name} missing from {c['file']}"
            elif name != "zpub.pub1" or not aware:
                assert flow["flow_id"] not in seen[c["file"]], f"{name} appears on {c['file']}, off its path"


LINE = """
name: tbt-sigint
duration: 60s
nodes: {{r1: {{}}, r2: {{}}, r3: {{}}}}
links:
  - {{endpoints: [r1, r2], bw: 10mbit}}
  - {{endpoints: [r2, r3], bw: 10mbit}}
traffic:
  - {{profile: zpub, node: r1, subscribers: [r3], start_delay: 1s}}
scenario:
  - {{at: 3s, action: set_link, link: r2-r3, bw: 5mbit}}
"""


@needs_mininet
def test_sigint_mid_run_leaves_an_interrupted_manifest_clean_pcaps_and_no_leftovers(tmp_path):
    from spark.pcap import decode_pcap_file

    topo = tmp_path / "sigint.yaml"
    topo.write_text(LINE.format())
    results = tmp_path / "results"
    proc = subprocess.Popen(cli_argv("run", str(topo), "--no-analyze", "--results", str(results), "--quiet"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        run_dir = None
        while time.monotonic() < deadline:
            dirs = list(results.glob("tbt-sigint-*")) if results.exists() else []
            if dirs:
                run_dir = dirs[0]
                events = (run_dir / "events.jsonl").read_text() if (run_dir / "events.jsonl").exists() else ""
                if '"set_link"' in events:
                    break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        else:
            pytest.fail("the run never reached its scenario event")
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out + err
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and "SIGINT" in manifest["error"]
    traffic_phase = next(p for p in manifest["phases"] if p["name"] == "traffic")
    assert traffic_phase["ok"] is False
    assert {p["name"] for p in manifest["phases"]} >= {"collect", "teardown"}
    captures = json.loads((run_dir / "pcap" / "capture.json").read_text())["captures"]
    realtime_seen = 0
    for c in captures:
        decoded = decode_pcap_file(str(run_dir / "pcap" / c["file"]))
        assert not decoded.stats.truncated_file and decoded.stats.error is None, f"{c['file']} was cut short"
        assert c["packets_captured"] is not None, "tcpdump was stopped cleanly and reported its counts"
        realtime_seen += len(decoded.observations)
    assert realtime_seen > 0
    send = (run_dir / "traffic" / "send-zpub.realtime.csv").read_text().splitlines()
    assert len(send) > 20
    assert leftovers("tbt-sigint") == []


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_kill_9_mid_run_then_clean_salvages_what_the_nodes_held(tmp_path, backend):
    """kill -9 of `testbed run` mid-traffic: `clean` brings the routers' events, the traffic logs and
    the captures into the run's folder before removing the nodes (on Docker they are only in the
    containers), and the manifest says it crashed."""
    skip_unless_backend(backend)
    topo = tmp_path / "crash.yaml"
    topo.write_text(LINE.format().replace("tbt-sigint", "tbt-crash"))
    results = tmp_path / "results"
    proc = subprocess.Popen(cli_argv("run", str(topo), "--no-analyze", "--backend", backend, "--results",
                                     str(results), "--quiet"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            dirs = list(results.glob("tbt-crash-*")) if results.exists() else []
            events = (dirs[0] / "events.jsonl").read_text() if dirs and (dirs[0] / "events.jsonl").exists() else ""
            if '"set_link"' in events:
                break
            assert proc.poll() is None, "the run ended before its scenario event"
            time.sleep(0.2)
        else:
            pytest.fail("the run never reached its scenario event")
        run_dir = dirs[0]
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not (run_dir / "nodes" / "r2" / "events.jsonl").exists(), "nothing was collected before the kill"
    clean = subprocess.run(cli_argv("clean", "--json"), capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr
    report = json.loads(clean.stdout)
    assert [s["run_dir"] for s in report["salvaged"]] == [str(run_dir.resolve())]
    for node in ("r1", "r2", "r3"):
        events = [json.loads(line) for line in (run_dir / "nodes" / node / "events.jsonl").read_text().splitlines()]
        assert {"ready", "link_up"} <= {e["event"] for e in events}, node
    assert len((run_dir / "traffic" / "send-zpub.realtime.csv").read_text().splitlines()) > 20
    assert list((run_dir / "pcap").glob("*.pcap"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "crashed" and manifest["extra"]["crash"]["found_by"] == "testbed clean"
    assert any(f.endswith("events.jsonl") for f in manifest["extra"]["crash"]["salvaged"])
    assert leftovers("tbt-crash") == []
    assert [x for x in get_backend(backend).leftovers(set()) if "tbt-crash" in x] == []
