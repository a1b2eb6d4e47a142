"""Congestion-aware routing with four router processes on loopback.

    r1 - r2 - r4      r2 -> r4 is paced to 10 Mbit/s (capacity_bps) and its
    r1 - r3 - r4      link_capacity_bps is 10 Mbit/s, so r2's monitor can decide.

A Data flow r1 -> r4 above cap_limit and a RealTime flow: r2 blocks the data
weight of r2-r4 within two monitor intervals, the Data flow moves to r1-r3-r4
(pinned there), RealTime stays on r1-r2-r4, the weight is restored once r2-r4
is relieved without the flow coming back, and the flow returns to r2 only
after it was idle for the flow TTL.  With congestion-awareness off nothing
moves.  Asserted through router events and per-neighbour counters.
"""
from __future__ import annotations

import asyncio
import subprocess
import time
from typing import List, Tuple

from clients import probe_until_received, subscribe
from router.congestion import payload_capacity
from test_router_qos import finish, kill_all, start_flood

MBIT = 1_000_000
INTERVAL_MS = 500
TTL_MS = 1500


def build(cluster, aware: bool):
    cfg = dict(monitor_interval_ms=INTERVAL_MS, flow_ttl_ms=TTL_MS, flow_sweep_ms=250, congestion_aware=aware)
    for n in ("r1", "r2", "r3", "r4"):
        cluster.add(n, **cfg)
    cluster.link("r1", "r2")
    cluster.link("r1", "r3")
    cluster.link("r2", "r4", capacity_bps=10 * MBIT, link_capacity_bps=10 * MBIT)
    cluster.link("r3", "r4")
    cluster.start()
    cluster.wait_links()


#: Hang guard for waits on router events: far beyond the intervals configured here, so that
#: only a router that never does it, not a slow machine, trips it.
GUARD_S = 20 * (INTERVAL_MS + TTL_MS) / 1000 + 10


def data_to_r4(cluster) -> Tuple[float, float]:
    """(r2->r4, r3->r4) Data messages sent so far. Taken once the probes are through: a probe (Data
    priority) sent while r1's link-state view was still incomplete can have gone r1-r3-r4."""
    return tx(cluster, "r2", "r4", 5), tx(cluster, "r3", "r4", 5)


async def settled_after_move(cluster, start: Tuple[float, float]) -> tuple:
    """(r2->r4, r3->r4) Data counters once the flow runs on r3-r4 (beyond ``start``) and what was
    already on its way over r2 has drained (r2's counter still for a few monitor intervals)."""
    deadline = time.monotonic() + GUARD_S
    while tx(cluster, "r3", "r4", 5) == start[1]:
        assert time.monotonic() < deadline, "the Data flow never reached r3-r4"
        await asyncio.sleep(0.05)
    last = None
    while True:
        now = data_to_r4(cluster)
        if last is not None and now[0] == last[0]:
            return now
        assert time.monotonic() < deadline, "Data still crosses r2-r4 after the move"
        last = now
        await asyncio.sleep(INTERVAL_MS / 1000)


def tx(cluster, router: str, peer: str, prio: int) -> float:
    return cluster.routers[router].metric("router_tx_messages_total", peer=peer, priority=str(prio))


def events(cluster, router: str, name: str) -> List[dict]:
    return [e for e in cluster.routers[router].events() if e["event"] == name]


def test_data_moves_off_the_congested_link_and_realtime_stays(cluster):
    build(cluster, aware=True)
    r1 = cluster.routers["r1"]
    procs: List[subprocess.Popen] = []
    marks = {}

    async def scenario():
        s, _, rec = await subscribe(cluster.routers["r4"].client_port, "cg/**", "sub4")
        await probe_until_received(r1.client_port, "cg/probe", [rec])
        marks["start"] = data_to_r4(cluster)
        try:
            rt = start_flood(r1.client_port, "cg/rt", 1, "block", 200, 50 * 14, 50, 2, procs)
            await asyncio.sleep(0.5)
            marks["data_start"] = time.time_ns()
            # 1500 msg/s x 1000 B = 12 Mbit/s of Data for 6 s, into a 10 Mbit/s link
            data = start_flood(r1.client_port, "cg/data", 5, "drop", 1000, 9000, 1500, 1, procs)
            ev = await asyncio.to_thread(cluster.wait_event, "r2", "congestion_detected", GUARD_S)
            marks["detected"] = ev
            marks["after_move"] = await settled_after_move(cluster, marks["start"])
            await asyncio.to_thread(cluster.wait_event, "r2", "congestion_cleared", GUARD_S)
            while data.poll() is None:
                await asyncio.sleep(0.1)
            marks["data_end"] = time.time_ns()
            marks["end_of_data"] = data_to_r4(cluster)
            await asyncio.to_thread(finish, data)
            # idle past the TTL: r1 expires (and unpins) the flow; when it comes back it takes r2 again
            await asyncio.to_thread(cluster.wait_event, "r1", "flow_expired", GUARD_S, marks["data_end"],
                                    key="cg/data")
            again = start_flood(r1.client_port, "cg/data", 5, "drop", 500, 300, 300, 3, procs)
            await asyncio.to_thread(finish, again)
            deadline = time.monotonic() + GUARD_S
            while tx(cluster, "r2", "r4", 5) - marks["end_of_data"][0] < 250:
                assert time.monotonic() < deadline, "the returning flow did not take r2-r4"
                await asyncio.sleep(0.05)
            marks["returned"] = data_to_r4(cluster)
            await asyncio.to_thread(finish, rt)
            await asyncio.sleep(0.3)
            return rec
        finally:
            kill_all(procs)
            await s.close()

    rec = asyncio.run(scenario())
    ev = marks["detected"]
    # r2 blocked the data weight of r2-r4 within two monitor intervals, with the numbers that caused it
    assert ev["neighbour"] == "r4" and ev["weight_before"] == 100 and ev["weight_after"] == 65535
    assert ev["data_bps"] > ev["cap_limit_bps"] and ev["capacity_bps"] == 10 * MBIT
    assert abs(ev["cap_limit_bps"] - (payload_capacity(ev["capacity_bps"]) - ev["high_bps"] - MBIT // 2)) <= 1
    # detected while the Data flow ran (how soon: bench/router_timing_bench.py)
    assert marks["data_start"] < ev["ts_ns"] < marks["data_end"]
    changed = [e for e in events(cluster, "r2", "weight_changed") if e["source"] == "monitor"]
    assert [(e["tree"], e["weight_after"]) for e in changed] == [("data", 65535), ("data", 100)]
    # every router heard of it through link-state
    for r in ("r1", "r3", "r4"):
        assert any(e["source"] == "linkstate" and e["router"] == "r2" and e["weight_after"] == 65535
                   for e in events(cluster, r, "weight_changed")), r
    # r1 moved the Data flow to r3 on r2's request, and kept it there after the restore
    pins = [e for e in events(cluster, "r1", "flow_pinned") if e["key"] == "cg/data"]
    assert pins and pins[0]["next_hop"] == ["r3"] and pins[0]["reason"] == "upstream_request"
    assert all(p["next_hop"] == ["r3"] for p in pins)
    r2_after, r3_after = marks["after_move"]
    r2_end, r3_end = marks["end_of_data"]
    assert r3_after > marks["start"][1] and r3_end - r3_after > 1000, "Data goes r1-r3-r4 after the block"
    assert r2_end - r2_after < 50, "no Data on r2-r4 after the move, even after the weight was restored"
    # exactly one block and one restore: no oscillation
    r2 = cluster.routers["r2"]
    assert r2.metric("router_monitor_decisions_total", neighbour="r4", kind="block") == 1
    assert r2.metric("router_monitor_decisions_total", neighbour="r4", kind="restore") == 1
    assert r2.metric("router_link_congested", neighbour="r4") == 0
    # after the TTL the flow returned to r1-r2-r4
    r2_back, r3_back = marks["returned"]
    assert r2_back - r2_end >= 250 and r3_back == r3_end
    # RealTime never moved: all of it over r2-r4, none over r3, and all delivered
    assert tx(cluster, "r3", "r4", 1) == 0
    assert tx(cluster, "r2", "r4", 1) >= 700
    assert len(rec.flows[2]) == 700
    unpins = [e for e in events(cluster, "r1", "flow_unpinned") if e["key"] == "cg/data"]
    assert unpins and unpins[0]["reason"] == "ttl"


def test_congestion_awareness_off_moves_nothing(cluster):
    build(cluster, aware=False)
    r1 = cluster.routers["r1"]
    procs: List[subprocess.Popen] = []
    marks = {}

    async def scenario():
        s, _, rec = await subscribe(cluster.routers["r4"].client_port, "cg/**", "sub4")
        await probe_until_received(r1.client_port, "cg/probe", [rec])
        marks["start"] = data_to_r4(cluster)
        try:
            rt = start_flood(r1.client_port, "cg/rt", 1, "block", 200, 50 * 4, 50, 2, procs)
            data = start_flood(r1.client_port, "cg/data", 5, "drop", 1000, 4500, 1500, 1, procs)
            await asyncio.to_thread(finish, data)
            await asyncio.to_thread(finish, rt)
            await asyncio.sleep(0.3)
        finally:
            kill_all(procs)
            await s.close()

    asyncio.run(scenario())
    for r in ("r1", "r2", "r3", "r4"):
        assert not events(cluster, r, "congestion_detected")
        assert not events(cluster, r, "weight_changed")
        assert not events(cluster, r, "flow_pinned")
    r2_data, r3_data = data_to_r4(cluster)
    assert r3_data == marks["start"][1] and tx(cluster, "r3", "r4", 1) == 0
    assert r2_data - marks["start"][0] > 3000
    assert cluster.routers["r2"].metric("router_congestion_aware") == 0


def set_capacity(cluster, router: str, neighbour: str, capacity_bps, **extra) -> dict:
    """POST /admin/capacity on ``router`` (loopback client: no token needed)."""
    import json
    import urllib.request

    body = json.dumps(dict({"neighbour": neighbour, "capacity_bps": capacity_bps}, **extra)).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{cluster.routers[router].metrics_port}/admin/capacity",
                                 data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


def test_link_narrowed_at_run_time_is_detected_and_the_data_moves(cluster):
    """r2-r4 is configured at 10 Mbit/s and carries 6 Mbit/s of Data: no congestion.
    The link is narrowed to 4 Mbit/s at run time (what a scenario's ``set_link bw:``
    does, told to r2 through POST /admin/capacity): r2's monitor decides against
    the new capacity and blocks the link, and the Data flow moves to r1-r3-r4."""
    build(cluster, aware=True)
    r1 = cluster.routers["r1"]
    procs: List[subprocess.Popen] = []
    marks = {}

    async def scenario():
        s, _, rec = await subscribe(cluster.routers["r4"].client_port, "nc/**", "sub4")
        await probe_until_received(r1.client_port, "nc/probe", [rec])
        marks["start"] = data_to_r4(cluster)
        try:
            # 750 msg/s x 1000 B = 6 Mbit/s of Data, for up to 30 s (stopped when the test has seen enough)
            data = start_flood(r1.client_port, "nc/data", 5, "drop", 1000, 22500, 750, 1, procs)
            # wait for three monitor ticks that measured the flow on r2-r4, below the configured capacity
            deadline = time.monotonic() + GUARD_S
            while cluster.routers["r2"].metric("router_monitor_data_throughput_bps", neighbour="r4") < 4 * MBIT:
                assert time.monotonic() < deadline, "the Data flow never reached r2-r4"
                await asyncio.sleep(0.05)
            await asyncio.sleep(3 * INTERVAL_MS / 1000)
            marks["before"] = data_to_r4(cluster)
            marks["answer"] = await asyncio.to_thread(set_capacity, cluster, "r2", "r4", 4 * MBIT,
                                                      address="127.0.0.1", reason="test narrows r2-r4")
            marks["detected"] = await asyncio.to_thread(cluster.wait_event, "r2", "congestion_detected", GUARD_S)
            await asyncio.to_thread(cluster.wait_event, "r1", "flow_pinned", GUARD_S, key="nc/data")
            marks["moved"] = await settled_after_move(cluster, marks["start"])
            await asyncio.sleep(2 * INTERVAL_MS / 1000)
            marks["later"] = data_to_r4(cluster)
            return rec
        finally:
            kill_all(procs)
            await s.close()

    asyncio.run(scenario())
    r2 = cluster.routers["r2"]
    (r2_start, r3_start), (r2_before, r3_before) = marks["start"], marks["before"]
    assert r2_before - r2_start > 1000 and r3_before == r3_start, "Data went r1-r2-r4 first"
    assert not [e for e in r2.events() if e["event"] == "congestion_detected"
                and e["ts_ns"] < marks["detected"]["ts_ns"]], "no congestion while the link had 10 Mbit/s"
    answer = marks["answer"]
    assert answer["capacity_bps_before"] == 10 * MBIT and answer["capacity_bps"] == 4 * MBIT
    assert answer["configured_capacity_bps"] == 10 * MBIT
    (changed,) = events(cluster, "r2", "link_capacity_changed")
    assert changed["neighbour"] == "r4" and changed["source"] == "admin" and changed["reason"] == "test narrows r2-r4"
    assert (changed["capacity_bps_before"], changed["capacity_bps_after"]) == (10 * MBIT, 4 * MBIT)
    ev = marks["detected"]
    # decided against the new capacity, after it was set
    assert ev["ts_ns"] > changed["ts_ns"]
    assert ev["neighbour"] == "r4" and ev["capacity_bps"] == 4 * MBIT
    assert abs(ev["cap_limit_bps"] - (payload_capacity(4 * MBIT) - ev["high_bps"] - 4 * MBIT // 20)) <= 1
    # ... and would not have against the configured one
    assert ev["cap_limit_bps"] < ev["data_bps"] < payload_capacity(10 * MBIT) - ev["high_bps"] - 10 * MBIT // 20
    assert r2.metric("router_link_capacity_bps", neighbour="r4") == 4 * MBIT
    # the Data flow moved to r1-r3-r4 and stays there
    pins = [e for e in events(cluster, "r1", "flow_pinned") if e["key"] == "nc/data"]
    assert pins and pins[0]["next_hop"] == ["r3"] and pins[0]["reason"] == "upstream_request"
    (r2_moved, r3_moved), (r2_later, r3_later) = marks["moved"], marks["later"]
    assert r3_later > r3_moved and r2_later == r2_moved
