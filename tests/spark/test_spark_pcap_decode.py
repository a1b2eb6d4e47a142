"""The pcap decoder on hand-made captures whose right answers are known (no Spark needed)."""
from __future__ import annotations

import struct

import pytest

from router.codec import FrameKind, encode_frame, encode_json_frame, encode_message, make_payload
from spark.pcap import decode_pcap
from spark.testing import PcapWriter

A, B = "10.10.0.1", "10.10.0.2"
T = 1_800_000_000_000_000_000
MS = 1_000_000


def data_frame(flow: int, seq: int, size: int = 100, priority: int = 5, send_ns: int = 0) -> bytes:
    msg = encode_message("demo/x", make_payload(flow, seq, send_ns or T + seq, size), priority=priority)
    return encode_frame(FrameKind.DATA, msg, flags=priority)


def batch_frame(msgs, priority: int = 5) -> bytes:
    body = b"".join(encode_message("demo/x", make_payload(f, s, T + s, size), priority=priority)
                    for f, s, size in msgs)
    return encode_frame(FrameKind.DATA, body, flags=priority)


def stream(frames) -> bytes:
    return encode_json_frame(FrameKind.HELLO, {"role": "router", "name": "r1"}) + b"".join(frames)


def segments(data: bytes, size: int):
    return [(off, data[off:off + size]) for off in range(0, len(data), size)]


def capture(segs, isn: int = 1000, syn: bool = True, snaplen: int = 65535, order=None, times=None) -> bytes:
    """Packets A->B carrying ``segs`` [(offset, bytes)]; packet i at T + i ms unless ``times`` says otherwise."""
    w = PcapWriter(snaplen)
    if syn:
        w.tcp(T - MS, A, 40000, B, 7447, isn - 1, flags=0x02)
    order = order if order is not None else range(len(segs))
    for i, k in enumerate(order):
        off, data = segs[k]
        w.tcp(times[i] if times else T + i * MS, A, 40000, B, 7447, isn + off, data)
    return w.to_bytes()


def observed(result):
    return [(flow, seq) for _s, _ts, flow, seq, _send, _p, _l in result.observations]


def test_in_order_messages_with_stream_and_priority():
    frames = [data_frame(1, s, priority=1 if s % 2 else 5) for s in range(5)]
    r = decode_pcap(capture(segments(stream(frames), 1448)))
    assert r.stats.error is None
    assert observed(r) == [(1, s) for s in range(5)]
    assert [o[5] for o in r.observations] == [5, 1, 5, 1, 5]
    assert r.streams == [(A, 40000, B, 7447)]
    assert [o[4] for o in r.observations] == [T + s for s in range(5)]
    assert r.stats.messages == 5 and r.stats.codec_errors == 0


def test_message_spanning_segments_is_timed_by_the_segment_that_completes_it():
    data = stream([data_frame(1, 0, size=5000)])
    segs = segments(data, 1000)  # 6 segments
    r = decode_pcap(capture(segs))
    assert observed(r) == [(1, 0)]
    assert r.observations[0][1] == T + (len(segs) - 1) * MS


def test_batch_of_messages_each_timed_when_its_last_byte_arrives():
    data = stream([batch_frame([(1, 0, 600), (1, 1, 600), (1, 2, 600)])])
    hello = len(stream([]))
    segs = [(0, data[:hello + 8 + 650]), (hello + 8 + 650, data[hello + 8 + 650:])]
    r = decode_pcap(capture(segs))
    assert observed(r) == [(1, 0), (1, 1), (1, 2)]
    assert [o[1] for o in r.observations] == [T, T + MS, T + MS]


def test_retransmitted_segment_is_not_a_second_observation():
    data = stream([data_frame(1, s) for s in range(6)])
    segs = segments(data, 150)
    order = [0, 1, 2, 2, 3, 1, 4] + list(range(5, len(segs)))  # segment 2 twice, segment 1 again later
    r = decode_pcap(capture(segs, order=order))
    assert observed(r) == [(1, s) for s in range(6)]
    assert r.stats.retransmitted_segments == 2


def test_partial_overlap_retransmission_keeps_only_new_bytes():
    data = stream([data_frame(1, s) for s in range(4)])
    segs = segments(data, 100)
    # a retransmission that repeats the end of segment 1 and carries segment 2's bytes
    merged = [segs[0], segs[1], (segs[1][0] + 50, data[segs[1][0] + 50:segs[2][0] + 100])] + segs[3:]
    r = decode_pcap(capture(merged))
    assert observed(r) == [(1, s) for s in range(4)]
    assert r.stats.retransmitted_segments == 1


def test_reordered_segments_wait_for_the_gap_and_take_the_filling_packets_time():
    data = stream([data_frame(1, s, size=100) for s in range(6)])
    segs = segments(data, 136)  # one message per segment after the hello
    n = len(segs)
    order = [0, 1, 3, 2] + list(range(4, n))
    r = decode_pcap(capture(segs, order=order))
    assert observed(r) == [(1, s) for s in range(6)]
    assert r.stats.out_of_order_segments == 1
    # what segment 3 completed is only complete once segment 2 arrived (packet index 3)
    ts = {seq: ts for _s, ts, _f, seq, *_ in r.observations}
    assert max(ts.values()) == T + (n - 1) * MS
    assert r.stats.codec_errors == 0


def test_capture_started_mid_stream_resynchronises_on_frame_magic():
    frames = [data_frame(1, s, size=300) for s in range(8)]
    data = stream(frames)
    start = len(stream(frames[:2])) + 17  # inside the third frame
    segs = [(off - start, d) for off, d in segments(data[start:], 200)]
    r = decode_pcap(capture(segs, syn=False))
    assert observed(r) == [(1, s) for s in range(3, 8)]
    assert r.stats.resyncs >= 1


def test_snap_length_hides_what_it_cuts_and_never_invents_messages():
    # frame 0: a big message (its traffic header visible, the rest cut); then small frames, one per segment
    frames = [data_frame(1, 0, size=3000)] + [data_frame(1, s, size=60) for s in range(1, 5)]
    data = stream(frames)
    first = len(stream(frames[:1]))
    segs = segments(data[:first], 1448)
    segs += [(first + off, d) for off, d in segments(data[first:], len(frames[1]))]
    r = decode_pcap(capture(segs, snaplen=14 + 20 + 20 + 90))
    assert observed(r) == [(1, s) for s in range(5)]
    assert r.stats.snap_truncated_bytes > 0
    # one segment with a batch of three: the first message is visible, the second's header is past
    # the snap length, so the rest of that frame is skipped (counted), never guessed
    batch = stream([batch_frame([(2, 0, 200), (2, 1, 200), (2, 2, 200)]), data_frame(3, 0)])
    cut = len(stream([])) + 8 + 12 + len("demo/x") + 24  # exactly the first traffic header
    r2 = decode_pcap(capture([(0, batch[:len(batch) - len(data_frame(3, 0))]),
                              (len(batch) - len(data_frame(3, 0)), data_frame(3, 0))], snaplen=14 + 20 + 20 + cut))
    assert observed(r2) == [(2, 0), (3, 0)]
    assert r2.stats.frame_parts_skipped == 1
    assert r2.stats.codec_errors == 0
    # the same with the first traffic header one byte short of visible: hidden
    r3 = decode_pcap(capture([(0, batch)], snaplen=14 + 20 + 20 + cut - 1))
    assert observed(r3) == []
    assert r3.stats.messages_hidden == 1


def test_missing_segment_becomes_a_hole_and_later_frames_are_recovered():
    frames = [data_frame(1, s, size=100) for s in range(10)]
    data = stream(frames)
    segs = segments(data, 136)
    del segs[4]  # never captured (kernel drop): the message in it is lost from this capture
    r = decode_pcap(capture(segs))
    got = observed(r)
    assert (1, 9) in got and len(got) >= 7
    assert r.stats.gap_bytes == 136
    assert len(set(got)) == len(got)


def test_truncated_file_keeps_the_complete_packets():
    data = stream([data_frame(1, s, size=100) for s in range(5)])
    pcap = capture(segments(data, 136))
    r = decode_pcap(pcap[:-50])
    assert r.stats.truncated_file
    assert r.stats.error is None
    assert observed(r) == [(1, s) for s in range(4)]


@pytest.mark.parametrize("blob, words", [
    (b"", "empty"),
    (b"\x00" * 10, "only 10 bytes"),
    (b"not a pcap at all, just text....", "not a pcap"),
    (struct.pack("<I", 0x0A0D0D0A) + bytes(40), "pcapng"),
])
def test_damaged_files_are_reported_not_raised(blob, words):
    r = decode_pcap(blob)
    assert r.stats.error and words in r.stats.error
    assert r.observations == []


def test_both_directions_are_separate_streams():
    w = PcapWriter()
    fa = stream([data_frame(1, 0)])
    fb = stream([data_frame(2, 0)])
    w.tcp(T, A, 40000, B, 7447, 1, fa)
    w.tcp(T + MS, B, 7447, A, 40000, 90000, fb)
    r = decode_pcap(w.to_bytes())
    assert sorted(observed(r)) == [(1, 0), (2, 0)]
    assert len(r.streams) == 2


def test_non_traffic_payloads_and_control_frames_are_skipped():
    other = encode_frame(FrameKind.DATA, encode_message("demo/x", b"plain application bytes, no header"), flags=5)
    data = stream([encode_frame(FrameKind.KEEPALIVE), other, data_frame(1, 7)])
    r = decode_pcap(capture(segments(data, 1448)))
    assert observed(r) == [(1, 7)]
    assert r.stats.messages_other == 1


def test_corrupted_captures_never_break_the_decoder():
    """Random byte flips and cuts: every outcome is a result or a reported PcapError, never an internal
    failure (decode_pcap turns those into "decoder failed: ..." so a run is still analysed)."""
    import random

    frames = [data_frame(1, s, size=150 + 37 * (s % 5)) for s in range(40)]
    segs = segments(stream(frames), 300)
    base = bytearray(capture(segs, order=[0, 2, 1] + list(range(3, len(segs)))))
    assert len(observed(decode_pcap(bytes(base)))) == 40
    rng = random.Random(7)
    for _ in range(300):
        blob = bytearray(base)
        for _k in range(rng.randint(1, 12)):
            blob[rng.randrange(24, len(blob))] = rng.randrange(256)
        if rng.random() < 0.3:
            blob = blob[: rng.randrange(24, len(blob))]
        r = decode_pcap(bytes(blob))
        assert r.stats.error is None or not r.stats.error.startswith("decoder failed"), r.stats.error


def _pipeline_frames(fragmentation: bool = True) -> list:
    """What a router sends: a 20 kB message at data priority cut into pieces by a real
    transmission pipeline (4 KiB batches), and two real-time messages pushed while it leaves."""
    import time as _time

    from router.config import PipelineConfig
    from router.pipeline import EMPTY, TransmissionPipeline
    pipe = TransmissionPipeline(PipelineConfig(batch_size_bytes=4096, batch_threshold_bytes=4096,
                                               fragmentation=fragmentation))
    big = encode_message("demo/x", make_payload(1, 0, T, 20_000), priority=5)
    pipe.try_push(5, False, big[:6], big[6:], 1)
    later = _time.time_ns() + 10**10
    pulled = [pipe.pull(later)]
    for seq in (1, 2):
        rt = encode_message("demo/x", make_payload(2, seq, T + seq, 100), priority=1)
        pipe.try_push(1, False, rt[:6], rt[6:], 2)
        pulled += [pipe.pull(later), pipe.pull(later)]
    while (item := pipe.pull(later)) is not EMPTY:
        pulled.append(item)
    return [bytes(item[1]) for item in pulled if isinstance(item, tuple)]


def test_a_fragmented_message_is_observed_when_its_last_piece_arrives_with_its_first_pieces_header():
    frames = _pipeline_frames()
    assert sum(f[2] == FrameKind.FRAGMENT for f in frames) == 5 and max(len(f) for f in frames) <= 4096
    data = stream(frames)
    segs = segments(data, 1448)
    r = decode_pcap(capture(segs))
    assert r.stats.error is None and r.stats.codec_errors == 0 and r.stats.frame_parts_skipped == 0
    # the real-time messages passed between the pieces; the large one is seen when complete
    assert observed(r) == [(2, 1), (2, 2), (1, 0)]
    big = r.observations[2]
    assert big[1] == T + (len(segs) - 1) * MS and big[4] == T and big[5] == 5 and big[6] == 20_000
    # the same message unfragmented is the same observation
    r_off = decode_pcap(capture(segments(stream(_pipeline_frames(fragmentation=False)), 1448)))
    assert sorted(observed(r_off)) == sorted(observed(r))


def test_pieces_whose_start_was_not_captured_are_skipped_and_counted():
    frames = _pipeline_frames()
    data = stream(frames)
    first_piece_at = len(stream([]))
    segs = segments(data, 1448)
    # the segment carrying the first piece's headers is lost: the large message cannot be observed
    lost = [i for i, (off, d) in enumerate(segs) if off <= first_piece_at < off + len(d)]
    del segs[lost[0]]
    r = decode_pcap(capture(segs))
    assert (1, 0) not in observed(r)
    assert r.stats.frame_parts_skipped >= 1 and r.stats.gap_bytes == 1448
    assert (2, 2) in observed(r)  # what followed is recovered


def test_what_a_waiting_segment_completes_is_timed_by_the_packet_that_filled_the_gap():
    data = stream([data_frame(1, s, size=100) for s in range(6)])
    segs = segments(data, 136)
    in_order = {seq: ts for _s, ts, _f, seq, *_ in decode_pcap(capture(segs)).observations}
    r = decode_pcap(capture(segs, order=[0, 1, 3, 2] + list(range(4, len(segs)))))
    got = {seq: ts for _s, ts, _f, seq, *_ in r.observations}
    # segment 3 (packet 2) waits for segment 2 (packet 3): nothing it completes is complete before packet 3
    assert got == {seq: T + 3 * MS if t in (T + 2 * MS, T + 3 * MS) else t for seq, t in in_order.items()}
    assert T + 2 * MS in in_order.values()


@pytest.mark.parametrize("trim_at", [0, 100, 5000])
def test_trimming_the_stream_buffer_never_shifts_it(monkeypatch, trim_at):
    """The walker skips a control frame (here a link-state frame) by its length, so with its body still
    in flight its position is past the bytes received; the buffer of walked bytes must then not be cut
    there. Once it was (a real diamond run: r2->r4 when the buffer passed 1 MiB just then), every later
    byte of that stream sat 55 bytes off: 1568 of 2122 messages timed one or more packets late (3-23 ms)
    and one codec error. Cutting the buffer at every chance gives what never cutting gives."""
    from spark import pcap

    lsp = encode_json_frame(FrameKind.LINKSTATE, {"origin": "r2", "seq": 7, "links": ["x" * 40] * 20})
    frames = []
    for s in range(60):
        frames.append(data_frame(1, s, size=300 + 37 * (s % 9), priority=1 if s % 3 else 5))
        if s % 4 == 0:
            frames.append(lsp)
        if s % 7 == 0:
            frames.append(batch_frame([(2, 3 * s + k, 120) for k in range(3)]))
    data = stream(frames)
    for size in (100, 536, 1448):
        cap = capture(segments(data, size))
        monkeypatch.setattr(pcap, "_TRIM_AT", 1 << 40)
        whole = decode_pcap(cap)
        monkeypatch.setattr(pcap, "_TRIM_AT", trim_at)
        trimmed = decode_pcap(cap)
        assert whole.stats.codec_errors == 0 and len(whole.observations) == 60 + 9 * 3
        assert trimmed.observations == whole.observations, size
        assert trimmed.stats.codec_errors == 0


#: what the packet-by-packet decoder of 5bd07ad (before the record headers were read with numpy) gave for
#: each capture: a digest of its observations, streams, traffic (in order) and every count
BEFORE_NUMPY = {
    "window": {"r1-eth1": "a5320de5a12cdd46", "r1-eth2": "7742e9b67fa2ee9d", "r2-eth1": "8b2d515e49b21efd",
               "r2-eth2": "0e37e06486eb7d84", "r3-eth1": "d4c85a9c35164083", "r3-eth2": "7eb45694c871e169",
               "r4-eth1": "a2bb36eeb730a5db", "r4-eth2": "4c901a87789d9623"},
    "synthetic": {"r1-eth1": "de37d823b87c17dc", "r1-eth2": "86d38067c236099e", "r2-eth1": "cad79bf3037c5226",
                  "r2-eth2": "fda0a2c14835964c", "r3-eth1": "15d5ebf21643781d", "r3-eth2": "5ad95925e46d1707",
                  "r4-eth1": "f3e1b7cf32d21367", "r4-eth2": "268fc16418418738"},
}


def _digest(result) -> str:
    import hashlib

    everything = (result.observations, result.streams, list(result.traffic.items()),
                  sorted(result.stats.as_dict().items()))
    return hashlib.sha256(repr(everything).encode()).hexdigest()[:16]


def test_the_decoder_gives_what_the_packet_by_packet_decoder_gave(tmp_path):
    """The real window's captures (tests/spark/data/diamond-pcap-real) and the synthetic 60 s diamond's."""
    import gzip
    from pathlib import Path

    from runfolder.layout import LAYOUT
    from spark.testing import diamond_run, write_run

    window = Path(__file__).with_name("data") / "diamond-pcap-real" / "pcap"
    got = {"window": {p.name[:-len(".pcap.gz")]: _digest(decode_pcap(gzip.decompress(p.read_bytes())))
                      for p in sorted(window.glob("*.pcap.gz"))}}
    rd = write_run(diamond_run(), tmp_path)
    got["synthetic"] = {p.name[:-len(".pcap")]: _digest(decode_pcap(p.read_bytes()))
                        for p in sorted((rd / LAYOUT.pcap_dir).glob("*.pcap"))}
    assert got == BEFORE_NUMPY
