"""The traffic-header search (spark.streamsearch) on hand-made captures of a wire format that is not ours:
reassembly (a header split across segments, out-of-order and retransmitted segments, gaps, snap length),
validation against the send log (a false header is rejected and counted, never observed), timing.
No Spark needed."""
from __future__ import annotations

import struct

import pandas as pd
import pytest

from router.codec import PAYLOAD_HEADER_SIZE, make_payload, pack_payload_header
from spark.pcap import decode_pcap
from spark.streamsearch import HEADER_MARK, SentIndex, search_pcap
from spark.testing import PcapWriter

A, B = "10.10.0.1", "10.10.0.2"
T = 1_800_000_000_000_000_000
MS = 1_000_000
SIZE = 200
FLOW = 7


def send_ns(seq: int) -> int:
    return T - 5 * MS + seq * 1000 + 123_456_789  # ns with no zero bytes at the end


def sent_index(seqs=range(20), flow: int = FLOW, size: int = SIZE, others=(3,)) -> SentIndex:
    """A send log of ``flow`` (its seqs, send_ns from ``send_ns``) and flows.json ids ``others`` without one."""
    df = pd.DataFrame({"flow_id": flow, "priority": 2, "seq": list(seqs),
                       "send_ns": [send_ns(s) for s in seqs], "size": size})
    return SentIndex.from_sent(df, [flow, *others])


def foreign_message(seq: int, flow: int = FLOW, size: int = SIZE, ts: int = 0) -> bytes:
    """A message in a made-up wire format (not our frames): id byte, key, LEB128 length, then the payload."""
    payload = make_payload(flow, seq, ts or send_ns(seq), size)
    key = b"demo/key"
    n, length = len(payload), b""
    while True:
        length += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            break
    return b"\x1d" + bytes([len(key)]) + key + length + payload


def batch(messages) -> bytes:
    body = b"".join(messages)
    return struct.pack("<H", len(body)) + body


def stream(batches) -> bytes:
    return b"\x01OPEN-foreign-router\x00" + b"".join(batches)


def segments(data: bytes, size: int):
    return [(off, data[off:off + size]) for off in range(0, len(data), size)]


def capture(segs, isn: int = 1000, syn: bool = True, snaplen: int = 65535, order=None) -> bytes:
    """Packets A->B carrying ``segs`` [(offset, bytes)] in ``order``; the i-th packet at T + i ms."""
    w = PcapWriter(snaplen)
    if syn:
        w.tcp(T - MS, A, 40000, B, 7447, isn - 1, flags=0x02)
    for i, k in enumerate(order if order is not None else range(len(segs))):
        off, data = segs[k]
        w.tcp(T + i * MS, A, 40000, B, 7447, isn + off, data)
    return w.to_bytes()


def seen(result):
    return [(flow, seq) for _s, _ts, flow, seq, _send, _p, _l in result.observations]


def times(result):
    return {seq: ts for _s, ts, _f, seq, *_ in result.observations}


def test_headers_in_a_foreign_wire_are_found_validated_and_described_by_the_send_log():
    data = stream([batch([foreign_message(s) for s in range(3)]), batch([foreign_message(3)])])
    r = search_pcap(capture(segments(data, 1448)), sent_index())
    assert r.stats.error is None and r.stats.method == "header-search"
    assert seen(r) == [(FLOW, s) for s in range(4)]
    # priority from flows.json, payload_len from the send log; send_ns as the header has it
    assert {(o[5], o[6]) for o in r.observations} == {(2, SIZE)}
    assert [o[4] for o in r.observations] == [send_ns(s) for s in range(4)]
    assert r.stats.headers_found == r.stats.headers_validated == r.stats.messages == 4
    assert r.stats.headers_rejected == 0
    assert r.streams == [(A, 40000, B, 7447)]
    # our router's decoder sees nothing in it: not its frames
    assert decode_pcap(capture(segments(data, 1448))).observations == []


def test_header_split_across_two_segments():
    data = stream([batch([foreign_message(0), foreign_message(1)])])
    at = data.index(pack_payload_header(FLOW, 1, send_ns(1))) + 10  # cut inside the second header
    segs = [(0, data[:at]), (at, data[at:])]
    r = search_pcap(capture(segs), sent_index())
    assert seen(r) == [(FLOW, 0), (FLOW, 1)]
    assert times(r) == {0: T, 1: T + MS}
    assert r.stats.headers_found == 2 and r.stats.headers_rejected == 0


def test_a_message_is_timed_by_the_packet_with_its_last_payload_byte_or_by_its_header():
    data = stream([batch([foreign_message(0, size=5000)])])
    segs = segments(data, 1000)  # 6 packets: the header in the first, the payload's end in the last
    r = search_pcap(capture(segs), sent_index(size=5000))
    assert times(r) == {0: T + (len(segs) - 1) * MS}
    h = search_pcap(capture(segs), sent_index(size=5000), timing="header")
    assert times(h) == {0: T}
    # the capture ends before the payload does: no time at which it had crossed, so no observation (as the frame
    # decoder skips a frame it never saw end); validated, and counted as unfinished
    cut = search_pcap(capture(segs[:3]), sent_index(size=5000))
    assert times(cut) == {} and cut.stats.headers_validated == 1 and cut.stats.headers_unfinished == 1


def test_out_of_order_segments_wait_for_the_gap_and_take_the_filling_packets_time():
    data = stream([batch([foreign_message(s)]) for s in range(6)])
    segs = segments(data, 150)
    order = [0, 1, 3, 2] + list(range(4, len(segs)))
    r = search_pcap(capture(segs, order=order), sent_index())
    assert sorted(seen(r)) == [(FLOW, s) for s in range(6)]
    assert r.stats.out_of_order_segments == 1 and r.stats.headers_rejected == 0
    in_order = times(search_pcap(capture(segs), sent_index()))
    # what segments 2 and 3 complete (packets 2 and 3 in order) is complete when segment 2 arrives (packet 3)
    assert times(r) == {seq: T + 3 * MS if t in (T + 2 * MS, T + 3 * MS) else t for seq, t in in_order.items()}
    assert sorted(in_order.values()).count(T + 2 * MS) >= 1


def test_retransmitted_segment_is_counted_once():
    data = stream([batch([foreign_message(s)]) for s in range(6)])
    segs = segments(data, 150)
    order = [0, 1, 2, 2, 3, 1, 4] + list(range(5, len(segs)))  # segment 2 twice, segment 1 again later
    r = search_pcap(capture(segs, order=order), sent_index())
    assert seen(r) == [(FLOW, s) for s in range(6)]
    assert r.stats.retransmitted_segments == 2
    # a retransmission overlapping old and new bytes keeps only the new ones
    merged = [segs[0], segs[1], (segs[1][0] + 50, data[segs[1][0] + 50:segs[2][0] + 150])] + segs[3:]
    r2 = search_pcap(capture(merged), sent_index())
    assert seen(r2) == [(FLOW, s) for s in range(6)]


def test_a_header_that_the_send_log_does_not_confirm_is_rejected_and_counted():
    fake_send = foreign_message(5, ts=send_ns(5) + 1)            # known flow and seq, send_ns off by 1 ns
    fake_seq = foreign_message(999)                              # a seq never sent
    fake_flow = foreign_message(0, flow=42)                      # a flow not in flows.json
    query = foreign_message(0, flow=3)                           # a flow of flows.json without a send log
    data = stream([batch([foreign_message(4), fake_send, fake_seq, fake_flow, query, foreign_message(6)])])
    r = search_pcap(capture(segments(data, 1448)), sent_index())
    assert seen(r) == [(FLOW, 4), (FLOW, 6)]
    st = r.stats
    assert st.headers_found == 6 and st.headers_validated == 2
    assert st.headers_rejected == 3 and st.rejected_not_sent == 2 and st.rejected_unknown_flow == 1
    assert st.headers_no_send_log == 1


def test_a_false_mark_just_before_a_true_header_does_not_hide_it():
    # "TP\x01" and then the first bytes of a real header: the false candidate overlaps the true one
    true = foreign_message(2)
    at = true.index(HEADER_MARK)
    tricky = true[:at] + HEADER_MARK + b"\x00\x00" + true[at:]
    data = stream([batch([tricky])])
    r = search_pcap(capture(segments(data, 1448)), sent_index())
    assert seen(r) == [(FLOW, 2)]
    assert r.stats.headers_rejected == 1  # the false one: counted, not observed


def test_a_gap_never_makes_a_match_even_where_the_missing_bytes_were_zeros():
    # a send_ns whose last bytes are zeros: zero-filling the missing segment would rebuild the header exactly
    zeros_ts = (T >> 16) << 16
    msg = foreign_message(1, ts=zeros_ts)
    df = pd.DataFrame({"flow_id": FLOW, "priority": 2, "seq": [0, 1, 2], "size": SIZE,
                       "send_ns": [send_ns(0), zeros_ts, send_ns(2)]})
    index = SentIndex.from_sent(df, [FLOW])
    data = stream([batch([foreign_message(0)]), batch([msg]), batch([foreign_message(2)])])
    end = data.index(pack_payload_header(FLOW, 1, zeros_ts)) + PAYLOAD_HEADER_SIZE
    segs = [(0, data[:end - 2]), (end - 2, data[end - 2:end]), (end, data[end:])]
    r = search_pcap(capture(segs, order=[0, 2]), index)  # the 2-byte segment was never captured
    assert seen(r) == [(FLOW, 0), (FLOW, 2)]
    assert r.stats.gap_bytes == 2 and r.stats.headers_in_holes == 1 and r.stats.headers_rejected == 0
    # with it: all three
    assert len(search_pcap(capture(segs), index).observations) == 3


def test_snap_length_cutting_a_header_hides_it_and_never_invents_one():
    msgs = [foreign_message(s) for s in range(4)]
    data = stream([batch(msgs)])
    first_header = data.index(HEADER_MARK)
    # one packet whose capture ends 5 bytes into the first header: the rest of the stream is a hole
    r = search_pcap(capture([(0, data)], snaplen=14 + 20 + 20 + first_header + 5), sent_index())
    assert seen(r) == []
    assert r.stats.headers_found == 1 and r.stats.headers_in_holes == 1 and r.stats.snap_truncated_bytes > 0
    # the next packet, whole, is read
    nxt = stream([batch([foreign_message(9)])])
    w = PcapWriter(14 + 20 + 20 + first_header + 5)
    w.tcp(T - MS, A, 40000, B, 7447, 999, flags=0x02)
    w.tcp(T, A, 40000, B, 7447, 1000, data)
    w.tcp(T + MS, A, 40000, B, 7447, 1000 + len(data), nxt[:first_header + 5])
    assert seen(search_pcap(w.to_bytes(), sent_index())) == []  # header of seq 9 cut as well
    # the same stream with a large snap length: everything
    assert len(search_pcap(capture([(0, data)], snaplen=262144), sent_index()).observations) == 4


def test_capture_started_mid_stream_and_both_directions():
    data = stream([batch([foreign_message(s)]) for s in range(8)])
    start = data.index(pack_payload_header(FLOW, 2, send_ns(2))) + 3  # inside the third header
    w = PcapWriter()
    for off, d in segments(data[start:], 200):  # no SYN: the stream starts at its first segment
        w.tcp(T + off, A, 40000, B, 7447, 5000 + off, d)
    back = stream([batch([foreign_message(s, flow=8)]) for s in range(2)])
    w.tcp(T, B, 7447, A, 40000, 77, back)
    index = SentIndex.from_sent(pd.DataFrame({"flow_id": [FLOW] * 8 + [8, 8], "priority": 2,
                                              "seq": list(range(8)) + [0, 1],
                                              "send_ns": [send_ns(s) for s in range(8)] + [send_ns(0), send_ns(1)],
                                              "size": SIZE}), [FLOW, 8])
    r = search_pcap(w.to_bytes(), index)
    assert sorted(seen(r)) == sorted([(8, 0), (8, 1)] + [(FLOW, s) for s in range(3, 8)])
    assert len(r.streams) == 2


def test_send_index_with_gaps_and_repeated_seqs_matches_exactly():
    df = pd.DataFrame({"flow_id": 1, "priority": 5, "seq": [0, 1, 5, 5, 9], "send_ns": [10, 11, 15, 16, 19],
                       "size": [30, 30, None, 40, 30]})
    index = SentIndex.from_sent(df, [1, 2])
    fs = index.flows[1]
    assert not fs.dense
    assert index.check(1, 5, 16)[0] == 0 and index.check(1, 5, 15)[0] == 0
    assert index.check(1, 5, 17)[0] == 3 and index.check(1, 4, 14)[0] == 3 and index.check(1, 2**64 - 1, 1)[0] == 3
    assert index.check(2, 0, 10)[0] == 2 and index.check(9, 0, 10)[0] == 1
    dense = SentIndex.from_sent(pd.DataFrame({"flow_id": 1, "priority": 5, "seq": [3, 4, 5],
                                              "send_ns": [1, 2, 2**63 - 1], "size": 30}), [1])
    assert dense.flows[1].dense
    assert dense.check(1, 5, 2**63 - 1)[0] == 0 and dense.check(1, 6, 2)[0] == 3 and dense.check(1, 2, 1)[0] == 3


@pytest.mark.parametrize("blob", [b"", b"\x00" * 10, b"not a pcap at all, just text...."])
def test_damaged_files_are_reported_not_raised(blob):
    r = search_pcap(blob, sent_index())
    assert r.stats.error and r.observations == []


def test_a_small_message_between_a_large_ones_fragments_is_timed_by_its_own_last_byte():
    # Zenoh fragments a message above batch_size: a 40 kB message in 4 fragments, a 200 B message of another
    # flow sent between the first and the second fragment; 100 B TCP segments
    big_size, small_size, small_flow = 40_000, 200, 9
    big = foreign_message(0, size=big_size)
    small = foreign_message(0, flow=small_flow, size=small_size)
    cut = [len(big) * k // 4 for k in range(5)]
    frags = [b"\x0f" + struct.pack("<H", cut[k + 1] - cut[k]) + big[cut[k]:cut[k + 1]] for k in range(4)]
    data = stream([frags[0], batch([small]), *frags[1:]])
    df = pd.DataFrame({"flow_id": [FLOW, small_flow], "priority": [5, 1], "seq": [0, 0],
                       "send_ns": [send_ns(0), send_ns(0)], "size": [big_size, small_size]})
    index = SentIndex.from_sent(df, [FLOW, small_flow])
    segs = segments(data, 100)
    r = search_pcap(capture(segs), index)
    at = {flow: ts for _s, ts, flow, *_ in r.observations}
    small_end = data.index(pack_payload_header(small_flow, 0, send_ns(0))) + small_size - 1
    big_end = data.index(pack_payload_header(FLOW, 0, send_ns(0))) + big_size - 1  # a few bytes early: frag headers
    assert small_end // 100 < 110 < big_end // 100
    assert at == {small_flow: T + (small_end // 100) * MS, FLOW: T + (big_end // 100) * MS}
    # the capture ends inside the large message: the small one keeps its own time, the large one is unfinished
    cut_off = search_pcap(capture(segs[:200]), index)
    assert {flow: ts for _s, ts, flow, *_ in cut_off.observations} == {small_flow: T + (small_end // 100) * MS}
    assert cut_off.stats.headers_unfinished == 1


@pytest.mark.parametrize("seg_size, cut", [(110, 30), (1448, 400)])
def test_a_message_whose_last_byte_fell_in_a_hole_is_unfinished_not_observed(seg_size, cut):
    """The snap length cuts the last ``cut`` bytes of every packet: a message whose header was captured but
    whose last byte was not has no instant at which it had crossed (as for the frame decoder) - unfinished,
    never an observation; one whose last byte was captured is timed by its packet. With 100-byte segments
    every message waits for a later packet; with 1448-byte ones most end in the packet of their header."""
    msgs = [foreign_message(s) for s in range(20)]
    data = stream([batch(msgs)])
    w = PcapWriter(14 + 20 + 20 + seg_size - cut)
    w.tcp(T - MS, A, 40000, B, 7447, 999, flags=0x02)
    segs = segments(data, seg_size)
    for i, (off, d) in enumerate(segs):
        w.tcp(T + i * MS, A, 40000, B, 7447, 1000 + off, d)
    r = search_pcap(w.to_bytes(), sent_index())

    def captured(offset: int) -> bool:
        return offset % seg_size < seg_size - cut

    expect_seen, expect_unfinished, expect_in_holes = {}, 0, 0
    for s in range(20):
        head = data.index(pack_payload_header(FLOW, s, send_ns(s)))
        if not all(captured(o) for o in range(head, head + PAYLOAD_HEADER_SIZE)):
            # a candidate (never read) when its mark was captured; invisible when the mark fell in the hole
            expect_in_holes += all(captured(o) for o in range(head, head + len(HEADER_MARK)))
        elif captured(head + SIZE - 1):
            expect_seen[s] = T + ((head + SIZE - 1) // seg_size) * MS
        else:
            expect_unfinished += 1
    assert expect_seen and expect_unfinished  # the case is made of both kinds
    assert times(r) == expect_seen
    assert r.stats.headers_unfinished == expect_unfinished and r.stats.headers_in_holes == expect_in_holes
    assert r.stats.messages == len(r.observations)
    assert r.stats.headers_validated == r.stats.messages + r.stats.headers_unfinished


def test_messages_counts_observations_not_headers_waiting_at_the_capture_end():
    data = stream([batch([foreign_message(s) for s in range(3)])])
    last_end = data.index(pack_payload_header(FLOW, 2, send_ns(2))) + SIZE
    r = search_pcap(capture(segments(data[:last_end - 10], 100)), sent_index())
    assert seen(r) == [(FLOW, 0), (FLOW, 1)]
    assert r.stats.messages == 2 and r.stats.headers_validated == 3 and r.stats.headers_unfinished == 1
