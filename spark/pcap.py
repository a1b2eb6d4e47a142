"""Decode one pcap of a router link into per-message observations.

No Spark: one call per file (``decode_pcap_file``), or per piece of a large file (``capture_pieces``,
``decode_pcap_piece``: the pieces of a file give exactly what the whole file gives), so Spark can run one task
per file or piece. The chain of record lengths is followed in a Python loop (``scan_records``: one step a
record), then every record's link, IP and TCP fields are read at once with numpy (``_packets``: each record's
first bytes copied into a row, the fields its columns); only TCP segments that carry data or a SYN go through
the Python reassembly and frame walker. They go stream by stream (``_feed``): a run of whole segments that each
continue the one before is appended to its stream at once and walked in one call (``walk_appended``), which
reads exactly what walking after each of its packets would; the observations are then put back in the order
of the packets that completed them (``_Completions``). Any other segment (a SYN, out of order, repeated, cut
by the snap length) is reassembled and walked on its own.

The frame, message and traffic-header layouts are the router protocol's own
(``router.codec``: ``parse_frame_header`` (the frame header), ``MESSAGE_HEADER``,
``PAYLOAD_HEADER`` and the validation constants); nothing of the wire format is
redefined here.  What this module adds is what a capture needs and a live
connection does not:

* TCP reassembly per stream direction by sequence number: retransmitted
  segments are dropped (or trimmed when they overlap new data), out-of-order
  segments wait until the gap before them is filled.  A stream whose SYN was
  not captured starts at its first segment and resynchronises on the frame
  magic (the header is re-validated by the codec).
* Holes: tcpdump's snap length truncates segments, and a capture can miss a
  segment altogether.  The bytes that were on the wire but not captured are
  tracked as holes; a frame or message header inside a hole is skipped using
  the lengths that are known (a message header in a hole loses the rest of its
  frame; a frame header in a hole loses synchronisation until the next valid
  frame header).  Holes are counted, never guessed.
* The observation time of a message is the timestamp of the packet that
  completed it (the one carrying its last byte; for bytes that waited in an
  out-of-order segment, the packet that filled the gap before them).
* FRAGMENT frames (a message larger than a batch, in pieces): the message
  header and the traffic header are read from its first piece; the message is
  observed when its last piece is complete.  A piece whose earlier pieces were
  not seen (a hole, or a capture that began mid-message) is skipped and counted
  in ``frame_parts_skipped``.
* A file cut short by an interrupted run (a partial last record) is decoded up
  to the cut and reported as truncated.

The reassembly (``_Stream``) is separate from what reads the bytes (its
``walk``): ``decode_pcap(data, stream_factory)`` takes another reader, as
``spark.streamsearch`` does for routers whose wire format is not ours.
"""
from __future__ import annotations

import mmap
import os
import struct
from bisect import bisect_right
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, FrozenSet, List, Optional, Tuple, Union

import numpy as np
import pandas as pd

from router.codec import (
    FRAGMENT_HEADER, FRAGMENT_HEADER_SIZE, FRAME_HEADER_SIZE, FRAME_MAGIC, KNOWN_MESSAGE_FLAGS, MAX_KEY_LEN, MESSAGE_HEADER,
    MESSAGE_HEADER_SIZE, PAYLOAD_HEADER, PAYLOAD_HEADER_SIZE, PAYLOAD_MAGIC, PAYLOAD_VERSION, PRIORITY_MASK,
    CodecError, FrameKind, parse_frame_header,
)

__all__ = ["CaptureStats", "CapturePiece", "DecodedCapture", "capture_pieces", "decode_pcap", "decode_pcap_file",
           "decode_pcap_piece", "merge_piece_stats", "merge_pieces", "PcapError", "StreamFactory"]

PCAP_MAGIC_NS = 0xA1B23C4D
PCAP_MAGIC_US = 0xA1B2C3D4
LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_LINUX_SLL2 = 276
_MAX_RECORD = 1 << 20          # a record longer than this is corruption, not a packet
_PENDING_MAX_SEGMENTS = 2048   # out-of-order segments held before a gap is declared a hole
_PENDING_MAX_BYTES = 16 << 20
_TRIM_AT = 1 << 20             # drop parsed bytes from a stream buffer past this much
_DATA = int(FrameKind.DATA)
_FRAGMENT = int(FrameKind.FRAGMENT)
_ZEROS = bytes(65536)


class PcapError(ValueError):
    """The file is not a pcap this decoder reads (the message says why)."""


@dataclass
class CaptureStats:
    """What decoding one file saw; every count is of this file only."""

    packets: int = 0
    bytes_on_wire: int = 0
    tcp_segments: int = 0
    payload_bytes: int = 0            # TCP payload bytes on the wire
    captured_payload_bytes: int = 0   # of those, bytes present in the capture (snap length)
    retransmitted_segments: int = 0
    out_of_order_segments: int = 0
    gap_bytes: int = 0                # stream bytes never captured (missing segments)
    snap_truncated_bytes: int = 0     # stream bytes cut by the snap length
    streams: int = 0
    resyncs: int = 0                  # frame-magic searches after losing the frame boundary
    frames_lost_in_holes: int = 0     # frame headers that fell into holes
    messages: int = 0                 # traffic messages observed (with a visible traffic header)
    messages_hidden: int = 0          # messages whose traffic header fell into a hole
    messages_other: int = 0           # messages whose payload is not a traffic payload
    frame_parts_skipped: int = 0      # partial frames (or fragments) skipped: a header in a hole, a piece alone
    codec_errors: int = 0
    non_tcp_packets: int = 0
    truncated_file: bool = False
    error: Optional[str] = None
    first_ts_ns: Optional[int] = None
    last_ts_ns: Optional[int] = None
    # how the streams were read: "router-frames" (this module's walker, our wire format) or "header-search"
    # (spark.streamsearch: the traffic header searched for in the bytes, whatever the router's wire format)
    method: str = "router-frames"
    # header search only (0 with router-frames): candidates = validated + rejected + no_send_log + in_holes
    headers_found: int = 0            # candidate headers (magic and version) complete in a stream
    headers_validated: int = 0        # flow in flows.json and (flow, seq, send_ns) a line of its send log
    headers_rejected: int = 0         # candidates that failed validation: never counted as messages
    rejected_unknown_flow: int = 0    # of those: a flow id not in flows.json
    rejected_not_sent: int = 0        # of those: a known flow, but (seq, send_ns) not in its send log
    headers_no_send_log: int = 0      # a flow of flows.json without a send log (queries): not validated, not counted
    headers_in_holes: int = 0         # a candidate whose bytes are partly not captured: not validated, not counted
    headers_unfinished: int = 0       # validated, but its message's last byte never captured (the capture ended, or
                                      # a hole): not timed, not counted (validated = messages + unfinished), as the
                                      # frame decoder skips a frame it never saw end

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class DecodedCapture:
    """Observations: ``(stream, ts_ns, flow_id, seq, send_ns, priority, payload_len)``;
    ``stream`` indexes ``streams`` = ``(src_ip, src_port, dst_ip, dst_port)``.
    ``traffic``: ``{(stream, second): [bytes_on_wire, packets]}`` (second = ts_ns // 1e9)."""

    observations: List[Tuple[int, int, int, int, int, int, int]] = field(default_factory=list)
    streams: List[Tuple[str, int, str, int]] = field(default_factory=list)
    traffic: Dict[Tuple[int, int], List[int]] = field(default_factory=dict)
    stats: CaptureStats = field(default_factory=CaptureStats)


def _ip(b: bytes) -> str:
    return f"{b[0]}.{b[1]}.{b[2]}.{b[3]}"


class _Stream:
    """One direction of one TCP connection: reassembly and the frame walker."""

    __slots__ = ("index", "next", "buf", "base", "holes", "pending", "pending_bytes", "pos", "frame_start",
                 "frame_end", "synced", "started", "fragments", "origin", "from_syn", "first_sync", "orphans",
                 "searches_to_sync", "gaps", "orphan_pieces", "appended")

    def __init__(self, index: int):
        self.index = index
        self.started = False
        self.next = 0              # stream offset (unwrapped seq) of the next byte expected
        self.buf = bytearray()     # stream bytes from offset ``base`` (holes zero-filled)
        self.base = 0
        self.holes: deque = deque()  # (start, end) stream offsets of bytes not captured
        self.pending: Dict[int, Tuple[bytes, int, int]] = {}  # offset -> (captured bytes, wire length, ts)
        self.pending_bytes = 0
        self.pos = 0               # next stream offset the walker looks at
        self.frame_start = 0
        self.frame_end = -1        # end of the DATA frame being walked, -1 outside one
        self.synced = False
        # priority -> [total, bytes seen, observation or None] of the fragmented message in progress
        self.fragments: Dict[int, list] = {}
        # what a piece of a capture checks (its lead-in must have given the stream its whole state)
        self.origin = 0            # the stream offset it started at
        self.from_syn = False      # started by a SYN: its whole history is here
        self.first_sync = -1       # the first frame header the walker synchronised on, -1 before
        self.orphans: set = set()  # priorities whose fragmented message began before the stream's start
        self.searches_to_sync = 0  # frame-magic searches (``stats.resyncs``) before ``first_sync``
        self.gaps: List[int] = []  # sequence numbers where bytes never captured begin (``gap``)
        self.orphan_pieces = 0     # fragments whose message's first piece was not seen
        # the records of whole segments appended in order and not walked yet (``walk_appended``)
        self.appended: List[int] = []

    def start(self, offset: int, synced: bool) -> None:
        self.started = True
        self.origin = offset
        self.from_syn = synced
        self.first_sync = -1
        self.orphans = set()
        self.searches_to_sync = 0
        self.next = self.base = self.pos = offset
        self.buf = bytearray()
        self.holes.clear()
        self.pending.clear()
        self.pending_bytes = 0
        self.frame_end = -1
        self.synced = synced
        self.fragments.clear()

    # -- reassembly --

    def unwrap(self, seq: int) -> int:
        delta = (seq - self.next) & 0xFFFFFFFF
        if delta >= 0x80000000:
            delta -= 0x100000000
        return self.next + delta

    def append(self, data, wire_len: int, stats: CaptureStats) -> None:
        captured = len(data)
        if captured:
            self.buf += data
        if captured < wire_len:
            missing = wire_len - captured
            stats.snap_truncated_bytes += missing
            self.buf += _ZEROS[:missing] if missing <= len(_ZEROS) else bytes(missing)
            self._hole(self.next + captured, self.next + wire_len)
        self.next += wire_len

    def _hole(self, start: int, end: int) -> None:
        holes = self.holes
        if holes and holes[-1][1] == start:
            holes[-1] = (holes[-1][0], end)
        else:
            holes.append((start, end))

    def gap(self, upto: int, stats: CaptureStats) -> None:
        """Bytes ``next..upto`` were never captured: record them as a hole."""
        n = upto - self.next
        stats.gap_bytes += n
        self.gaps.append(self.next & 0xFFFFFFFF)
        self.buf += _ZEROS[:n] if n <= len(_ZEROS) else bytes(n)
        self._hole(self.next, upto)
        self.next = upto

    def in_hole(self, a: int, b: int) -> bool:
        holes = self.holes
        while holes and holes[0][1] <= a:
            holes.popleft()
        return bool(holes) and holes[0][0] < b

    def trim(self) -> None:
        """Drop the bytes the walker is done with. Never past ``next`` (the walker may have skipped a frame
        body that has not all arrived: ``pos`` is then ahead of the bytes held, and cutting there would
        shift every later byte of the stream) nor past the start of the DATA frame being walked (a bad
        message in it restarts the search from its start)."""
        keep = self.pos if self.pos < self.next else self.next
        if self.frame_end >= 0 and self.frame_start < keep:
            keep = self.frame_start
        cut = keep - self.base
        if cut > _TRIM_AT:
            del self.buf[:cut]
            self.base = keep

    # -- the frame walker --

    def walk(self, ts: int, out: list, stats: CaptureStats) -> None:
        """Read what the bytes up to ``next`` complete (``ts``: the time of the packet that brought them)."""
        self._walk((self.next,), (ts,), out, stats)

    def walk_appended(self, wire_lens: np.ndarray, times: np.ndarray, first: int, out: list, stats: CaptureStats,
                      completed: Optional["_Completions"]) -> None:
        """Read the whole segments appended in order since the last walk (``appended``: their records, of the
        chunk whose first record is ``first``, whose payload lengths and times are ``wire_lens`` and
        ``times``) as walking after each of them would, in one call; ``completed`` notes which record completed
        each observation."""
        records = self.appended
        self.appended = []
        if len(records) < 16:
            ends, ts, end = [], [], self.next
            for rec in reversed(records):
                ends.append(end)
                ts.append(int(times[rec - first]))
                end -= int(wire_lens[rec - first])
            ends.reverse()
            ts.reverse()
        else:
            at = np.array(records, dtype=np.int64) - first
            grown = np.cumsum(wire_lens[at])
            ends = (self.next - int(grown[-1]) + grown).tolist()
            ts = times[at].tolist()
        self._walk(ends, ts, out, stats, records, completed)

    def _walk(self, ends, times, out: list, stats: CaptureStats, records=None,
              completed: Optional["_Completions"] = None) -> None:
        """The frame walker: the stream's bytes up to ``ends[0]`` arrived at ``times[0]``, then up to
        ``ends[1]`` at ``times[1]``... Each step reads all that its bytes complete, exactly as one walk per
        step would (a message is observed at the first step that holds its last byte). Where the walker
        waits for a known byte (the end of a header, a fragment, a message), the steps before the one that
        brings it are passed over: walking after each of them would find the same wait and do nothing."""
        buf = self.buf
        base = self.base
        pos = self.pos
        frame_end = self.frame_end
        index = self.index
        holes = self.holes  # the same deque throughout (``in_hole`` pops from it)
        unpack_msg = MESSAGE_HEADER.unpack_from
        unpack_payload = PAYLOAD_HEADER.unpack_from
        frame_header, message_header, payload_header = FRAME_HEADER_SIZE, MESSAGE_HEADER_SIZE, PAYLOAD_HEADER_SIZE
        unknown_flags, max_key, magic_ok, version_ok = ~KNOWN_MESSAGE_FLAGS, MAX_KEY_LEN, PAYLOAD_MAGIC, PAYLOAD_VERSION
        messages = other = 0
        noted = len(out)
        lengths: List[int] = []  # of ``out`` after each step that added to it (with ``completed``)
        completing: List[int] = []  # the record of each such step
        last = len(ends) - 1
        step = 0
        limit = ends[0]
        ts = times[0]
        while True:
            need = 0  # the stream offset whose byte the walker waits for, 0: the next step's bytes, whatever
            while True:
                if frame_end < 0:
                    if not self.synced:
                        found = self._resync(pos, limit, stats)
                        if found < 0:
                            pos = max(pos, limit - 1)
                            break
                        pos = found
                        if not self.synced:
                            break  # candidate header not complete yet
                    if pos + frame_header > limit:
                        need = pos + frame_header
                        break
                    if holes and self.in_hole(pos, pos + frame_header):
                        stats.frames_lost_in_holes += 1
                        self.synced = False
                        continue
                    try:
                        kind, flags, length = parse_frame_header(buf[pos - base:pos - base + frame_header])
                    except CodecError:
                        stats.codec_errors += 1
                        self.synced = False
                        pos += 1
                        continue
                    if kind == _DATA:
                        self.frame_start = pos
                        frame_end = pos + frame_header + length
                        pos += frame_header
                    elif kind == _FRAGMENT:
                        if pos + frame_header + length > limit:
                            need = pos + frame_header + length
                            break  # a piece (at most a batch) is read whole
                        self._fragment(pos + frame_header, flags, length, ts, out, stats)
                        pos += frame_header + length
                    else:
                        pos += frame_header + length
                    continue
                if pos >= frame_end:
                    frame_end = -1
                    continue
                if pos + message_header > limit:
                    need = pos + message_header
                    break
                if holes and self.in_hole(pos, pos + message_header):
                    stats.frame_parts_skipped += 1
                    pos = frame_end
                    frame_end = -1
                    continue
                mflags, _ttl, _origin, keylen, paylen = unpack_msg(buf, pos - base)
                pstart = pos + message_header + keylen
                stop = pstart + paylen
                if mflags & unknown_flags or keylen == 0 or keylen > max_key or stop > frame_end:
                    # not a message: the frame header we synchronised on was not one, or the stream is corrupt
                    stats.codec_errors += 1
                    self.synced = False
                    pos = self.frame_start + 1
                    frame_end = -1
                    continue
                if stop > limit:
                    need = stop
                    break  # the message's last byte has not arrived yet
                if paylen >= payload_header and not (holes and self.in_hole(pstart, pstart + payload_header)):
                    magic, version, _f, flow, seq, send_ns = unpack_payload(buf, pstart - base)
                    if magic == magic_ok and version == version_ok:
                        out.append((index, ts, flow, seq, send_ns, mflags & PRIORITY_MASK, paylen))
                        messages += 1
                    else:
                        other += 1
                elif paylen >= payload_header:
                    stats.messages_hidden += 1
                else:
                    other += 1
                pos = stop
            if completed is not None and len(out) != noted:
                noted = len(out)
                lengths.append(noted)
                completing.append(records[step])
            if step == last:
                break
            step += 1
            while step < last and ends[step] < need:
                step += 1
            limit = ends[step]
            ts = times[step]
        if completed is not None:
            completed.note_steps(lengths, completing)
        stats.messages += messages
        stats.messages_other += other
        self.pos = pos
        self.frame_end = frame_end
        if pos - base > _TRIM_AT:  # else nothing to trim (trim keeps at most up to pos)
            self.trim()

    def _fragment(self, start: int, prio: int, length: int, ts: int, out: list, stats: CaptureStats) -> None:
        """One FRAGMENT frame whose body (``length`` bytes at stream offset ``start``) is all here."""
        buf, base = self.buf, self.base
        fragments = self.fragments
        if self.in_hole(start, start + FRAGMENT_HEADER_SIZE):
            fragments.pop(prio, None)
            stats.frame_parts_skipped += 1
            return
        total, offset = FRAGMENT_HEADER.unpack_from(buf, start - base)
        end = start + length
        if offset == 0:
            self.orphans.discard(prio)
            if prio in fragments:
                stats.frame_parts_skipped += 1  # the one in progress never finished
            m = start + FRAGMENT_HEADER_SIZE
            seen: object = "hidden"
            if m + MESSAGE_HEADER_SIZE <= end and not self.in_hole(m, m + MESSAGE_HEADER_SIZE):
                mflags, _ttl, _origin, keylen, paylen = MESSAGE_HEADER.unpack_from(buf, m - base)
                if mflags & ~KNOWN_MESSAGE_FLAGS or keylen == 0 or keylen > MAX_KEY_LEN or \
                        MESSAGE_HEADER_SIZE + keylen + paylen != total:
                    stats.codec_errors += 1
                    fragments.pop(prio, None)
                    return
                pstart = m + MESSAGE_HEADER_SIZE + keylen
                seen = "other"
                if paylen >= PAYLOAD_HEADER_SIZE:
                    seen = "hidden"
                    if pstart + PAYLOAD_HEADER_SIZE <= end and not self.in_hole(pstart, pstart + PAYLOAD_HEADER_SIZE):
                        magic, version, _f, flow, seq, send_ns = PAYLOAD_HEADER.unpack_from(buf, pstart - base)
                        seen = (flow, seq, send_ns, mflags & PRIORITY_MASK, paylen) \
                            if magic == PAYLOAD_MAGIC and version == PAYLOAD_VERSION else "other"
            state = fragments[prio] = [total, 0, seen]
        else:
            state = fragments.get(prio)
            if state is None:
                self.orphans.add(prio)
                self.orphan_pieces += 1
            if state is None or state[0] != total or state[1] != offset:
                fragments.pop(prio, None)
                stats.frame_parts_skipped += 1
                return
        state[1] += length - FRAGMENT_HEADER_SIZE
        if state[1] < total:
            return
        del fragments[prio]
        seen = state[2]
        if seen == "other":
            stats.messages_other += 1
        elif seen == "hidden":
            stats.messages_hidden += 1
        else:
            flow, seq, send_ns, mprio, paylen = seen
            out.append((self.index, ts, flow, seq, send_ns, mprio, paylen))
            stats.messages += 1

    def _resync(self, pos: int, limit: int, stats: CaptureStats) -> int:
        """Offset of the next plausible frame header at or after ``pos``, or -1."""
        buf = self.buf
        base = self.base
        stats.resyncs += 1
        if self.first_sync < 0:
            self.searches_to_sync += 1
        while True:
            i = buf.find(FRAME_MAGIC, pos - base, limit - base)
            if i < 0:
                return -1
            cand = i + base
            if cand + FRAME_HEADER_SIZE > limit:
                return cand  # not complete yet: keep looking from here when more data arrives
            if self.in_hole(cand, cand + FRAME_HEADER_SIZE):
                pos = cand + 1
                continue
            try:
                kind, _flags, length = parse_frame_header(buf[i:i + FRAME_HEADER_SIZE])
            except CodecError:
                pos = cand + 1
                continue
            if kind == _DATA:
                if length < MESSAGE_HEADER_SIZE + 1:
                    pos = cand + 1
                    continue
                m = cand + FRAME_HEADER_SIZE
                if m + MESSAGE_HEADER_SIZE <= limit and not self.in_hole(m, m + MESSAGE_HEADER_SIZE):
                    mflags, _t, _o, keylen, paylen = MESSAGE_HEADER.unpack_from(buf, m - base)
                    if (mflags & ~KNOWN_MESSAGE_FLAGS or keylen == 0 or keylen > MAX_KEY_LEN
                            or MESSAGE_HEADER_SIZE + keylen + paylen > length):
                        pos = cand + 1
                        continue
            self.synced = True
            if self.first_sync < 0:
                self.first_sync = cand
            return cand

    def lead_in_complete(self) -> bool:
        """Whether what was seen of the stream so far gives it the state the whole capture would (when a
        piece of a capture starts here): started by a SYN, or synchronised on a frame with no fragmented
        message whose first piece was missed."""
        return not self.started or self.from_syn or (self.synced and not self.orphans)

    def fresh_start_complete(self) -> bool:
        """For a stream first seen inside a piece: it began with a SYN or at a frame header (nothing of it
        before the piece was in a frame still open)."""
        return self.from_syn or self.first_sync == self.origin

    def finish(self, stats: CaptureStats, out: list) -> None:
        """The stream ends (end of file, or a new SYN on its addresses): the frame walker drops a message not
        complete by then (a reader that keeps observations waiting for later bytes emits them here)."""

    def flush_pending(self, stats: CaptureStats, out: list, force: bool, now: int = 0) -> None:
        """Append pending segments that have become contiguous; with ``force``, turn gaps into holes.
        ``now``: the timestamp of the packet that filled the gap (what the pending bytes complete is
        complete from then on, not from their own earlier arrival)."""
        pending = self.pending
        while pending:
            nxt = self.next
            seg = pending.pop(nxt, None)
            if seg is None:
                first = min(pending)
                if first < nxt:
                    seg = pending.pop(first)
                    data, wire_len, ts = seg
                    self.pending_bytes -= wire_len
                    skip = nxt - first
                    if skip >= wire_len:
                        continue
                    self.append(data[skip:], wire_len - skip, stats)
                    self.walk(ts if ts > now else now, out, stats)
                    continue
                if not force:
                    return
                self.gap(first, stats)
                continue
            data, wire_len, ts = seg
            self.pending_bytes -= wire_len
            self.append(data, wire_len, stats)
            self.walk(ts if ts > now else now, out, stats)


StreamFactory = Callable[[int], _Stream]


class _Completions:
    """Which record completed each observation of a list: ``lengths[i]``, the list's length once record
    ``records[i]`` was read (noted only where the list grew: memory by observations, not by packets). Streams
    walked in batches append theirs stream by stream; ``in_record_order`` puts the list back in the order one
    walk per packet gives (by record, then as appended)."""

    __slots__ = ("lengths", "records")

    def __init__(self):
        self.lengths: List[int] = []
        self.records: List[int] = []

    def note(self, length: int, record: int) -> None:
        """The observations up to ``length`` not noted yet were completed by ``record`` (none: nothing kept)."""
        if length != (self.lengths[-1] if self.lengths else 0):
            self.lengths.append(length)
            self.records.append(record)

    def note_steps(self, lengths: List[int], records: List[int]) -> None:
        """``note`` of each (length, record), the lengths increasing."""
        self.lengths += lengths
        self.records += records

    def in_record_order(self, out: list) -> None:
        if not self.lengths:
            return
        counts = np.diff(np.array(self.lengths, dtype=np.int64), prepend=0)
        if self.lengths[-1] != len(out) or (counts < 0).any():
            raise AssertionError("observations appended without their record noted")
        records = np.repeat(np.array(self.records, dtype=np.int64), counts)
        if (records[1:] < records[:-1]).any():
            out[:] = [out[i] for i in np.argsort(records, kind="stable").tolist()]


def decode_pcap(data: Union[bytes, bytearray, memoryview, mmap.mmap],
                stream_factory: Optional[StreamFactory] = None) -> DecodedCapture:
    """Decode a whole pcap held in memory. Never raises for damaged input: see ``stats.error``.
    ``stream_factory(index)``: the reader of each stream direction (default: the router frame walker)."""
    raw = data if isinstance(data, (bytes, bytearray, mmap.mmap)) else bytes(data)
    return _decode_reporting(raw, stream_factory or _Stream, None)


def decode_pcap_file(path: str, stream_factory: Optional[StreamFactory] = None) -> DecodedCapture:
    """Decode a pcap on disk through mmap: the file is never held in memory as a whole."""
    return _with_mapped(path, lambda raw: decode_pcap(raw, stream_factory))


def _with_mapped(path: str, use: Callable[[Union[bytes, mmap.mmap]], DecodedCapture]) -> DecodedCapture:
    with open(path, "rb") as fh:
        try:
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            return use(b"")
        try:
            return use(mapped)
        finally:
            mapped.close()


def _decode_reporting(raw, make_stream: StreamFactory, span: Optional[Tuple[int, int, int]],
                      known_gaps: frozenset = frozenset(), opens: frozenset = frozenset()) -> DecodedCapture:
    """``_decode`` into a new result, its failure said in ``stats.error`` (a decoder bug must not lose the other
    files' results); ``_LeadInTooShort`` is for the caller."""
    result = DecodedCapture()
    try:
        _decode(raw, result, make_stream, span, known_gaps, opens)
    except PcapError as err:
        result.stats.error = str(err)
    except _LeadInTooShort:
        raise
    except Exception as err:  # noqa: BLE001
        result.stats.error = f"decoder failed: {type(err).__name__}: {err}"
    return result


# ---------------------------------------------------------------- pieces of a capture

#: how far before its start a piece's decoding begins, tried in turn until the streams' state there is known
#: (the file's start comes last, and always is: it is decoding the whole file up to the piece)
LEAD_IN_BYTES = (1 << 20, 16 << 20, 128 << 20)


@dataclass(frozen=True)
class CapturePiece:
    """The records of a pcap from byte ``start`` to before byte ``stop`` (record boundaries), decoded by one
    task. ``lead_ins``: record boundaries to begin decoding at, nearest first, the file's first record last;
    the records between a lead-in and ``start`` only bring the TCP streams to their state at ``start``.
    ``opens``: the streams whose first segment with data (or SYN) in the file is in the piece."""

    index: int
    start: int
    stop: int
    lead_ins: Tuple[int, ...]
    opens: FrozenSet[Tuple[str, int, str, int]] = frozenset()


def capture_pieces(path: str, target_bytes: int, lead_in_bytes: Tuple[int, ...] = LEAD_IN_BYTES
                   ) -> List[CapturePiece]:
    """Split a pcap on disk into pieces of about ``target_bytes`` (at record boundaries, found by a scan of
    the record headers), each with lead-ins about ``lead_in_bytes`` before it. A file that is not a pcap, or
    whose records are corrupt, is one piece: decoded whole, it is reported as ``decode_pcap_file`` reports
    it; so is a capture that lost TCP segments for good (``_bytes_missing``)."""
    size = os.path.getsize(path)
    whole = [CapturePiece(0, 24, max(size, 24), (24,))]
    if target_bytes <= 0 or size <= target_bytes + 24:
        return whole
    with open(path, "rb") as fh:
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            try:
                endian, scale, l2 = _read_header(mapped)
            except PcapError:
                return whole
            scan = scan_records(mapped, endian)
            offsets = scan.offsets
            if scan.corrupt_at is not None or len(offsets) < 2:
                return whole
            moves = _segments_moving(mapped, offsets, endian, scale, l2)
            if _bytes_missing(moves):
                return whole
        finally:
            mapped.close()
    cuts = np.unique(offsets[np.minimum(np.searchsorted(offsets, np.arange(24 + target_bytes, size, target_bytes)),
                                        len(offsets) - 1)])
    bounds = [24] + [int(c) for c in cuts if c > 24] + [size]
    # where each stream's first segment with data or SYN is (the piece that opens it as decoding the file does)
    first = pd.DataFrame({"k": moves.src << 32 | moves.dst, "p": moves.sport << 16 | moves.dport}
                         ).drop_duplicates().index.to_numpy()
    opens: Dict[int, set] = {}
    for i in first.tolist():
        opens.setdefault(int(np.searchsorted(bounds, offsets[moves.record[i]], side="right")) - 1, set()).add(
            (_ip(int(moves.src[i]).to_bytes(4, "big")), int(moves.sport[i]), _ip(int(moves.dst[i]).to_bytes(4, "big")),
             int(moves.dport[i])))
    pieces = []
    for i, (start, stop) in enumerate(zip(bounds, bounds[1:])):
        if start == 24:
            pieces.append(CapturePiece(i, start, stop, (24,), frozenset(opens.get(i, ()))))
            continue
        leads = []
        for back in lead_in_bytes:
            at = int(offsets[max(int(np.searchsorted(offsets, start - back, side="right")) - 1, 0)])
            if at > 24 and at not in leads:
                leads.append(at)
        pieces.append(CapturePiece(i, start, stop, tuple(leads) + (24,), frozenset(opens.get(i, ()))))
    return pieces


@dataclass
class _Moving:
    """The TCP segments of a capture that carry data or a SYN (what moves a stream), one entry each."""

    record: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    sport: np.ndarray
    dport: np.ndarray
    seq: np.ndarray
    syn: np.ndarray
    wire_len: np.ndarray


def _segments_moving(raw, offsets: np.ndarray, endian: str, scale: int, l2: int) -> _Moving:
    parts = []
    for first, pk in _chunks(raw, offsets, endian, scale, l2):
        at = np.flatnonzero(pk.tcp & ((pk.wire_len > 0) | pk.syn))
        parts.append((at + first, pk.src[at], pk.dst[at], pk.sport[at], pk.dport[at], pk.seq[at], pk.syn[at],
                      pk.wire_len[at]))
    return _Moving(*(np.concatenate(column) for column in zip(*parts)))


def _bytes_missing(moves: _Moving) -> bool:
    """Whether a TCP stream of the capture lacks bytes between its first and its last captured one (a
    segment the capture never saw), or was opened twice. Decoding the whole file then holds the segments
    after such a gap for up to ``_PENDING_MAX_SEGMENTS`` / ``_PENDING_MAX_BYTES`` (or the end of the file),
    waiting for it; a piece that begins after the gap cannot know that it waits."""
    key = moves.src << 32 | moves.dst
    ports = moves.sport << 16 | moves.dport
    syn = moves.syn
    if syn.any() and pd.DataFrame({"k": key[syn], "p": ports[syn]}).duplicated().any():
        return True
    data = moves.wire_len > 0
    if not data.any():
        return False
    seg = pd.DataFrame({"k": key[data], "p": ports[data], "seq": moves.seq[data] + moves.syn[data],
                        "len": moves.wire_len[data]})
    # the sequence numbers unwrapped: each one the nearest to its stream's previous one (segments are never
    # 2 GiB out of place)
    step = seg.groupby(["k", "p"], sort=False)["seq"].diff().fillna(0).astype(np.int64)
    step = (step + (1 << 31)) % (1 << 32) - (1 << 31)
    seg["start"] = seg["seq"].groupby([seg["k"], seg["p"]], sort=False).transform("first") + \
        step.groupby([seg["k"], seg["p"]], sort=False).cumsum()
    seg["end"] = seg["start"] + seg["len"]
    seg = seg.sort_values(["k", "p", "start"], kind="stable")
    reach = seg.groupby(["k", "p"], sort=False)["end"].cummax()
    before = reach.groupby([seg["k"], seg["p"]], sort=False).shift(1)
    return bool((seg["start"] > before).any())


def decode_pcap_piece(path: str, piece: CapturePiece, stream_factory: Optional[StreamFactory] = None
                      ) -> DecodedCapture:
    """Decode one piece of a pcap on disk: the observations of the messages completed by its records (the
    packet carrying a message's last byte is in the piece), its records' traffic and counts. The pieces of
    a file together give what ``decode_pcap_file`` gives (``merge_pieces``); its streams are listed those
    with a packet in the piece first (``stats.streams`` of them), then those seen only in the lead-in."""
    make_stream = stream_factory or _Stream

    def decode(raw) -> DecodedCapture:
        if piece.start <= 24 and piece.stop >= len(raw):
            return _decode_reporting(raw, make_stream, None)
        known_gaps: frozenset = frozenset()
        for lead in piece.lead_ins:
            try:
                return _decode_reporting(raw, make_stream, (lead, piece.start, piece.stop), known_gaps, piece.opens)
            except _LeadInTooShort as short:
                known_gaps = short.gaps  # a gap a longer lead-in leaves unfilled too was never captured
        raise AssertionError("the last lead-in is the file's start, which needs no check")
    return _with_mapped(path, decode)


def merge_piece_stats(parts: List[Tuple[CaptureStats, List[Tuple[str, int, str, int]]]]) -> CaptureStats:
    """One file's counts from its pieces' (in file order; each with the streams it had packets of)."""
    merged = CaptureStats()
    streams = set()
    for stats, own_streams in parts:
        for name, value in stats.as_dict().items():
            if isinstance(value, bool):
                setattr(merged, name, getattr(merged, name) or value)
            elif isinstance(value, int) and name not in ("first_ts_ns", "last_ts_ns", "streams"):
                setattr(merged, name, getattr(merged, name) + value)
        streams.update(own_streams)
        if merged.error is None:
            merged.error = stats.error
        if merged.first_ts_ns is None:
            merged.first_ts_ns = stats.first_ts_ns
        if stats.last_ts_ns is not None:
            merged.last_ts_ns = stats.last_ts_ns
        merged.method = stats.method
    merged.streams = len(streams)
    return merged


def merge_pieces(parts: List[DecodedCapture]) -> DecodedCapture:
    """What ``decode_pcap_file`` gives for a file, from ``decode_pcap_piece`` of each of its pieces in order."""
    merged = DecodedCapture()
    number: Dict[Tuple[str, int, str, int], int] = {}
    for part in parts:
        index = []
        for key in part.streams:
            if key not in number:
                number[key] = len(merged.streams)
                merged.streams.append(key)
            index.append(number[key])
        merged.observations.extend((index[o[0]],) + o[1:] for o in part.observations)
        for (stream, second), (nbytes, npackets) in part.traffic.items():
            tb = merged.traffic.setdefault((index[stream], second), [0, 0])
            tb[0] += nbytes
            tb[1] += npackets
    merged.stats = merge_piece_stats([(p.stats, p.streams[:p.stats.streams]) for p in parts])
    return merged


def _read_header(raw) -> Tuple[str, int, int]:
    """(struct endian, ns per timestamp fraction unit, link-layer header length) of a pcap's file header."""
    size = len(raw)
    if size < 24:
        raise PcapError("empty file" if size == 0 else f"only {size} bytes: no complete pcap header")
    magic_le = struct.unpack_from("<I", raw, 0)[0]
    if magic_le in (PCAP_MAGIC_NS, PCAP_MAGIC_US):
        endian = "<"
    elif struct.unpack_from(">I", raw, 0)[0] in (PCAP_MAGIC_NS, PCAP_MAGIC_US):
        endian = ">"
    else:
        if magic_le == 0x0A0D0D0A:
            raise PcapError("pcapng is not supported; capture with tcpdump -w (pcap) instead")
        raise PcapError(f"not a pcap file (magic 0x{magic_le:08x})")
    magic = struct.unpack_from(endian + "I", raw, 0)[0]
    scale = 1 if magic == PCAP_MAGIC_NS else 1000
    linktype = struct.unpack_from(endian + "I", raw, 20)[0] & 0x0FFFFFFF
    l2 = _LINK_HEADER.get(linktype)
    if l2 is None:
        raise PcapError(f"link type {linktype} is not supported (Ethernet, Linux cooked or raw IP)")
    return endian, scale, l2


_LINK_HEADER = {LINKTYPE_ETHERNET: 14, LINKTYPE_LINUX_SLL: 16, LINKTYPE_LINUX_SLL2: 20, LINKTYPE_RAW: 0,
                LINKTYPE_IPV4: 0, LINKTYPE_NULL: 4}


@dataclass(frozen=True)
class RecordScan:
    """The complete records of a pcap from one offset on: where each starts (its 16-byte record header), and
    how the scan ended (the file cut inside a record, or a record header that is corruption)."""

    offsets: np.ndarray          # int64, increasing
    truncated: bool              # the file ends inside a record (or a record header)
    corrupt_at: Optional[int]    # offset of a record header claiming more than _MAX_RECORD bytes


def scan_records(raw, endian: str, start: int = 24, stop: Optional[int] = None) -> RecordScan:
    """The records starting at ``start`` (a record boundary) and before ``stop`` (default: the file end):
    a chain of record headers, each giving the length of its record."""
    size = len(raw)
    stop = size if stop is None else min(stop, size)
    view = memoryview(raw)
    unpack = struct.Struct(endian + "I").unpack_from
    found = []
    add = found.append
    off = start
    last = size - 16  # a record header must fit
    limit = stop if stop <= last else last + 1
    while off < limit:
        add(off)
        off += 16 + unpack(view, off + 8)[0]
    offsets = np.array(found, dtype=np.int64)
    truncated = stop == size and off < size and off >= limit  # a record header cut by the end of the file
    corrupt_at = None
    if len(offsets):
        incl = _u32(np.frombuffer(raw, np.uint8), offsets + 8, endian == "<")
        bad = np.flatnonzero(incl > _MAX_RECORD)
        if len(bad):  # the chain is corruption from there on
            corrupt_at = int(offsets[bad[0]])
            offsets = offsets[:bad[0]]
            truncated = False
        elif int(offsets[-1]) + 16 + int(incl[-1]) > size:  # the last record is cut by the end of the file
            offsets = offsets[:-1]
            truncated = True
    return RecordScan(offsets, truncated, corrupt_at)


def _u8(b: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return b[np.minimum(pos, len(b) - 1)].astype(np.int64)


def _u32(b: np.ndarray, pos: np.ndarray, little: bool = False) -> np.ndarray:
    if little:
        return _u8(b, pos) | (_u8(b, pos + 1) << 8) | (_u8(b, pos + 2) << 16) | (_u8(b, pos + 3) << 24)
    return (_u8(b, pos) << 24) | (_u8(b, pos + 1) << 16) | (_u8(b, pos + 2) << 8) | _u8(b, pos + 3)


@dataclass
class _Packets:
    """The records' headers decoded at once (numpy arrays, one entry per record)."""

    ts: np.ndarray         # ns
    orig: np.ndarray       # length on the wire
    tcp: np.ndarray        # bool: an IPv4 TCP segment (not a fragment) with a whole TCP header
    src: np.ndarray        # IPv4 addresses and ports (meaningful where tcp)
    dst: np.ndarray
    sport: np.ndarray
    dport: np.ndarray
    seq: np.ndarray
    syn: np.ndarray        # bool
    data_start: np.ndarray  # file offset of the TCP payload
    wire_len: np.ndarray   # payload bytes on the wire
    captured: np.ndarray   # of those, bytes in the capture


def _packets(raw, offsets: np.ndarray, endian: str, scale: int, l2: int) -> _Packets:
    """The records' headers, each record's first bytes copied into a row of one layout: its record header, link
    header, the first 20 bytes of its IPv4 header and the first 14 of its TCP header; every field is a column of
    those rows. A record laid out otherwise (a VLAN tag, IP options) gets its row made without those bytes
    (``_row_without_extras``), and their lengths are kept per record (``extra``, ``ihl``). Bytes past a record's
    end are the next record's (zeros past the file's end); no field of a TCP segment (``tcp``) comes from
    them."""
    width = 16 + l2 + 34
    tag = 4 if l2 == 14 else 0  # an Ethernet frame's VLAN tag
    read = width + tag
    n = len(offsets)
    size = len(raw)
    whole = int(np.searchsorted(offsets, size - read, side="right"))  # rows not cut by the end of the file
    starts = offsets.tolist()
    rows = b"".join([raw[o:o + read] for o in starts[:whole]]
                    + [raw[o:o + read].ljust(read, b"\0") for o in starts[whole:]])
    h = np.frombuffer(rows, np.uint8).reshape(n, read)
    if tag:  # a tagged frame's row without its tag (the MACs, then the frame's own type and what follows)
        vlan = (h[:, 28] == 0x81) & (h[:, 29] == 0x00)
        h = np.where(vlan[:, None], np.concatenate([h[:, :28], h[:, 32:]], axis=1), h[:, :width]) if vlan.any() \
            else h[:, :width]
    else:
        vlan = np.zeros(n, dtype=bool)
    ip = 16 + l2  # the IPv4 header's column
    other = np.flatnonzero(h[:, ip] & 0x0F != 5)  # IP options: rows made one by one
    if len(other):
        h = h.copy()
        for r in other.tolist():
            h[r] = np.frombuffer(_row_without_extras(raw, starts[r], l2, width), np.uint8)
    u8 = lambda c: h[:, c].astype(np.int64)  # noqa: E731
    be16 = lambda c: u8(c) << 8 | u8(c + 1)  # noqa: E731
    be32 = lambda c: be16(c) << 16 | be16(c + 2)  # noqa: E731
    words = h[:, :16].view(endian + "u4").astype(np.int64)
    ts = words[:, 0] * 1_000_000_000 + words[:, 1] * scale
    incl = words[:, 2]
    orig = words[:, 3]
    if l2 == 14:
        ok = (incl >= 34) & (be16(28) == 0x0800)  # a VLAN tag's inner type (the tag left out of the row)
    elif l2 == 16:
        ok = be16(30) == 0x0800
    elif l2 == 20:
        ok = be16(16) == 0x0800
    elif l2:
        ok = (u8(16) == 2) | (u8(19) == 2)
    else:
        ok = np.ones(n, dtype=bool)
    link = l2 + 4 * vlan  # the link header's length
    vihl = u8(ip)
    ihl = (vihl & 0x0F) * 4
    tcp_at = ip + 20
    thl = (u8(tcp_at + 12) >> 4) * 4
    ok &= (incl - link >= 20) & (vihl >> 4 == 4) & (u8(ip + 9) == 6) & (be16(ip + 6) & 0x1FFF == 0)
    ok &= incl - link - ihl >= 20
    total_len = be16(ip + 2)
    data_start = offsets + 16 + link + ihl + thl
    wire_len = np.maximum(np.where(total_len != 0, total_len - ihl - thl, orig - link - ihl - thl), 0)
    captured = np.minimum(np.maximum(offsets + 16 + incl - data_start, 0), wire_len)
    return _Packets(ts, orig, ok, be32(ip + 12), be32(ip + 16), be16(tcp_at), be16(tcp_at + 2), be32(tcp_at + 4),
                    (u8(tcp_at + 13) & 0x02) != 0, data_start, wire_len, captured)


def _row_without_extras(raw, start: int, l2: int, width: int) -> bytes:
    """The row of ``_packets`` for the record at ``start`` whose headers are laid out otherwise: its VLAN tag
    (Ethernet) and IP options left out, so each field is where the rows have it."""
    def at(pos: int, n: int) -> bytes:
        return raw[pos:pos + n].ljust(n, b"\0")

    link = start + 16
    if l2 == 14 and at(link + 12, 2) == b"\x81\x00":
        header = at(link, 12) + at(link + 16, 2)  # the MACs, then the tagged frame's own type
        ip = link + 18
    else:
        header = at(link, l2)
        ip = link + l2
    ihl = (at(ip, 1)[0] & 0x0F) * 4
    return at(start, 16) + header + at(ip, 20) + at(ip + ihl, 14)


class _LeadInTooShort(Exception):
    """A piece's lead-in did not bring every stream to the state decoding the whole file gives there.
    ``gaps``: the gaps of its streams never filled (stream, sequence number), when that was the reason."""

    def __init__(self, gaps: frozenset = frozenset()):
        super().__init__()
        self.gaps = gaps


def _decode(raw: Union[bytes, bytearray, mmap.mmap], result: DecodedCapture, make_stream: StreamFactory,
            span: Optional[Tuple[int, int, int]] = None, known_gaps: frozenset = frozenset(),
            opens: frozenset = frozenset()) -> None:
    """Decode the records of ``raw``; ``span`` = (lead-in, start, stop) decodes only the piece of the records
    from ``start`` to before ``stop``, after decoding the records from ``lead-in`` on to bring the streams to
    their state at ``start`` (what the lead-in sees is not counted). A gap never filled may be bytes that came
    before the lead-in (an out-of-order segment waiting for them there): unless ``known_gaps`` (those a longer
    lead-in left unfilled too) has it, it ends the decoding with ``_LeadInTooShort``. ``opens``: the streams
    that begin in the piece (``CapturePiece.opens``)."""
    stats = result.stats
    size = len(raw)
    if size < 24:
        stats.truncated_file = size > 0
    endian, scale, l2 = _read_header(raw)
    lead, start, stop = span or (24, 24, size)
    checked = lead > 24  # the streams' history before the lead-in is unknown: check what it must have given
    scan = scan_records(raw, endian, lead, stop)
    offsets = scan.offsets
    own = int(np.searchsorted(offsets, start))  # the first record of the piece
    stream_list = result.streams
    streams: List[_Stream] = []
    numbers: Dict[Tuple[int, int], int] = {}   # (addresses, ports) -> stream number, in order of appearance
    first_own: Dict[int, int] = {}            # stream number -> its first record in the piece
    traffic = result.traffic
    view = memoryview(raw)
    out = result.observations if own == 0 else []
    seen = stats if own == 0 else CaptureStats()  # what the lead-in sees is not counted
    switched = own == 0
    completed = _Completions()  # which record completed each observation of the piece
    batched = []  # per stream: read by this module's walker (walked in batches), not a reader's own walk
    started_before: set = set()  # the streams started when the piece began
    orphans_before: Dict[int, int] = {}
    wire_total = 0
    first_ts: Optional[int] = None
    last_ts: Optional[int] = None
    for first, pk in _chunks(raw, offsets, endian, scale, l2):
        tcp = np.flatnonzero(pk.tcp)
        pair_codes, pairs = pd.factorize(pk.src[tcp] << 32 | pk.dst[tcp])
        port_codes, ports = pd.factorize(pk.sport[tcp] << 16 | pk.dport[tcp])
        combo_of, combos = pd.factorize(pair_codes.astype(np.int64) * max(len(ports), 1) + port_codes)
        combo_first = np.unique(combo_of, return_index=True)[1]
        to_number = np.empty(len(combos), dtype=np.int64)
        for c, rec in enumerate(tcp[combo_first].tolist()):  # each (addresses, ports) of this chunk, in order
            key = (int(pairs[pair_codes[combo_first[c]]]), int(ports[port_codes[combo_first[c]]]))
            number = numbers.get(key)
            if number is None:
                number = numbers[key] = len(streams)
                streams.append(make_stream(number))
                batched.append(type(streams[-1]).walk is _Stream.walk)
                src, dst = int(pk.src[rec]), int(pk.dst[rec])
                stream_list.append((_ip(src.to_bytes(4, "big")), int(pk.sport[rec]), _ip(dst.to_bytes(4, "big")),
                                    int(pk.dport[rec])))
            to_number[c] = number
        stream_of = to_number[combo_of]
        # what is counted per packet, for the piece's records only
        mine = tcp + first >= own
        own_tcp = tcp[mine]
        own_streams = stream_of[mine]
        for number, at in zip(*np.unique(own_streams, return_index=True)):
            first_own.setdefault(int(number), first + int(own_tcp[at]))
        stats.tcp_segments += len(own_tcp)
        lead_records = min(max(own - first, 0), len(pk.ts))  # of this chunk, in the lead-in
        stats.non_tcp_packets += len(pk.ts) - lead_records - len(own_tcp)
        stats.payload_bytes += int(pk.wire_len[own_tcp].sum())
        stats.captured_payload_bytes += int(pk.captured[own_tcp].sum())
        bins, keys = pd.factorize(own_streams << 33 | pk.ts[own_tcp] // 1_000_000_000)
        nbytes = np.bincount(bins, weights=pk.orig[own_tcp], minlength=len(keys)).astype(np.int64)
        npackets = np.bincount(bins, minlength=len(keys))
        for k, nb, npk in zip(keys.tolist(), nbytes.tolist(), npackets.tolist()):
            tb = traffic.get((k >> 33, k & ((1 << 33) - 1)))
            if tb is None:
                traffic[(k >> 33, k & ((1 << 33) - 1))] = [nb, npk]
            else:
                tb[0] += nb
                tb[1] += npk
        mine_records = pk.orig[lead_records:]
        wire_total += int(mine_records.sum())
        if len(mine_records):
            if first_ts is None:
                first_ts = int(pk.ts[lead_records])
            last_ts = int(pk.ts[-1])
        # the streams: only segments that carry data or open a connection, those of the lead-in first, each
        # stream's in their order (streams are independent; ``completed`` restores the order of the
        # observations one walk per packet gives)
        moving = (pk.wire_len[tcp] > 0) | pk.syn[tcp]
        moves = tcp[moving]
        lead_moves = 0 if switched else int(np.searchsorted(moves, own - first))
        for lo, hi in ((0, lead_moves), (lead_moves, len(moves))):
            if lo == hi:
                continue
            if not switched and lo == lead_moves:  # (``_feed`` left no stream with bytes not walked)
                if checked:
                    _check_lead_in(streams)
                started_before = {st.index for st in streams if st.started}
                orphans_before = {st.index: st.orphan_pieces for st in streams}
                out, seen, switched = result.observations, stats, True
            _feed(streams, batched, pk, first, moves[lo:hi], stream_of[moving][lo:hi], view, checked, out, seen,
                  completed if switched else None)
    if not switched and checked:
        _check_lead_in(streams)
        started_before = {st.index for st in streams if st.started}
        orphans_before = {st.index: st.orphan_pieces for st in streams}
    if checked:
        for st in streams:
            if st.orphan_pieces != orphans_before.get(st.index, 0) and not st.from_syn:
                raise _LeadInTooShort  # a piece of a fragmented message that began before the lead-in
            if st.started and st.index not in started_before and not st.from_syn \
                    and stream_list[st.index] not in opens:
                if not st.fresh_start_complete():
                    raise _LeadInTooShort  # a stream first seen in the piece, mid-way through a frame
                # it began at a frame boundary, where decoding the whole file was in step already
                stats.resyncs -= st.searches_to_sync
    if scan.truncated:
        stats.truncated_file = True
    if scan.corrupt_at is not None:
        completed.in_record_order(result.observations)  # what was decoded up to there is kept, in order
        raise PcapError(f"record at byte {scan.corrupt_at} claims "
                        f"{int(_u32(np.frombuffer(raw, np.uint8), np.array([scan.corrupt_at + 8]), endian == '<')[0])}"
                        " bytes: the file is corrupt from there on")
    if stop >= size:  # end of file: segments still waiting for a gap that was never filled
        for st in streams:
            if st.pending:
                st.flush_pending(stats, result.observations, force=True)
            st.finish(stats, result.observations)
        completed.note(len(result.observations), len(offsets))
    completed.in_record_order(result.observations)
    if checked:
        gaps = frozenset((stream_list[st.index], seq) for st in streams for seq in
                         st.gaps + ([st.next & 0xFFFFFFFF] if st.pending else []))
        if gaps - known_gaps:
            raise _LeadInTooShort(gaps)
    packets = len(offsets) - own
    stats.packets = packets
    stats.bytes_on_wire = wire_total
    stats.streams = len(first_own)  # the first ones of ``result.streams``
    stats.first_ts_ns = first_ts
    stats.last_ts_ns = last_ts if packets else None
    if own:
        _own_streams_first(result, first_own)


def _segment(st: _Stream, seq: int, syn: bool, wire_len: int, captured: int, data: memoryview, ts: int,
             checked: bool, out: list, seen: CaptureStats) -> None:
    """One segment of a stream that ``append_in_order`` does not take: a SYN, a segment out of order, one
    that repeats bytes already had, or one the capture cut short; walked at once."""
    if syn:
        if st.started:
            st.finish(seen, out)
        st.start((seq + 1) & 0xFFFFFFFF, True)
        if not wire_len:
            return
        seq = (seq + 1) & 0xFFFFFFFF
    if not st.started:
        st.start(seq, False)
    nxt = st.next
    start_at = nxt + ((seq - nxt) & 0xFFFFFFFF)  # the sequence number unwrapped near the next expected
    if start_at - nxt >= 0x80000000:
        start_at -= 0x100000000
    if start_at != nxt:
        if checked and start_at < st.origin and not st.from_syn:
            raise _LeadInTooShort  # bytes from before the stream's first segment here: history is missing
        stop_at = start_at + wire_len
        if stop_at <= nxt:
            seen.retransmitted_segments += 1
            return
        if start_at > nxt:
            seen.out_of_order_segments += 1
            if start_at not in st.pending or st.pending[start_at][1] < wire_len:
                st.pending[start_at] = (bytes(data), wire_len, ts)
                st.pending_bytes += wire_len
            if len(st.pending) > _PENDING_MAX_SEGMENTS or st.pending_bytes > _PENDING_MAX_BYTES:
                st.flush_pending(seen, out, force=True)
            return
        # overlaps data already had: keep only the new part
        seen.retransmitted_segments += 1
        skip = nxt - start_at
        st.append(data[skip:] if skip < captured else b"", wire_len - skip, seen)
    else:
        st.append(data, wire_len, seen)
    st.walk(ts, out, seen)
    if st.pending:
        st.flush_pending(seen, out, force=False, now=ts)


def _feed(streams: List[_Stream], batched: List[bool], pk: "_Packets", first: int, moves: np.ndarray,
          stream_of: np.ndarray, view: memoryview, checked: bool, out: list, seen: CaptureStats,
          completed: Optional[_Completions]) -> None:
    """The segments ``moves`` (of the chunk whose first record is ``first``; ``stream_of``: their streams),
    stream by stream, each stream's in order. A run of whole segments that each continue the one before
    (``runs``) is appended at once when its first continues the stream where it stands, and walked later with
    the stream's next ones (``walk_appended``); any other segment goes through ``_segment``, walked at once.
    Every stream's appended segments are walked by the time it returns (at the end of the stream's last run)."""
    order = np.argsort(stream_of, kind="stable")
    at = moves[order]
    streams_of = stream_of[order]
    seqs = pk.seq[at]
    wire = pk.wire_len[at]
    captured = pk.captured[at]
    syn = pk.syn[at]
    whole = ~syn & (captured == wire)
    # a run: whole segments of one stream, each starting where the one before ends
    runs = np.ones(len(at), dtype=bool)  # True where a run starts
    runs[1:] = ~((streams_of[1:] == streams_of[:-1]) & whole[1:] & whole[:-1]
                 & (seqs[1:] == (seqs[:-1] + wire[:-1]) & 0xFFFFFFFF))
    starts = np.flatnonzero(runs).tolist() + [len(at)]
    records = (at + first).tolist()
    seq_l, wire_l, cap_l, syn_l, whole_l = seqs.tolist(), wire.tolist(), captured.tolist(), syn.tolist(), whole.tolist()
    data_at = pk.data_start[at].tolist()
    data_end = (pk.data_start[at] + captured).tolist()
    times = pk.ts[at].tolist()
    streams_l = streams_of.tolist()
    bytes_before = np.concatenate(([0], np.cumsum(captured))).tolist()  # captured bytes of the segments before
    slice_of = view.__getitem__
    for r in range(len(starts) - 1):
        i, end = starts[r], starts[r + 1]
        si = streams_l[i]
        st = streams[si]
        while i < end:
            if whole_l[i] and batched[si] and st.started and not st.pending and not (seq_l[i] - st.next) & 0xFFFFFFFF:
                # the run's bytes in pieces of up to _JOIN_BYTES: one copy into the stream where a segment is
                # that long, else joined first (one call for many segments; the joined piece stays in cache)
                upto = max(i + 1, bisect_right(bytes_before, bytes_before[i] + _JOIN_BYTES, i, end + 1) - 1)
                if upto == i + 1:
                    st.buf += view[data_at[i]:data_end[i]]
                else:
                    st.buf += b"".join(map(slice_of, map(slice, data_at[i:upto], data_end[i:upto])))
                st.next += sum(wire_l[i:upto])
                st.appended += records[i:upto]
                if st.next - st.base > _WALK_BATCH_BYTES:  # the buffer is bounded as a walk per packet bounds it
                    st.walk_appended(pk.wire_len, pk.ts, first, out, seen, completed)
                i = upto
                continue
            if st.appended:
                st.walk_appended(pk.wire_len, pk.ts, first, out, seen, completed)
            _segment(st, seq_l[i], syn_l[i], wire_l[i], cap_l[i], view[data_at[i]:data_end[i]], times[i], checked,
                     out, seen)
            if completed is not None:
                completed.note(len(out), records[i])
            i += 1
        if st.appended and (r + 2 == len(starts) or streams_l[starts[r + 1]] != si):  # the stream's last run
            st.walk_appended(pk.wire_len, pk.ts, first, out, seen, completed)


def _own_streams_first(result: DecodedCapture, first_own: Dict[int, int]) -> None:
    """Renumber a piece's streams: those with a packet in the piece first, in order of their first one there,
    then those seen only in its lead-in."""
    order = sorted(first_own, key=first_own.get) + [i for i in range(len(result.streams)) if i not in first_own]
    if order == list(range(len(order))):
        return
    renumber = {old: new for new, old in enumerate(order)}
    result.streams[:] = [result.streams[old] for old in order]
    result.observations[:] = [(renumber[o[0]],) + o[1:] for o in result.observations]
    traffic = {(renumber[stream], second): v for (stream, second), v in result.traffic.items()}
    result.traffic.clear()
    result.traffic.update(traffic)


def _chunks(raw, offsets: np.ndarray, endian: str, scale: int, l2: int):
    """(index of the first record, ``_Packets``) of ``_CHUNK`` records at a time: memory bounded by the chunk."""
    for first in range(0, len(offsets), _CHUNK):
        yield first, _packets(raw, offsets[first:first + _CHUNK], endian, scale, l2)


_CHUNK = 1 << 18  # records decoded at once (~40 arrays of 8 bytes each per record)
_WALK_BATCH_BYTES = 4 << 20  # a stream's buffer is walked (and trimmed) at the latest when it holds this much
_JOIN_BYTES = 64 << 10  # a run's segments are appended this many bytes at a time


def _check_lead_in(streams: List["_Stream"]) -> None:
    for st in streams:
        if not st.lead_in_complete():
            raise _LeadInTooShort
