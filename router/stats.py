"""Per-link statistics: queue statistics per priority (the 'qstats' of the
Zenoh notes) and per-priority tx/rx counters."""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import groupby
from typing import List

from .codec import NUM_PRIORITIES

EMA_ALPHA = 0.1
_EMA_KEEP = 1.0 - EMA_ALPHA


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

    def record_queued_run(self, count: int) -> None:
        """``count`` messages offered and queued one after the other: ``count`` times ``record_offer``
        then one more in the queue, in one step.  The samples are in_queue, in_queue + 1, ...: an
        EMA of a ramp of slope 1, which trails it by (1 - alpha) / alpha."""
        lag = _EMA_KEEP / EMA_ALPHA
        first = self.in_queue
        self.avg_qsize = (first + count - 1 - lag) + _EMA_KEEP ** count * (self.avg_qsize - (first - 1 - lag))
        self.tried += count
        self.in_queue = first + count

    def record_pulled(self, enqueue_times_ns: List[int], now_ns: int) -> None:
        # k messages queued at the same time (a run, router/pipeline.py push_run) move the average
        # as k samples of one delay do, in one step: d + (avg - d) * (1 - alpha) ** k
        avg = self.avg_qdelay_ns
        for t, same in groupby(enqueue_times_ns):
            delay = now_ns - t
            avg = delay + (avg - delay) * _EMA_KEEP ** len(list(same))
        self.avg_qdelay_ns = avg
        self.in_queue -= len(enqueue_times_ns)


@dataclass
class TrafficCounters:
    """Per-priority byte and message counters in one direction."""

    bytes: List[int] = field(default_factory=lambda: [0] * NUM_PRIORITIES)
    messages: List[int] = field(default_factory=lambda: [0] * NUM_PRIORITIES)
