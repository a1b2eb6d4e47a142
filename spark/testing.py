"""Hand-made results folders (docs/results.md) whose right answers are known.

Used by the tests (small folders with one retransmission, one lost message,
one reroute...) and by the benchmarks (a synthetic 60 s diamond run with
realistic volumes).  Packets are real bytes: pcap (nanosecond magic
0xa1b23c4d), Ethernet/IPv4/TCP headers built with ``struct``, TCP payloads
made of router frames built with ``router.codec``.

A simulated message crosses the routers of its flow's path; on each link it
leaves the sending router at ``t`` (seen by the sender-side capture) and
arrives ``link_delay`` later (seen by the receiver-side capture); each router
adds ``router_delay``.  Messages may be lost after a given number of hops,
delivered twice, and TCP segments may be retransmitted or reordered.

A run may also stand for another router (``router_driver``, as the manifest records it): its links then
carry a made-up wire format that is not ours (``wire="foreign"``: batches of a length and messages with
their own headers around the untouched payloads, and a connection opening holding bytes that look like a
traffic header but are not one), and what the driver does not provide (metrics, event log) is not written;
the metrics of such a router, when its driver has some, are only ``metric_samples`` (its own names).
"""
from __future__ import annotations

import io
import itertools
import json
import math
import mmap
import struct
import tempfile
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Dict, Iterable, Iterator, List, Optional, Set, Tuple

import numpy as np

from router.codec import (
    MESSAGE_HEADER, MESSAGE_HEADER_SIZE, FrameKind, encode_frame, encode_json_frame, encode_message,
    make_payload,
)
from router.congestion import payload_capacity
from runfolder.layout import LAYOUT
from runfolder.priorities import PRIORITY_LABELS
from runfolder.records import RECV_HEADER, SEND_HEADER

__all__ = ["SynthFlow", "SynthRun", "PcapWriter", "write_run", "diamond_run", "congestion_events", "MovedFlow",
           "T0_NS", "ZENOH_DRIVER", "FOREIGN_FALSE_HEADERS"]

T0_NS = 1_800_000_000 * 1_000_000_000  # an arbitrary run clock origin (2027)
_S = 1_000_000_000
_MS = 1_000_000
_US = 1_000
ROUTER_PORT = 7447
MSS = 1448



class PcapWriter:
    """Nanosecond pcap with Ethernet framing, written sorted by time (ties in the order added).

    Records may be added in any order. Each frame goes to a spill file (in ``spill_dir``, default the system's
    temporary folder) as it is added; only its time, length and place there stay in memory (24 bytes a record),
    so a capture of any size is written in bounded memory: the spill is read back in time order by
    :meth:`write`.
    """

    def __init__(self, snaplen: int = 65535, spill_dir: Optional[Path] = None):
        self.snaplen = snaplen
        self._spill = tempfile.TemporaryFile(dir=spill_dir)
        self._ts = array("q")      # per record: time (ns)
        self._length = array("q")  # its frame's length on the wire
        self._spilled = 0          # bytes in the spill so far (the records' captured bytes, in the order added)

    def add(self, ts_ns: int, frame: bytes) -> None:
        cap = frame[: self.snaplen]
        self._spill.write(cap)
        self._spilled += len(cap)
        self._ts.append(ts_ns)
        self._length.append(len(frame))

    def tcp(self, ts_ns: int, src: str, sport: int, dst: str, dport: int, seq: int, payload: bytes = b"",
            flags: int = 0x18, ack: int = 0) -> None:
        self.add(ts_ns, tcp_packet(src, sport, dst, dport, seq, payload, flags, ack))

    def _write_to(self, out: BinaryIO, truncate_at: Optional[int]) -> None:
        left = math.inf if truncate_at is None else truncate_at

        def put(data: bytes) -> bool:
            nonlocal left
            out.write(data if len(data) <= left else data[: int(left)])
            left -= len(data)
            return left > 0

        if not put(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, self.snaplen, 1)) or not self._ts:
            return
        self._spill.flush()
        ts = np.frombuffer(self._ts, dtype=np.int64)
        length = np.frombuffer(self._length, dtype=np.int64)
        cap = np.minimum(length, self.snaplen)
        start = np.concatenate([[0], np.cumsum(cap)[:-1]])
        with mmap.mmap(self._spill.fileno(), self._spilled, access=mmap.ACCESS_READ) as spill:
            for k in np.argsort(ts, kind="stable").tolist():
                t, a, n = int(ts[k]), int(start[k]), int(cap[k])
                if not put(struct.pack("<IIII", t // _S, t % _S, n, int(length[k])) + spill[a:a + n]):
                    return

    def to_bytes(self, truncate_at: Optional[int] = None) -> bytes:
        out = io.BytesIO()
        self._write_to(out, truncate_at)
        return out.getvalue()

    def write(self, path: Path, truncate_at: Optional[int] = None) -> None:
        with open(path, "wb", buffering=1 << 20) as out:
            self._write_to(out, truncate_at)

    def close(self) -> None:
        """Drop the spill (the writer cannot write after this)."""
        self._spill.close()


def _ip_bytes(ip: str) -> bytes:
    return bytes(int(x) for x in ip.split("."))


def tcp_packet(src: str, sport: int, dst: str, dport: int, seq: int, payload: bytes, flags: int = 0x18,
               ack: int = 0) -> bytes:
    tcp = struct.pack(">HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack, 5 << 4, flags, 65535, 0, 0)
    total = 20 + len(tcp) + len(payload)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, total, 0, 0x4000, 64, 6, 0, _ip_bytes(src), _ip_bytes(dst))
    eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    return eth + ip + tcp + payload


@dataclass
class SynthFlow:
    name: str
    flow_id: int
    publisher: str
    subscribers: List[str]
    priority: int = 5
    rate_hz: float = 20.0
    size: int = 200
    start_s: float = 0.0
    stop_s: float = 10.0
    key: str = ""
    congestion_control: str = "drop"

    def sends(self) -> List[Tuple[int, int]]:
        """(seq, send_ns) of every message (seq from 0)."""
        out = []
        step = _S / self.rate_hz
        n = int(round((self.stop_s - self.start_s) * self.rate_hz))
        for seq in range(n):
            out.append((seq, T0_NS + int(self.start_s * _S + seq * step)))
        return out


@dataclass
class SynthRun:
    """Everything needed to write a results folder whose contents are known exactly."""

    name: str
    nodes: List[str]
    links: List[Tuple[str, str]]                 # (a, b); interface names are eth1, eth2... per node in order
    flows: List[SynthFlow]
    #: flow name -> [(from_s, [node, node, ...])]: the path used for messages sent from that time on; for
    #: several subscribers, a tree as its branches: [(from_s, [[r1, r2, r4], [r1, r2, r5]])]
    paths: Dict[str, List[Tuple[float, list]]]
    #: link index -> bandwidth (bit/s) of both directions, written to lab.json as the lab's shaping
    link_bw_bps: Dict[int, int] = field(default_factory=dict)
    link_delay_ns: int = 1 * _MS
    router_delay_ns: int = 100 * _US
    #: (flow, seq) -> number of links crossed before the message vanished (0: never left the publisher's router)
    lost: Dict[Tuple[str, int], int] = field(default_factory=dict)
    #: (flow, seq, subscriber) -> the same, on the branch toward that subscriber only (the others still get it)
    lost_on_branch: Dict[Tuple[str, int, str], int] = field(default_factory=dict)
    #: (flow, seq): delivered twice to every subscriber
    duplicates: Set[Tuple[str, int]] = field(default_factory=set)
    #: (flow, seq) -> ns added to its receive time at every subscriber (a queue before the last hop)
    recv_delay: Dict[Tuple[str, int], int] = field(default_factory=dict)
    #: (flow, seq) pairs delivered in swapped order to every subscriber: the second arrives first
    reordered: List[Tuple[Tuple[str, int], Tuple[str, int]]] = field(default_factory=list)
    #: (link index, "ab"|"ba", segment number): that TCP segment is sent again 2 ms later
    retransmit: Set[Tuple[int, str, int]] = field(default_factory=set)
    #: (link index, "ab"|"ba", segment number): that segment is captured after the next one
    swap: Set[Tuple[int, str, int]] = field(default_factory=set)
    scenario_events: List[dict] = field(default_factory=list)   # {"at_s", "event", ...}
    router_events: Dict[str, List[dict]] = field(default_factory=dict)  # node -> [{"at_s", "event", ...}]
    #: node -> [(at_s, metric, labels, value)] extra samples on top of the built-in counters
    metric_samples: Dict[str, List[Tuple[float, str, dict, float]]] = field(default_factory=dict)
    failed_scrapes: Dict[str, List[float]] = field(default_factory=dict)
    duration_s: float = 10.0
    snaplen: int = 65535
    batch_window_ns: int = 0      # messages on a link within this window share a DATA frame
    expect: List = field(default_factory=list)
    syn: bool = True              # capture the SYN of every router connection
    acks: bool = False            # emit a pure ACK for every data segment (real captures have them)
    #: node -> (its clock minus the controller's at traffic start, and at the end of the run), linear in
    #: between: the traffic logs and payload headers are written on the nodes' clocks (captures stay on the
    #: controller's); the latencies they give are off by the subscriber's offset minus the publisher's
    clock_offset_ns: Dict[str, Tuple[int, int]] = field(default_factory=dict)
    #: the manifest's ``clocks`` as written (runfolder.records.clocks_json), or None to leave it out (older runs)
    clocks: Optional[dict] = None
    #: the manifest's ``router_driver`` (top level, as the orchestrator writes it; None: left out, as an older
    #: run of our router)
    router_driver: Optional[dict] = None
    #: what the router connections carry: "testbed" (our frames) or "foreign" (another router's format)
    wire: str = "testbed"

    # -- derived --

    def node_time(self, node: str, t_ns: int) -> int:
        """What ``node``'s clock reads at controller time ``t_ns`` (``clock_offset_ns``)."""
        if node not in self.clock_offset_ns:
            return t_ns
        o0, o1 = self.clock_offset_ns[node]
        span = max(1, int(self.duration_s * _S))
        return t_ns + o0 + (2 * (o1 - o0) * (t_ns - T0_NS) + span) // (2 * span)

    def ifname(self, node: str, link: int) -> str:
        n = 0
        for i, (a, b) in enumerate(self.links):
            if node in (a, b):
                n += 1
            if i == link:
                return f"eth{n}"
        raise KeyError(link)

    def address(self, node: str, link: int) -> str:
        a, _b = self.links[link]
        return f"10.10.{link}.{1 if node == a else 2}"

    def link_of(self, u: str, v: str) -> Tuple[int, str]:
        for i, (a, b) in enumerate(self.links):
            if (a, b) == (u, v):
                return i, "ab"
            if (a, b) == (v, u):
                return i, "ba"
        raise KeyError(f"no link {u}-{v}")

    def path_at(self, flow: str, t_ns: int) -> list:
        chosen = None
        for from_s, nodes in self.paths[flow]:
            if t_ns - T0_NS >= from_s * _S:
                chosen = nodes
        if chosen is None:
            chosen = self.paths[flow][0][1]
        return chosen

    def branches_at(self, flow: str, t_ns: int) -> List[List[str]]:
        """The path as a list of chains from the publisher (one per subscriber of a tree)."""
        path = self.path_at(flow, t_ns)
        return [list(b) for b in path] if path and isinstance(path[0], (list, tuple)) else [list(path)]


def _neighbours(run: SynthRun, node: str) -> List[str]:
    return [b if a == node else a for a, b in run.links if node in (a, b)]


def _flow_by_name(run: SynthRun) -> Dict[str, SynthFlow]:
    return {f.name: f for f in run.flows}


#: a message as simulate() hands it on: its flow, seq and send time on the publisher's clock (its bytes are
#: made when a frame takes it, :func:`_encoded`: a run holds no message's bytes for long)
Sent = Tuple[SynthFlow, int, int]


def _encoded(message: Sent) -> bytes:
    flow, seq, logged_send = message
    payload = make_payload(flow.flow_id, seq, logged_send, flow.size)
    return encode_message(flow.key or f"flows/{flow.name}", payload, priority=flow.priority,
                          congestion_control=1 if flow.congestion_control == "block" else 0)


def simulate(run: SynthRun):
    """Per link direction: [(tx_ns, message, priority)]; deliveries [(flow, node, seq, send_ns, recv_ns)]."""
    per_dir: Dict[Tuple[int, str], List[Tuple[int, Sent, int]]] = {}
    deliveries: List[Tuple[str, str, int, int, int, int]] = []
    for flow in run.flows:
        for seq, send_ns in flow.sends():
            logged_send = run.node_time(flow.publisher, send_ns)  # the publisher's clock
            msg = (flow, seq, logged_send)
            carried: Set[Tuple[int, str]] = set()  # link directions this message crossed (a tree shares a prefix)
            for path in run.branches_at(flow.name, send_ns):
                cuts = [c for c in (run.lost.get((flow.name, seq)), run.lost_on_branch.get((flow.name, seq, path[-1])))
                        if c is not None]
                lost_after = min(cuts) if cuts else None
                t = send_ns + run.router_delay_ns
                reached = True
                for hop, (u, v) in enumerate(zip(path, path[1:])):
                    if lost_after is not None and hop >= lost_after:
                        reached = False
                        break
                    idx, d = run.link_of(u, v)
                    if (idx, d) not in carried:
                        carried.add((idx, d))
                        per_dir.setdefault((idx, d), []).append((t, msg, flow.priority))
                    t += run.link_delay_ns + run.router_delay_ns
                if not reached or path[-1] not in flow.subscribers:
                    continue
                t += run.recv_delay.get((flow.name, seq), 0)
                sub = path[-1]
                deliveries.append((flow.name, sub, seq, logged_send, run.node_time(sub, t), flow.size))
                if (flow.name, seq) in run.duplicates:
                    deliveries.append((flow.name, sub, seq, logged_send, run.node_time(sub, t + 50 * _US),
                                       flow.size))
    # reordering at the receivers: swap the receive times of the pairs
    for first, second in run.reordered:
        i = next(k for k, d in enumerate(deliveries) if (d[0], d[2]) == first)
        j = next(k for k, d in enumerate(deliveries) if (d[0], d[2]) == second)
        a, b = deliveries[i], deliveries[j]
        deliveries[i] = a[:4] + (b[4] + 10 * _US,) + a[5:]
    return per_dir, deliveries


#: a stock Zenoh router as the orchestrator's driver records it
ZENOH_DRIVER = {"name": "zenoh", "wire": "zenoh", "client": "zenoh", "metrics": False, "events": False,
                "admin": False}
#: candidate traffic headers in each direction of every foreign connection that validation must reject:
#: one of a flow not in flows.json, one of a known flow at a seq it never sent
FOREIGN_FALSE_HEADERS = 2


def _foreign_open(src: str) -> bytes:
    """A made-up connection opening with two false traffic headers (magic and version, then numbers that
    are no (flow, seq, send_ns) sent)."""
    return (b"\x01OPEN" + src.encode() + b"\x00" + make_payload(0xDEAD, 1, 2, 24)
            + b"\x02" + make_payload(1, 10**9, 3, 24) + b"\x03")


def _foreign_message(msg: bytes) -> bytes:
    """Our encoded message re-wrapped in the foreign format: an id, the key, a LEB128 length, the payload
    (the payload untouched, as any router forwards it)."""
    _flags, _ttl, _origin, keylen, paylen = MESSAGE_HEADER.unpack_from(msg, 0)
    key = msg[MESSAGE_HEADER_SIZE:MESSAGE_HEADER_SIZE + keylen]
    payload = msg[MESSAGE_HEADER_SIZE + keylen:MESSAGE_HEADER_SIZE + keylen + paylen]
    n, length = len(payload), bytearray()
    while True:
        length.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            break
    return b"\x1d" + struct.pack("<H", len(key)) + key + bytes(length) + payload


def _frames(run: SynthRun, msgs: List[Tuple[int, Sent, int]]) -> Iterator[Tuple[int, bytes]]:
    """Group messages into DATA frames (a foreign run: length-prefixed batches): (write time, frame bytes),
    one at a time."""
    msgs = sorted(msgs, key=lambda m: m[0])
    i = 0
    while i < len(msgs):
        t0, message, prio = msgs[i]
        parts = [_encoded(message)]
        t_last = t0
        j = i + 1
        while run.batch_window_ns and j < len(msgs) and msgs[j][2] == prio and msgs[j][0] - t0 <= run.batch_window_ns:
            body = _encoded(msgs[j][1])
            if sum(map(len, parts)) + len(body) >= 65000:
                break
            parts.append(body)
            t_last = msgs[j][0]
            j += 1
        if run.wire == "foreign":
            body = b"".join(_foreign_message(m) for m in parts)
            yield t_last, struct.pack("<I", len(body)) + body
        else:
            yield t_last, encode_frame(FrameKind.DATA, b"".join(parts), flags=prio)
        i = j


def _segments(writes: Iterable[Tuple[int, bytes]], isn: int) -> Iterator[Tuple[int, int, bytes]]:
    """The TCP segments of a connection direction's writes, one at a time: (time, sequence number, data); a
    write's segments leave 1 us apart."""
    seq = isn
    for t, data in writes:
        for k in range(0, len(data), MSS):
            yield t + (k // MSS) * _US, seq, data[k:k + MSS]
            seq += len(data[k:k + MSS])


def _with_next(items: Iterator) -> Iterator[Tuple[object, Optional[object]]]:
    """Each item with the one after it (None after the last)."""
    current = next(items, None)
    while current is not None:
        following = next(items, None)
        yield current, following
        current = following


def write_run(run: SynthRun, root: Path, truncate_pcap: Optional[Dict[str, int]] = None,
              omit: Iterable[str] = ()) -> Path:
    """Write the results folder ``root/<run.name>``; returns its path.

    ``truncate_pcap``: file name -> bytes to keep (an interrupted capture);
    ``omit``: relative paths not to write (a missing log).
    """
    omit = set(omit)
    rd = Path(root) / run.name
    for sub in (LAYOUT.nodes_dir, LAYOUT.traffic_dir, LAYOUT.metrics_dir, LAYOUT.pcap_dir):
        (rd / sub).mkdir(parents=True, exist_ok=True)
    per_dir, deliveries = simulate(run)
    flows = _flow_by_name(run)

    # -- lab.json and capture.json --
    lab_links = []
    for i, (a, b) in enumerate(run.links):
        def end(n: str) -> dict:
            return {"node": n, "netns": f"tbed-{run.name}-{n}", "ifname": run.ifname(n, i),
                    "address": f"{run.address(n, i)}/30"}
        bw = run.link_bw_bps.get(i)
        shape = {"bw_bps": bw, "delay_ns": None, "jitter_ns": None, "loss_pct": None, "queue_packets": None} if bw \
            else {}
        lab_links.append({"index": i, "weight": 100, "a": end(a), "b": end(b), "shape_ab": dict(shape),
                          "shape_ba": dict(shape)})
    lab = {"name": run.name, "backend": "synthetic",
           "nodes": {n: {"kind": "router", "netns": f"tbed-{run.name}-{n}", "pid": None} for n in run.nodes},
           "links": lab_links, "applied": []}
    _write_json(rd / LAYOUT.lab, lab, omit, rd)

    captures = []
    for i, (a, b) in enumerate(run.links):
        for n, other in ((a, b), (b, a)):
            captures.append({"file": LAYOUT.pcap_name(n, run.ifname(n, i)), "node": n, "ifname": run.ifname(n, i), "link": i,
                             "peer": f"{other}:{run.ifname(other, i)}", "packets_captured": None,
                             "packets_dropped_by_kernel": 0, "packets_received_by_filter": None})

    # -- TCP: one router connection per link, a dials b; its two captures written before the next link's --
    truncate_pcap = truncate_pcap or {}
    for i, (a, b) in enumerate(run.links):
        ip_a, ip_b = run.address(a, i), run.address(b, i)
        port_a, port_b = 40000 + i, ROUTER_PORT
        wa, wb = PcapWriter(run.snaplen, rd / LAYOUT.pcap_dir), PcapWriter(run.snaplen, rd / LAYOUT.pcap_dir)
        isn = {"ab": 1000 + 7919 * i, "ba": 5000 + 104729 * i}
        if run.syn:
            t_syn = T0_NS - 2 * _S
            for w, dt in ((wa, 0), (wb, run.link_delay_ns)):
                w.tcp(t_syn + dt, ip_a, port_a, ip_b, port_b, isn["ab"] - 1, flags=0x02)
                w.tcp(t_syn + 2 * run.link_delay_ns - dt, ip_b, port_b, ip_a, port_a, isn["ba"] - 1, flags=0x12)
        hello_t = T0_NS - 1 * _S
        for d in ("ab", "ba"):
            src, dst = (a, b) if d == "ab" else (b, a)
            src_ip, dst_ip = (ip_a, ip_b) if d == "ab" else (ip_b, ip_a)
            sport, dport = (port_a, port_b) if d == "ab" else (port_b, port_a)
            w_tx, w_rx = (wa, wb) if d == "ab" else (wb, wa)
            hello = (hello_t, _foreign_open(src) if run.wire == "foreign" else
                     encode_json_frame(FrameKind.HELLO, {"role": "router", "name": src, "id": 1,
                                                         "lease_ms": 3000, "weight": 100}))
            writes = itertools.chain([hello], _frames(run, per_dir.get((i, d), [])))
            for segno, ((t, s, data), following) in enumerate(_with_next(_segments(writes, isn[d]))):
                t_tx = t
                if (i, d, segno) in run.swap and following is not None:
                    t_tx = following[0] + 1  # captured just after the next one
                for w, dt in ((w_tx, 0), (w_rx, run.link_delay_ns)):
                    w.tcp(t_tx + dt, src_ip, sport, dst_ip, dport, s, data)
                    if (i, d, segno) in run.retransmit:
                        w.tcp(t_tx + dt + 2 * _MS, src_ip, sport, dst_ip, dport, s, data)
                if run.acks:
                    for w, dt in ((w_rx, run.link_delay_ns), (w_tx, 2 * run.link_delay_ns)):
                        w.tcp(t_tx + dt + 1, dst_ip, dport, src_ip, sport, 0, b"", flags=0x10, ack=s + len(data))
        for n, w in ((a, wa), (b, wb)):
            ifname = run.ifname(n, i)
            if LAYOUT.pcap(n, ifname) not in omit:
                w.write(rd / LAYOUT.pcap(n, ifname), truncate_pcap.get(LAYOUT.pcap_name(n, ifname)))
            w.close()
    _write_json(rd / LAYOUT.captures, {"captures": captures}, omit, rd)

    # -- traffic logs --
    flows_json = {"flows": [
        {"name": f.name, "flow_id": f.flow_id, "profile": "constant", "priority": f.priority,
         "priority_name": PRIORITY_LABELS[f.priority], "congestion_control": f.congestion_control,
         "express": False, "key": f.key or f"flows/{f.name}", "publisher": f.publisher,
         "subscribers": list(f.subscribers), "size": f.size, "rate_bps": int(f.rate_hz * f.size * 8)}
        for f in run.flows]}
    _write_json(rd / LAYOUT.flows, flows_json, omit, rd)
    for f in run.flows:
        rel = LAYOUT.send_log(f.name)
        if rel not in omit:
            lines = [SEND_HEADER] + [f"{seq},{run.node_time(f.publisher, ns)},{f.size}"
                                            for seq, ns in f.sends()]
            (rd / rel).write_text("\n".join(lines) + "\n")
        for sub in f.subscribers:
            rel = LAYOUT.recv_log(f.name, sub)
            if rel in omit:
                continue
            rows = sorted((d for d in deliveries if d[0] == f.name and d[1] == sub), key=lambda d: d[4])
            lines = [RECV_HEADER] + [f"{d[2]},{d[3]},{d[4]},{d[5]}" for d in rows]
            (rd / rel).write_text("\n".join(lines) + "\n")

    # -- events --
    start_ns = T0_NS
    ev_lines = [{"ts_ns": T0_NS - 3 * _S, "source": "orchestrator", "event": "run_started"}]
    for e in run.scenario_events:
        e = dict(e)
        at = e.pop("at_s")
        ev_lines.append({"ts_ns": T0_NS + int(at * _S) + 2 * _MS, "source": "scenario", "at_ns": int(at * _S), **e})
    ev_lines.append({"ts_ns": T0_NS + int(run.duration_s * _S), "source": "orchestrator", "event": "traffic_stopped"})
    _write_lines(rd / LAYOUT.events, ev_lines, omit, rd)
    driver = run.router_driver or {}
    for n in run.nodes:
        nd = rd / LAYOUT.node_dir(n)
        nd.mkdir(parents=True, exist_ok=True)
        if driver.get("events") is False:  # a router without an event log: its log and its config only
            (nd / LAYOUT.router_log_name).write_text(f"{n}: started\n")
            (nd / "router.json5").write_text(json.dumps({"mode": "router"}) + "\n")
            continue
        lines = [{"ts_ns": T0_NS - 2 * _S, "node": n, "event": "ready", "router_listen": "0.0.0.0:7447",
                  "client_listen": "127.0.0.1:7448"}]
        for e in run.router_events.get(n, []):
            e = dict(e)
            at = e.pop("at_s")
            lines.append({"ts_ns": T0_NS + int(at * _S), "node": n, **e})
        _write_lines(nd / LAYOUT.router_events_name, lines, omit, rd)
        (nd / "router.json").write_text(json.dumps({"name": n}) + "\n")

    # -- metrics: counters per neighbour and priority from the simulation, one scrape per second (another
    # router's, when its driver has metrics: only ``metric_samples``, under that router's own names) --
    ours = run.wire == "testbed"
    for n in run.nodes:
        rel = LAYOUT.metrics(n)
        if rel in omit or driver.get("metrics") is False:
            continue
        out_msgs: Dict[Tuple[str, int], List[int]] = {}
        for (i, d), msgs in per_dir.items():
            a, b = run.links[i]
            src, dst = (a, b) if d == "ab" else (b, a)
            if src == n:
                out_msgs.setdefault((dst, None), [])
                for t, _message, prio in msgs:
                    out_msgs.setdefault((dst, prio), []).append(t)
        lines = []
        failed = set(run.failed_scrapes.get(n, []))
        for sec in range(int(run.duration_s) + 1):
            ts = T0_NS + sec * _S
            if float(sec) in failed:
                lines.append({"ts_ns": ts, "node": n, "ok": False, "error": "timed out", "samples": []})
                continue
            samples = []
            for (peer, prio), times in out_msgs.items() if ours else ():
                if prio is None:
                    continue
                labels = {"peer": peer, "peer_kind": "router", "priority": str(prio),
                          "priority_name": PRIORITY_LABELS[prio]}
                samples.append(["router_tx_messages_total", labels, float(sum(1 for t in times if t <= ts))])
            latest: Dict[str, list] = {}
            for peer in sorted({p for p, _ in out_msgs} | set(_neighbours(run, n))) if ours else ():
                for prio in range(len(PRIORITY_LABELS)):  # as the router: a drop counter per peer and priority
                    labels = {"peer": peer, "peer_kind": "router", "priority": str(prio),
                              "priority_name": PRIORITY_LABELS[prio]}
                    latest["router_queue_dropped_messages_total" + json.dumps(labels, sort_keys=True)] = [
                        "router_queue_dropped_messages_total", labels, 0.0]
            for at_s, metric, labels, value in sorted(run.metric_samples.get(n, []), key=lambda x: x[0]):
                if at_s <= sec:  # each series' latest value at this scrape
                    latest[metric + json.dumps(labels, sort_keys=True)] = [metric, labels, float(value)]
            samples.extend(latest.values())
            lines.append({"ts_ns": ts, "node": n, "ok": True, "error": None, "samples": samples})
        (rd / rel).write_text("".join(json.dumps(x) + "\n" for x in lines))

    # -- topology.yaml and manifest.json --
    topo = {"name": run.name, "nodes": {n: {} for n in run.nodes},
            "links": [{"endpoints": [f"{a}:{run.ifname(a, i)}", f"{b}:{run.ifname(b, i)}"]}
                      for i, (a, b) in enumerate(run.links)],
            "expect": list(run.expect)}
    if LAYOUT.topology not in omit:
        import yaml
        (rd / LAYOUT.topology).write_text(yaml.safe_dump(topo, sort_keys=False))
    manifest = {"run_id": run.name, "status": "completed", "error": None, "spec": topo, "spec_file": "synthetic",
                "backend": "synthetic", "started_ns": T0_NS - 5 * _S, "ended_ns": T0_NS + int(run.duration_s * _S),
                "traffic_start_ns": start_ns, "phases": [], "versions": {}, "git_revision": None,
                "kernel": None, "capabilities": {}, "shaping": []}
    if run.clocks is not None:
        manifest["clocks"] = run.clocks
    if run.router_driver is not None:
        manifest["router_driver"] = dict(run.router_driver)
    _write_json(rd / LAYOUT.manifest, manifest, omit, rd)
    return rd


def _write_json(path: Path, data, omit: Set[str], rd: Path) -> None:
    if str(path.relative_to(rd)) in omit:
        return
    path.write_text(json.dumps(data, indent=1) + "\n")


def _write_lines(path: Path, lines: List[dict], omit: Set[str], rd: Path) -> None:
    if str(path.relative_to(rd)) in omit:
        return
    path.write_text("".join(json.dumps(x) + "\n" for x in sorted(lines, key=lambda e: e["ts_ns"])))


# ---------------------------------------------------------------- the router's event sequences


@dataclass
class MovedFlow:
    """A data flow that the congestion-aware routers move: its key, priority, the router it enters the network
    at (``origin``) and the client or router it arrives from there (``previous_hop``)."""

    key: str
    priority: int
    origin: str
    previous_hop: str


def congestion_events(routers: List[str], node: str, neighbour: str, detected_s: float, flows: List[MovedFlow],
                      old_next: str, new_next: str, cleared_s: Optional[float] = None,
                      stay_pins: Optional[Dict[str, str]] = None, capacity_bps: int = 10_000_000,
                      data_bps: float = 9.4e6, high_bps: float = 2.0e6, weight: int = 10,
                      flood_s: float = 0.001, debounce_s: float = 0.020) -> Dict[str, List[dict]]:
    """What the routers write (router/node.py, docs/router.md) when ``node`` blocks its link to ``neighbour``
    at ``detected_s`` and, if given, restores it at ``cleared_s``; node -> events (with ``at_s``).

    Block, at ``node``: congestion_detected, flow_pinned (local_block: what is in flight stays) for each flow,
    weight_changed (source monitor); every other router ``flood_s`` later per router: its link-state copy,
    weight_changed (source linkstate, router = node); ``debounce_s`` after that, trees_recomputed everywhere
    and, at each flow's origin, flow_pinned (upstream_request) from ``old_next`` to ``new_next``.
    Restore: congestion_cleared and weight_changed at ``node``, the copies, trees_recomputed, and flow_pinned
    (route_change) where an active flow would otherwise move back (``stay_pins``: router -> its next hop).
    """
    out: Dict[str, List[dict]] = {r: [] for r in routers}
    others = [r for r in routers if r != node]
    limit = payload_capacity(capacity_bps) - high_bps - capacity_bps // 20  # as router/congestion.py decides

    def trees(at: float) -> None:
        for r in routers:
            out[r].append({"at_s": at, "event": "trees_recomputed", "duration_ns": 150_000, "routers": len(routers),
                           "links": len(routers), "tree_sets": ["default", "data"]})

    def change_weight(at: float, before: int, after: int, reason: str) -> None:
        out[node].append({"at_s": at, "event": "weight_changed", "neighbour": neighbour, "tree": "data",
                          "weight_before": before, "weight_after": after, "source": "monitor", "reason": reason})
        for k, r in enumerate(others):
            out[r].append({"at_s": at + flood_s * (k + 1), "event": "weight_changed", "router": node,
                           "neighbour": neighbour, "tree": "data", "weight_before": before, "weight_after": after,
                           "source": "linkstate"})

    numbers = {"neighbour": neighbour, "data_bps": round(data_bps), "high_bps": round(high_bps),
               "capacity_bps": capacity_bps, "cap_limit_bps": round(limit)}
    out[node].append({"at_s": detected_s, "event": "congestion_detected", **numbers, "weight_before": weight,
                      "weight_after": 65535})
    for f in flows:
        out[node].append({"at_s": detected_s, "event": "flow_pinned", "key": f.key, "origin": f.origin,
                          "priority": f.priority, "previous_hop": f.origin,
                          "next_hop": [neighbour], "previous_next_hop": [neighbour], "reason": "local_block"})
    change_weight(detected_s, weight, 65535, "congestion block")
    moved_at = detected_s + flood_s * len(others) + debounce_s
    for f in flows:
        out[f.origin].append({"at_s": moved_at, "event": "flow_pinned", "key": f.key, "origin": f.origin,
                              "priority": f.priority, "previous_hop": f.previous_hop, "next_hop": [new_next],
                              "previous_next_hop": [old_next], "reason": "upstream_request"})
    trees(moved_at)
    if cleared_s is not None:
        out[node].append({"at_s": cleared_s, "event": "congestion_cleared", **numbers, "data_bps": round(data_bps / 10),
                          "weight_before": 65535, "weight_after": weight})
        change_weight(cleared_s, 65535, weight, "congestion restore")
        settled = cleared_s + flood_s * len(others) + debounce_s
        for r, nxt in (stay_pins or {}).items():
            for f in flows:
                out[r].append({"at_s": settled, "event": "flow_pinned", "key": f.key, "origin": f.origin,
                               "priority": f.priority, "previous_hop": f.origin, "next_hop": [nxt],
                               "previous_next_hop": [nxt], "reason": "route_change"})
        trees(settled)
    return out


# ---------------------------------------------------------------- the synthetic diamond


def diamond_run(name: str = "diamond-synthetic", duration_s: float = 60.0, snaplen: int = 65535,
                bulk_rate_hz: float = 400.0, acks: bool = True) -> SynthRun:
    """The diamond of topologies/diamond.yaml with zpub-like flows and a bulk flow, and the router's events.

    Links 20 Mbit/s, r2-r4 10 Mbit/s. The data (pub1, data) and bulk (data_low) flows share r2-r4 with
    realtime; the scenario narrows r2-r4 to 1 Mbit/s at 20 s, below what they offer (onset: 20.002 s, when
    the change is applied). r2 reports the congestion at 21.45 s (detection), r1 pins both data flows to r3
    20 ms later, and they leave r2-r4 with their next messages at 21.5 s (first message on the new path);
    pub1's messages sent 20.5 .. 21.5 s are lost at r2. r2 restores the link at 21.95 s; the moved flows stay
    on r1-r3-r4 (route_change pins); pub2, started at 30 s, takes the restored r1-r2-r4, where realtime
    stays throughout. The scenario gives r2-r4 back its 10 Mbit/s at 40 s.
    """
    nodes = ["r1", "r2", "r3", "r4"]
    links = [("r1", "r2"), ("r2", "r4"), ("r1", "r3"), ("r3", "r4")]
    upper, lower = ["r1", "r2", "r4"], ["r1", "r3", "r4"]
    end = duration_s
    flows = [
        SynthFlow("zpub.pub1", 1, "r1", ["r4"], priority=5, rate_hz=20, size=1250, start_s=5, stop_s=min(30, end),
                  key="demo/example/pub1"),
        SynthFlow("zpub.pub2", 2, "r1", ["r4"], priority=5, rate_hz=20, size=1250, start_s=min(30, end), stop_s=end,
                  key="demo/example/pub2"),
        SynthFlow("zpub.realtime", 3, "r1", ["r4"], priority=1, rate_hz=20, size=200, start_s=5, stop_s=end,
                  key="demo/example/realtime"),
        SynthFlow("bulk", 4, "r1", ["r4"], priority=6, rate_hz=bulk_rate_hz, size=1200, start_s=10,
                  stop_s=min(40, end)),
    ]
    paths = {
        "zpub.pub1": [(0, upper), (21.5, lower)],
        "zpub.pub2": [(0, upper)],
        "zpub.realtime": [(0, upper)],
        "bulk": [(0, upper), (21.5, lower)],
    }
    lost = {("zpub.pub1", seq): 1 for seq in range(int((20.5 - 5) * 20), int((21.5 - 5) * 20))}
    router_events = congestion_events(
        nodes, "r2", "r4", 21.45, [MovedFlow("demo/example/pub1", 5, "r1", "pub-zpub.pub1@127.0.0.1:41516"),
                                   MovedFlow("flows/bulk", 6, "r1", "pub-bulk@127.0.0.1:41510")],
        old_next="r2", new_next="r3", cleared_s=21.95, stay_pins={"r1": "r3", "r3": "r4"}, capacity_bps=1_000_000,
        data_bps=bulk_rate_hz * 1200 * 8 + 20 * 1250 * 8, high_bps=20 * 200 * 8)
    drops = {"r2": [(float(s), "router_queue_dropped_messages_total",
                     {"peer": "r4", "peer_kind": "router", "priority": "6", "priority_name": "data_low"}, 10.0 * max(0, s - 20))
                    for s in range(0, int(end) + 1)]}
    return SynthRun(
        name=name, nodes=nodes, links=links, flows=flows, paths=paths, lost=lost, router_events=router_events,
        link_bw_bps={0: 20_000_000, 1: 10_000_000, 2: 20_000_000, 3: 20_000_000},
        scenario_events=[{"at_s": 20.0, "event": "set_link", "link": 1, "node": None, "ok": True,
                          "bw_bps": 1_000_000, "left_out": []},
                         {"at_s": 40.0, "event": "set_link", "link": 1, "node": None, "ok": True,
                          "bw_bps": 10_000_000, "left_out": []}],
        metric_samples=drops, duration_s=duration_s, snaplen=snaplen, batch_window_ns=1 * _MS, acks=acks,
        link_delay_ns=2 * _MS,
        expect=[{"metric": "latency.p99", "op": "<=", "value": "50ms", "priority": "realtime"},
                {"metric": "loss", "op": "<=", "value": "1%", "flow": "zpub.realtime"},
                {"metric": "reroute.time", "op": "<=", "value": "3s", "flow": "zpub.pub1"},
                {"metric": "reroutes_per_episode", "op": "<=", "value": 1},
                "loss <= 2% for flow zpub.pub2"],
    )
