"""QoS on a saturated link a -> b (capacity-limited in the router's writer):
priority overtaking, Drop vs Block, WRR shares vs strict-priority starvation."""
from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import List

from clients import probe_until_received, subscribe

FLOOD = str(Path(__file__).with_name("flood.py"))


def saturated_pair(cluster, capacity_bps: int, **cfg):
    common = dict(batch_size_bytes=4096, queue_sizes=[1, 2, 2, 2, 4, 4, 4, 2], drop_deadline_ms=1.0)
    common.update(cfg)
    cluster.add("a", **common)
    cluster.add("b", **common)
    cluster.link("a", "b", capacity_bps=capacity_bps)
    cluster.start()
    cluster.wait_links()


def start_flood(port: int, key: str, prio: int, cc: str, size: int, count: int, rate: float, flow: int,
                procs: List[subprocess.Popen]) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, FLOOD, str(port), key, str(prio), cc, str(size), str(count), str(rate),
                          str(flow)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    procs.append(p)
    return p


def finish(p: subprocess.Popen, timeout: float = 60) -> dict:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"flood failed: {err[-2000:]}"
    return json.loads(out.strip().splitlines()[-1])


def kill_all(procs: List[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        for pipe in (p.stdout, p.stderr):
            if pipe is not None:
                pipe.close()


def test_realtime_overtakes_a_saturated_data_queue(cluster):
    saturated_pair(cluster, capacity_bps=2_000_000)
    a, b = cluster.routers["a"], cluster.routers["b"]
    procs: List[subprocess.Popen] = []

    async def scenario():
        s, _, rec = await subscribe(b.client_port, "qos/**", "sub")
        await probe_until_received(a.client_port, "qos/probe", [rec])
        try:
            data = start_flood(a.client_port, "qos/data", 5, "block", 1024, 1500, 1000, 1, procs)
            await asyncio.sleep(0.7)  # let the Data queue fill
            rt = start_flood(a.client_port, "qos/rt", 1, "block", 64, 40, 25, 2, procs)
            while rt.poll() is None or data.poll() is None:
                await asyncio.sleep(0.1)
            deadline = time.monotonic() + 20
            while len(rec.flows[1]) < 1500 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)
            return rec, finish(data), finish(rt)
        finally:
            kill_all(procs)
            await s.close()

    rec, data, rt = asyncio.run(scenario())
    assert data["client_dropped"] == 0 and rt["client_dropped"] == 0
    rt_lat = [(r[2] - r[1]) / 1e6 for r in rec.flows[2]]
    data_lat = [(r[2] - r[1]) / 1e6 for r in rec.flows[1]]
    assert [r[0] for r in rec.flows[2]] == list(range(40)), "every RealTime message arrives"
    assert len(rec.flows[1]) == 1500, "Block Data is slow but complete"
    assert cluster.routers["a"].metric("router_queue_avg_size_messages", peer="b", priority="5") > 1
    # RealTime crosses the saturated link while Data waits in its queue
    assert statistics.median(rt_lat) * 5 < statistics.median(data_lat), (statistics.median(rt_lat),
                                                                          statistics.median(data_lat))
    # overtaking: RealTime messages arrive before Data messages that were sent earlier
    first_rt_send, first_rt_recv = rec.flows[2][5][1], rec.flows[2][5][2]
    assert any(send < first_rt_send and recv > first_rt_recv for _, send, recv, _, _ in rec.flows[1])


def test_drop_messages_dropped_and_counted_block_messages_not(cluster):
    saturated_pair(cluster, capacity_bps=4_000_000)
    a, b = cluster.routers["a"], cluster.routers["b"]
    procs: List[subprocess.Popen] = []
    n = 800

    async def scenario():
        s, _, rec = await subscribe(b.client_port, "cc/**", "sub")
        await probe_until_received(a.client_port, "cc/probe", [rec])
        try:
            drop = start_flood(a.client_port, "cc/drop", 5, "drop", 1024, n, 500, 1, procs)
            block = start_flood(a.client_port, "cc/block", 5, "block", 1024, n, 500, 2, procs)
            while drop.poll() is None or block.poll() is None:
                await asyncio.sleep(0.1)
            deadline = time.monotonic() + 20
            while len(rec.flows[2]) < n and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)
            return rec, finish(drop), finish(block)
        finally:
            kill_all(procs)
            await s.close()

    rec, drop, block = asyncio.run(scenario())
    assert [r[0] for r in rec.flows[2]] == list(range(n)), "Block: no loss, no duplicate, in order"
    assert block["client_dropped"] == 0
    got = [r[0] for r in rec.flows[1]]
    assert got == sorted(set(got)), "Drop: no duplicates, in order"
    missing = n - len(got)
    dropped_a = a.metric("router_queue_dropped_messages_total", peer="b", priority="5")
    dropped_b = b.metric("router_queue_dropped_messages_total", peer_kind="client", priority="5")
    assert dropped_a > 0, "the saturated link dropped Drop messages"
    assert missing == dropped_a + dropped_b + drop["client_dropped"], "every lost message is counted"
    assert a.metric("router_queue_drop_ratio", peer="b", priority="5") > 0
    assert a.metric("router_links_closed_block_total") == 0
    deadline = time.monotonic() + 30  # the last summary event is due a second after the last drop (hang guard)
    while True:
        reported = sum(e["count"] for e in a.events() if e["event"] == "messages_dropped" and e["peer"] == "b")
        if reported == dropped_a or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert reported == dropped_a, "drop summary events add up to the counter"
    assert not [e for e in a.events() if e["event"] in ("link_closed", "link_down")]


def _shares(cluster, scheduler: str, **cfg):
    weights = [1, 1, 1, 1, 1, 2, 4, 1]
    saturated_pair(cluster, capacity_bps=4_000_000, scheduler=scheduler, wrr_weights=weights, **cfg)
    a, b = cluster.routers["a"], cluster.routers["b"]
    procs: List[subprocess.Popen] = []

    async def scenario():
        s, _, rec = await subscribe(b.client_port, "wrr/**", "sub")
        await probe_until_received(a.client_port, "wrr/probe", [rec])
        try:
            floods = [start_flood(a.client_port, f"wrr/p{p}", p, "drop", 1024, 3000, 600, p, procs) for p in (4, 5, 6)]
            t0 = time.time_ns()
            await asyncio.sleep(4.0)
            return rec, t0
        finally:
            kill_all(procs)
            await s.close()

    rec, t0 = asyncio.run(scenario())
    lo, hi = t0 + int(1.5e9), t0 + int(3.5e9)
    got = {p: sum(r[4] for r in rec.flows[p] if lo <= r[2] < hi) for p in (4, 5, 6)}
    total = sum(got.values())
    assert total > 300_000, f"link not saturated in the window: {got}"
    shares = {p: v / total for p, v in got.items()}
    print(f"{scheduler} byte shares of priorities 4, 5, 6: {shares}")
    return shares


def test_wrr_gives_each_priority_its_weighted_share(cluster):
    shares = _shares(cluster, "wrr")
    for p, w in ((4, 1), (5, 2), (6, 4)):
        expected = w / 7
        assert abs(shares[p] - expected) <= 0.1 * expected, f"priority {p}: share {shares[p]:.3f}, want {expected:.3f}"


def test_strict_priority_starves_the_lowest(cluster):
    shares = _shares(cluster, "strict")
    assert shares[4] > 0.9 and shares[6] < 0.02, shares


def test_contention_polling_shares_from_its_windows_and_weights(cluster):
    """The reference's scheduler on a saturated 4 Mbit/s link: 50 ms contention
    windows go to DataHigh (4, the most urgent backlogged priority), 150 ms polling
    windows are shared 1 : 2 : 4.  From first principles, of the link's bytes 4 gets
    1/4 + 3/4 * 1/7, 5 gets 3/4 * 2/7 and 6 gets 3/4 * 4/7 (strict would give 6
    nothing, wrr 4/7)."""
    contention, polling = 50_000, 150_000
    shares = _shares(cluster, "contention_polling", contention_window_us=contention, polling_window_us=polling)
    c = contention / (contention + polling)
    for p, w in ((4, 1), (5, 2), (6, 4)):
        expected = (c if p == 4 else 0.0) + (1 - c) * w / 7
        assert abs(shares[p] - expected) <= 0.1 * expected, f"priority {p}: share {shares[p]:.3f}, want {expected:.3f}"


def test_wrr_banks_no_credit_for_a_priority_that_was_idle(cluster):
    """Data (5) uses the link alone for 3 s; one DataLow (6) message crosses the idle
    link; then both saturate it.  With equal weights they share it 1 : 1 from the
    start, DataLow does not monopolise it to catch up with Data's past bytes."""
    saturated_pair(cluster, capacity_bps=4_000_000, scheduler="wrr", wrr_weights=[1] * 8)
    a, b = cluster.routers["a"], cluster.routers["b"]
    procs: List[subprocess.Popen] = []

    async def scenario():
        s, _, rec = await subscribe(b.client_port, "idle/**", "sub")
        await probe_until_received(a.client_port, "idle/probe", [rec])
        try:
            alone = start_flood(a.client_port, "idle/p5", 5, "drop", 1024, 900, 300, 5, procs)  # ~2.5 Mbit/s
            await asyncio.to_thread(finish, alone)
            one = start_flood(a.client_port, "idle/p6", 6, "drop", 1024, 1, 1, 16, procs)
            await asyncio.to_thread(finish, one)
            assert len(rec.flows[16]) == 1
            both = [start_flood(a.client_port, f"idle/p{p}", p, "drop", 1024, 1800, 600, 10 + p, procs)
                    for p in (5, 6)]
            t0 = time.time_ns()
            await asyncio.sleep(2.5)
            return rec, t0
        finally:
            kill_all(procs)
            await s.close()

    rec, t0 = asyncio.run(scenario())
    assert len(rec.flows[5]) > 800, "Data used the link alone first"
    lo, hi = t0 + int(0.5e9), t0 + int(1.5e9)
    got = {p: sum(r[4] for r in rec.flows[10 + p] if lo <= r[2] < hi) for p in (5, 6)}
    total = sum(got.values())
    assert total > 300_000, f"link not saturated in the window: {got}"
    print(f"after the idle period, byte shares of 5 and 6: {({p: got[p] / total for p in got})}")
    for p in (5, 6):
        assert abs(got[p] / total - 0.5) <= 0.05, f"priority {p}: share {got[p] / total:.3f} of {got}, want 0.5"


def test_block_message_past_close_deadline_closes_and_reports_the_link(cluster):
    # 16 kbit/s: a 4 KiB batch takes 2 s to leave, longer than the 300 ms close deadline
    saturated_pair(cluster, capacity_bps=16_000, close_deadline_ms=300)
    a, b = cluster.routers["a"], cluster.routers["b"]
    procs: List[subprocess.Popen] = []
    t0 = time.time_ns()

    async def scenario():
        s, _, rec = await subscribe(b.client_port, "cd/**", "sub")
        await probe_until_received(a.client_port, "cd/probe", [rec])
        try:
            start_flood(a.client_port, "cd/block", 5, "block", 1024, 100, 200, 1, procs)
            cluster.wait_event("a", "link_closed", timeout=15, peer="b")
        finally:
            kill_all(procs)
            await s.close()

    asyncio.run(scenario())
    ev = cluster.wait_event("a", "link_closed", peer="b")
    assert "close deadline" in ev["reason"] and ev["priority"] == 5
    assert a.metric("router_links_closed_block_total") >= 1
    cluster.wait_event("a", "link_down", neighbour="b", after_ns=t0)
    cluster.wait_event("a", "link_up", neighbour="b", after_ns=ev["ts_ns"], timeout=10)  # dialled again
