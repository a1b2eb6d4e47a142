"""Parts of `testbed run` on their own: results folder, manifest, timeline, progress counting, scraping."""
from __future__ import annotations

import json
import signal
import os
import threading
import time
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from testbed.run.manifest import Manifest, ManifestWriter
from testbed.run.progress import TrafficWatch
from testbed.run.rundir import RunDir, new_run_id
from testbed.run.scenario import ScenarioError, Timeline
from testbed.run.scraper import SCRAPER_NICE, MetricsScraper
from testbed.run.signals import Interrupted, interrupt_guard


def test_run_dir_layout_and_event_log(tmp_path):
    run = RunDir(tmp_path, new_run_id("diamond", 1_700_000_000 * 10**9))
    assert run.run_id == "diamond-20231114T221320Z"
    for sub in ("nodes", "traffic", "metrics", "pcap", "ansible"):
        assert (run.path / sub).is_dir()
    run.events.write("orchestrator", "lab_up", nodes=4)
    run.events.close()
    record = json.loads((run.path / "events.jsonl").read_text())
    assert record["event"] == "lab_up" and record["nodes"] == 4 and isinstance(record["ts_ns"], int)
    again = RunDir(tmp_path, run.run_id)  # same second: a new folder, never the same one
    assert again.run_id == "diamond-20231114T221320Z-2" and again.path.is_dir()


def test_manifest_records_phases_and_failure(tmp_path):
    writer = ManifestWriter(tmp_path / "manifest.json", Manifest("r", "t.yaml", {}, "mininet"))
    with writer.phase("lab"):
        pass
    with pytest.raises(RuntimeError):
        with writer.phase("deploy"):
            raise RuntimeError("r2: task 'start router' failed")
    writer.finish("failed", "deploy failed")
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert [(p["name"], p["ok"]) for p in m["phases"]] == [("lab", True), ("deploy", False)]
    assert m["phases"][1]["error"] == "r2: task 'start router' failed"
    assert m["status"] == "failed" and m["ended_ns"] >= m["started_ns"]
    assert m["versions"]["testbed"] and m["kernel"]


class RecordingActions:
    def __init__(self, fail_on: str = ""):
        self.seen = []
        self.fail_on = fail_on

    def apply(self, event):
        if event.action == self.fail_on:
            raise RuntimeError("boom")
        self.seen.append((event.action, time.time_ns()))
        return {"link": 1}


def test_timeline_applies_events_on_time(tmp_path):
    run = RunDir(tmp_path, "t")
    events = [SimpleNamespace(at=300_000_000, action="link_up"), SimpleNamespace(at=100_000_000, action="link_down")]
    actions = RecordingActions()
    t0 = time.time_ns()
    ticks = []
    Timeline(events, actions, run.events).run(t0, t0 + 500_000_000, tick=lambda: ticks.append(1), tick_s=0.1)
    assert [a for a, _ in actions.seen] == ["link_down", "link_up"]
    for (action, ts), at in zip(actions.seen, (100_000_000, 300_000_000)):
        assert 0 <= ts - (t0 + at) < 100_000_000, f"{action} late by {(ts - t0 - at) / 1e6:.1f} ms"
    assert len(ticks) >= 3
    lines = [json.loads(line) for line in (run.path / "events.jsonl").read_text().splitlines()]
    assert [(r["event"], r["at_ns"], r["source"]) for r in lines] == [
        ("link_down", 100_000_000, "scenario"), ("link_up", 300_000_000, "scenario")]


def test_timeline_failure_is_recorded_and_raised(tmp_path):
    run = RunDir(tmp_path, "t")
    t0 = time.time_ns()
    with pytest.raises(ScenarioError, match="link_down.*boom"):
        Timeline([SimpleNamespace(at=0, action="link_down")], RecordingActions("link_down"), run.events).run(
            t0, t0 + 10**9)
    record = json.loads((run.path / "events.jsonl").read_text())
    assert record["ok"] is False and record["error"] == "boom"


def test_traffic_watch_counts_complete_lines_on_each_node(tmp_path):
    """Sent lines are counted on the publisher's node, received ones on each subscriber's node."""
    nodes = {"r1": tmp_path / "r1", "r4": tmp_path / "r4", "r5": tmp_path / "r5"}
    for d in nodes.values():
        d.mkdir()
    asked = []

    def line_counts(node, names):  # what the node access answers: complete lines of the files that exist
        asked.append((node, sorted(names)))
        return {n: (nodes[node] / n).read_text().count("\n") for n in names if (nodes[node] / n).exists()}

    watch = TrafficWatch({"f": ["r4", "r5"]}, {"f": "r1"}, line_counts)
    assert watch.counts().sent == 0
    (nodes["r1"] / "send-f.csv").write_text("seq,send_ns,size\n0,1,10\n1,2,10\n2,3,1")  # last line incomplete
    (nodes["r4"] / "recv-f-r4.csv").write_text("seq,send_ns,recv_ns,size\n0,1,5,10\n")
    counts = watch.counts()
    assert (counts.sent, counts.expected, counts.delivered, counts.lost) == (2, 4, 1, 3)
    assert ("r5", ["recv-f-r5.csv"]) in asked and ("r1", ["send-f.csv"]) in asked


def test_progress_never_shows_more_delivered_than_expected(tmp_path):
    """A receive log read after its send log may hold messages whose send line came later: the progress line
    counts at most each message sent once per subscriber, out of the deliveries expected."""
    import io

    from testbed.run.progress import Progress

    logs = {"r1": {"send-f.csv": 1 + 3}, "r4": {"recv-f-r4.csv": 1 + 5}}
    watch = TrafficWatch({"f": ["r4"]}, {"f": "r1"}, lambda node, names: logs[node])
    counts = watch.counts()
    assert (counts.sent, counts.expected, counts.delivered, counts.lost) == (3, 3, 3, 0)
    out = io.StringIO()
    Progress("human", out).status("traffic", 4.0, counts)
    assert out.getvalue().endswith("traffic   4.0s left  sent 3  delivered 3 of 3  not (yet) delivered 0 (0.0%)\n")


def test_scraper_writes_samples_and_failures(tmp_path):
    registry = CollectorRegistry()
    Counter("demo_messages", "messages", ["priority"], registry=registry).labels("data").inc(7)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    port = server.server_port
    try:
        scraper = MetricsScraper({"r1": f"http://127.0.0.1:{port}/metrics", "r2": "http://127.0.0.1:9/metrics"},
                                 tmp_path, interval_s=0.1)
        scraper.start()
        time.sleep(0.35)
        # the scraper's threads (its loop and the ones that fetch and parse) yield the CPU to the routers
        threads = [t for t in threading.enumerate() if t.name.startswith("metrics-scrape")]
        assert len(threads) >= 2  # the loop and at least one fetching thread
        assert {os.getpriority(os.PRIO_PROCESS, t.native_id) for t in threads} == \
            {min(19, os.getpriority(os.PRIO_PROCESS, 0) + SCRAPER_NICE)}
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == os.getpriority(os.PRIO_PROCESS, 0)
        scraper.stop()
    finally:
        server.shutdown()
    good = [json.loads(line) for line in (tmp_path / "r1.jsonl").read_text().splitlines()]
    bad = [json.loads(line) for line in (tmp_path / "r2.jsonl").read_text().splitlines()]
    assert len(good) >= 3 and all(r["ok"] for r in good)
    assert ["demo_messages_total", {"priority": "data"}, 7.0] in good[0]["samples"]
    assert bad and not any(r["ok"] for r in bad) and bad[0]["error"]


def test_first_signal_interrupts_later_ones_do_not():
    with interrupt_guard() as guard:
        with pytest.raises(Interrupted, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGINT)  # during teardown: reported, not raised
        time.sleep(0.05)
        assert guard.received == [signal.SIGTERM, signal.SIGINT]


def test_deferred_signal_is_raised_when_the_block_ends_and_handlers_come_back():
    with interrupt_guard() as guard:
        with pytest.raises(Interrupted, match="SIGINT"):
            with guard.deferred():
                signal.signal(signal.SIGINT, lambda *a: None)  # a library installs its own handler
                guard._handler(signal.SIGINT, None)  # what our handler would see
                assert guard.pending
        assert signal.getsignal(signal.SIGINT) == guard._handler


def test_a_router_that_cannot_hear_of_a_bandwidth_change_is_reported_and_told_again_after_restart(monkeypatch):
    """set_link goes on when one end's router is down (killed by the scenario): the event says which router
    did not hear of it, and a router restarted later is told the bandwidth again."""
    from testbed.backends import LabEnd, LabLink
    from testbed.deploy import routeradmin
    from testbed.deploy.deployer import RouterEndpoint
    from testbed.run.routercontrol import RouterControl
    from testbed.spec.resolve import Shaping

    link = LabLink(1, LabEnd("r2", "eth2", "10.0.0.1/30"), LabEnd("r4", "eth1", "10.0.0.2/30"), 10,
                   Shaping(), Shaping())
    endpoints = {n: RouterEndpoint(n, "100.100.0.2", "http://127.0.0.1:9/metrics", "http://127.0.0.1:9/admin", "t",
                                   "127.0.0.1:7448", "/x") for n in ("r2", "r4")}
    told = []

    def notify(eps, lnk, bw, *, direction=None, **_):
        told.append((direction, bw))
        if direction == "r4":
            raise routeradmin.RouterAdminError("router r4: cannot reach its admin API", node="r4", url="u")
        return [routeradmin.CapacityUpdate(direction, lnk.other(direction).node, bw, True, answer={})]

    monkeypatch.setattr(routeradmin, "notify_link_bandwidth", notify)
    restarted = []
    from testbed.drivers import TestbedDriver

    deployer = SimpleNamespace(endpoints=lambda: endpoints, restart_router=restarted.append, driver=TestbedDriver())
    control = RouterControl(deployer)
    updates = control.tell_link_bandwidth(link, 4_000_000, None)
    assert [(u.router, u.applied) for u in updates] == [("r2", True), ("r4", False)]
    assert "cannot reach" in updates[1].skipped
    told.clear()
    control.restart("r4")
    assert restarted == ["r4"] and told == [("r4", 4_000_000)]


def test_a_driver_without_an_admin_api_is_not_told_of_bandwidth_changes_and_says_so():
    """set_link on a run of stock Zenoh: the shaping changes; the routers are not told (no admin API), and
    the event says so for each end instead of trying."""
    from testbed.backends import LabEnd, LabLink
    from testbed.drivers import ZenohDriver
    from testbed.run.routercontrol import RouterControl
    from testbed.spec.resolve import Shaping

    link = LabLink(1, LabEnd("r2", "eth2", "10.0.0.1/30"), LabEnd("r4", "eth1", "10.0.0.2/30"), 10,
                   Shaping(), Shaping())
    deployer = SimpleNamespace(endpoints=lambda: pytest.fail("no admin API to reach"), driver=ZenohDriver())
    updates = RouterControl(deployer).tell_link_bandwidth(link, 6_000_000, None)
    assert [(u.router, u.applied, u.skipped) for u in updates] == [
        ("r2", False, "router driver zenoh has no admin API"), ("r4", False, "router driver zenoh has no admin API")]
