"""Congestion monitor: per neighbour, per priority throughput from the router's
own tx counters, and the block / restore decision of
reference/zenoh-congestion-aware-qos-routing.md.

Every ``monitor_interval_ms`` the node calls ``CongestionMonitor.tick``.  For
each up neighbour router with a ``link_capacity_bps`` it takes the bytes the
router wrote toward that neighbour since the previous tick, per priority (DATA
frames as written to the socket: the 8-byte frame header and the 12-byte
message headers, keys and payloads; TCP/IP overhead not included), and turns
them into bit/s over the measured elapsed time:

    data_bps  = sum over data_priorities
    high_bps  = sum over high_priorities
    cap_limit = payload_capacity(capacity) - high_bps - buffer
    block     if not blocked and data_bps > 0 and data_bps > cap_limit
    restore   if blocked and data_bps < recovery_ratio * cap_limit

``capacity`` is the link's rate as its shaper counts it (whole Ethernet frames: htb, tbf), while the
throughputs are bytes written to the socket; ``payload_capacity`` is the part of the capacity those bytes
can have: full-size TCP segments at MTU 1500 carry 1448 bytes under 66 bytes of Ethernet, IPv4 and TCP
headers (4.4 %). Without it a saturated link carries ``capacity × 0.956 - high_bps`` of data, barely above
a 5 % buffer's ``cap_limit`` (0.6 % of the capacity): whether an interval of a saturated link was seen
as congested was left to chance.

Both comparisons are strict (a value exactly at the threshold changes
nothing).  The capacity is read at every tick (the node passes the one set at
run time through the admin API, else the configured one), so ``cap_limit``
follows a bandwidth change from the next tick on.  A link whose capacity
became unknown (None) is no longer measured; if it was blocked it is restored
(there is nothing left to decide against).  The decision function is pure (``decide``) so its edges are unit
tested; the node applies decisions (weights, events, pin requests).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

BLOCK = "block"
RESTORE = "restore"
#: IPv4 (20) + TCP (20) + the timestamp option Linux sends by default (12): the MSS of a 1500-byte
#: MTU is 1448 bytes of payload
TCP_IP_HEADERS = 52
#: the Ethernet header: htb counts a packet's length as the device sees it (IP packet + 14 bytes;
#: no preamble, FCS or inter-frame gap), also for GSO packets, which it counts per segment
ETHERNET_HEADER = 14
#: TCP payload of a full-size segment at MTU 1500, and the headers a shaper counts with it
SEGMENT_PAYLOAD = 1500 - TCP_IP_HEADERS
SEGMENT_HEADERS = ETHERNET_HEADER + TCP_IP_HEADERS


def payload_capacity(capacity_bps: float) -> float:
    """What of a link's shaped rate (whole frames) the bytes a router writes to its socket can have."""
    return capacity_bps * SEGMENT_PAYLOAD / (SEGMENT_PAYLOAD + SEGMENT_HEADERS)


def decide(blocked: bool, data_bps: float, high_bps: float, capacity_bps: float, buffer_bps: float,
           recovery_ratio: float) -> Tuple[Optional[str], float]:
    """(decision or None, cap_limit_bps)."""
    cap_limit = payload_capacity(capacity_bps) - high_bps - buffer_bps
    if not blocked:
        if data_bps > 0 and data_bps > cap_limit:
            return BLOCK, cap_limit
    elif data_bps < recovery_ratio * cap_limit:
        return RESTORE, cap_limit
    return None, cap_limit


def default_buffer(capacity_bps: int, configured: Optional[int]) -> int:
    """``monitor_buffer_bps`` if set, else 5% of the link's capacity."""
    return configured if configured is not None else capacity_bps // 20


@dataclass
class LinkMonitorState:
    neighbour: str
    blocked: bool = False
    conn_id: int = 0  # id() of the connection the baseline was taken on
    last_t: float = 0.0
    last_bytes: List[int] = field(default_factory=list)
    data_bps: float = 0.0
    high_bps: float = 0.0
    capacity_bps: int = 0
    cap_limit_bps: float = 0.0
    decisions: Dict[str, int] = field(default_factory=lambda: {BLOCK: 0, RESTORE: 0})


@dataclass
class Decision:
    neighbour: str
    kind: str
    data_bps: float
    high_bps: float
    capacity_bps: Optional[int]  # None: the capacity was removed at run time (restore)
    cap_limit_bps: float

    def numbers(self) -> Dict[str, Any]:
        return {"neighbour": self.neighbour, "data_bps": round(self.data_bps), "high_bps": round(self.high_bps),
                "capacity_bps": self.capacity_bps, "cap_limit_bps": round(self.cap_limit_bps)}


class CongestionMonitor:
    def __init__(self, data_priorities: Sequence[int], high_priorities: Sequence[int], buffer_bps: Optional[int],
                 recovery_ratio: float) -> None:
        self.data_priorities = tuple(data_priorities)
        self.high_priorities = tuple(high_priorities)
        self.buffer_bps = buffer_bps
        self.recovery_ratio = recovery_ratio
        self.links: Dict[str, LinkMonitorState] = {}

    def tick(self, now: float, links: Iterable[Tuple[str, int, Optional[int], Sequence[int]]]) -> List[Decision]:
        """``links``: (neighbour, connection id, capacity bit/s or None, tx bytes per priority) of up links.

        The first sample on a connection only sets the baseline."""
        out: List[Decision] = []
        for name, conn_id, capacity, tx in links:
            if not capacity:
                st = self.links.get(name)
                if st is not None:
                    st.conn_id = 0  # a capacity given again later starts from a new baseline
                    if st.blocked:
                        st.blocked = False
                        st.capacity_bps, st.cap_limit_bps = 0, 0.0
                        st.decisions[RESTORE] += 1
                        out.append(Decision(name, RESTORE, st.data_bps, st.high_bps, None, 0.0))
                continue
            st = self.links.get(name)
            if st is None:
                st = self.links[name] = LinkMonitorState(name)
            st.capacity_bps = capacity
            if st.conn_id != conn_id or now <= st.last_t:
                st.conn_id, st.last_t, st.last_bytes = conn_id, now, list(tx)
                continue
            dt = now - st.last_t
            delta = [b - a for a, b in zip(st.last_bytes, tx)]
            st.last_t, st.last_bytes = now, list(tx)
            st.data_bps = sum(delta[p] for p in self.data_priorities) * 8 / dt
            st.high_bps = sum(delta[p] for p in self.high_priorities) * 8 / dt
            kind, st.cap_limit_bps = decide(st.blocked, st.data_bps, st.high_bps, capacity,
                                            default_buffer(capacity, self.buffer_bps), self.recovery_ratio)
            if kind is not None:
                st.blocked = kind == BLOCK
                st.decisions[kind] += 1
                out.append(Decision(name, kind, st.data_bps, st.high_bps, capacity, st.cap_limit_bps))
        return out
