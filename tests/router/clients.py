"""In-test helpers around the client library (not a test module)."""
from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from router.codec import make_payload, unpack_payload_header
from traffic.client import Sample, Session, Subscriber, connect

PROBE_FLOW = 0


@dataclass
class Recorder:
    """Collects what one subscriber received: per flow, the (seq, send_ns, recv_ns, prio, size)."""

    name: str
    flows: Dict[int, List[Tuple[int, int, int, int, int]]] = field(default_factory=lambda: defaultdict(list))

    def __call__(self, sample: Sample) -> None:
        h = unpack_payload_header(sample.payload)
        if h is not None:
            self.flows[h.flow_id].append((h.seq, h.send_ns, sample.recv_ns, sample.priority, len(sample.payload)))

    def seqs(self, flow: int) -> List[int]:
        return [r[0] for r in self.flows.get(flow, [])]


async def subscribe(port: int, key: str, name: str) -> Tuple[Session, Subscriber, Recorder]:
    session = await connect("127.0.0.1", port, name=name)
    rec = Recorder(name)
    sub = await session.declare_subscriber(key, callback=rec)
    return session, sub, rec


async def probe_until_received(port: int, key: str, recorders: List[Recorder], timeout: float = 15.0,
                               flow: int = PROBE_FLOW) -> None:
    """Publish probes on ``key`` until every recorder saw one (routes have converged)."""
    session = await connect("127.0.0.1", port, name="prober")
    pub = session.declare_publisher(key)
    deadline = time.monotonic() + timeout
    seq = 0
    try:
        while not all(r.flows.get(flow) for r in recorders):
            if time.monotonic() > deadline:
                missing = [r.name for r in recorders if not r.flows.get(flow)]
                raise AssertionError(f"probes on {key} never reached {missing}")
            await pub.put(make_payload(flow, seq, time.time_ns(), 32))
            seq += 1
            await asyncio.sleep(0.05)
    finally:
        await session.close()
