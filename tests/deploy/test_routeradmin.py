"""The orchestrator's admin client (testbed/deploy/routeradmin.py) against real router
processes on loopback: two routers a - b with an admin token, as deployed."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from router.congestion import payload_capacity
from testbed.backends.base import LabEnd, LabLink
from testbed.deploy.deployer import RouterEndpoint
from testbed.deploy.routeradmin import (
    RouterAdminError,
    link_capacities,
    notify_link_bandwidth,
    set_link_capacity,
)
from testbed.spec.resolve import Shaping

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "0123456789abcdef-test"
MBIT = 1_000_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Routers:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, dict[str, int]] = {}

    def start(self, name: str, neighbours: list) -> None:
        ports = self.ports[name]
        cfg = {"node": name, "router_listen": [f"127.0.0.1:{ports['router']}"],
               "client_listen": [f"127.0.0.1:{ports['client']}"], "neighbours": neighbours,
               "metrics_listen": f"127.0.0.1:{ports['metrics']}", "admin_token": TOKEN,
               "event_log": str(self.tmp / f"{name}.events.jsonl"), "lease_ms": 1000, "keepalive_ms": 250,
               "monitor_interval_ms": 200}
        path = self.tmp / f"{name}.json"
        path.write_text(json.dumps(cfg))
        with open(self.tmp / f"{name}.stderr", "ab") as err:
            self.procs[name] = subprocess.Popen([sys.executable, "-m", "router", "--config", str(path)], cwd=str(ROOT),
                                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)

    def events(self, name: str) -> list:
        path = self.tmp / f"{name}.events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def wait_event(self, name: str, event: str, timeout: float = 15.0, **match) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ev in self.events(name):
                if ev["event"] == event and all(ev.get(k) == v for k, v in match.items()):
                    return ev
            if self.procs[name].poll() is not None:
                raise AssertionError(f"router {name} exited: {(self.tmp / f'{name}.stderr').read_text()[-2000:]}")
            time.sleep(0.02)
        raise AssertionError(f"router {name}: no {event} {match} within {timeout}s")

    def endpoint(self, name: str, token: str = TOKEN) -> RouterEndpoint:
        base = f"http://127.0.0.1:{self.ports[name]['metrics']}"
        return RouterEndpoint(name, "127.0.0.1", f"{base}/metrics", f"{base}/admin", token,
                              f"127.0.0.1:{self.ports[name]['client']}", str(self.tmp))

    def cleanup(self) -> None:
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)


@pytest.fixture
def pair(tmp_path: Path):
    r = Routers(tmp_path)
    try:
        for n in ("a", "b"):
            r.ports[n] = {k: free_port() for k in ("router", "client", "metrics")}
        r.start("a", [{"name": "b", "address": "127.0.0.1", "port": r.ports["b"]["router"],
                       "link_capacity_bps": 10 * MBIT}])
        r.start("b", [])
        for n in ("a", "b"):
            r.wait_event(n, "ready")
            r.wait_event(n, "link_up")
        yield r
    finally:
        r.cleanup()


def lab_link(a_ip: str = "127.0.0.1", b_ip: str = "127.0.0.1") -> LabLink:
    return LabLink(0, LabEnd("a", "a-eth0", f"{a_ip}/8"), LabEnd("b", "b-eth0", f"{b_ip}/8"), 100,
                   Shaping(bw_bps=10 * MBIT), Shaping(bw_bps=10 * MBIT))


def test_set_link_capacity_changes_what_the_monitor_uses_and_is_logged(pair):
    a = pair.endpoint("a")
    answer = set_link_capacity(a, "b", 4 * MBIT, address="127.0.0.1", reason="set_link a-b bw 4mbit")
    assert answer["neighbour"] == "b" and answer["capacity_bps"] == 4 * MBIT
    assert answer["capacity_bps_before"] == 10 * MBIT and answer["configured_capacity_bps"] == 10 * MBIT
    assert answer["monitor_interval_ms"] == 200
    ev = pair.wait_event("a", "link_capacity_changed")
    assert ev == dict(ev, neighbour="b", capacity_bps_before=10 * MBIT, capacity_bps_after=4 * MBIT, source="admin",
                      reason="set_link a-b bw 4mbit")
    # the monitor's next ticks decide against it: cap_limit = 4M of frames as TCP payload - 0 - 5% of 4M
    deadline = time.monotonic() + 15
    while link_capacities(a)["b"]["cap_limit_bps"] != round(payload_capacity(4 * MBIT) - 200_000):
        assert time.monotonic() < deadline, link_capacities(a)
        time.sleep(0.05)
    # no limit any more: the monitor ignores the link
    assert set_link_capacity(a, "b", None)["capacity_bps"] is None
    assert link_capacities(a)["b"]["capacity_bps"] is None


def test_failures_raise_with_the_routers_reason(pair):
    a = pair.endpoint("a")
    with pytest.raises(RouterAdminError, match="router a: POST .*/admin/capacity answered HTTP 403") as err:
        set_link_capacity(pair.endpoint("a", token="wrong-token-xyz"), "b", 4 * MBIT)
    assert err.value.status == 403 and err.value.node == "a"
    with pytest.raises(RouterAdminError, match="HTTP 400: neighbour 'zz' is not a neighbour router of a"):
        set_link_capacity(a, "zz", 4 * MBIT)
    with pytest.raises(RouterAdminError, match="HTTP 409: a reaches b at 127.0.0.1, not at 10.0.0.9") as err:
        set_link_capacity(a, "b", 4 * MBIT, address="10.0.0.9")
    assert err.value.status == 409
    with pytest.raises(ValueError, match="positive integer"):
        set_link_capacity(a, "b", 0)
    gone = RouterEndpoint("ghost", "127.0.0.1", "", f"http://127.0.0.1:{free_port()}/admin", TOKEN, "", "")
    with pytest.raises(RouterAdminError, match="router ghost: cannot reach its admin API at http://127.0.0.1:"):
        set_link_capacity(gone, "b", 4 * MBIT, timeout_s=2)
    assert not [e for e in pair.events("a") if e["event"] == "link_capacity_changed"]


def test_notify_link_bandwidth_tells_each_sending_end(pair):
    endpoints = {n: pair.endpoint(n) for n in ("a", "b")}
    link = lab_link()
    # both directions: a -> b and b -> a (b has no configured capacity toward a)
    updates = notify_link_bandwidth(endpoints, link, 6 * MBIT, reason="set_link 0 bw 6mbit")
    assert [(u.router, u.neighbour, u.applied) for u in updates] == [("a", "b", True), ("b", "a", True)]
    assert updates[0].answer["capacity_bps_before"] == 10 * MBIT and updates[1].answer["capacity_bps_before"] is None
    assert pair.wait_event("b", "link_capacity_changed")["capacity_bps_after"] == 6 * MBIT
    # one direction only
    (only,) = notify_link_bandwidth(endpoints, link, 2 * MBIT, direction="b")
    assert (only.router, only.capacity_bps) == ("b", 2 * MBIT)
    assert link_capacities(endpoints["a"])["b"]["capacity_bps"] == 6 * MBIT
    assert link_capacities(endpoints["b"])["a"]["capacity_bps"] == 2 * MBIT
    # a parallel link the routers do not use for each other: skipped, nothing changed
    parallel = lab_link(a_ip="10.0.0.1", b_ip="10.0.0.2")
    skipped = notify_link_bandwidth(endpoints, parallel, 1 * MBIT)
    assert [u.applied for u in skipped] == [False, False] and "409" in skipped[0].skipped
    assert link_capacities(endpoints["a"])["b"]["capacity_bps"] == 6 * MBIT
    # an end that is not a router: skipped
    host_link = LabLink(1, LabEnd("a", "a-eth1", "127.0.0.1/8"), LabEnd("h1", "h1-eth0", "127.0.0.1/8"), 100,
                        Shaping(), Shaping())
    (host,) = notify_link_bandwidth(endpoints, host_link, 1 * MBIT, direction="a")
    assert not host.applied and "no router" in host.skipped
