"""Streaming links (router/streaming.py): large messages on pooled stream connections,
between routers (dialled, or asked for when the other side dialled) and from a router to a
client, the pool's reuse and trimming, and a stream lost mid-message."""
from __future__ import annotations

import asyncio
import time

from router.codec import CongestionControl, FrameKind, Priority, encode_frame, make_payload
from router.node import RouterNode
from test_router_fragmentation import KEY, Latencies, _close, _cport, _pair, _until_routed, _whole
from test_router_inprocess import until
from traffic.client import connect

BIG = 1 << 20


def _events(node: RouterNode, name: str):
    return [e for e in node.events.records if e["event"] == name]


async def _subscribed(nodes) -> tuple:
    """A subscriber of KEY on b, once a has its subscription: (session, what it receives)."""
    sub = await connect("127.0.0.1", _cport(nodes["b"]), name="sub")
    got = Latencies()
    await sub.declare_subscriber(KEY, callback=got)
    await _until_routed(nodes, sub)
    return sub, got


async def _same_priority_run(streaming: bool) -> Latencies:
    """1 MiB messages and 200 B messages at the same priority (data, Block) from a to b over a
    link paced at 20 Mbit/s: without a stream link the small ones queue behind each large one."""
    nodes = await _pair(capacity_bps=20_000_000, batch_size_bytes=16384, streaming_links=streaming,
                        streaming_threshold_bytes=256 * 1024)
    sub = pub = None
    try:
        sub, got = await _subscribed(nodes)
        pub = await connect("127.0.0.1", _cport(nodes["a"]), name="pub")
        p = pub.declare_publisher(KEY, priority=Priority.DATA, congestion_control=CongestionControl.BLOCK)
        start = time.monotonic()
        seq = 0
        while time.monotonic() - start < 2.0:
            if seq % 50 == 0:
                await p.put(make_payload(1, seq, time.time_ns(), BIG))
            await p.put(make_payload(2, seq, time.time_ns(), 200))
            seq += 1
            await asyncio.sleep(0.01)
        await until(lambda: len(got.ms.get(1, [])) == 4 and len(got.ms.get(2, [])) == seq, timeout=20)
        assert _whole(got.payloads[1], BIG)
        pools = [c.streams.view() for c in nodes["a"].routers.values() if c.streams is not None]
        got.pools = pools  # type: ignore[attr-defined]
        return got
    finally:
        await _close(nodes, pub, sub)


def test_small_messages_at_the_same_priority_do_not_wait_behind_a_large_one_on_a_stream_link():
    on = asyncio.run(_same_priority_run(True))
    off = asyncio.run(_same_priority_run(False))
    worst_on, worst_off = max(on.ms[2]), max(off.ms[2])
    print(f"small-message latency max: streaming links on {worst_on:.1f} ms, off {worst_off:.1f} ms; pools {on.pools}")
    assert worst_off > 300  # behind a whole 1 MiB message at 20 Mbit/s (420 ms)
    assert worst_on < 100
    # the four large messages went one after the other over one stream link: opened once, reused
    assert on.pools == [dict(on.pools[0], opened=1, reused=3, messages=4, busy=0, free=1)]


def test_a_router_that_was_dialled_asks_for_its_stream_link_and_a_client_gets_one_too():
    """b dials nothing (a dialled it): b -> a large messages need a STREAM request; a -> its
    client too. Everything arrives whole; the pools say how."""
    async def go():
        nodes = await _pair(streaming_threshold_bytes=64 * 1024)
        sub = pub = None
        try:
            # b knows no address of a: drop a from b's neighbour configuration view
            nodes["b"].neighbour_cfg.pop("a", None)
            sub = await connect("127.0.0.1", _cport(nodes["a"]), name="sub")
            got = Latencies()
            await sub.declare_subscriber(KEY, callback=got)
            await until(lambda: any(st.subs for st in nodes["a"].clients.values()))
            await until(lambda: KEY in str(nodes["b"].lsdb.all()), timeout=5)
            pub = await connect("127.0.0.1", _cport(nodes["b"]), name="pub")
            p = pub.declare_publisher(KEY, congestion_control=CongestionControl.BLOCK)
            for seq in range(3):
                await p.put(make_payload(1, seq, time.time_ns(), 300_000))
            await until(lambda: len(got.payloads.get(1, [])) == 3, timeout=10)
            assert _whole(got.payloads[1], 300_000)
            b_pool = nodes["b"].routers["a"].streams.view()
            # a link per message in flight at once (made on demand), each message on one
            assert b_pool["opened"] >= 1 and b_pool["opened"] + b_pool["reused"] == b_pool["messages"] == 3
            a_to_b = nodes["a"].routers["b"].streams.view()
            assert a_to_b["receiving"] == b_pool["opened"] and a_to_b["opened"] == 0  # a dialled them for b
            client_pool = next(st.conn for st in nodes["a"].clients.values() if st.subs).streams.view()
            assert client_pool["opened"] + client_pool["reused"] == client_pool["messages"] == 3
            assert len(sub._streams) == client_pool["opened"]
            assert not _events(nodes["a"], "stream_link_failed") and not _events(nodes["b"], "stream_link_failed")
            opened = _events(nodes["b"], "stream_link_opened")
            assert opened and opened[0]["endpoint"] == "a" and opened[0]["direction"] == "send"
        finally:
            await _close(nodes, pub, sub)
    asyncio.run(go())


def test_the_pool_opens_links_on_demand_for_concurrent_messages_and_trims_the_idle_ones():
    async def go():
        nodes = await _pair(streaming_threshold_bytes=64 * 1024, stream_pool_max_idle=1, stream_idle_ms=300)
        subs = []
        try:
            sub, got = await _subscribed(nodes)
            subs.append(sub)
            # three publishers, each a large message at the same moment: three links at once
            pubs = [await connect("127.0.0.1", _cport(nodes["a"]), name=f"pub{i}") for i in range(3)]
            subs += pubs
            await asyncio.gather(*(s.declare_publisher(KEY).put(make_payload(1, i, time.time_ns(), 2_000_000))
                                   for i, s in enumerate(pubs)))
            await until(lambda: len(got.payloads.get(1, [])) == 3, timeout=10)
            pool = nodes["a"].routers["b"].streams
            await until(lambda: len(pool.free) + len(pool.busy) == pool.opened and not pool.busy)
            assert pool.opened >= 2, pool.view()  # concurrent messages do not wait for each other's link
            opened = pool.opened
            # after stream_idle_ms only stream_pool_max_idle free links are kept
            await until(lambda: len(pool.free) == 1, timeout=3)
            assert pool.trimmed == opened - 1
            await until(lambda: len(nodes["b"].routers["a"].streams.receiving) == 1)  # closed on both sides
            closed = _events(nodes["a"], "stream_link_closed")
            assert len(closed) == opened - 1 and all("idle" in e["reason"] for e in closed)
            # the kept one is reused
            await pubs[0].declare_publisher(KEY).put(make_payload(1, 9, time.time_ns(), 2_000_000))
            await until(lambda: len(got.payloads.get(1, [])) == 4, timeout=10)
            assert pool.opened == opened and pool.reused >= 1
            assert _whole(got.payloads[1], 2_000_000)
            await until(lambda: not pool.busy)
            # the metrics and the admin view say the same
            from prometheus_client.openmetrics.exposition import generate_latest
            from router.metrics import make_registry
            text = generate_latest(make_registry(nodes["a"])).decode().splitlines()
            assert 'router_stream_links{peer="b",peer_kind="router",state="free"} 1.0' in text
            assert f'router_stream_links_opened_total{{peer="b",peer_kind="router"}} {opened}.0' in text
            assert f'router_stream_links_trimmed_total{{peer="b",peer_kind="router"}} {opened - 1}.0' in text
            assert 'router_stream_messages_total{peer="b",peer_kind="router"} 4.0' in text
            view = nodes["a"].describe()["streams"]
            assert view["pool_max_idle"] == 1 and view["pools"][0] == pool.view() and pool.view()["messages"] == 4
        finally:
            await _close(nodes, *subs)
    asyncio.run(go())


def test_a_stream_link_lost_mid_message_loses_that_message_only_and_the_endpoint_stays_up():
    async def go():
        nodes = await _pair(capacity_bps=20_000_000, streaming_threshold_bytes=64 * 1024)
        sub = pub = None
        try:
            sub, got = await _subscribed(nodes)
            pub = await connect("127.0.0.1", _cport(nodes["a"]), name="pub")
            p = pub.declare_publisher(KEY, congestion_control=CongestionControl.BLOCK)
            await p.put(make_payload(1, 1, time.time_ns(), 4_000_000))  # 1.6 s at 20 Mbit/s
            await until(lambda: nodes["a"].routers["b"].streams is not None and nodes["a"].routers["b"].streams.busy)
            pool = nodes["a"].routers["b"].streams
            await asyncio.sleep(0.3)
            next(iter(pool.busy)).close("cut by the test")
            await until(lambda: _events(nodes["b"], "stream_link_closed"))
            lost_b = _events(nodes["b"], "stream_link_closed")[0]["reason"]
            lost_a = _events(nodes["a"], "stream_link_closed")[0]["reason"]
            assert "fragmented message(s) lost after" in lost_b, lost_b  # the receiver dropped the partial one
            assert "1 queued messages discarded" in lost_a, lost_a      # the sender says it lost one
            assert "b" in nodes["a"].routers and not _events(nodes["a"], "link_down")
            # the next large message takes a new stream link and arrives whole
            await p.put(make_payload(1, 2, time.time_ns(), 300_000))
            await until(lambda: len(got.payloads.get(1, [])) == 1, timeout=10)
            assert int.from_bytes(got.payloads[1][0][8:16], "big") == 2 and _whole(got.payloads[1], 300_000)
            assert pool.opened == 2
        finally:
            await _close(nodes, pub, sub)
    asyncio.run(go())


def test_a_peer_that_never_answers_for_a_stream_link_holds_nobody_up_and_is_tried_again_later():
    """A subscriber that reads everything but never answers STREAM (e.g. an older client): a large
    message for it waits at most STREAM_TAKE_WAIT_S for the link and then goes on its shared
    connection, so the publisher's other messages — here to a fast subscriber — are never held
    for the 2 s an opening may take; while that opening goes on, and for a back-off after it failed
    (1 s, then doubling), no other is tried."""
    from router.streaming import STREAM_OPEN_TIMEOUT_S, STREAM_TAKE_WAIT_S
    from test_router_limits import _raw_subscriber

    async def go():
        nodes = await _pair(streaming_threshold_bytes=64 * 1024)
        a = nodes["a"]
        loop = asyncio.get_running_loop()
        deaf = await _raw_subscriber(_cport(a), "deaf", KEY)
        received = [0]

        async def drain():
            while True:
                try:
                    data = await loop.sock_recv(deaf, 1 << 16)
                except OSError:
                    return
                if not data:
                    return
                received[0] += len(data)

        async def keep_alive():  # it is alive: it just knows nothing of STREAM
            while True:
                await asyncio.sleep(0.5)
                await loop.sock_sendall(deaf, encode_frame(FrameKind.KEEPALIVE))
        reader = asyncio.gather(drain(), keep_alive())
        fast = await connect("127.0.0.1", _cport(a), name="fast")
        got = Latencies()
        await fast.declare_subscriber(KEY, callback=got)
        pub = None
        try:
            await until(lambda: sum(1 for st in a.clients.values() if st.subs) == 2)
            pub = await connect("127.0.0.1", _cport(a), name="pub")
            p = pub.declare_publisher(KEY, priority=Priority.DATA, congestion_control=CongestionControl.BLOCK)
            start, seq, large = time.monotonic(), 0, 0
            while time.monotonic() - start < 3.6:
                if seq % 50 == 0:  # every 0.5 s
                    await p.put(make_payload(1, seq, time.time_ns(), 300_000))
                    large += 1
                await p.put(make_payload(2, seq, time.time_ns(), 200))
                seq += 1
                await asyncio.sleep(0.01)
            await until(lambda: len(got.ms.get(1, [])) == large and len(got.ms.get(2, [])) == seq, timeout=10)
            assert _whole(got.payloads[1], 300_000)
            worst = max(got.ms[2])
            deaf_pool = next(c.conn.streams for c in a.clients.values() if c.conn.peer_name.startswith("deaf@"))
            view = deaf_pool.view()
            print(f"small-message latency max {worst:.0f} ms; the deaf endpoint's pool {view}")
            assert worst < (STREAM_TAKE_WAIT_S + 0.3) * 1000 < STREAM_OPEN_TIMEOUT_S * 1000
            failed = [e for e in _events(a, "stream_link_failed") if e["endpoint"].startswith("deaf@")]
            # the first opening (t = 0) failed at 2 s, the next was tried only after its 1 s back-off
            assert [e["retry_in_s"] for e in failed] == [1.0], failed
            assert view["opened"] == 0 and view["on_shared"] == large and view["failures_in_a_row"] == 1
            from prometheus_client.openmetrics.exposition import generate_latest
            from router.metrics import make_registry
            text = generate_latest(make_registry(a)).decode().splitlines()
            assert (f'router_stream_messages_on_shared_total{{peer="{deaf_pool.main.peer_name}",peer_kind="client"}} '
                    f'{large}.0') in text
            # every large message went to the deaf subscriber all the same, on its shared connection
            await until(lambda: received[0] >= large * 300_000 + seq * 200, timeout=10)
            # and after the back-off a second opening was tried, which fails after its 2 s as well
            await until(lambda: len([e for e in _events(a, "stream_link_failed") if e["endpoint"].startswith("deaf@")]) == 2,
                        timeout=STREAM_OPEN_TIMEOUT_S + 1)
            assert _events(a, "stream_link_failed")[-1]["retry_in_s"] == 2.0
        finally:
            reader.cancel()
            deaf.close()
            await _close(nodes, pub, fast)
    asyncio.run(go())


def test_a_slow_reader_of_large_messages_holds_no_more_than_its_endpoint_limit():
    """A subscriber reading 2 Mbit/s of 1 MiB messages sent at 40 Mbit/s: its stream links take
    large messages only while what it holds on its shared and stream connections stays within
    its endpoint limit (then they go on its shared connection, where it is found a slow reader and
    its messages are dropped), at most stream_pool_max_busy at once; a fast subscriber of the same
    messages gets every one."""
    async def go():
        limit = 2 << 20
        nodes = await _pair(streaming_threshold_bytes=256 * 1024, stream_pool_max_busy=3,
                            limits={"total_bytes": 16 << 20, "client": {"endpoint_bytes": limit, "slow_reader_ms": 200,
                                                                       "slow_reader_policy": "drop"}})
        a = nodes["a"]
        slow = await connect("127.0.0.1", _cport(a), name="slow", slow_reader=True)
        slow.read_rate_bps = 2_000_000
        await slow.declare_subscriber(KEY, callback=lambda s: None)
        fast = await connect("127.0.0.1", _cport(a), name="fast")
        got = Latencies()
        await fast.declare_subscriber(KEY, callback=got)
        pub = None
        try:
            await until(lambda: sum(1 for st in a.clients.values() if st.subs) == 2)
            pub = await connect("127.0.0.1", _cport(a), name="pub")
            p = pub.declare_publisher(KEY, priority=Priority.DATA, congestion_control=CongestionControl.DROP)
            peak_held = peak_busy = 0
            for i in range(20):
                await p.put(make_payload(1, i, time.time_ns(), BIG))
                for _ in range(20):
                    await asyncio.sleep(0.01)
                    for st in a.clients.values():
                        if st.conn.peer_name.startswith("slow@") and st.conn.streams is not None:
                            pool = st.conn.streams
                            peak_busy = max(peak_busy, len(pool.busy))
                            peak_held = max(peak_held, pool.held_bytes())
            await until(lambda: len(got.ms.get(1, [])) == 20, timeout=10)
            assert _whole(got.payloads[1], BIG)
            print(f"slow reader: busy stream links at most {peak_busy}, held on them at most {peak_held} B")
            assert 1 <= peak_busy <= 3 and peak_held <= limit
            ev = [e for e in _events(a, "slow_reader") if e["endpoint"].startswith("slow@")]
            assert len(ev) == 1 and ev[0]["policy"] == "drop"
            acct = next(x for x in a.ledger.accounts if x.name.startswith("slow@") and "#" not in x.name)
            assert acct.dropped_slow > 0
            assert not [e for e in _events(a, "messages_dropped") if e["peer"].startswith("fast@")]
        finally:
            slow.read_rate_bps = None
            await _close(nodes, pub, slow, fast)
    asyncio.run(go())
