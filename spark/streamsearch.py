"""Per-link observations from any router's captures: the traffic payload header searched for in the
reassembled TCP streams, and counted only when the send logs confirm it.

Our router's frames are decoded by ``spark.pcap``; a router with another wire format (stock Zenoh, or any
router binary: ``router_driver.wire`` other than ``testbed`` in the manifest) still forwards every traffic
message's payload untouched, and every payload starts with the traffic header (``router.codec``
``PAYLOAD_HEADER``: magic ``TP``, version, flags, flow id u32, seq u64, send_ns u64; DESIGN.md contract 2).
So, per pcap file (one Spark task each, as for our frames):

* each TCP stream direction is reassembled by sequence number with ``spark.pcap``'s reassembly (the same
  code our decoder uses: retransmissions and overlaps kept once, out-of-order segments waiting for the gap
  before them, bytes never captured — snap length, capture loss, a gap never filled — tracked as holes);
* the bytes are searched for the magic and version (``TP\\x01``) at every position;
* a candidate whose 24 bytes touch a hole is never read (``headers_in_holes``): a gap must not make a
  match;
* a candidate **validates** only when its flow id is a flow of ``traffic/flows.json`` and
  (flow, seq, send_ns) is exactly a line of that flow's send log (``SentIndex``; send_ns compared as the
  full u64). A validated header is an observation (the search goes on after its 24 bytes); any other
  candidate is counted (``rejected_unknown_flow``, ``rejected_not_sent``; or ``headers_no_send_log`` for
  the query flows, which have no send log) and the search goes on from the next byte, so a false match
  never hides a true header and is never counted as a message;
* the observation is timed as our decoder times a message, by the packet that carried its last byte:
  here the stream byte ``header + size - 1``, ``size`` being the payload size the send log gives (the
  payload's last byte when the payload is contiguous in the stream, as it is in one batch or one Zenoh
  message; a few bytes early per fragment header of a fragmented message). ``timing="header"`` times it
  by the packet that completed the header instead; so does a send log without sizes. A message whose
  last byte was never captured (the stream ended first: end of the capture, a new connection; or it fell
  in a hole) is not an observation: there is no instant at which it had crossed. It is counted as
  ``headers_unfinished`` (so ``headers_validated = messages + headers_unfinished``). Each message waits
  for its own last byte only: one that ends while another, found before it, still waits (a small message
  between the fragments of a large one) is timed by its own end. For bytes that waited in an out-of-order
  segment, the packet that filled the gap counts. ``priority`` is the flow's (flows.json) and ``payload_len`` the size its send log gives: the
  wire's own are not read.

The observations have the tuple layout of ``spark.pcap.DecodedCapture``, so ingest makes the same
``observations`` table from them and paths, reroutes and drops per hop work unchanged.
"""
from __future__ import annotations

import heapq
import mmap
from dataclasses import dataclass
from typing import Dict, Iterable, Optional, Tuple, Union

import numpy as np
import pandas as pd

from router.codec import PAYLOAD_HEADER, PAYLOAD_HEADER_SIZE, PAYLOAD_MAGIC, PAYLOAD_VERSION

from .pcap import CaptureStats, CapturePiece, DecodedCapture, _Stream, decode_pcap, decode_pcap_file, decode_pcap_piece

__all__ = ["SentIndex", "FlowSends", "search_pcap", "search_pcap_file", "search_pcap_piece", "HEADER_MARK", "METHOD",
           "TIMINGS"]

METHOD = "header-search"
#: what a traffic header starts with: the magic and the version
HEADER_MARK = PAYLOAD_MAGIC + bytes([PAYLOAD_VERSION])
_MARK_LEN = len(HEADER_MARK)

VALID, UNKNOWN_FLOW, NO_SEND_LOG, NOT_SENT = 0, 1, 2, 3
#: when an observation is timed: by the packet carrying the payload's last byte, or the header's
TIMINGS = ("payload_end", "header")


@dataclass
class FlowSends:
    """One flow's send log as arrays sorted by seq (``dense``: the seqs are ``base, base+1, ...`` once each)."""

    priority: int
    seqs: np.ndarray   # int64, sorted
    sends: np.ndarray  # int64 send_ns, in the order of seqs
    sizes: np.ndarray  # int64, -1 where the log has none
    base: int
    dense: bool

    def find(self, seq: int, send_ns: int) -> int:
        """The index of the line (seq, send_ns), or -1."""
        n = len(self.seqs)
        if self.dense:
            i = seq - self.base
            return i if 0 <= i < n and self.sends.item(i) == send_ns else -1
        i = int(np.searchsorted(self.seqs, seq)) if 0 <= seq < 1 << 63 else n
        while i < n and self.seqs.item(i) == seq:
            if self.sends.item(i) == send_ns:
                return i
            i += 1
        return -1


class SentIndex:
    """What the send logs say was sent, to validate candidate headers against (small: shipped to every task).

    ``flows``: flow id -> its sends; ``known``: every flow id of flows.json (query flows included, which
    have no send log)."""

    def __init__(self, flows: Dict[int, FlowSends], known: Iterable[int]):
        self.flows = flows
        self.known = frozenset(int(k) for k in known) | frozenset(flows)
        #: the largest payload a send log gives (a message seen in part, its header before a stream's first
        #: captured byte, ends within this many bytes of it)
        self.largest = max([PAYLOAD_HEADER_SIZE] + [int(fs.sizes.max()) for fs in flows.values() if len(fs.sizes)])

    @classmethod
    def from_sent(cls, sent: pd.DataFrame, flow_ids: Iterable[int]) -> "SentIndex":
        """From the ``sent`` table (flow_id, priority, seq, send_ns, size) and every flow id of flows.json."""
        flows: Dict[int, FlowSends] = {}
        if len(sent):
            for fid, g in sent.groupby("flow_id", sort=True):
                g = g.sort_values(["seq", "send_ns"], kind="stable")
                seqs = g["seq"].to_numpy(dtype="int64")
                sizes = pd.to_numeric(g["size"], errors="coerce").fillna(-1).to_numpy(dtype="int64")
                base = int(seqs[0]) if len(seqs) else 0
                dense = bool(len(seqs)) and int(seqs[-1]) - base == len(seqs) - 1 and bool(
                    (np.diff(seqs) == 1).all())
                flows[int(fid)] = FlowSends(int(g["priority"].iloc[0]), seqs, g["send_ns"].to_numpy(dtype="int64"),
                                            sizes, base, dense)
        return cls(flows, flow_ids)

    def check(self, flow: int, seq: int, send_ns: int) -> Tuple[int, Optional[FlowSends], int]:
        """(VALID / UNKNOWN_FLOW / NO_SEND_LOG / NOT_SENT, the flow's sends, index of the line or -1)."""
        fs = self.flows.get(flow)
        if fs is None:
            return (NO_SEND_LOG if flow in self.known else UNKNOWN_FLOW), None, -1
        i = fs.find(seq, send_ns)
        return (VALID if i >= 0 else NOT_SENT), fs, i


class _SearchStream(_Stream):
    """One TCP stream direction, reassembled by ``_Stream``, read by searching for traffic headers."""

    __slots__ = ("sent", "at_end", "waiting", "last_ts")

    def __init__(self, index: int, sent: SentIndex, at_end: bool = True):
        super().__init__(index)
        self.sent = sent
        self.at_end = at_end
        # a heap of (stream offset past the payload, order found, observation without its time): each is
        # released when the stream reaches its own end, whatever waits before it (a fragmented large message
        # must not hold back a small one that ends in between)
        self.waiting: list = []
        self.last_ts = 0

    def holds_hole(self, offset: int) -> bool:
        """Whether the stream byte at ``offset`` was never captured (looks at every hole still known; unlike
        ``in_hole`` it forgets none)."""
        return any(start <= offset < end for start, end in self.holes)

    def lead_in_complete(self) -> bool:
        """Started by a SYN, or seen for longer than the largest message: a message whose header came before
        the first byte seen has ended by now (it was the lead-in's, not the piece's)."""
        return not self.started or self.from_syn or self.next - self.origin >= self.sent.largest

    def fresh_start_complete(self) -> bool:
        """A header search cannot tell where a message of another wire format begins: only a SYN will do."""
        return self.from_syn

    def finish(self, stats: CaptureStats, out: list) -> None:
        """The stream ended with messages whose last byte was never captured: not observations (there is
        no time at which they had crossed), counted as unfinished."""
        stats.headers_unfinished += len(self.waiting)
        self.waiting.clear()

    def walk(self, ts: int, out: list, stats: CaptureStats) -> None:
        self.last_ts = ts
        waiting = self.waiting
        at_end = self.at_end
        buf = self.buf
        base = self.base
        limit = self.next
        pos = self.pos
        # messages found in earlier packets whose last byte is now in the stream: this packet completed them.
        # Released before the search (whose hole checks forget holes behind it); every message the search
        # below makes wait ends past ``limit``, so none of them could be released in this call.
        while waiting and waiting[0][0] <= limit:
            end, _order, obs = heapq.heappop(waiting)
            if self.holds_hole(end - 1):
                stats.headers_unfinished += 1  # its last byte was never captured: no time it crossed at
            else:
                out.append((obs[0], ts) + obs[1:])
                stats.messages += 1
        find = buf.find
        unpack = PAYLOAD_HEADER.unpack_from
        check = self.sent.check
        index = self.index
        while True:
            i = find(HEADER_MARK, pos - base, limit - base)
            if i < 0:
                # a header may start in the last bytes: look there again when more arrive
                pos = max(pos, limit - (_MARK_LEN - 1))
                break
            cand = i + base
            if cand + PAYLOAD_HEADER_SIZE > limit:
                pos = cand  # not complete yet
                break
            stats.headers_found += 1
            if self.in_hole(cand, cand + PAYLOAD_HEADER_SIZE):
                stats.headers_in_holes += 1
                pos = cand + 1
                continue
            _magic, _version, _flags, flow, seq, send_ns = unpack(buf, i)
            verdict, fs, k = check(flow, seq, send_ns)
            if verdict == VALID:
                size = fs.sizes.item(k)
                stats.headers_validated += 1
                if at_end and size > PAYLOAD_HEADER_SIZE and cand + size > limit:
                    heapq.heappush(waiting, (cand + size, stats.headers_validated,
                                             (index, flow, seq, send_ns, fs.priority, size)))
                elif at_end and size > PAYLOAD_HEADER_SIZE and self.holds_hole(cand + size - 1):
                    stats.headers_unfinished += 1
                else:
                    out.append((index, ts, flow, seq, send_ns, fs.priority, size if size >= 0 else None))
                    stats.messages += 1
                pos = cand + PAYLOAD_HEADER_SIZE
                continue
            if verdict == NO_SEND_LOG:
                stats.headers_no_send_log += 1
            else:
                stats.headers_rejected += 1
                if verdict == UNKNOWN_FLOW:
                    stats.rejected_unknown_flow += 1
                else:
                    stats.rejected_not_sent += 1
            pos = cand + 1
        self.pos = pos
        holes = self.holes
        while holes and holes[0][1] <= pos:  # no candidate starts before pos any more
            holes.popleft()
        self.trim()


def _factory(sent: SentIndex, timing: str):
    if timing not in TIMINGS:
        raise ValueError(f"timing {timing!r}: one of {', '.join(TIMINGS)}")
    at_end = timing == "payload_end"
    return lambda index: _SearchStream(index, sent, at_end)


def search_pcap(data: Union[bytes, bytearray, memoryview, mmap.mmap], sent: SentIndex,
                timing: str = "payload_end") -> DecodedCapture:
    """Observations of validated traffic headers in a pcap held in memory (never raises: ``stats.error``)."""
    result = decode_pcap(data, _factory(sent, timing))
    result.stats.method = METHOD
    return result


def search_pcap_file(path: str, sent: SentIndex, timing: str = "payload_end") -> DecodedCapture:
    """The same for a pcap on disk, read through mmap."""
    result = decode_pcap_file(path, _factory(sent, timing))
    result.stats.method = METHOD
    return result


def search_pcap_piece(path: str, sent: SentIndex, piece: CapturePiece, timing: str = "payload_end") -> DecodedCapture:
    """The same for one piece of a pcap on disk (``spark.pcap.capture_pieces``)."""
    result = decode_pcap_piece(path, piece, _factory(sent, timing))
    result.stats.method = METHOD
    return result
