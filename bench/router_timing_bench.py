"""Router timing benchmark: how long the router takes to notice and react, measured on
loopback with real router processes (the measurements the router tests used to assert
with fixed bounds; the tests now check what happens and in which order, this reports
how fast).

    .venv/bin/python bench/router_timing_bench.py > result.json   # 5 runs per case, median/min/max
    .venv/bin/python bench/router_timing_bench.py --runs 1         # one run per case

Cases (the configuration is in the output next to each figure):

- ``reroute_after_kill``: diamond a-b-d / a-c-d, 500 msg/s a -> d through b, b killed
  (SIGKILL): failure -> a's ``link_down`` (detection) and failure -> first message
  delivered that was sent after the failure (recovery, over a-c-d).
- ``reroute_after_freeze``: the same with b frozen (SIGSTOP): only the lease can tell.
- ``client_lease_expiry``: a client that says HELLO and then nothing: HELLO ->
  ``client_disconnected`` (bound below by ``lease_ms``).
- ``congestion_detection``: r2 -> r4 paced at 10 Mbit/s with ``link_capacity_bps`` 10 Mbit/s,
  12 Mbit/s of Data starts: start -> r2's ``congestion_detected`` (the first monitor tick
  only takes a baseline, so expect one to two intervals).
- ``capacity_change_detection``: 6 Mbit/s of Data on that link, then ``POST /admin/capacity``
  narrows it to 4 Mbit/s: the call -> ``congestion_detected`` (at most one interval).

Every router and traffic process is killed at the end of its case.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "router"))

from clients import probe_until_received, subscribe  # noqa: E402
from routerlab import RouterCluster  # noqa: E402
from test_router_qos import kill_all, start_flood  # noqa: E402

from router import codec  # noqa: E402
from router.codec import CongestionControl, FrameKind, make_payload  # noqa: E402
from traffic.client import connect  # noqa: E402

MBIT = 1_000_000
DATA_FLOW = 7


def with_cluster(fn: Callable[[RouterCluster], Dict[str, Any]]) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="router-timing-") as tmp:
        cluster = RouterCluster(Path(tmp))
        try:
            return fn(cluster)
        finally:
            cluster.cleanup()


def diamond(cluster: RouterCluster) -> None:
    for n in ("a", "b", "c", "d"):
        cluster.add(n)
    for x, y in (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")):
        cluster.link(x, y)
    cluster.start()
    cluster.wait_links()


def reroute(how: str) -> Callable[[RouterCluster], Dict[str, Any]]:
    def case(cluster: RouterCluster) -> Dict[str, Any]:
        diamond(cluster)
        a = cluster.routers["a"]

        async def scenario():
            s, _, rec = await subscribe(cluster.routers["d"].client_port, "flow/**", "sub-d")
            await probe_until_received(a.client_port, "flow/probe", [rec])
            session = await connect("127.0.0.1", a.client_port, name="pub")
            pub = session.declare_publisher("flow/x", congestion_control=CongestionControl.DROP)
            t_fail = None
            seq = 0
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if t_fail is None and seq == 500:
                    t_fail = time.time_ns()
                    cluster.kill("b", signal.SIGKILL if how == "kill" else signal.SIGSTOP)
                if t_fail is not None and any(r[1] > t_fail for r in rec.flows[DATA_FLOW]):
                    break
                await pub.put(make_payload(DATA_FLOW, seq, time.time_ns(), 64))
                seq += 1
                await asyncio.sleep(1 / 500)
            await session.close()
            await s.close()
            return rec, t_fail

        rec, t_fail = asyncio.run(scenario())
        first = min(r[2] for r in rec.flows[DATA_FLOW] if r[1] > t_fail)
        down = cluster.wait_event("a", "link_down", neighbour="b", after_ns=t_fail)
        if how == "stop":
            cluster.kill("b", signal.SIGCONT)
        return {"detection_s": (down["ts_ns"] - t_fail) / 1e9, "recovery_s": (first - t_fail) / 1e9,
                "config": {k: a.config[k] for k in ("lease_ms", "keepalive_ms")}}
    return case


def client_lease_expiry(cluster: RouterCluster) -> Dict[str, Any]:
    import socket

    r = cluster.add("r1")
    cluster.start()
    t_hello = time.time_ns()
    s = socket.create_connection(("127.0.0.1", r.client_port), timeout=5)
    s.sendall(codec.encode_json_frame(FrameKind.HELLO, {"role": "client", "name": "silent"}))
    ev = cluster.wait_event("r1", "client_disconnected", timeout=60)
    s.close()
    return {"disconnect_s": (ev["ts_ns"] - t_hello) / 1e9, "config": {"lease_ms": r.config["lease_ms"]}}


def congestion(cluster: RouterCluster, capacity_change: bool) -> Dict[str, Any]:
    cfg = dict(monitor_interval_ms=500, flow_ttl_ms=1500, flow_sweep_ms=250)
    for n in ("r1", "r2", "r3", "r4"):
        cluster.add(n, **cfg)
    cluster.link("r1", "r2")
    cluster.link("r1", "r3")
    cluster.link("r2", "r4", capacity_bps=10 * MBIT, link_capacity_bps=10 * MBIT)
    cluster.link("r3", "r4")
    cluster.start()
    cluster.wait_links()
    r1, r2 = cluster.routers["r1"], cluster.routers["r2"]
    procs: List[subprocess.Popen] = []

    async def scenario():
        s, _, rec = await subscribe(cluster.routers["r4"].client_port, "cg/**", "sub4")
        await probe_until_received(r1.client_port, "cg/probe", [rec])
        try:
            rate = 750 if capacity_change else 1500
            t_start = time.time_ns()
            start_flood(r1.client_port, "cg/data", 5, "drop", 1000, rate * 30, rate, 1, procs)
            if not capacity_change:
                ev = await asyncio.to_thread(cluster.wait_event, "r2", "congestion_detected", 60.0)
                return (ev["ts_ns"] - t_start) / 1e9
            deadline = time.monotonic() + 60
            while r2.metric("router_monitor_data_throughput_bps", neighbour="r4") < 4 * MBIT:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.5)
            body = json.dumps({"neighbour": "r4", "capacity_bps": 4 * MBIT}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{r2.metrics_port}/admin/capacity", data=body,
                                         method="POST")
            t_call = time.time_ns()
            urllib.request.urlopen(req, timeout=5).read()
            ev = await asyncio.to_thread(cluster.wait_event, "r2", "congestion_detected", 60.0, t_call)
            return (ev["ts_ns"] - t_call) / 1e9
        finally:
            kill_all(procs)
            await s.close()

    delay = asyncio.run(scenario())
    key = "call_to_detection_s" if capacity_change else "start_to_detection_s"
    return {key: delay, "config": {"monitor_interval_ms": 500}}


CASES: Dict[str, Callable[[RouterCluster], Dict[str, Any]]] = {
    "reroute_after_kill": reroute("kill"),
    "reroute_after_freeze": reroute("stop"),
    "client_lease_expiry": client_lease_expiry,
    "congestion_detection": lambda c: congestion(c, capacity_change=False),
    "capacity_change_detection": lambda c: congestion(c, capacity_change=True),
}


def summarise(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"config": runs[0]["config"], "runs": len(runs)}
    for key in runs[0]:
        if key == "config":
            continue
        values = [r[key] for r in runs]
        out[key] = {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
                    "max": round(max(values), 4)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", choices=sorted(CASES), action="append")
    args = ap.parse_args()
    result: Dict[str, Any] = {}
    for name in args.only or list(CASES):
        runs = []
        for i in range(args.runs):
            runs.append(with_cluster(CASES[name]))
            print(f"{name} run {i + 1}: {runs[-1]}", file=sys.stderr, flush=True)
        result[name] = summarise(runs)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
