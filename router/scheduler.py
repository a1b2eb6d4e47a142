"""Link schedulers: which priority queue a link's writer serves next.

A scheduler sees only the priorities that have a batch ready to leave and is
told how many bytes the chosen batch had.  Add a scheduler by implementing
``LinkScheduler`` and registering it in ``make_scheduler``.
"""
from __future__ import annotations

from typing import List, Sequence

from .codec import NUM_PRIORITIES


class LinkScheduler:
    name = "abstract"

    def choose(self, eligible: List[int]) -> int:
        """Pick one priority out of ``eligible`` (non-empty, ascending)."""
        raise NotImplementedError

    def charge(self, priority: int, nbytes: int) -> None:
        """Account ``nbytes`` sent from ``priority``."""


class StrictPriorityScheduler(LinkScheduler):
    """Always the most urgent (lowest-numbered) priority: Zenoh's default."""

    name = "strict"

    def choose(self, eligible: List[int]) -> int:
        return eligible[0]


class WeightedRoundRobinScheduler(LinkScheduler):
    """Byte-weighted round robin (start-time fair queueing).

    Under saturation each backlogged priority gets a share of the link's bytes
    proportional to its weight; an idle priority accrues no credit.
    """

    name = "wrr"

    def __init__(self, weights: Sequence[int]) -> None:
        if len(weights) != NUM_PRIORITIES or any(w <= 0 for w in weights):
            raise ValueError(f"wrr weights must be {NUM_PRIORITIES} positive integers, got {list(weights)}")
        self.weights = list(weights)
        self._finish = [0.0] * NUM_PRIORITIES
        self._virtual_now = 0.0

    def choose(self, eligible: List[int]) -> int:
        finish = self._finish
        vnow = self._virtual_now
        best = -1
        best_tag = 0.0
        for prio in eligible:
            tag = finish[prio]
            if tag < vnow:
                tag = finish[prio] = vnow
            if best < 0 or tag < best_tag:
                best, best_tag = prio, tag
        return best

    def charge(self, priority: int, nbytes: int) -> None:
        start = self._finish[priority]
        self._virtual_now = start
        self._finish[priority] = start + nbytes / self.weights[priority]


def make_scheduler(kind: str, wrr_weights: Sequence[int]) -> LinkScheduler:
    if kind == "strict":
        return StrictPriorityScheduler()
    if kind == "wrr":
        return WeightedRoundRobinScheduler(wrr_weights)
    raise ValueError(f"unknown scheduler {kind!r}; expected 'strict' or 'wrr'")
