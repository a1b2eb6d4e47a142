"""How the decoder reads fast gives what it gave reading packet by packet.

* A stream's whole in-order segments are appended in runs and walked in batches (``_feed``,
  ``_Stream.walk_appended``); the reference is one walk per packet, which a stream reader with a walk of its own
  gets (``PerPacket``). Both must give the same observations, in the same order, at the same times, with the
  same counts, on captures that mix in-order runs with everything that breaks them.
* The records' headers are read as rows of their first bytes (``_packets``), a VLAN tag or IP options left out
  of a row: every field must be what the packet was made with, for each link type.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest

from router.codec import (
    FRAME_HEADER_SIZE, MESSAGE_HEADER_SIZE, FrameKind, encode_fragment, encode_frame, encode_json_frame, encode_message,
    make_payload,
)
from spark import pcap
from spark.pcap import _Stream, decode_pcap
from spark.testing import PcapWriter, tcp_packet

A, B, C, D = "10.10.0.1", "10.10.0.2", "10.10.1.1", "10.10.1.2"
T = 1_800_000_000_000_000_000
MS = 1_000_000


class PerPacket(_Stream):
    """The reference reader: walked after every packet (a reader with its own walk is never batched)."""

    def walk(self, ts, out, stats):
        super().walk(ts, out, stats)


def message(flow: int, seq: int, size: int, priority: int = 5) -> bytes:
    return encode_message("demo/x", make_payload(flow, seq, T + seq, size), priority=priority)


def frames(flow: int, count: int) -> bytes:
    return b"".join(frame_list(flow, count))


def frame_list(flow: int, count: int) -> list:
    """A router's stream: single messages, batches, a control frame, and a message in FRAGMENT pieces."""
    out = [encode_json_frame(FrameKind.HELLO, {"role": "router", "name": f"r{flow}"})]
    for s in range(count):
        priority = 1 if s % 3 else 5
        out.append(encode_frame(FrameKind.DATA, message(flow, s, 120 + 53 * (s % 11), priority), flags=priority))
        if s % 9 == 4:
            body = b"".join(message(flow, 10_000 + 3 * s + k, 90) for k in range(3))
            out.append(encode_frame(FrameKind.DATA, body, flags=5))
        if s % 13 == 6:
            out.append(encode_json_frame(FrameKind.LINKSTATE, {"origin": "r2", "seq": s, "links": ["x" * 30] * 8}))
        if s % 17 == 8:
            big = message(flow, 20_000 + s, 5000, priority=2)
            out += [encode_fragment(2, len(big), off, big[off:off + 1500]) for off in range(0, len(big), 1500)]
    return out


def packets_of(data: bytes, size: int, src: str, dst: str, sport: int):
    """(offset, bytes, src, dst, sport) of ``data`` cut into segments of ``size`` bytes."""
    return [(off, data[off:off + size], src, dst, sport) for off in range(0, len(data), size)]


def frame_packets(flow: int, src: str, dst: str, sport: int):
    """Each frame in a packet of its own (a router writes frame by frame), some cut in two: in the middle,
    right after the frame header, right after the first message's header."""
    out, off = [], 0
    for i, frame in enumerate(frame_list(flow, 120)):
        cut = {2: len(frame) // 2, 3: FRAME_HEADER_SIZE,
               4: FRAME_HEADER_SIZE + MESSAGE_HEADER_SIZE}.get(i % 5, len(frame))
        out.append((off, frame[:cut], src, dst, sport))
        if frame[cut:]:
            out.append((off + cut, frame[cut:], src, dst, sport))
        off += len(frame)
    return out


def interleaved(a, b):
    out = []
    for i in range(max(len(a), len(b))):
        out += a[i:i + 1] + b[i:i + 1]
    return out


def write(packets, snaplen: int = 65535, isn: int = 1000, syn=(A, C)) -> bytes:
    w = PcapWriter(snaplen)
    for k, src in enumerate(syn):
        dst = B if src == A else D
        w.tcp(T - MS, src, 40000 + k, dst, 7447, isn - 1, flags=0x02)
    for i, (off, data, src, dst, sport) in enumerate(packets):
        w.tcp(T + i * MS, src, sport, dst, 7447, isn + off, data)
    return w.to_bytes()


def two_streams(size_a: int = 536, size_b: int = 1448):
    return interleaved(packets_of(frames(1, 120), size_a, A, B, 40000),
                       packets_of(frames(2, 120), size_b, C, D, 40001))


def swapped(packets, every: int):
    """A segment overtaken by its stream's next one (the streams alternate packet by packet)."""
    out = list(packets)
    for i in range(5, len(out) - 2, every):
        out[i], out[i + 2] = out[i + 2], out[i]
    return out


def repeated(packets, every: int):
    """Retransmissions: a segment sent again, and one resent overlapping the next (partly new bytes)."""
    out = []
    for i, p in enumerate(packets):
        out.append(p)
        if i % every == 3:
            out.append(p)
        if i % every == 7 and i + 1 < len(packets) and packets[i + 1][2] == p[2]:
            nxt = packets[i + 1]
            out.append((p[0] + len(p[1]) // 2, p[1][len(p[1]) // 2:] + nxt[1][:40], p[2], p[3], p[4]))
    return out


def dropped(packets, which):
    return [p for i, p in enumerate(packets) if i not in which]


def corrupted(packets, which):
    out = list(packets)
    for i in which:
        off, data, *rest = out[i]
        out[i] = (off, bytes(len(data) // 3) + data[len(data) // 3:], *rest)
    return out


def reopened(packets):
    """The first stream's connection closes mid-capture and a new one opens on the same addresses."""
    half = len(packets) // 2
    again = packets_of(frames(1, 40), 700, A, B, 40000)
    return packets[:half], again


CAPTURES = {
    "in order": lambda: write(two_streams()),
    "small segments": lambda: write(two_streams(100, 211)),
    "a frame a packet": lambda: write(interleaved(frame_packets(1, A, B, 40000), frame_packets(2, C, D, 40001))),
    "out of order": lambda: write(swapped(two_streams(), 7)),
    "retransmitted": lambda: write(repeated(two_streams(), 11)),
    "a segment never captured": lambda: write(dropped(two_streams(), {40, 41, 170})),
    "cut by the snap length": lambda: write(two_streams(), snaplen=54 + 300),
    "garbage in a stream": lambda: write(corrupted(two_streams(), {30, 31, 150})),
    "without the SYNs": lambda: write(two_streams()[9:], syn=()),
}


def _reopened_capture() -> bytes:
    before, again = reopened(two_streams())
    w = PcapWriter()
    w.tcp(T - MS, A, 40000, B, 7447, 999, flags=0x02)
    w.tcp(T - MS, C, 40001, D, 7447, 999, flags=0x02)
    for i, (off, data, src, dst, sport) in enumerate(before):
        w.tcp(T + i * MS, src, sport, dst, 7447, 1000 + off, data)
    t = T + len(before) * MS
    w.tcp(t, A, 40000, B, 7447, 500_000 - 1, flags=0x02)
    for i, (off, data, src, dst, sport) in enumerate(again):
        w.tcp(t + (i + 1) * MS, src, sport, dst, 7447, 500_000 + off, data)
    return w.to_bytes()


CAPTURES["the connection opened again"] = _reopened_capture


def _corrupt_capture() -> bytes:
    """The in-order capture, then a record that claims 2 GiB: decoded up to it, the file said corrupt."""
    return write(two_streams()) + struct.pack("<IIII", 1_800_000_100, 0, 0x7FFFFFF0, 0x7FFFFFF0) + bytes(64)


CAPTURES["a corrupt record at the end"] = _corrupt_capture


def everything(result):
    return result.observations, result.streams, result.traffic, result.stats.as_dict()


#: captures whose segments after a gap wait for it until the end of the file, observed there at their own times
WAITING_TO_THE_END = {"a segment never captured"}
#: captures ``capture_pieces`` leaves whole: a stream lacks bytes, or is opened twice (``_bytes_missing``)
NOT_SPLIT = {"a segment never captured", "cut by the snap length", "the connection opened again"}


def in_time_order(result) -> bool:
    """The packets' times increase through these captures, so the observations, in the order of the packets
    that completed them, have non-decreasing times (what grouping them stream by stream would break)."""
    times = [o[1] for o in result.observations]
    return times == sorted(times)


@pytest.mark.parametrize("batches", ["default", "tiny"])
@pytest.mark.parametrize("name", list(CAPTURES))
def test_walking_in_batches_gives_what_one_walk_per_packet_gives(monkeypatch, name, batches):
    if batches == "tiny":  # runs appended 1 500 bytes at a time, a walk every 500 bytes: every split is taken
        monkeypatch.setattr(pcap, "_JOIN_BYTES", 1500)
        monkeypatch.setattr(pcap, "_WALK_BATCH_BYTES", 500)
    cap = CAPTURES[name]()
    batched = decode_pcap(cap)
    reference = decode_pcap(cap, PerPacket)
    assert (batched.stats.error is None) == (name != "a corrupt record at the end")
    assert batched.stats.messages > 50
    assert everything(batched) == everything(reference)
    assert in_time_order(batched) or name in WAITING_TO_THE_END


@pytest.mark.parametrize("name", [n for n in CAPTURES if n != "a corrupt record at the end"])
def test_pieces_walked_in_batches_give_the_whole_file_walked_per_packet(tmp_path, monkeypatch, name):
    """Pieces of ~10 kB with lead-ins of 3 and 30 kB (so a piece's streams are often brought to their state
    by a lead-in, and sometimes need the longer one), 50 records a chunk and the buffer trimmed past 2 kB:
    the switch from a lead-in to the piece, chunk ends and trims inside runs are all taken."""
    monkeypatch.setattr(pcap, "_CHUNK", 50)
    monkeypatch.setattr(pcap, "_TRIM_AT", 2000)
    path = tmp_path / "capture.pcap"
    path.write_bytes(CAPTURES[name]())
    whole = pcap.decode_pcap_file(str(path), PerPacket)
    pieces = pcap.capture_pieces(str(path), 10_000, lead_in_bytes=(3_000, 30_000))
    assert len(pieces) > 10 or name in NOT_SPLIT
    merged = pcap.merge_pieces([pcap.decode_pcap_piece(str(path), piece) for piece in pieces])
    assert merged.observations == whole.observations
    assert merged.traffic == whole.traffic
    assert in_time_order(merged) or name in WAITING_TO_THE_END
    # every count as the same pieces walked per packet give (the snap-length capture's pieces count one
    # skipped frame part fewer than its whole file, with either walk: not this test's subject)
    per_packet = pcap.merge_pieces([pcap.decode_pcap_piece(str(path), piece, PerPacket) for piece in pieces])
    assert merged.stats.as_dict() == per_packet.stats.as_dict()


def test_the_captures_above_take_every_way_through_the_reassembly():
    """What the comparison above covers: each case breaks the in-order runs the way its name says."""
    stats = {name: decode_pcap(make()).stats for name, make in CAPTURES.items()}
    assert stats["in order"].out_of_order_segments == stats["in order"].retransmitted_segments == 0
    assert stats["out of order"].out_of_order_segments > 20
    assert stats["retransmitted"].retransmitted_segments > 20
    assert stats["a segment never captured"].gap_bytes > 0
    assert stats["cut by the snap length"].snap_truncated_bytes > 0
    assert stats["garbage in a stream"].codec_errors + stats["garbage in a stream"].resyncs > 0
    assert stats["without the SYNs"].resyncs > 0
    assert stats["the connection opened again"].streams == 2
    assert all(s.messages > 50 for s in stats.values())


# ---------------------------------------------------------------- the records' headers

LINK_ETHERNET, LINK_RAW, LINK_NULL, LINK_SLL, LINK_SLL2 = 1, 101, 0, 113, 276


def record(ts_ns: int, frame: bytes, snaplen: int = 65535) -> bytes:
    cap = frame[:snaplen]
    return struct.pack("<IIII", ts_ns // 10**9, ts_ns % 10**9, len(cap), len(frame)) + cap


def link_header(linktype: int, ip: bytes, vlan: bool = False) -> bytes:
    if linktype == LINK_ETHERNET:
        macs = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01"
        return macs + (b"\x81\x00\x00\x05" if vlan else b"") + b"\x08\x00" + ip
    if linktype == LINK_SLL:
        return b"\x00\x00\x00\x01\x00\x06" + bytes(8) + b"\x08\x00" + ip
    if linktype == LINK_SLL2:
        return b"\x08\x00\x00\x00" + bytes(16) + ip
    if linktype == LINK_NULL:
        return struct.pack("<I", 2) + ip
    return ip


def ipv4(payload_packet: bytes, options: int = 0, proto: int = 6, fragment: int = 0) -> bytes:
    """``payload_packet``: an Ethernet TCP packet from ``tcp_packet``, whose IP header is rebuilt here."""
    tcp = payload_packet[14 + 20:]
    ihl = 5 + options
    header = struct.pack(">BBHHHBBH4s4s", 0x40 | ihl, 0, 4 * ihl + len(tcp), 0, fragment, 64, proto, 0,
                         bytes([10, 10, 0, 1]), bytes([10, 10, 0, 2]))
    return header + b"\x01" * (4 * options) + tcp


def with_tcp_options(packet: bytes) -> bytes:
    tcp = bytearray(packet[14 + 20:14 + 40])
    tcp[12] = 8 << 4  # 32-byte header: 12 bytes of options
    return packet[:14 + 20] + bytes(tcp) + b"\x01" * 12 + packet[14 + 40:]


def headers_capture(linktype: int):
    """Every layout the decoder meets, then a short record at the very end of the file; and per record what
    its headers say (None: not a TCP segment of IPv4, or one whose TCP header is not all in the capture)."""
    out = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, linktype)]
    expected = []
    offset = 24
    seq = 1000
    for i in range(60):
        body = bytes(range(256))[: 40 + 7 * i]
        kind = i % 10
        packet = tcp_packet(A, 40000, B, 7447, seq, body, flags=0x02 if i == 7 else 0x18)
        thl = 20
        if kind == 1:
            packet, thl = with_tcp_options(packet), 32
        options = (1 + i % 3) if kind == 2 else 0
        ip = ipv4(packet, options=options, proto=17 if kind == 3 else 6, fragment=0x2000 | 8 if kind == 4 else 0)
        vlan = kind == 5 and linktype == LINK_ETHERNET
        frame = link_header(linktype, ip, vlan=vlan)
        snaplen = 40 if kind == 6 else 65535
        out.append(record(T + i * MS, frame, snaplen=snaplen))
        link = len(frame) - len(ip)
        data_start = offset + 16 + link + 20 + 4 * options + thl
        tcp = kind not in (3, 4) and min(len(frame), snaplen) >= data_start - offset - 16 - thl + 20
        expected.append(dict(ts=T + i * MS, orig=len(frame), tcp=tcp, src=0x0A0A0001, dst=0x0A0A0002, sport=40000,
                             dport=7447, seq=seq, syn=i == 7, data_start=data_start, wire_len=len(body),
                             captured=max(0, min(len(body), offset + 16 + min(len(frame), snaplen) - data_start)))
                        if tcp else dict(ts=T + i * MS, orig=len(frame), tcp=False))
        offset += 16 + min(len(frame), snaplen)
        seq += len(body)
    short = link_header(linktype, ipv4(tcp_packet(A, 40000, B, 7447, seq, b"")))[:30]
    out.append(record(T + 61 * MS, short))
    expected.append(dict(ts=T + 61 * MS, orig=30, tcp=False))
    return b"".join(out), expected


@pytest.mark.parametrize("linktype", [LINK_ETHERNET, LINK_RAW, LINK_NULL, LINK_SLL, LINK_SLL2])
def test_every_records_headers_read_as_they_were_written(linktype):
    raw, expected = headers_capture(linktype)
    endian, scale, l2 = pcap._read_header(raw)
    offsets = pcap.scan_records(raw, endian).offsets
    assert len(offsets) == len(expected) == 61
    packets = pcap._packets(raw, offsets, endian, scale, l2)
    got = [{name: getattr(packets, name)[r].item() for name in want} for r, want in enumerate(expected)]
    assert got == expected
    # what the capture holds: TCP segments with the usual layout and with every other one, and other packets
    assert sum(e["tcp"] for e in expected) >= 30 and sum(not e["tcp"] for e in expected) >= 10


def test_a_vlan_tag_and_ip_options_change_no_observation():
    """The same stream with its packets VLAN-tagged, or with IP options, decodes to the same messages at the
    same times."""
    data = frames(1, 60)
    plain = PcapWriter()
    tagged = PcapWriter()
    optioned = PcapWriter()
    for i, off in enumerate(range(0, len(data), 700)):
        packet = tcp_packet(A, 40000, B, 7447, 1000 + off, data[off:off + 700])
        plain.add(T + i * MS, packet)
        tagged.add(T + i * MS, packet[:12] + b"\x81\x00\x00\x05" + packet[12:])
        optioned.add(T + i * MS, packet[:14] + ipv4(packet, options=2))
    expected = decode_pcap(plain.to_bytes(), PerPacket)
    assert expected.stats.messages > 60
    for writer in (tagged, optioned):
        got = decode_pcap(writer.to_bytes())
        assert got.observations == expected.observations
        assert got.stats.messages == expected.stats.messages
