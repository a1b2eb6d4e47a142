from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router import codec
from router.codec import CodecError, CongestionControl, FrameKind, Priority


def test_message_roundtrip_through_a_data_frame():
    m1 = codec.encode_message("a/b", b"\x00payload", Priority.REAL_TIME, CongestionControl.BLOCK, express=True,
                              ttl=7, origin=42)
    m2 = codec.encode_message("c", b"", Priority.BACKGROUND)
    frame = codec.encode_data_frame([m1, m2], priority=1)
    frames, consumed = codec.decode_frames(frame)
    assert consumed == len(frame)
    assert [f.kind for f in frames] == [FrameKind.DATA]
    msgs = codec.decode_messages(frames[0].body)
    assert msgs[0] == codec.Message(1, CongestionControl.BLOCK, True, 7, 42, "a/b", b"\x00payload")
    assert msgs[1] == codec.Message(7, CongestionControl.DROP, False, codec.DEFAULT_TTL, 0, "c", b"")


def test_decode_frames_leaves_a_partial_frame_unconsumed():
    stream = codec.encode_json_frame(FrameKind.HELLO, {"role": "client", "name": "x"}) + codec.encode_frame(
        FrameKind.KEEPALIVE)
    extra = codec.encode_frame(FrameKind.DATA, codec.encode_message("k", b"abc"), flags=5)
    buf = stream + extra[:-2]
    frames, consumed = codec.decode_frames(buf)
    assert consumed == len(stream)
    assert [f.kind for f in frames] == [FrameKind.HELLO, FrameKind.KEEPALIVE]
    assert frames[0].json() == {"role": "client", "name": "x"}
    frames2, consumed2 = codec.decode_frames(buf[consumed:] + extra[-2:])
    assert consumed2 == len(extra) and frames2[0].kind == FrameKind.DATA


@pytest.mark.parametrize("bad, reason", [
    (b"XX\x03\x00\x00\x00\x00\x00", "magic"),
    (b"TB\x63\x00\x00\x00\x00\x00", "unknown frame kind"),
    (b"TB\x03\x09\x00\x00\x00\x00", "priority"),
    (b"TB\x03\x00\xff\xff\xff\xff", "exceeds"),
])
def test_malformed_frame_headers_are_rejected_with_a_reason(bad, reason):
    with pytest.raises(CodecError, match=reason):
        codec.decode_frames(bad)


def test_malformed_message_bodies_are_rejected():
    good = codec.encode_message("k", b"abc")
    with pytest.raises(CodecError, match="claims"):
        codec.decode_messages(good[:-1])
    with pytest.raises(CodecError, match="truncated"):
        codec.decode_messages(good + b"\x00\x01")
    with pytest.raises(CodecError, match="flag"):
        codec.decode_messages(b"\xff" + good[1:])
    with pytest.raises(CodecError, match="key length"):
        codec.decode_messages(codec.MESSAGE_HEADER.pack(5, 1, 0, 0, 0))
    with pytest.raises(CodecError, match="UTF-8"):
        codec.decode_messages(codec.MESSAGE_HEADER.pack(5, 1, 0, 1, 0) + b"\xff")


def test_json_body_errors():
    with pytest.raises(CodecError, match="JSON"):
        codec.Frame(FrameKind.HELLO, 0, b"{not json").json()
    with pytest.raises(CodecError, match="object"):
        codec.Frame(FrameKind.HELLO, 0, b"[1]").json()


def test_payload_header_roundtrip_and_detection():
    p = codec.make_payload(flow_id=9, seq=2**40 + 3, send_ns=1_700_000_000_123_456_789, size=64)
    assert len(p) == 64
    h = codec.unpack_payload_header(p)
    assert h == codec.PayloadHeader(9, 2**40 + 3, 1_700_000_000_123_456_789)
    assert codec.unpack_payload_header(b"hello world, not a traffic payload") is None
    assert codec.unpack_payload_header(p[:10]) is None
    with pytest.raises(CodecError):
        codec.make_payload(1, 1, 1, size=10)


def test_find_payload_headers_in_a_stream():
    msgs = [codec.encode_message("t/x", codec.make_payload(1, i, 1000 + i, 32), Priority.DATA) for i in range(3)]
    stream = codec.encode_frame(FrameKind.KEEPALIVE) + codec.encode_data_frame(msgs, 5)
    pairs, consumed = codec.find_payload_headers(stream + b"TB")
    assert consumed == len(stream)
    assert [h.seq for _, h in pairs] == [0, 1, 2]
    assert all(m.key == "t/x" for m, _ in pairs)


def test_router_id_is_stable_and_nonzero():
    assert codec.router_id("r1") == codec.router_id("r1") != 0
    assert codec.router_id("r1") != codec.router_id("r2")


# ------------------------------------------------------------------ fuzzing

@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_decode_frames_raises_only_codec_errors(data):
    try:
        frames, consumed = codec.decode_frames(data)
    except CodecError:
        return
    assert 0 <= consumed <= len(data)
    for f in frames:
        if f.kind == FrameKind.DATA:
            try:
                codec.decode_messages(f.body)
            except CodecError:
                pass
        elif f.kind != FrameKind.KEEPALIVE:
            try:
                f.json()
            except CodecError:
                pass


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_decode_messages_raises_only_codec_errors(body):
    try:
        codec.decode_messages(body)
    except CodecError:
        pass


_keys = st.text(alphabet="abcz/*", min_size=1, max_size=20)
_msgs = st.tuples(_keys, st.binary(max_size=80), st.integers(0, 7), st.sampled_from([0, 1]), st.booleans(),
                  st.integers(0, 255), st.integers(0, 2**32 - 1))


@settings(max_examples=200, deadline=None)
@given(st.lists(_msgs, min_size=1, max_size=10), st.integers(0, 7), st.integers(0, 50))
def test_fuzz_roundtrip_any_messages_any_split(msgs, prio, split):
    encoded = [codec.encode_message(k, p, pr, cc, ex, ttl, o) for k, p, pr, cc, ex, ttl, o in msgs]
    stream = codec.encode_data_frame(encoded, prio) * 2
    cut = min(split, len(stream))
    frames1, c1 = codec.decode_frames(stream[:cut])
    frames2, c2 = codec.decode_frames(stream[c1:])
    assert c1 + c2 == len(stream)
    frames = frames1 + frames2
    assert len(frames) == 2
    decoded = codec.decode_messages(frames[0].body)
    assert [(m.key, m.payload, m.priority, int(m.congestion_control), m.express, m.ttl, m.origin) for m in decoded] == [
        (k, p, pr, cc, ex, ttl, o) for k, p, pr, cc, ex, ttl, o in msgs]


@settings(max_examples=200, deadline=None)
@given(st.lists(_msgs, min_size=1, max_size=5), st.integers(0, 200), st.integers(0, 255))
def test_fuzz_corrupted_byte_never_crashes(msgs, pos, value):
    encoded = [codec.encode_message(k, p, pr, cc, ex, ttl, o) for k, p, pr, cc, ex, ttl, o in msgs]
    buf = bytearray(codec.encode_data_frame(encoded, 3))
    buf[pos % len(buf)] = value
    try:
        frames, _ = codec.decode_frames(bytes(buf))
        for f in frames:
            codec.decode_messages(f.body)
    except CodecError:
        pass


def test_same_header_run_counts_the_messages_that_differ_in_their_payloads_only():
    """Against its definition, one message at a time, on runs short and long, cut anywhere."""
    import random

    from router.codec import same_header_run

    def one_by_one(body, offset, key_end, size, end):
        prefix, n = body[offset:key_end], 1
        while offset + (n + 1) * size <= end and body.startswith(prefix, offset + n * size):
            n += 1
        return n

    rng = random.Random(7)
    for _ in range(400):
        msgs = []
        change = rng.choice([0.3, 0.05, 0.01])  # how often a message's header or key differs from the last's
        key, size, prio, ttl = "a/b", 5, 5, 32
        for _ in range(rng.choice([1, 3, 40, 300, 1200])):  # 1200: past its third window
            if rng.random() < change:
                key, size, prio, ttl = rng.choice([(key[:2] + rng.choice("bc"), size, prio, ttl),
                                                   (key, rng.choice([5, 6]), prio, ttl),
                                                   (key, size, rng.choice([5, 6]), ttl),
                                                   (key, size, prio, rng.choice([32, 9]))])
            payload = bytes(rng.randrange(256) for _ in range(size))
            msgs.append(codec.encode_message(key, payload, prio, ttl=ttl))
        body = b"".join(msgs)
        end = rng.randint(1, len(body)) if rng.random() < 0.3 else len(body)
        offset = 0
        for m in msgs:
            if offset + len(m) > end:
                break
            key_end = offset + codec.MESSAGE_HEADER_SIZE + int.from_bytes(m[6:8], "big")
            assert same_header_run(body, offset, key_end, len(m), end) == one_by_one(body, offset, key_end, len(m), end)
            offset += len(m)
