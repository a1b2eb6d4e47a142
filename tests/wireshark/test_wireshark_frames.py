"""The dissector (testbed/wireshark/tb.lua) in tshark on captures made from the codec (router/codec.py): every
frame kind decoded with its fields and no malformed mark, fragments reassembled, malformed frames flagged with the
codec's own reason, a capture that starts mid-stream resynchronised on the frame magic as the analysis's decoder
(spark/pcap.py) does, and the display filters of docs/wireshark.md."""
from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from router.codec import (
    CodecError, FrameKind, Reassembly, decode_frames, decode_json_body, decode_messages, decode_query_body,
    encode_fragment, encode_frame, encode_json_frame, encode_message, encode_query_frame, make_payload, router_id,
)
from spark.pcap import decode_pcap
from spark.testing import PcapWriter
from tests.wireshark.tshark import decode, needs_tshark, tshark

pytestmark = needs_tshark

A, B = "10.10.0.1", "10.10.0.2"
T = 1_800_000_000_000_000_000
MS = 1_000_000
SEND_NS = T - 5 * MS + 123


def message(flow: int, seq: int, key: str = "demo/example/pub1", size: int = 100, priority: int = 5, **kw) -> bytes:
    return encode_message(key, make_payload(flow, seq, SEND_NS + seq, size), priority=priority, **kw)


def write_capture(path: Path, data: bytes, segment: int = 700, syn: bool = True, port: int = 7447) -> Path:
    """``data`` A -> B in segments of ``segment`` bytes (a frame may span several: TCP reassembly)."""
    w = PcapWriter(65535)
    if syn:
        w.tcp(T - MS, A, 40000, B, port, 999, flags=0x02)
    for i, off in enumerate(range(0, len(data), segment)):
        w.tcp(T + i * MS, A, 40000, B, port, 1000 + off, data[off:off + segment])
    w.write(path)
    return path


def fragments(msg: bytes, priority: int, piece: int) -> bytes:
    return b"".join(encode_fragment(priority, len(msg), off, msg[off:off + piece]) for off in range(0, len(msg), piece))


def every_kind_stream() -> bytes:
    big = message(7, 0, key="demo/big", size=5000, priority=4)
    return b"".join([
        encode_json_frame(FrameKind.HELLO, {"role": "router", "name": "r1", "id": router_id("r1"), "lease_ms": 3000,
                                            "weight": 10}),
        encode_frame(FrameKind.KEEPALIVE),
        encode_frame(FrameKind.DATA, message(3, 1, key="demo/example/realtime", priority=1, congestion_control=1,
                                             origin=router_id("r1"))
                     + message(3, 2, key="demo/example/realtime", priority=1, express=True), flags=1),
        encode_json_frame(FrameKind.DECLARE, {"id": 1, "key": "demo/**"}),
        encode_json_frame(FrameKind.UNDECLARE, {"id": 1}),
        encode_json_frame(FrameKind.LINKSTATE, {"origin": "r1", "seq": 1795265418801597163,
                                                "links": {"r2": 100, "r3": 50}, "subs": ["demo/**"],
                                                "extra": {"data": {"r2": 65535}}}),
        fragments(big, 4, 2000),
        encode_json_frame(FrameKind.STREAM, {"token": "t-1"}),
        encode_json_frame(FrameKind.DECLARE_QUERYABLE, {"id": 2, "key": "svc/lookup"}),
        encode_json_frame(FrameKind.UNDECLARE_QUERYABLE, {"id": 2}),
        encode_query_frame(FrameKind.QUERY, {"id": 5, "key": "svc/lookup", "timeout_ms": 1000,
                                             "consolidation": "first", "priority": 3}, make_payload(9, 0, SEND_NS, 64)),
        encode_query_frame(FrameKind.REPLY, {"id": 5, "key": "svc/lookup", "ts_ns": T, "replier": "r2"},
                           make_payload(9, 1, SEND_NS, 64)),
        encode_frame(FrameKind.DATA, message(1, 0) + message(2, 0, key="demo/example/pub2"), flags=5),
        encode_json_frame(FrameKind.CLOSE, {"reason": "shutting down"}),
    ])


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory):
    folder = tmp_path_factory.mktemp("every-kind")
    (folder / "manifest.json").write_text(json.dumps({"spec": {"routers": ["r1", "r2"]}}))
    pcap = write_capture(folder / "every-kind.pcap", every_kind_stream())
    return pcap, decode(pcap, "-o", f"tb.manifest:{folder / 'manifest.json'}")


def test_every_frame_kind_decodes_without_a_malformed_mark(every_kind):
    _pcap, got = every_kind
    assert got.malformed() == []
    assert set(got.kinds) == {int(k) for k in FrameKind}


def test_data_messages_show_their_fields(every_kind):
    _pcap, got = every_kind
    # the DATA batches' 4 messages and the reassembled one, each with its traffic header
    assert sorted(got.flows().items()) == [(1, 1), (2, 1), (3, 2), (7, 1)]
    assert got.values["tb.priority"] == ["real_time", "real_time", "data_high", "data", "data"]
    assert got.values["tb.express"].count("1") == 1
    assert got.values["tb.congestion_control"][:2] == ["1", "0"]
    assert got.values["tb.origin_name"][0] == "r1"  # a router's wire id by name, from the manifest
    assert got.values["tb.origin"][1] == "0"
    sent = datetime.datetime.fromtimestamp(SEND_NS // 10**9, datetime.timezone.utc)
    assert got.values["tb.send_time"][0].startswith(sent.strftime("%b %d, %Y %H:%M:%S.") + f"{(SEND_NS + 1) % 10**9:09d}")
    assert got.values["tb.send_ns"][0] == str(SEND_NS + 1)


def test_json_bodies_are_fields(every_kind):
    _pcap, got = every_kind
    assert got.values["tb.name"] == ["r1"]
    assert got.values["tb.role"] == ["router"]
    assert got.values["tb.reason"] == ["shutting down"]
    assert got.values["tb.token"] == ["t-1"]
    assert got.values["tb.key"].count("svc/lookup") == 3  # DECLARE_QUERYABLE, QUERY and REPLY: keys as DATA's
    members = got.values["tb.json.member"]
    assert "seq: 1795265418801597163" in members and "r2: 65535" in members and "consolidation: \"first\"" in members


def test_fragments_are_reassembled(every_kind):
    _pcap, got = every_kind
    assert got.values["tb.fragment.offset"] == ["0", "2000", "4000"]
    assert len(got.values["tb.reassembled"]) == 1
    assert 7 in got.flows()


def test_display_filters(every_kind):
    pcap, _got = every_kind
    realtime = tshark(pcap, "-Y", 'tb.priority == "real_time"', "-T", "fields", "-e", "tb.flow")
    assert realtime.split() and all(set(line.split(",")) == {"3"} for line in realtime.split())
    pub1 = tshark(pcap, "-Y", 'tb.key contains "pub1"', "-T", "fields", "-e", "tb.key")
    assert len(pub1.split()) == 1 and "demo/example/pub1" in pub1
    flow3 = tshark(pcap, "-Y", "tb.flow == 3", "-T", "fields", "-e", "tb.priority")
    assert len(flow3.split()) == len(realtime.split()) and set(flow3.replace(",", " ").split()) == {"real_time"}


def test_a_connection_on_another_port_is_found_by_the_magic(tmp_path):
    """Not on the ports of the preference: the heuristic dissector recognises the frame header."""
    pcap = write_capture(tmp_path / "port.pcap", every_kind_stream(), port=19000)
    got = decode(pcap)
    assert set(got.kinds) == {int(k) for k in FrameKind} and got.malformed() == []
    assert decode(pcap, "--disable-heuristic", "tb_tcp").kinds == {}


def codec_reason(stream: bytes) -> str:
    """What the codec says of ``stream`` (frames, then each body as its kind is read)."""
    try:
        frames, _ = decode_frames(stream)
        reassembly = Reassembly()
        for frame in frames:
            if frame.kind == FrameKind.DATA:
                decode_messages(frame.body)
            elif frame.kind == FrameKind.FRAGMENT:
                reassembly.feed(frame.flags, frame.body)
            elif frame.kind in (FrameKind.QUERY, FrameKind.REPLY):
                decode_query_body(frame.kind, frame.body)
            elif frame.kind != FrameKind.KEEPALIVE:
                decode_json_body(frame)
    except CodecError as err:
        return str(err)
    raise AssertionError("the codec found nothing wrong")


HELLO = encode_json_frame(FrameKind.HELLO, {"role": "router", "name": "r1"})
MSG = message(1, 0)
BIG = message(1, 1, size=300)
MALFORMED = {
    "bad magic": HELLO + b"XY" + HELLO[2:],
    "unknown kind": HELLO + b"TB\x63\x00\x00\x00\x00\x00",
    "oversized length": HELLO + b"TB\x02\x00\x01\x00\x00\x01",
    "DATA flags not a priority": HELLO + encode_frame(FrameKind.DATA, MSG, flags=9),
    "truncated message header": HELLO + encode_frame(FrameKind.DATA, MSG + MSG[:5], flags=5),
    "unknown flag bits": HELLO + encode_frame(FrameKind.DATA, bytes([0x45]) + MSG[1:], flags=5),
    "key length 0": HELLO + encode_frame(FrameKind.DATA, MSG[:6] + b"\x00\x00" + MSG[8:], flags=5),
    "message overruns its frame": HELLO + encode_frame(FrameKind.DATA, MSG[:-1], flags=5),
    "key not UTF-8": HELLO + encode_frame(FrameKind.DATA, encode_message("k", b"p").replace(b"k", b"\xff"), flags=5),
    "JSON not an object": HELLO + encode_frame(FrameKind.CLOSE, b"[1]"),
    "JSON not UTF-8": HELLO + encode_frame(FrameKind.CLOSE, b'{"reason": "\xff"}'),
    "JSON invalid": HELLO + encode_frame(FrameKind.LINKSTATE, b'{"origin": '),
    "query without header length": HELLO + encode_frame(FrameKind.QUERY, b"\x00"),
    "query header past the body": HELLO + encode_frame(FrameKind.QUERY, b"\x00\x10{}"),
    "reply header not an object": HELLO + encode_frame(FrameKind.REPLY, b"\x00\x02[]"),
    "fragment without a piece": HELLO + encode_frame(FrameKind.FRAGMENT, b"\x00" * 8, flags=5),
    "fragment out of order": HELLO + fragments(BIG, 5, 100)[:116] + fragments(BIG, 5, 100)[232:],
    "fragment overruns": HELLO + encode_fragment(5, len(BIG), 0, BIG[:200]) + encode_fragment(5, len(BIG), 200, BIG[200:] + b"xx"),
    "first fragment fits one frame": HELLO + encode_fragment(5, 20, 0, b"x" * 20),
    "new fragmented message before the last ended": HELLO + encode_fragment(5, len(BIG), 0, BIG[:100]) * 2,
    "fragmented message too large": HELLO + encode_fragment(5, 64 * 2**20 + 1, 0, b"x" * 100),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_frames_get_the_codecs_reason(case, tmp_path):
    stream = MALFORMED[case]
    reason = codec_reason(stream)
    got = decode(write_capture(tmp_path / "bad.pcap", stream, segment=60))
    messages = [e.get("message", "") for e in got.malformed()]
    if "JSON" in case and "not an object" not in case:
        reason = reason.split(": ", 1)[0] + ": "  # the JSON parser's own words differ from Python's after this
    assert any(m.startswith(reason) for m in messages), (reason, messages)


def test_a_capture_that_starts_mid_stream_resynchronises_on_the_magic(tmp_path):
    """The first 5 000 bytes of the stream were not captured (the capture began mid-frame): the dissector skips
    to the first valid frame header, says so as a note (not a malformed frame), and decodes what follows; it
    decodes the same messages as the analysis's decoder."""
    stream = every_kind_stream() + b"".join(
        encode_frame(FrameKind.DATA, b"".join(message(f, s) for f in (1, 2)), flags=5) for s in range(1, 60))
    w = PcapWriter(65535)
    cut = 5000
    for i, off in enumerate(range(cut, len(stream), 700)):
        w.tcp(T + i * MS, A, 40000, B, 7447, 1000 + off, stream[off:off + 700])
    pcap = tmp_path / "mid.pcap"
    w.write(pcap)
    got = decode(pcap)
    assert got.malformed() == []
    assert any(e.get("message", "").startswith("Capture started mid-stream") for e in got.experts)
    analysis = decode_pcap(pcap.read_bytes())
    assert analysis.stats.resyncs >= 1
    from collections import Counter
    assert got.flows() == Counter(obs[2] for obs in analysis.observations)
    assert got.flows()[1] == 60  # seq 0 of every_kind_stream's last DATA frame, and 59 after it
