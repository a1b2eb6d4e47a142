"""Several router processes on loopback: delivery, fan-out, no duplicates or
loops, reconvergence after a router dies or freezes, and recovery."""
from __future__ import annotations

import asyncio
import signal
import time

from clients import Recorder, probe_until_received, subscribe
from router.codec import CongestionControl, make_payload
from traffic.client import connect

DATA_FLOW = 7


async def publish(port: int, key: str, count: int, flow: int = DATA_FLOW, rate: float = 2000.0,
                  cc=CongestionControl.BLOCK) -> None:
    session = await connect("127.0.0.1", port, name=f"pub-{flow}")
    pub = session.declare_publisher(key, congestion_control=cc)
    for seq in range(count):
        await pub.put(make_payload(flow, seq, time.time_ns(), 64))
        if seq % 20 == 19:
            await asyncio.sleep(20 / rate)
    await session.close()


async def wait_for(pred, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def line(cluster, names):
    for n in names:
        cluster.add(n)
    for a, b in zip(names, names[1:]):
        cluster.link(a, b)
    cluster.start()
    cluster.wait_links()


def test_delivery_over_a_line_of_three(cluster):
    line(cluster, ["r1", "r2", "r3"])

    async def scenario():
        s, _, rec = await subscribe(cluster.routers["r3"].client_port, "demo/**", "sub3")
        await probe_until_received(cluster.routers["r1"].client_port, "demo/probe", [rec])
        await publish(cluster.routers["r1"].client_port, "demo/a", 500)
        await wait_for(lambda: len(rec.seqs(DATA_FLOW)) >= 500)
        await asyncio.sleep(0.3)
        await s.close()
        return rec

    rec = asyncio.run(scenario())
    assert rec.seqs(DATA_FLOW) == list(range(500))  # all, once, in order
    # the middle router forwarded them: its counters say so
    r2 = cluster.routers["r2"]
    assert r2.metric("router_rx_messages_total", peer="r1", priority="5") >= 500
    assert r2.metric("router_tx_messages_total", peer="r3", priority="5") >= 500


def test_fan_out_only_to_matching_subscribers(cluster):
    # r1 - r2 - r3, r2 - r4
    for n in ("r1", "r2", "r3", "r4"):
        cluster.add(n)
    cluster.link("r1", "r2")
    cluster.link("r2", "r3")
    cluster.link("r4", "r2")
    cluster.start()
    cluster.wait_links()

    async def scenario():
        subs = [await subscribe(cluster.routers["r1"].client_port, "demo/a", "s1"),
                await subscribe(cluster.routers["r3"].client_port, "demo/*", "s3"),
                await subscribe(cluster.routers["r4"].client_port, "other/**", "s4"),
                await subscribe(cluster.routers["r2"].client_port, "demo/**", "s2")]
        recs = [r for _, _, r in subs]
        await probe_until_received(cluster.routers["r2"].client_port, "demo/a", [recs[0], recs[1], recs[3]])
        await probe_until_received(cluster.routers["r2"].client_port, "other/x", [recs[2]], flow=1)
        await publish(cluster.routers["r2"].client_port, "demo/a", 100, flow=10)
        await publish(cluster.routers["r2"].client_port, "other/x/y", 100, flow=11)
        await wait_for(lambda: len(recs[2].seqs(11)) >= 100 and all(len(r.seqs(10)) >= 100 for r in
                                                                    (recs[0], recs[1], recs[3])))
        await asyncio.sleep(0.3)
        for s, _, _ in subs:
            await s.close()
        return recs

    s1, s3, s4, s2 = asyncio.run(scenario())
    for r in (s1, s3, s2):
        assert r.seqs(10) == list(range(100)) and not r.seqs(11)
    assert s4.seqs(11) == list(range(100)) and not s4.seqs(10)
    # r2 sent each neighbour exactly what that neighbour's subscriber received: nothing unwanted
    r2 = cluster.routers["r2"]
    for peer, rec in (("r4", s4), ("r1", s1), ("r3", s3)):
        received = sum(len(v) for v in rec.flows.values())
        assert r2.metric("router_tx_messages_total", peer=peer) == received


def _exactly_once_everywhere(cluster, names):
    async def scenario():
        subs = {n: await subscribe(cluster.routers[n].client_port, "mesh/**", f"sub-{n}") for n in names}
        recs = [r for _, _, r in subs.values()]
        for i, n in enumerate(names):
            await probe_until_received(cluster.routers[n].client_port, f"mesh/probe/{n}", recs, flow=100 + i)
        await asyncio.sleep(0.3)
        await asyncio.gather(*(publish(cluster.routers[n].client_port, f"mesh/{n}", 200, flow=i + 1)
                               for i, n in enumerate(names)))
        await wait_for(lambda: all(len(r.seqs(i + 1)) >= 200 for r in recs for i in range(len(names))), 20)
        await asyncio.sleep(0.5)  # let any duplicate arrive
        for s, _, _ in subs.values():
            await s.close()
        return recs

    recs = asyncio.run(scenario())
    for rec in recs:
        for i in range(len(names)):
            assert rec.seqs(i + 1) == list(range(200)), f"{rec.name} flow {i + 1}: duplicates, loss or reordering"
    for n in names:
        assert cluster.routers[n].metric("router_ttl_expired_messages_total") == 0


def test_no_duplicates_or_loops_on_a_ring(cluster):
    names = ["r1", "r2", "r3", "r4", "r5"]
    for n in names:
        cluster.add(n)
    for a, b in zip(names, names[1:] + names[:1]):
        cluster.link(a, b)
    cluster.start()
    cluster.wait_links()
    _exactly_once_everywhere(cluster, names)


def diamond(cluster, **cfg):
    for n in ("a", "b", "c", "d"):
        cluster.add(n, **cfg)
    cluster.link("a", "b")
    cluster.link("a", "c")
    cluster.link("b", "d")
    cluster.link("c", "d")
    cluster.start()
    cluster.wait_links()


def test_no_duplicates_or_loops_on_a_diamond(cluster):
    diamond(cluster)
    _exactly_once_everywhere(cluster, ["a", "b", "c", "d"])


def hang_guard_s(cfg) -> float:
    """How long a test may wait for a reroute before it calls the router stuck: far beyond
    what the configuration asks (detection within the lease, trees after the debounce), so
    that only a router that does not reroute at all, not a slow machine, trips it."""
    return 20 * (cfg["lease_ms"] + cfg.get("route_debounce_ms", 20)) / 1000 + 10


def _outage(cluster, how: str):
    """Publish a->d at ~500 msg/s until traffic crosses b (on the path), take b away
    (kill or freeze), go on publishing until 50 messages sent after the failure were
    delivered.  Returns (receiver's records of those messages, failure time ns).

    No bound on how long the reroute takes (that is bench/router_timing_bench.py's
    job): a loaded machine may be slow, but everything must happen, in order."""
    rate = 500.0
    guard = hang_guard_s(cluster.routers["a"].config)

    async def scenario():
        s, _, rec = await subscribe(cluster.routers["d"].client_port, "flow/**", "sub-d")
        await probe_until_received(cluster.routers["a"].client_port, "flow/probe", [rec])
        session = await connect("127.0.0.1", cluster.routers["a"].client_port, name="pub")
        pub = session.declare_publisher("flow/x", congestion_control=CongestionControl.DROP)
        t_fail = None
        seq = 0
        deadline = time.monotonic() + guard
        try:
            while True:
                assert time.monotonic() < deadline, f"no reroute within {guard:.0f} s (router stuck?)"
                if t_fail is None and seq % 50 == 49 and \
                        cluster.routers["b"].metric("router_tx_messages_total", peer="d") > 0:
                    t_fail = time.time_ns()  # traffic takes a-b-d: now take b away
                    cluster.kill("b", signal.SIGKILL if how == "kill" else signal.SIGSTOP)
                if t_fail is not None and len([r for r in rec.flows[DATA_FLOW] if r[1] > t_fail]) >= 50:
                    break
                await pub.put(make_payload(DATA_FLOW, seq, time.time_ns(), 64))
                seq += 1
                await asyncio.sleep(1 / rate)
        finally:
            await session.close()
            await s.close()
        return rec, t_fail

    rec, t_fail = asyncio.run(scenario())
    after = [r for r in rec.flows[DATA_FLOW] if r[1] > t_fail]
    return after, t_fail


def assert_rerouted_after_detection(cluster, after, t_fail: int) -> dict:
    """Messages sent after the failure arrived over a-c-d, and only once a had learned
    that b was gone and recomputed its trees: from its own link_down, or from d's LSP when
    d's lease for b ran out first (seen on a loaded machine: both leases are equal)."""
    down = cluster.wait_event("a", "link_down", neighbour="b", after_ns=t_fail)
    d_down = cluster.wait_event("d", "link_down", neighbour="b", after_ns=t_fail)
    learned = min(down["ts_ns"], d_down["ts_ns"])
    trees = cluster.wait_event("a", "trees_recomputed", after_ns=learned)
    assert after[0][2] >= trees["ts_ns"], "delivered after the failure before a rerouted?"
    assert cluster.routers["c"].metric("router_tx_messages_total", peer="d", priority="5") >= 50
    seqs = [r[0] for r in after]
    assert seqs == sorted(set(seqs)), "no duplicates, in order"
    return down


def test_reconvergence_after_router_killed_and_back(cluster):
    diamond(cluster)
    after, t_fail = _outage(cluster, "kill")
    down = assert_rerouted_after_detection(cluster, after, t_fail)
    assert down["reason"]
    # b comes back: links come up again and a's tree to d goes through b again
    guard = hang_guard_s(cluster.routers["a"].config)
    t_back = time.time_ns()
    cluster.start("b")
    cluster.wait_event("a", "link_up", neighbour="b", after_ns=t_back, timeout=guard)
    cluster.wait_event("d", "link_up", neighbour="b", after_ns=t_back, timeout=guard)

    async def traffic_through_b():
        s, _, rec = await subscribe(cluster.routers["d"].client_port, "flow/**", "sub-d2")
        await probe_until_received(cluster.routers["a"].client_port, "flow/probe", [rec])
        deadline = time.monotonic() + guard
        while time.monotonic() < deadline:
            await publish(cluster.routers["a"].client_port, "flow/x", 50, flow=50)
            if cluster.routers["b"].metric("router_tx_messages_total", peer="d") >= 50:
                break
        await s.close()

    asyncio.run(traffic_through_b())
    assert cluster.routers["b"].metric("router_tx_messages_total", peer="d") >= 50


def test_frozen_router_detected_by_lease(cluster):
    diamond(cluster)
    after, t_fail = _outage(cluster, "stop")
    down = assert_rerouted_after_detection(cluster, after, t_fail)
    lease_ms = cluster.routers["a"].config["lease_ms"]
    # a frozen peer keeps its TCP connection open: only the lease can tell
    # the reason names the configured lease; the router adds how many queued messages it discarded, if any
    assert down["reason"].split(" (")[0] == f"lease expired: nothing received for {lease_ms / 1000:.3f} s"
    t_cont = time.time_ns()
    cluster.kill("b", signal.SIGCONT)
    cluster.wait_event("a", "link_up", neighbour="b", after_ns=t_cont, timeout=hang_guard_s(cluster.routers["a"].config))
