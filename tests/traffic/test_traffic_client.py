from __future__ import annotations

import asyncio

import pytest

from router.codec import CongestionControl, Priority, make_payload, unpack_payload_header
from traffic.client import ClosedError, connect


async def converge(session, pub, sub, timeout=10.0):
    """Put probes until the subscriber gets one (the router has learned the subscription)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        await pub.put(b"probe")
        try:
            s = await sub.recv(timeout=0.1)
            assert s.payload == b"probe"
            break
        except asyncio.TimeoutError:
            assert loop.time() < deadline, "subscription never took effect"
    await asyncio.sleep(0.2)
    while not sub._queue.empty():
        sub._queue.get_nowait()


def test_async_iterator_callback_and_attributes(router):
    async def go():
        async with await connect("127.0.0.1", router.client_port, name="s") as sess_sub, \
                await connect("127.0.0.1", router.client_port, name="p") as sess_pub:
            got = []
            sub = await sess_sub.declare_subscriber("t/**")
            await sess_sub.declare_subscriber("t/cb", callback=got.append)
            pub = sess_pub.declare_publisher("t/cb", priority=Priority.REAL_TIME,
                                             congestion_control=CongestionControl.BLOCK, express=True)
            await converge(sess_pub, pub, sub)
            got.clear()
            for i in range(10):
                assert await pub.put(make_payload(3, i, 1, 40))
            received = []
            async for sample in sub:
                received.append(sample)
                if len(received) == 10:
                    break
            assert [unpack_payload_header(s.payload).seq for s in received] == list(range(10))
            s0 = received[0]
            assert (s0.key, s0.priority, s0.congestion_control, s0.express) == (
                "t/cb", 1, CongestionControl.BLOCK, True)
            await asyncio.sleep(0.1)
            assert [unpack_payload_header(s.payload).seq for s in got] == list(range(10))
    asyncio.run(go())


def test_undeclare_stops_delivery_and_ends_iteration(router):
    async def go():
        sess = await connect("127.0.0.1", router.client_port, name="x")
        sub = await sess.declare_subscriber("u/*")
        other = await sess.declare_subscriber("u/**")
        pub = sess.declare_publisher("u/v")
        await converge(sess, pub, sub)
        await sub.undeclare()
        assert [s async for s in sub] == []
        while not other._queue.empty():
            other._queue.get_nowait()
        await pub.put(b"after")
        s = await other.recv(timeout=5)
        assert s.payload == b"after"
        await asyncio.sleep(0.2)
        assert sub._queue.empty() and sub.received == 1  # only the probe, before undeclare
        assert other._queue.empty(), "local delivery happens once, the router does not echo it back"
        await sess.close()
    asyncio.run(go())


def test_put_after_close_raises_and_bad_key_rejected(router):
    async def go():
        sess = await connect("127.0.0.1", router.client_port, name="x")
        pub = sess.declare_publisher("k")
        with pytest.raises(ValueError):
            sess.declare_publisher("bad//key")
        with pytest.raises(ValueError):
            await sess.declare_subscriber("")
        await sess.close()
        with pytest.raises(ClosedError):
            await pub.put(b"late")
    asyncio.run(go())


def test_put_nowait_counts_drops_when_queue_full(router):
    async def go():
        sess = await connect("127.0.0.1", router.client_port, name="x")
        pub = sess.declare_publisher("n", priority=Priority.BACKGROUND)
        results = [pub.put_nowait(b"x" * 60000) for _ in range(10)]  # no await: the writer cannot run
        assert results[0] and not all(results)
        assert pub.dropped == results.count(False)
        assert sess.pipeline.queues[7].stats.dropped == pub.dropped
        await sess.close()
    asyncio.run(go())
