"""Resource limits (router/limits.py, router/enforcement.py): accounting in the
transmission pipeline, the control budget, the config, and each policy with a
real router and real clients on loopback (one asyncio loop)."""
from __future__ import annotations

import asyncio
import socket
import time
from typing import Dict, List

import pytest

from router.codec import FrameKind, Priority, CongestionControl, encode_json_frame, make_payload
from router.config import ConfigError, PipelineConfig, config_from_dict
from router.limits import EndpointAccount, Ledger, LimitsConfig, RoleLimits
from router.node import RouterNode
from router.pipeline import EMPTY, TransmissionPipeline
from routerlab import free_port
from test_router_inprocess import ListEvents, until
from traffic.client import Sample, connect

KEY = "limits/x"


# ------------------------------------------------------------------ accounting (unit)

def _pipe(ledger: Ledger, name: str = "sub", kind: str = "client", sizes=(4,) * 8) -> TransmissionPipeline:
    acct = ledger.open(name, kind, time.time_ns())
    return TransmissionPipeline(PipelineConfig(queue_sizes=sizes, batch_size_bytes=4096, batch_threshold_bytes=4096),
                                account=acct, ledger=ledger)


def _drain(pipe: TransmissionPipeline) -> int:
    frames = 0
    now = time.time_ns() + 10**10  # every filling batch is past its time limit
    while True:
        item = pipe.pull(now)
        if item is EMPTY:
            return frames
        if isinstance(item, tuple):
            frames += 1


def test_bytes_are_charged_to_target_sender_and_total_and_given_back_on_pull():
    ledger = Ledger(LimitsConfig())
    a, b = _pipe(ledger, "a"), _pipe(ledger, "b")
    src = ledger.open("pub", "client", time.time_ns())
    assert not src.tracks_from  # only with a sender limit; charged here all the same when given
    head, body = b"H" * 6, b"x" * 94
    for _ in range(3):
        assert a.try_push(5, False, head, body, time.time_ns(), src)
    assert b.try_push(1, False, head, body, time.time_ns(), src)
    assert (a.account.queued_to, b.account.queued_to) == (300, 100)
    assert src.queued_from == 400 and ledger.total == 400 and ledger.peak == 400
    assert _drain(a) == 1
    assert a.account.queued_to == 0 and src.queued_from == 100 and ledger.total == 100
    assert a.account.peak_to == 100 and ledger.peak == 400  # peaks are sampled as batches open
    lost = b.close()
    assert lost == 1 and b.account.queued_to == 0 and src.queued_from == 0 and ledger.total == 0


def test_endpoint_limit_refuses_and_marks_the_reader_full_the_total_does_not():
    ledger = Ledger(LimitsConfig(total_bytes=10_000, client=RoleLimits(endpoint_bytes=1000)))
    pipe = _pipe(ledger, sizes=(64,) * 8)
    other = _pipe(ledger, "other", sizes=(64,) * 8)
    for _ in range(10):
        assert pipe.try_push(5, False, b"H" * 6, b"x" * 94, 1)
    assert not pipe.try_push(5, False, b"H" * 6, b"x" * 94, 42)  # 1100 > 1000
    assert pipe.account.full_since_ns == 42 and pipe.account.full_for_ns(1042) == 1000
    assert pipe.try_push(5, False, b"", b"", 50)  # room now and then is not enough:
    assert pipe.account.full_since_ns == 42        # full until the queue empties
    _drain(pipe)
    assert pipe.account.full_since_ns == 0 and pipe.account.queued_to == 0
    # the total: 10 000 for everyone
    other.account.limit_to = 10**9
    for _ in range(100):
        assert other.try_push(5, False, b"H" * 6, b"x" * 94, 1)
    assert ledger.total == 10_000
    # the total is checked when a batch opens: an express message (a batch of its own) finds no room ...
    assert not other.try_push(5, True, b"H", b"", 60)
    assert other.account.full_since_ns == 0  # the total being full is not this reader's fault
    # ... while the batch being filled takes at most its own size past the limit
    while other.try_push(5, False, b"H" * 6, b"x" * 94, 61):
        pass
    assert 10_000 < ledger.total <= 10_000 + 4096 - 8


def test_a_closed_pipeline_takes_nothing_and_charges_no_sender():
    ledger = Ledger(LimitsConfig())
    pipe = _pipe(ledger)
    src = ledger.open("pub", "client", time.time_ns())
    assert pipe.try_push(5, False, b"H" * 6, b"x" * 94, 1, src)
    assert pipe.close() == 1 and src.queued_from == 0
    for express in (False, True):  # (a writer that closed while a forwarder waited for room in it)
        assert not pipe.try_push(5, express, b"H" * 6, b"x" * 94, 2, src)
    assert src.queued_from == 0 and pipe.account.queued_to == 0 and ledger.total == 0
    assert all(q.stats.in_queue == 0 and not q.ready and q.current is None for q in pipe.queues)


def test_batch_capacity_refusal_also_marks_full():
    ledger = Ledger(LimitsConfig())
    pipe = _pipe(ledger, sizes=(1,) * 8)
    assert pipe.try_push(5, True, b"H" * 6, b"x" * 10, 1)  # express: a batch of its own, the one slot
    assert not pipe.try_push(5, True, b"H" * 6, b"x" * 10, 7)
    assert pipe.account.full_since_ns == 7


def test_control_frames_have_their_own_bound_outside_the_data_budget_and_go_first():
    ledger = Ledger(LimitsConfig(total_bytes=100, control_bytes=1024, client=RoleLimits(endpoint_bytes=100)))
    pipe = _pipe(ledger)
    assert pipe.try_push(5, False, b"H" * 6, b"x" * 94, 1)
    assert not pipe.try_push(5, False, b"H", b"", 1)  # data budget exhausted
    frame = encode_json_frame(FrameKind.LINKSTATE, {"pad": "y" * 480})
    assert pipe.send_control(frame) and pipe.send_control(frame)  # control still has room
    assert ledger.control == 2 * len(frame) and ledger.total == 100
    assert not pipe.send_control(frame)  # past 1024 bytes of control
    first = pipe.pull(time.time_ns())
    assert isinstance(first, tuple) and first[0] == -1  # control before data
    assert ledger.control == len(frame)
    pipe.close()
    assert ledger.control == 0 and ledger.total == 0


def test_input_token_bucket_debt_and_rate():
    acct = EndpointAccount("pub", "client", RoleLimits(input_rate_bps=8_000_000, input_burst_bytes=100_000), 0)
    assert acct.observe_input(100_000, 0) == 0.0  # the burst
    debt = acct.observe_input(500_000, 0)  # 500 kB over at 1 MB/s
    assert debt == pytest.approx(0.5)
    assert acct.observe_input(0, 500_000_000) == pytest.approx(0.0)  # paid back after 0.5 s
    assert acct.noisy_reason(0.0) == "" and acct.noisy_reason(0.1) == "input_rate"
    unlimited = EndpointAccount("x", "client", RoleLimits(), 0)
    assert unlimited.observe_input(10**9, 1) == 0.0


# ------------------------------------------------------------------ config

def test_limits_config_parses_and_defaults():
    cfg = config_from_dict({"node": "r", "client_listen": ["127.0.0.1:0"], "limits": {
        "total_bytes": 1 << 20, "control_bytes": 4096,
        "client": {"endpoint_bytes": 65536, "input_rate_bps": 1_000_000, "noisy_policy": "drop",
                   "drop_priorities": ["data_low", 7], "slow_reader_ms": 300, "slow_reader_policy": "disconnect"},
        "router": {"endpoint_bytes": None}}})
    lim = cfg.limits
    assert lim.total_bytes == 1 << 20 and lim.control_bytes == 4096
    assert lim.client.drop_priorities == (6, 7) and lim.client.slow_reader_policy == "disconnect"
    assert lim.client.burst_bytes == 65536  # max(64 KiB, 100 ms at the rate)
    assert lim.router.endpoint_bytes is None and lim.router.noisy_policy == "throttle"
    default = config_from_dict({"node": "r", "client_listen": ["127.0.0.1:0"]}).limits
    assert default == LimitsConfig()


@pytest.mark.parametrize("limits, message", [
    ({"totl_bytes": 1}, "unknown key"),
    ({"client": {"noisy_policy": "shout"}}, "limits.client.noisy_policy: expected one of"),
    ({"router": {"slow_reader_policy": "throttle"}}, "limits.router.slow_reader_policy"),
    ({"client": {"endpoint_bytes": -1}}, "limits.client.endpoint_bytes: expected an integer >= 1"),
    ({"client": {"input_burst_bytes": 1000}}, "only meaningful with input_rate_bps"),
    ({"client": {"drop_priorities": ["urgent"]}}, "limits.client.drop_priorities: unknown priority"),
    ({"control_bytes": None}, "control frames are always bounded"),
    ({"control_bytes": 10}, "limits.control_bytes: expected an integer >= 1024"),
    ("lots", "limits: expected an object"),
])
def test_bad_limits_are_refused_with_the_key(limits, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict({"node": "r", "client_listen": ["127.0.0.1:0"], "limits": limits})


# ------------------------------------------------------------------ policies with a real router

async def _router(limits: Dict, **extra) -> RouterNode:
    cfg = config_from_dict({"node": "r", "client_listen": [f"127.0.0.1:{free_port()}"], "lease_ms": 3000,
                            "limits": dict({"check_interval_ms": 20}, **limits), **extra})
    node = RouterNode(cfg, ListEvents("r"))
    await node.start()
    return node


def _port(node: RouterNode) -> int:
    return node.ready_addresses["client"][0].port


async def _raw_subscriber(port: int, name: str, key: str) -> socket.socket:
    """A client that subscribes and then never reads (tiny receive buffer, so the router's queue fills)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    sock.sendall(encode_json_frame(FrameKind.HELLO, {"role": "client", "name": name})
                 + encode_json_frame(FrameKind.DECLARE, {"id": 1, "key": key}))
    return sock


def _events(node: RouterNode, name: str) -> List[Dict]:
    return [e for e in node.events.records if e["event"] == name]


class Arrivals:
    def __init__(self) -> None:
        self.times: List[int] = []
        self.bytes = 0

    def __call__(self, sample: Sample) -> None:
        self.times.append(sample.recv_ns)
        self.bytes += len(sample.payload)

    def longest_gap_s(self) -> float:
        return max((b - a for a, b in zip(self.times, self.times[1:])), default=0) / 1e9


async def _publish(port: int, name: str, seconds: float, size: int, per_tick: int,
                   cc=CongestionControl.DROP, prio=Priority.DATA, tick: float = 0.002, close_s: float = 10.0) -> int:
    session = await connect("127.0.0.1", port, name=name)
    pub = session.declare_publisher(KEY, priority=prio, congestion_control=cc)
    sent = 0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            for _ in range(per_tick):
                await pub.put(make_payload(1, sent, time.time_ns(), size))
                sent += 1
            await asyncio.sleep(tick)
        await session.flush(close_s)
    finally:
        await session.close(close_s)
    return sent


async def _subscriber(port: int, name: str):
    session = await connect("127.0.0.1", port, name=name)
    arrivals = Arrivals()
    await session.declare_subscriber(KEY, callback=arrivals)
    return session, arrivals


@pytest.mark.parametrize("cc", [CongestionControl.DROP, CongestionControl.BLOCK], ids=["drop", "block"])
def test_slow_reader_drop_policy_keeps_the_fast_subscriber_whole(cc):
    """A subscriber that stops reading: after slow_reader_ms its messages are dropped at
    once; the fast subscriber of the same key gets every message, never stalled for
    longer than slow_reader_ms (without the policy a Block message would hold the
    router for the 5 s close deadline)."""
    async def go():
        node = await _router({"client": {"endpoint_bytes": 128 * 1024, "slow_reader_ms": 200,
                                         "slow_reader_policy": "drop"}})
        port = _port(node)
        slow = await _raw_subscriber(port, "slow", KEY)
        fast_session, fast = await _subscriber(port, "fast")
        await until(lambda: len(node.clients) == 2 and all(st.subs for st in node.clients.values()))
        try:
            sent = await _publish(port, "pub", 2.0, 1024, 10, cc=cc)
            await until(lambda: len(fast.times) >= sent, timeout=10)
            ev = _events(node, "slow_reader")
            assert len(ev) == 1 and ev[0]["endpoint"].startswith("slow@") and ev[0]["policy"] == "drop"
            assert ev[0]["backlog_ms"] >= 200 and ev[0]["queued_to_bytes"] <= 128 * 1024
            acct = next(a for a in node.ledger.accounts if a.name.startswith("slow@"))
            assert acct.slow and acct.dropped_slow > 0 and acct.peak_to <= 128 * 1024
            assert len(fast.times) == sent  # nothing lost for the fast one
            # once detected, nothing waits for the slow one: the longest pause the fast
            # subscriber saw is bounded by the detection time, not the close deadline
            assert fast.longest_gap_s() < 0.2 + 0.5
            assert not _events(node, "link_closed")
            assert node.ledger.peak <= node.config.limits.total_bytes
        finally:
            slow.close()
            await fast_session.close()
            await node.stop()
        await until(lambda: node.ledger.total == 0 and not node.ledger.accounts)
    asyncio.run(go())


def test_a_reader_that_reads_but_slower_than_it_is_sent_to_is_slow():
    """Reading 50 kB/s of a 500 kB/s flow: its queue has room now and then but never
    empties, so it is a slow reader after slow_reader_ms (cause backlog; the stall
    detection is off here, so that the backlog rule alone is tested)."""
    async def go():
        node = await _router({"client": {"endpoint_bytes": 64 * 1024, "slow_reader_ms": 300,
                                         "stalled_reader_ms": None, "slow_reader_policy": "drop"}})
        port = _port(node)
        slow = await _raw_subscriber(port, "slow", KEY)
        loop = asyncio.get_running_loop()

        async def read_slowly():
            while True:
                try:
                    await loop.sock_recv(slow, 1000)
                except OSError:
                    return
                await asyncio.sleep(0.02)
        reader = asyncio.create_task(read_slowly())
        await until(lambda: any(st.subs for st in node.clients.values()))
        try:
            await _publish(port, "pub", 1.5, 1000, 1)  # 1000 B every 2 ms
            ev = _events(node, "slow_reader")
            assert len(ev) == 1 and ev[0]["backlog_ms"] >= 300 and ev[0]["cause"] == "backlog", ev
            acct = next(a for a in node.ledger.accounts if a.name.startswith("slow@"))
            assert acct.dropped_slow > 0
        finally:
            reader.cancel()
            slow.close()
            await node.stop()
    asyncio.run(go())


def test_a_full_total_is_no_reader_s_fault():
    """Two subscribers that do not read, each under its own (large) limit, fill the small total:
    messages then find no room and are dropped as queue_full after the drop deadline, but
    neither subscriber's own queue ever refused one, so neither is a slow reader."""
    async def go():
        node = await _router({"total_bytes": 64 * 1024,
                              "client": {"endpoint_bytes": 1024 * 1024, "slow_reader_ms": 100,
                                         "slow_reader_policy": "drop"}})
        port = _port(node)
        stuck = [await _raw_subscriber(port, f"stuck{i}", KEY) for i in range(2)]
        await until(lambda: len(node.clients) == 2 and all(st.subs for st in node.clients.values()))
        try:
            await _publish(port, "pub", 1.0, 1000, 2)  # 1 MB/s for 1 s: the total fills within 0.1 s
            accts = [a for a in node.ledger.accounts if a.name.startswith("stuck")]
            assert len(accts) == 2 and all(a.full_since_ns == 0 for a in accts)  # never refused by their own queue
            assert node.ledger.peak >= 64 * 1024  # the total was reached ...
            assert sum(q.stats.dropped for c in node.clients for q in c.pipeline.queues) > 0  # ... and dropped for
            assert not _events(node, "slow_reader"), _events(node, "slow_reader")
            assert all(a.dropped_slow == 0 and not a.slow for a in accts)
        finally:
            for sock in stuck:
                sock.close()
            await node.stop()
    asyncio.run(go())


def test_slow_reader_disconnect_policy_is_a_logged_deliberate_disconnect():
    async def go():
        node = await _router({"client": {"endpoint_bytes": 64 * 1024, "slow_reader_ms": 150,
                                         "slow_reader_policy": "disconnect"}})
        port = _port(node)
        slow = await _raw_subscriber(port, "slow", KEY)
        fast_session, fast = await _subscriber(port, "fast")
        await until(lambda: len(node.clients) == 2 and all(st.subs for st in node.clients.values()))
        try:
            sent = await _publish(port, "pub", 1.5, 1024, 10)
            await until(lambda: len(fast.times) >= sent, timeout=10)
            ev = _events(node, "slow_reader")
            assert len(ev) == 1 and ev[0]["policy"] == "disconnect"
            gone = [e for e in _events(node, "client_disconnected") if e["client"].startswith("slow@")]
            assert len(gone) == 1 and "slow reader" in gone[0]["reason"]
            assert not any(a.name.startswith("slow@") for a in node.ledger.accounts)
        finally:
            slow.close()
            await fast_session.close()
            await node.stop()
    asyncio.run(go())


def test_noisy_sender_throttle_reads_it_at_its_rate():
    """1 Mbit/s input limit with a 64 KiB burst; a publisher pushes ~50 MB/s for 2 s:
    the router forwards at most rate x time + burst + one frame.  (Drop congestion
    control: a Block publisher would wait on megabytes of socket buffers that the
    router now reads at 125 kB/s, and pass its own close deadline.)"""
    rate_bps, burst = 1_000_000, 64 * 1024
    async def go():
        node = await _router({"client": {"input_rate_bps": rate_bps, "input_burst_bytes": burst,
                                         "noisy_policy": "throttle"}})
        port = _port(node)
        sub_session, sub = await _subscriber(port, "sub")
        await until(lambda: any(st.subs for st in node.clients.values()))
        try:
            start = time.monotonic()
            # what it could not send in 2 s stays behind: the router reads it at 125 kB/s, no use waiting
            sent = await _publish(port, "noisy", 2.0, 1000, 50, tick=0.001, close_s=0.2)
            elapsed = time.monotonic() - start
            await asyncio.sleep(0.1)
            bound = rate_bps / 8 * elapsed + burst + 65536
            assert sub.bytes <= bound, (sub.bytes, bound)
            assert sub.bytes >= 0.5 * rate_bps / 8 * 2.0  # throttled, not stopped
            assert len(sub.times) <= sent
            ev = _events(node, "noisy_sender")
            assert ev and ev[0]["endpoint"].startswith("noisy@") and ev[0]["policy"] == "throttle"
            assert ev[0]["cause"] == "input_rate" and ev[0]["input_rate_limit_bps"] == rate_bps
            acct = next(a for a in node.ledger.accounts if a.name.startswith("noisy@"))
            assert acct.throttled_ns > 0.5e9
        finally:
            await sub_session.close()
            await node.stop()
    asyncio.run(go())


def test_noisy_sender_drop_policy_drops_its_low_priorities_only():
    """Drop policy: while over its rate the sender's data messages are dropped down to
    the rate; its real-time messages all pass."""
    rate_bps = 800_000
    async def go():
        node = await _router({"client": {"input_rate_bps": rate_bps, "input_burst_bytes": 20_000,
                                         "noisy_policy": "drop", "drop_priorities": [4, 5, 6, 7]}})
        port = _port(node)
        sub_session = await connect("127.0.0.1", port, name="sub")
        data, rt = Arrivals(), Arrivals()
        await sub_session.declare_subscriber("limits/data", callback=data)
        await sub_session.declare_subscriber("limits/rt", callback=rt)
        await until(lambda: any(len(st.subs) == 2 for st in node.clients.values()))
        pub_session = await connect("127.0.0.1", port, name="noisy")
        pd = pub_session.declare_publisher("limits/data", priority=Priority.DATA)
        pr = pub_session.declare_publisher("limits/rt", priority=Priority.REAL_TIME)
        try:
            n_rt = 0
            end = time.monotonic() + 2.0
            start = time.monotonic()
            while time.monotonic() < end:  # data at ~5 Mbit/s, realtime 100 msg/s
                for _ in range(6):
                    await pd.put(make_payload(1, 0, time.time_ns(), 1000))
                await pr.put(make_payload(2, n_rt, time.time_ns(), 100))
                n_rt += 1
                await asyncio.sleep(0.01)
            elapsed = time.monotonic() - start
            await pub_session.flush()
            await asyncio.sleep(0.2)
            assert len(rt.times) == n_rt
            bound = rate_bps / 8 * elapsed + 20_000 + 65536
            assert data.bytes <= bound, (data.bytes, bound)
            assert data.bytes >= 0.4 * rate_bps / 8 * elapsed
            acct = next(a for a in node.ledger.accounts if a.name.startswith("noisy@"))
            assert acct.dropped_noisy > 0
            ev = _events(node, "noisy_sender")
            assert ev and ev[0]["policy"] == "drop"
        finally:
            await pub_session.close()
            await sub_session.close()
            await node.stop()
        drops = [e for e in _events(node, "messages_dropped") if e["reason"] == "noisy_sender"]
        assert drops and all(e["priority"] == 5 for e in drops)
    asyncio.run(go())


def test_noisy_sender_disconnect_policy():
    async def go():
        node = await _router({"client": {"input_rate_bps": 200_000, "input_burst_bytes": 10_000,
                                         "noisy_policy": "disconnect"}})
        port = _port(node)
        sub_session, _ = await _subscriber(port, "sub")
        try:
            with pytest.raises(ConnectionError, match="session closed"):  # the client library's ClosedError
                await _publish(port, "noisy", 1.0, 1000, 20)
            await until(lambda: any(e["client"].startswith("noisy@")
                                    for e in _events(node, "client_disconnected")))
            gone = next(e for e in _events(node, "client_disconnected") if e["client"].startswith("noisy@"))
            assert "noisy sender (input_rate)" in gone["reason"]
            assert _events(node, "noisy_sender")[0]["policy"] == "disconnect"
        finally:
            await sub_session.close()
            await node.stop()
    asyncio.run(go())


def test_noisy_state_clears_after_a_calm_second_with_an_event():
    async def go():
        # 300 kB at ~1 MB/s against 250 kB/s: about 1.2 s of throttling, then a calm second
        node = await _router({"client": {"input_rate_bps": 2_000_000, "input_burst_bytes": 10_000,
                                         "noisy_policy": "throttle"}})
        port = _port(node)
        sub_session, _ = await _subscriber(port, "sub")
        pub_session = await connect("127.0.0.1", port, name="noisy")  # stays connected, goes quiet
        pub = pub_session.declare_publisher(KEY)
        try:
            for i in range(150):
                await pub.put(make_payload(1, i, time.time_ns(), 1000))
                await pub.put(make_payload(1, i, time.time_ns(), 1000))
                await asyncio.sleep(0.002)
            await until(lambda: _events(node, "noisy_sender"), timeout=5)
            await until(lambda: _events(node, "noisy_sender_cleared"), timeout=10)
            ev = _events(node, "noisy_sender_cleared")[0]
            assert ev["endpoint"].startswith("noisy@") and ev["throttled_ms"] > 0
            assert ev["duration_ms"] >= 1000  # at least the calm second
        finally:
            await pub_session.close()
            await sub_session.close()
            await node.stop()
    asyncio.run(go())


def test_sender_bytes_makes_a_sender_noisy_when_it_holds_too_much():
    async def go():
        node = await _router({"client": {"endpoint_bytes": 1 << 20, "sender_bytes": 64 * 1024,
                                         "noisy_policy": "drop"}})
        port = _port(node)
        slow = await _raw_subscriber(port, "slow", KEY)
        await until(lambda: any(st.subs for st in node.clients.values()))
        try:
            await _publish(port, "pub", 1.0, 1024, 20)
            ev = _events(node, "noisy_sender")
            assert ev and ev[0]["cause"] == "sender_bytes" and ev[0]["sender_limit_bytes"] == 64 * 1024
            assert ev[0]["queued_from_bytes"] > 64 * 1024
        finally:
            slow.close()
            await node.stop()
    asyncio.run(go())


def test_a_router_peer_that_does_not_read_its_control_messages_is_disconnected():
    """Link-state floods to a neighbour that never reads: past limits.control_bytes the
    router disconnects it (AllJoyn's maxControlMessages) instead of growing without bound."""
    async def go():
        port = free_port()
        cfg = config_from_dict({"node": "r", "router_listen": [f"127.0.0.1:{port}"], "lease_ms": 60000,
                                "keepalive_ms": 30000, "limits": {"control_bytes": 64 * 1024}})
        node = RouterNode(cfg, ListEvents("r"))
        await node.start()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        sock.sendall(encode_json_frame(FrameKind.HELLO, {"role": "router", "name": "deaf"}))
        try:
            await until(lambda: "deaf" in node.routers)
            acct = node.routers["deaf"].pipeline.account
            for i in range(200_000):
                if "deaf" not in node.routers:
                    break
                node.set_link_weight("deaf", 1 + i % 60000, reason="x" * 200)
                if i % 50 == 0:
                    await asyncio.sleep(0)
            await until(lambda: "deaf" not in node.routers)
            down = [e for e in _events(node, "link_down") if e["neighbour"] == "deaf"]
            assert down and "control queue over its limit of 65536 bytes" in down[0]["reason"]
            assert acct.control == 0 and node.ledger.control == 0
        finally:
            sock.close()
            await node.stop()
    asyncio.run(go())


def test_limits_are_in_the_metrics_and_the_admin_view():
    pytest.importorskip("prometheus_client")
    from prometheus_client.openmetrics.exposition import generate_latest
    from router.metrics import make_registry

    async def go():
        node = await _router({"client": {"endpoint_bytes": 64 * 1024, "slow_reader_ms": 100}})
        port = _port(node)
        slow = await _raw_subscriber(port, "slow", KEY)
        await until(lambda: any(st.subs for st in node.clients.values()))
        try:
            await _publish(port, "pub", 0.8, 1024, 10)
            text = generate_latest(make_registry(node)).decode()
            view = node.describe()["limits"]
        finally:
            slow.close()
            await node.stop()
        return text, view
    text, view = asyncio.run(go())
    for name in ("router_queued_bytes ", "router_queued_bytes_peak ", "router_queued_bytes_limit ",
                 "router_endpoint_queued_bytes{", "router_limit_decisions_total{", "router_resident_memory_bytes "):
        assert name in text, name
    cpu = next(float(line.split()[1]) for line in text.splitlines() if line.startswith("router_cpu_seconds_total "))
    assert 0 < cpu < 120  # this process's own CPU time: it has published and forwarded, within the test's time
    assert any(line.startswith("router_limit_decisions_total{") and 'kind="slow_reader"' in line
               and 'peer="slow@' in line and line.endswith(" 1.0") for line in text.splitlines())
    slow_view = next(e for e in view["endpoints"] if e["endpoint"].startswith("slow@"))
    assert slow_view["slow"] and slow_view["dropped_slow"] > 0 and slow_view["endpoint_limit_bytes"] == 65536
    assert view["total_limit_bytes"] == 64 * 1024 * 1024


# ------------------------------------------------------------------ safe by default (issue 26)

def test_stall_is_measured_from_the_last_bytes_that_left_the_queue():
    acct = EndpointAccount("c", "client", RoleLimits(endpoint_bytes=1000, stalled_reader_ms=200), 0)
    assert acct.stalled_ns(5_000_000_000) == 0 and acct.slow_cause_now(5_000_000_000) == ""  # empty: no stall
    acct.backlog_since_ns = 1_000_000_000  # data queued at t = 1 s
    assert acct.stalled_ns(1_150_000_000) == 150_000_000
    acct.full_since_ns = 1_100_000_000  # its own queue refused a message at 1.1 s
    assert acct.slow_cause_now(1_150_000_000) == "" and acct.until_slow_s(1_150_000_000) == pytest.approx(0.05)
    acct.moved(1_190_000_000)  # a frame left at 1.19 s: the stall restarts from there
    assert acct.stalled_max_ns == 190_000_000
    assert acct.stalled_ns(1_300_000_000) == 110_000_000 and acct.slow_cause_now(1_300_000_000) == ""
    assert acct.slow_cause_now(1_390_000_000) == "stalled"
    # the backlog rule is off by default; set, it is the other cause
    backlog = EndpointAccount("c", "client", RoleLimits(endpoint_bytes=1000, slow_reader_ms=300), 0)
    backlog.backlog_since_ns = backlog.full_since_ns = 1
    backlog.moved(1_000_000)  # it moves, but never empties
    assert backlog.slow_cause_now(200_000_000) == "" and backlog.slow_cause_now(301_000_000) == "backlog"
    assert EndpointAccount("r", "router", RoleLimits(), 0).until_slow_s(10) is None


def test_the_defaults_protect_clients_and_leave_router_links_alone():
    cfg = config_from_dict({"node": "r", "client_listen": ["127.0.0.1:0"], "limits": {}})
    assert cfg.limits == LimitsConfig()
    assert cfg.limits.client.stalled_reader_ms == 200 and cfg.limits.client.slow_reader_ms is None
    assert cfg.limits.router.stalled_reader_ms is None and cfg.limits.router.slow_reader_ms is None
    assert cfg.limits.declarations_per_client == 10_000
    # setting another key of the role keeps the default; null turns it off
    kept = config_from_dict({"node": "r", "client_listen": ["127.0.0.1:0"],
                             "limits": {"client": {"endpoint_bytes": 4096}}})
    assert kept.limits.client.stalled_reader_ms == 200
    off = config_from_dict({"node": "r", "client_listen": ["127.0.0.1:0"],
                            "limits": {"client": {"stalled_reader_ms": None},
                                                    "declarations_per_client": None}})
    assert off.limits.client.stalled_reader_ms is None and off.limits.declarations_per_client is None


def _slow_reader_metric(node: RouterNode) -> Dict[str, float]:
    from prometheus_client.openmetrics.exposition import generate_latest
    from router.metrics import make_registry
    text = generate_latest(make_registry(node)).decode()
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.startswith("router_slow_readers_total{")}


async def _publish_on_schedule(port: int, name: str, seconds: float, size: int, rate: int, cc) -> int:
    """Publish ``rate`` msg/s for ``seconds``: each tick sends what is due by the clock, so a pause (a Block
    put waiting) is caught up afterwards, as a source with its own clock would."""
    session = await connect("127.0.0.1", port, name=name)
    pub = session.declare_publisher(KEY, priority=Priority.DATA, congestion_control=cc)
    sent = 0
    start = time.monotonic()
    try:
        while (now := time.monotonic()) < start + seconds:
            due = min(int((now - start) * rate) + 1, int(seconds * rate))
            while sent < due:
                await pub.put(make_payload(1, sent, time.time_ns(), size))
                sent += 1
            await asyncio.sleep(0.002)
        await session.flush(10)
    finally:
        await session.close(10)
    return sent


@pytest.mark.parametrize("cc", [CongestionControl.DROP, CongestionControl.BLOCK], ids=["drop", "block"])
def test_router_defaults_keep_a_healthy_subscriber_beside_a_stuck_one(cc):
    """Issue 26's must-show: a router whose config has an empty limits section; 4 KiB messages at
    1 500 msg/s for 2 s to a healthy subscriber, first alone, then beside a subscriber of the same key
    whose client never reads.  The healthy one's rate in the 2 s after publishing starts keeps >= 0.8x
    its rate alone (before the defaults protected it: 0.035x Drop, 0.047x Block, issue 26), and the stuck
    one's fate is a slow_reader event (cause stalled) and a metric."""
    pytest.importorskip("prometheus_client")

    async def go():
        cfg = config_from_dict({"node": "r", "client_listen": [f"127.0.0.1:{free_port()}"], "limits": {}})
        node = RouterNode(cfg, ListEvents("r"))
        await node.start()
        port = _port(node)
        rates, gaps = {}, {}
        try:
            for with_stuck in (False, True):
                stuck = await _raw_subscriber(port, "stuck", KEY) if with_stuck else None
                session, healthy = await _subscriber(port, "healthy")
                await until(lambda: len(node.clients) == 1 + with_stuck
                            and all(st.subs for st in node.clients.values()))
                start = time.time_ns()
                sent = await _publish_on_schedule(port, "pub", 2.0, 4096, 1500, cc)
                await until(lambda: len(healthy.times) >= sent, timeout=15)
                rates[with_stuck] = sum(1 for t in healthy.times if t < start + 2_000_000_000) / 2.0
                gaps[with_stuck] = healthy.longest_gap_s()
                await session.close()
                if stuck is not None:
                    stuck.close()
                await until(lambda: not node.clients)
            return rates, gaps, _events(node, "slow_reader"), _slow_reader_metric(node)
        finally:
            await node.stop()
    rates, gaps, events, metric = asyncio.run(go())
    print(f"healthy subscriber {cc.name}: {rates[False]:.0f} msg/s alone, {rates[True]:.0f} msg/s beside a stuck "
          f"one ({rates[True] / rates[False]:.2f}x); longest pause {gaps[False] * 1000:.0f} / {gaps[True] * 1000:.0f} ms")
    assert rates[False] > 200  # the baseline itself is real traffic
    assert rates[True] >= 0.8 * rates[False]
    # a Block message waited for the stuck one at most until it counted as slow (200 ms), not the close
    # deadline (5 s); Drop never waited for it
    assert gaps[True] < 2.0
    assert len(events) == 1 and events[0]["endpoint"].startswith("stuck@"), events
    assert events[0]["cause"] == "stalled" and events[0]["policy"] == "drop"
    assert events[0]["stalled_ms"] >= 200 and events[0]["stalled_reader_ms"] == 200
    assert metric == {'router_slow_readers_total{cause="stalled",peer_kind="client",policy="drop"}': 1.0}


def test_a_drop_message_waits_once_per_stall_not_once_per_message():
    """A Drop message for a target whose queue is full waits at most the drop deadline from the
    moment nothing left that queue: a stuck reader not yet counted as slow costs the messages
    behind it nothing (before, each message waited the whole drop deadline for it).  Counted, not
    timed: how many times a message waited for the stuck reader's room, against how many were
    dropped for it."""
    async def go():
        # the stall rule far off, so that every refusal here is a queue_full one, however loaded the machine
        node = await _router({"client": {"endpoint_bytes": 64 * 1024, "stalled_reader_ms": 600_000}},
                             drop_deadline_ms=50.0)
        port = _port(node)
        stuck = await _raw_subscriber(port, "stuck", KEY)
        session, healthy = await _subscriber(port, "healthy")
        await until(lambda: len(node.clients) == 2 and all(st.subs for st in node.clients.values()))
        pipe = next(c.pipeline for c in node.clients if c.peer_name.startswith("stuck@"))
        waits = []
        real_wait = pipe.push_wait

        async def counted_wait(*args, **kwargs):
            waits.append(1)
            return await real_wait(*args, **kwargs)
        pipe.push_wait = counted_wait
        try:
            sent = await _publish(port, "pub", 1.0, 1024, 10)  # up to 5 000 messages; 64 KiB hold 64 of them
            await until(lambda: len(healthy.times) >= sent, timeout=30)
            dropped = sum(q.stats.dropped for q in pipe.queues)
            assert not pipe.account.slow  # every drop was a queue_full drop
            return sent, len(waits), dropped
        finally:
            stuck.close()
            await session.close()
            await node.stop()
    sent, waited, dropped = asyncio.run(go())
    print(f"{sent} sent, {dropped} dropped for the stuck reader after {waited} wait(s)")
    # once per stall: the first message that found its queue full waited (up to 50 ms); the stall then
    # outlasted the drop deadline and every later one was dropped at once (before: one wait each)
    assert dropped > 100 and waited <= 5, (sent, waited, dropped)


def test_a_priority_with_its_own_drop_deadline_drops_where_another_waits():
    """drop_deadlines_ms: toward a reader that stopped, a Drop message at data_low (its deadline 0) is
    dropped at once, while one at data (the router-wide 60 s drop deadline) waits for room. Counted, not
    timed: data_low's drops, then a data message waiting (a room waiter) with none of data's dropped."""
    async def go():
        node = await _router({"client": {"endpoint_bytes": 64 * 1024, "stalled_reader_ms": 600_000}},
                             drop_deadline_ms=60_000.0, drop_deadlines_ms={"data_low": 0})
        port = _port(node)
        stuck = await _raw_subscriber(port, "stuck", KEY)
        await until(lambda: node.clients and all(st.subs for st in node.clients.values()))
        pipe = next(c.pipeline for c in node.clients if c.peer_name.startswith("stuck@"))
        waiter = None
        try:
            await _publish(port, "low", 0.5, 1024, 10, prio=Priority.DATA_LOW)  # far more than 64 KiB
            await until(lambda: pipe.queues[Priority.DATA_LOW].stats.dropped > 0, timeout=30)
            assert pipe._room_waiters == 0
            waiter = asyncio.ensure_future(_publish(port, "data", 0.1, 1024, 10, prio=Priority.DATA, close_s=1.0))
            await until(lambda: pipe._room_waiters > 0, timeout=30)
            return pipe.queues[Priority.DATA_LOW].stats.dropped, pipe.queues[Priority.DATA].stats.dropped
        finally:
            stuck.close()
            if waiter is not None:
                await asyncio.gather(waiter, return_exceptions=True)
            await node.stop()
    low_dropped, data_dropped = asyncio.run(go())
    print(f"data_low: {low_dropped} dropped at once; data: waiting, {data_dropped} dropped")
    assert low_dropped > 0 and data_dropped == 0
