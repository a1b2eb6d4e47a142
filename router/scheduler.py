"""Link schedulers: which priority queue a link's writer serves next.

A scheduler sees only the priorities that have a batch ready to leave and is
told how many bytes each batch sent had, and when.  The pipeline asks
``choose`` only when two or more priorities are ready, but reports every batch
it sends to ``charge``, so a scheduler's state must follow from ``charge``
alone; ``reset`` says the link ran out of work.  Add a scheduler by
implementing ``LinkScheduler`` and registering it in ``make_scheduler``.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from .codec import NUM_PRIORITIES

STRICT = "strict"
WRR = "wrr"
CONTENTION_POLLING = "contention_polling"
SCHEDULERS = (STRICT, WRR, CONTENTION_POLLING)

CONTENTION = "contention"
POLLING = "polling"


class LinkScheduler:
    name = "abstract"

    def choose(self, eligible: List[int], now_ns: int = 0) -> int:
        """Pick one priority out of ``eligible`` (two or more, ascending)."""
        raise NotImplementedError

    def charge(self, priority: int, nbytes: int, now_ns: int = 0) -> None:
        """Account ``nbytes`` sent from ``priority`` at ``now_ns`` (chosen or the only one ready)."""

    def reset(self) -> None:
        """The link has nothing to send (every queue is empty)."""


class StrictPriorityScheduler(LinkScheduler):
    """Always the most urgent (lowest-numbered) priority: Zenoh's default."""

    name = STRICT

    def choose(self, eligible: List[int], now_ns: int = 0) -> int:
        return eligible[0]


class WeightedRoundRobinScheduler(LinkScheduler):
    """Byte-weighted round robin (start-time fair queueing).

    Each priority has a finish tag; a batch of ``n`` bytes from priority ``p``
    starts at ``max(finish[p], virtual_now)`` and finishes ``n / weight[p]``
    later; ``virtual_now`` is the start tag of the batch last sent.  The ready
    priority with the smallest start tag goes next.  Under saturation each
    backlogged priority gets a share of the link's bytes proportional to its
    weight.  An idle priority accrues no credit: its stale finish tag is
    raised to ``virtual_now`` when it sends again, whether or not ``choose``
    was asked (virtual time never goes back).
    """

    name = WRR

    def __init__(self, weights: Sequence[int]) -> None:
        if len(weights) != NUM_PRIORITIES or any(w <= 0 for w in weights):
            raise ValueError(f"wrr weights must be {NUM_PRIORITIES} positive integers, got {list(weights)}")
        self.weights = list(weights)
        self._finish = [0.0] * NUM_PRIORITIES
        self._virtual_now = 0.0

    def choose(self, eligible: List[int], now_ns: int = 0) -> int:
        finish = self._finish
        vnow = self._virtual_now
        best = -1
        best_tag = 0.0
        for prio in eligible:  # ties go to the more urgent priority
            tag = finish[prio]
            if tag < vnow:
                tag = vnow
            if best < 0 or tag < best_tag:
                best, best_tag = prio, tag
        return best

    def charge(self, priority: int, nbytes: int, now_ns: int = 0) -> None:
        start = self._finish[priority]
        if start < self._virtual_now:
            start = self._virtual_now
        self._virtual_now = start
        self._finish[priority] = start + nbytes / self.weights[priority]


class ContentionPollingScheduler(LinkScheduler):
    """The reference's link scheduler (zenoh-transport-pipeline-notes, 4.3): time
    alternates between a contention window, served by priority (strict), and a
    polling window, served by weighted virtual time (the ``wrr`` rule above,
    with the same weights).

    A cycle is ``contention_window_us`` then ``polling_window_us``, repeated
    while the link has work; it starts (with a contention window) when the link
    sends again after it ran out of work (``reset``).  Only batches sent in a polling
    window advance the virtual time, so under saturation the polling windows'
    bytes are shared in proportion to the weights of the backlogged
    priorities, and the contention windows' bytes go to the most urgent ready
    priority.  No priority starves: each gets at least its weighted share of
    the polling windows.  A batch belongs to the window in which it was pulled.
    """

    name = CONTENTION_POLLING

    def __init__(self, weights: Sequence[int], contention_window_us: int, polling_window_us: int) -> None:
        if contention_window_us < 0 or polling_window_us < 0 or contention_window_us + polling_window_us <= 0:
            raise ValueError("contention and polling windows must be >= 0 us, and not both 0, got "
                             f"{contention_window_us} and {polling_window_us}")
        self._virtual = WeightedRoundRobinScheduler(weights)
        self.weights = self._virtual.weights
        self.contention_ns = contention_window_us * 1000
        self.cycle_ns = (contention_window_us + polling_window_us) * 1000
        self._cycle_start: Optional[int] = None

    def window(self, now_ns: int) -> str:
        """The window a decision at ``now_ns`` falls in (without starting a cycle)."""
        if self._cycle_start is None:
            return CONTENTION if self.contention_ns else POLLING
        return CONTENTION if (now_ns - self._cycle_start) % self.cycle_ns < self.contention_ns else POLLING

    def _contention(self, now_ns: int) -> bool:
        start = self._cycle_start
        if start is None:
            start = self._cycle_start = now_ns
        return (now_ns - start) % self.cycle_ns < self.contention_ns

    def choose(self, eligible: List[int], now_ns: int = 0) -> int:
        if self._contention(now_ns):
            return eligible[0]
        return self._virtual.choose(eligible)

    def charge(self, priority: int, nbytes: int, now_ns: int = 0) -> None:
        if not self._contention(now_ns):
            self._virtual.charge(priority, nbytes)

    def reset(self) -> None:
        self._cycle_start = None


def make_scheduler(kind: str, wrr_weights: Sequence[int], contention_window_us: int = 0,
                   polling_window_us: int = 0) -> LinkScheduler:
    if kind == STRICT:
        return StrictPriorityScheduler()
    if kind == WRR:
        return WeightedRoundRobinScheduler(wrr_weights)
    if kind == CONTENTION_POLLING:
        return ContentionPollingScheduler(wrr_weights, contention_window_us, polling_window_us)
    raise ValueError(f"unknown scheduler {kind!r}; expected one of {', '.join(SCHEDULERS)}")
