"""Flow table for congestion-aware routing.

A flow is what the forwarding fast path caches a route for in the data tree
set: (tree set, origin router id, key bytes).  Per flow the table keeps the
previous hop (the connection it last arrived on), the next hops it is
forwarded to, its priority, when it was last seen (ns since the epoch, the
time of the DATA frame it arrived in) and, when pinned, the next hops it is
pinned to and why.  The fast path touches a flow with two attribute writes;
everything else (pinning, expiry) happens off the fast path.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

FlowKey = Tuple[int, int, bytes]


class Flow:
    __slots__ = ("ck", "origin", "key", "priority", "prev", "next_hops", "last_ns", "pinned", "pin_reason",
                 "move_requested")

    def __init__(self, ck: FlowKey, origin: str, key: str, priority: int, next_hops: Tuple[str, ...],
                 now_ns: int) -> None:
        self.ck = ck
        self.origin = origin
        self.key = key
        self.priority = priority
        self.prev: Any = None  # Connection the flow last arrived on
        self.next_hops = next_hops
        self.last_ns = now_ns
        self.pinned: Optional[Tuple[str, ...]] = None
        self.pin_reason = ""
        self.move_requested = ""  # reason, when a pin request asks this flow to follow the new trees

    @property
    def prev_name(self) -> Optional[str]:
        return None if self.prev is None else self.prev.peer_name

    @property
    def prev_is_router(self) -> bool:
        return self.prev is not None and self.prev.kind == "router"

    def to_json(self, now_ns: int) -> Dict[str, Any]:
        return {"origin": self.origin, "key": self.key, "priority": self.priority, "previous_hop": self.prev_name,
                "next_hop": list(self.next_hops), "pinned": None if self.pinned is None else list(self.pinned),
                "pin_reason": self.pin_reason or None, "idle_ms": (now_ns - self.last_ns) // 1_000_000}


class FlowTable:
    def __init__(self) -> None:
        self.flows: Dict[FlowKey, Flow] = {}

    def get(self, ck: FlowKey) -> Optional[Flow]:
        return self.flows.get(ck)

    def touch(self, ck: FlowKey, origin: str, key: str, priority: int, next_hops: Tuple[str, ...],
              now_ns: int) -> Flow:
        """The flow for ``ck`` (created if new), with its current next hops."""
        fl = self.flows.get(ck)
        if fl is None:
            fl = self.flows[ck] = Flow(ck, origin, key, priority, next_hops, now_ns)
        else:
            fl.next_hops = next_hops
            fl.priority = priority
        return fl

    def expire(self, now_ns: int, ttl_ns: int) -> List[Flow]:
        """Remove and return the flows idle for longer than ``ttl_ns``."""
        dead = [fl for fl in self.flows.values() if now_ns - fl.last_ns > ttl_ns]
        for fl in dead:
            del self.flows[fl.ck]
        return dead

    def active(self, now_ns: int, ttl_ns: int) -> List[Flow]:
        return [fl for fl in self.flows.values() if now_ns - fl.last_ns <= ttl_ns]

    def pinned_count(self) -> int:
        return sum(1 for fl in self.flows.values() if fl.pinned is not None)

    def __len__(self) -> int:
        return len(self.flows)
