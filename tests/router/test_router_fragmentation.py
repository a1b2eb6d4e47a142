"""Fragmentation (router/pipeline.py ``Fragments``, router/codec.py ``Reassembly``): no frame
larger than a batch, pieces of a large message interleaved with other priorities, reassembly
on the far side (router and client library), and what happens when a connection is lost
mid-message."""
from __future__ import annotations

import asyncio
import socket
import time
from typing import Dict, List

import pytest

from router import codec
from router.codec import (
    FRAGMENT_HEADER_SIZE, FRAME_HEADER_SIZE, CodecError, CongestionControl, FrameKind, Priority, Reassembly,
    encode_fragment, encode_json_frame, encode_message, make_payload, unpack_payload_header,
)
from router.config import PipelineConfig, config_from_dict
from router.limits import Ledger, LimitsConfig
from router.node import RouterNode
from router.pipeline import EMPTY, TransmissionPipeline
from routerlab import free_port
from test_router_inprocess import ListEvents, until
from traffic.client import Sample, connect

BATCH = 4096
KEY = "frag/x"


def _pipe(fragmentation: bool = True, ledger: Ledger = None) -> TransmissionPipeline:
    acct = ledger.open("sub", "client", time.time_ns()) if ledger is not None else None
    return TransmissionPipeline(PipelineConfig(queue_sizes=(4,) * 8, batch_size_bytes=BATCH,
                                               batch_threshold_bytes=BATCH, fragmentation=fragmentation),
                                account=acct, ledger=ledger)


def _frames(pipe: TransmissionPipeline) -> List[tuple]:
    out = []
    now = time.time_ns() + 10**10  # every filling batch is past its time limit
    while True:
        item = pipe.pull(now)
        if item is EMPTY:
            return out
        if isinstance(item, tuple):
            out.append(item)


def _split(msg: bytes):
    return msg[:6], memoryview(msg)[6:]


def test_a_large_message_leaves_in_pieces_no_larger_than_a_batch_with_other_priorities_between():
    big = encode_message(KEY, make_payload(7, 1, 123, 50_000), priority=Priority.DATA)
    small = encode_message(KEY, make_payload(8, 1, 456, 100), priority=Priority.REAL_TIME)
    pipe = _pipe()
    assert pipe.try_push(Priority.DATA, False, *_split(big), 1)
    first = pipe.pull(time.time_ns())
    assert first[1][2] == FrameKind.FRAGMENT and first[2] == 0  # a piece, no whole message yet
    assert pipe.try_push(Priority.REAL_TIME, False, *_split(small), 2)  # arrives while the big one leaves
    frames = [first] + _frames(pipe)
    assert all(len(f[1]) <= BATCH for f in frames)
    # the real-time message leaves right after the piece being sent, not after the whole message
    assert frames[1][0] == Priority.REAL_TIME and frames[1][1][2] == FrameKind.DATA
    assert sum(f[2] for f in frames) == 2 and pipe.tx.messages[Priority.DATA] == 1
    pieces = [f for f in frames if f[1][2] == FrameKind.FRAGMENT]
    assert len(pieces) == -(-len(big) // (BATCH - FRAME_HEADER_SIZE - FRAGMENT_HEADER_SIZE))
    pairs, consumed = codec.find_payload_headers(b"".join(bytes(f[1]) for f in frames))
    assert consumed == sum(len(f[1]) for f in frames)
    got = {hdr.flow_id: (msg.priority, msg.payload) for msg, hdr in pairs}
    assert got[7] == (Priority.DATA, make_payload(7, 1, 123, 50_000))
    assert got[8] == (Priority.REAL_TIME, make_payload(8, 1, 456, 100))


def test_fragmentation_off_sends_one_oversize_data_frame():
    big = encode_message(KEY, make_payload(7, 1, 123, 50_000))
    pipe = _pipe(fragmentation=False)
    assert pipe.try_push(Priority.DATA, False, *_split(big), 1)
    frames = _frames(pipe)
    assert len(frames) == 1 and frames[0][1][2] == FrameKind.DATA and len(frames[0][1]) == len(big) + 8


def test_pieces_are_accounted_as_they_leave_and_a_closed_pipeline_gives_back_the_rest():
    ledger = Ledger(LimitsConfig(total_bytes=10**9))
    pipe = _pipe(ledger=ledger)
    src = ledger.open("pub", "client", time.time_ns())
    big = encode_message(KEY, make_payload(7, 1, 123, 20_000))
    assert pipe.try_push(Priority.DATA, False, *_split(big), 1, src)
    assert pipe.account.queued_to == len(big) == src.queued_from == ledger.total
    _, frame, n = pipe.pull(time.time_ns())
    piece = len(frame) - FRAME_HEADER_SIZE - FRAGMENT_HEADER_SIZE
    assert n == 0 and pipe.account.queued_to == len(big) - piece
    assert src.queued_from == len(big)  # the sender is charged until its message has left
    assert pipe.close() == 1  # the message in flight is lost, and said so
    assert pipe.account.queued_to == 0 and src.queued_from == 0 and ledger.total == 0


def test_a_message_over_the_endpoint_limit_is_taken_by_an_empty_queue_only():
    ledger = Ledger(LimitsConfig(total_bytes=10**9))
    pipe = _pipe(ledger=ledger)
    pipe.account.limit_to = 10_000
    big = encode_message(KEY, make_payload(7, 1, 123, 30_000))
    assert pipe.try_push(Priority.DATA, False, *_split(big), 1)  # larger than the limit, but alone
    assert not pipe.try_push(Priority.DATA, False, *_split(encode_message(KEY, b"x" * 100)), 2)
    _frames(pipe)
    assert pipe.account.queued_to == 0


def test_reassembly_refuses_what_is_out_of_order_overruns_or_is_too_large():
    msg = encode_message(KEY, b"p" * 1000)
    r = Reassembly(max_message=5000)
    assert r.feed(5, _fragment_body(len(msg), 0, msg[:400])) is None
    assert r.pending() == (1, 400)
    with pytest.raises(CodecError, match="does not follow"):
        r.feed(5, _fragment_body(len(msg), 500, msg[500:600]))  # a gap
    r = Reassembly(max_message=5000)
    r.feed(5, _fragment_body(len(msg), 0, msg[:400]))
    with pytest.raises(CodecError, match="began before"):
        r.feed(5, _fragment_body(len(msg), 0, msg[:400]))
    assert r.feed(3, _fragment_body(len(msg), 0, msg[:400])) is None  # another priority is another stream
    with pytest.raises(CodecError, match="overruns"):
        r.feed(3, _fragment_body(len(msg), 400, msg[400:] + b"extra"))
    with pytest.raises(CodecError, match="exceeds the maximum"):
        Reassembly(max_message=5000).feed(5, _fragment_body(6000, 0, b"x" * 100))
    with pytest.raises(CodecError, match="not fragmented"):
        Reassembly().feed(5, _fragment_body(len(msg), 0, msg))
    r = Reassembly()
    r.feed(5, _fragment_body(len(msg), 0, msg[:400]))
    assert r.feed(5, _fragment_body(len(msg), 400, msg[400:])) == msg and r.pending() == (0, 0)
    assert r.discard() == (0, 0)


def _fragment_body(total: int, offset: int, piece: bytes) -> bytes:
    return encode_fragment(5, total, offset, piece)[FRAME_HEADER_SIZE:]


# ------------------------------------------------------------------ real routers and clients

async def _pair(**settings) -> Dict[str, RouterNode]:
    """Routers a - b on loopback; a client port on each; the a->b link paced at ``capacity_bps``."""
    ports = {n: free_port() for n in "ab"}
    cports = {n: free_port() for n in "ab"}
    capacity = settings.pop("capacity_bps", None)
    nodes = {}
    for n, m in (("a", "b"), ("b", "a")):
        cfg = config_from_dict(dict({
            "node": n, "router_listen": [f"127.0.0.1:{ports[n]}"], "client_listen": [f"127.0.0.1:{cports[n]}"],
            "lease_ms": 3000, "route_debounce_ms": 5, "congestion_aware": False,
            "neighbours": [{"name": m, "address": "127.0.0.1", "port": ports[m],
                            **({"capacity_bps": capacity} if capacity and n == "a" else {})}]}, **settings))
        nodes[n] = RouterNode(cfg, ListEvents(n))
    for node in nodes.values():
        await node.start()
    await until(lambda: all(len(nd.routers) == 1 for nd in nodes.values()))
    return nodes


def _cport(node: RouterNode) -> int:
    return node.ready_addresses["client"][0].port


async def _close(nodes: Dict[str, RouterNode], *sessions) -> None:
    """Close the sessions that were opened, then stop the routers."""
    for s in sessions:
        if s is not None:
            await s.close()
    for node in nodes.values():
        await node.stop()


def _whole(payloads, size: int) -> bool:
    """Every payload is the traffic payload of ``size`` bytes its header describes."""
    return all(len(p) == size and p == make_payload(int.from_bytes(p[4:8], "big"), int.from_bytes(p[8:16], "big"),
                                                    int.from_bytes(p[16:24], "big"), size) for p in payloads)


class Latencies:
    def __init__(self) -> None:
        self.ms: Dict[int, List[float]] = {}
        self.payloads: Dict[int, List[bytes]] = {}

    def __call__(self, sample: Sample) -> None:
        hdr = unpack_payload_header(sample.payload)
        self.ms.setdefault(hdr.flow_id, []).append((sample.recv_ns - hdr.send_ns) / 1e6)
        self.payloads.setdefault(hdr.flow_id, []).append(sample.payload)


async def _until_routed(nodes, sub_session) -> None:
    await until(lambda: any(st.subs for st in nodes["b"].clients.values()))
    await until(lambda: KEY in str(nodes["a"].lsdb.all()), timeout=5)


async def _run_hol(fragmentation: bool) -> Latencies:
    """1 MiB messages at data priority every 0.5 s beside 200 B real-time messages every 10 ms,
    over an a->b link paced at 20 Mbit/s (a 1 MiB frame holds it 0.42 s); no streaming links."""
    nodes = await _pair(capacity_bps=20_000_000, batch_size_bytes=16384, fragmentation=fragmentation,
                        streaming_links=False)
    sub, pub = None, None
    try:
        sub = await connect("127.0.0.1", _cport(nodes["b"]), name="sub")
        got = Latencies()
        await sub.declare_subscriber(KEY, callback=got)
        await _until_routed(nodes, sub)
        pub = await connect("127.0.0.1", _cport(nodes["a"]), name="pub")
        big = pub.declare_publisher(KEY, priority=Priority.DATA, congestion_control=CongestionControl.BLOCK)
        rt = pub.declare_publisher(KEY, priority=Priority.REAL_TIME, congestion_control=CongestionControl.BLOCK)
        await rt.put(make_payload(2, 0, time.time_ns(), 200))
        await until(lambda: len(got.ms.get(2, [])) == 1)
        start = time.monotonic()
        seq = 0
        while time.monotonic() - start < 2.0:
            if seq % 50 == 0:
                await big.put(make_payload(1, seq, time.time_ns(), 1 << 20))
            await rt.put(make_payload(2, seq + 1, time.time_ns(), 200))
            seq += 1
            await asyncio.sleep(0.01)
        await until(lambda: len(got.ms.get(1, [])) == 4 and len(got.ms.get(2, [])) == seq + 1, timeout=20)
        return got
    finally:
        await _close(nodes, pub, sub)


def test_real_time_messages_pass_between_the_pieces_of_large_ones_and_do_not_with_fragmentation_off():
    on = asyncio.run(_run_hol(True))
    assert _whole(on.payloads[1], 1 << 20)  # every large message whole
    off = asyncio.run(_run_hol(False))
    worst_on, worst_off = max(on.ms[2]), max(off.ms[2])
    print(f"real-time latency max: fragmentation on {worst_on:.1f} ms, off {worst_off:.1f} ms")
    # on: a real-time message waits at most for a piece (16 KiB at 20 Mbit/s: 6.6 ms) and the
    # socket buffers; off: for a whole 1 MiB frame (420 ms at 20 Mbit/s)
    assert worst_off > 300
    assert worst_on < 100


def test_a_connection_lost_mid_message_delivers_nothing_of_it_and_says_so():
    async def go():
        nodes = await _pair()
        sub = pub = raw = None
        try:
            sub = await connect("127.0.0.1", _cport(nodes["b"]), name="sub")
            got = Latencies()
            await sub.declare_subscriber(KEY, callback=got)
            await _until_routed(nodes, sub)
            msg = encode_message(KEY, make_payload(1, 1, time.time_ns(), 100_000))
            raw = socket.create_connection(("127.0.0.1", _cport(nodes["a"])))
            raw.sendall(encode_json_frame(FrameKind.HELLO, {"role": "client", "name": "cut"})
                        + encode_fragment(5, len(msg), 0, msg[:30_000])
                        + encode_fragment(5, len(msg), 30_000, msg[30_000:60_000]))
            await until(lambda: any(a.name.startswith("cut@") for a in nodes["a"].ledger.accounts) or
                        any(c.peer_name == "cut" for c in [st.conn for st in nodes["a"].clients.values()]))
            await asyncio.sleep(0.2)
            raw.close()  # the rest never comes
            await until(lambda: any(e["event"] == "client_disconnected" for e in nodes["a"].events.records))
            ev = next(e for e in nodes["a"].events.records if e["event"] == "client_disconnected")
            assert "1 fragmented message(s) lost after 60000 bytes received" in ev["reason"], ev
            # the router is fine: a whole one from a proper client still gets through
            pub = await connect("127.0.0.1", _cport(nodes["a"]), name="pub")
            await pub.declare_publisher(KEY).put(make_payload(1, 2, time.time_ns(), 100_000))
            await until(lambda: len(got.payloads.get(1, [])) == 1)
            assert int.from_bytes(got.payloads[1][0][8:16], "big") == 2  # not the cut one
        finally:
            if raw is not None:
                raw.close()
            await _close(nodes, pub, sub)
    asyncio.run(go())
