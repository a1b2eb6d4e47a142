"""Per-link statistics: queue statistics per priority (the 'qstats' of the
Zenoh notes) and per-priority tx/rx counters."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from .codec import NUM_PRIORITIES

EMA_ALPHA = 0.1


@dataclass
class QueueStats:
    """Statistics of one priority queue of one link.

    avg_qsize: EMA (alpha 0.1) of the number of queued messages, sampled when a
    message is offered; avg_qdelay_ns: EMA of the time a message spent queued,
    sampled when its batch is pulled for transmission.
    """

    priority: int
    avg_qsize: float = 0.0
    avg_qdelay_ns: float = 0.0
    tried: int = 0
    dropped: int = 0
    in_queue: int = 0

    @property
    def drop_rate(self) -> float:
        return self.dropped / self.tried if self.tried else 0.0

    def record_offer(self) -> None:
        self.tried += 1
        self.avg_qsize += EMA_ALPHA * (self.in_queue - self.avg_qsize)

    def record_pulled(self, enqueue_times_ns: List[int], now_ns: int) -> None:
        avg = self.avg_qdelay_ns
        for t in enqueue_times_ns:
            avg += EMA_ALPHA * ((now_ns - t) - avg)
        self.avg_qdelay_ns = avg
        self.in_queue -= len(enqueue_times_ns)


@dataclass
class TrafficCounters:
    """Per-priority byte and message counters in one direction."""

    bytes: List[int] = field(default_factory=lambda: [0] * NUM_PRIORITIES)
    messages: List[int] = field(default_factory=lambda: [0] * NUM_PRIORITIES)
