"""When a publisher sends: active windows, absolute tick times and messages per tick.

All times here are on the *run clock* (ns since the run's ``t0_ns``); nothing
in this module reads a clock, so the whole schedule can be tested with made-up
times.

Semantics (docs/traffic.md):

* A flow is active in *windows* ``[start, stop)``: its phases, cut into
  ``on``/``off`` cycles for a burst flow (each phase starts with ``on``), and
  clipped to the end of the run.
* Inside a window, tick ``k`` is due at ``window.start + k * tick_ns`` for every
  such time ``< window.stop``.  Times are absolute, so the schedule never
  drifts however late a tick is served.
* By the end of tick ``k`` (0-based) of a window of length ``L``, ``M(k+1)``
  messages have been sent, with ``M(j) = ceil(min(j * tick_ns, L) * rate_bps /
  (8e9 * size))``; tick ``k`` sends ``M(k+1) - M(k)``.  A window therefore
  carries ``ceil(L * rate_bps / (8e9 * size))`` messages.  So the first
  tick of a window always sends at least one message, the long-run rate is
  exactly ``rate_bps`` (no rounding up per tick), and when ``rate_bps * tick_ns / 8e9 == size`` (the
  zpub default) every tick sends exactly one message.
* Late ticks: when a tick is served at time ``now``, the tick actually sent is
  the *latest* tick due at or before ``now``, together with at most
  ``catch_up_ticks`` (default 1) of the unserved ticks just before it; earlier
  unserved ticks are skipped (counted with their messages), never sent.  A
  publisher therefore sends at most ``1 + catch_up_ticks`` ticks' worth at once:
  a single late wake-up costs nothing, a long stall is not followed by a burst.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class Window:
    """``[start_ns, stop_ns)`` on the run clock."""

    start_ns: int
    stop_ns: int


@dataclass(frozen=True)
class Tick:
    """A tick to serve now: its due time, how many messages, what was skipped to reach it."""

    due_ns: int
    count: int
    skipped_ticks: int
    skipped_messages: int
    caught_up_ticks: int = 0


def merge_phases(phases: Iterable[Sequence[int]]) -> List[Tuple[int, int]]:
    """Sorted, non-overlapping ``[start, stop)`` phases; empty ones removed."""
    items = sorted((int(a), int(b)) for a, b in phases if int(b) > int(a))
    out: List[Tuple[int, int]] = []
    for a, b in items:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def active_windows(phases: Iterable[Sequence[int]], end_ns: Optional[int] = None,
                   on_ns: Optional[int] = None, off_ns: Optional[int] = None) -> Iterator[Window]:
    """The windows in which a flow publishes, lazily (a long burst run has many)."""
    if (on_ns is None) != (off_ns is None):
        raise ValueError("a burst needs both on_ns and off_ns")
    if on_ns is not None and (on_ns <= 0 or off_ns <= 0):  # type: ignore[operator]
        raise ValueError("burst on_ns and off_ns must be > 0")
    for start, stop in merge_phases(phases):
        if end_ns is not None:
            stop = min(stop, end_ns)
        if stop <= start:
            continue
        if on_ns is None:
            yield Window(start, stop)
            continue
        period = on_ns + off_ns  # type: ignore[operator]
        t = start
        while t < stop:
            yield Window(t, min(t + on_ns, stop))
            t += period


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


class TickSchedule:
    """The ticks of one flow, served in order with :meth:`take`."""

    def __init__(self, windows: Iterable[Window], tick_ns: int, rate_bps: int, size: int,
                 catch_up_ticks: int = 1) -> None:
        if tick_ns <= 0:
            raise ValueError(f"tick_ns must be > 0, not {tick_ns}")
        if rate_bps <= 0:
            raise ValueError(f"rate_bps must be > 0, not {rate_bps}")
        if size <= 0:
            raise ValueError(f"size must be > 0, not {size}")
        if catch_up_ticks < 0:
            raise ValueError(f"catch_up_ticks must be >= 0, not {catch_up_ticks}")
        self.tick_ns = tick_ns
        self.catch_up_ticks = catch_up_ticks
        # messages due after elapsed ns of a window = ceil(elapsed * rate / (8e9 * size))
        self._rate = rate_bps
        self._den = 8 * NS_PER_S * size
        self._length = 0  # of the current window
        self._windows = iter(windows)
        self._window: Optional[Window] = None
        self._pending: Optional[Window] = None
        self._n_ticks = 0  # ticks in the current window
        self._k = 0        # next tick index in the current window
        self._advance_window()

    @classmethod
    def one_per_tick(cls, windows: Iterable[Window], tick_ns: int, catch_up_ticks: int = 0) -> "TickSchedule":
        """Exactly one message per tick (``size == rate*tick/8``): a querier's schedule, query ``k`` of a
        window due at ``start + k*tick_ns``. With ``catch_up_ticks=0`` a tick that another tick has
        followed by the time it is served (late by a whole interval) is skipped."""
        return cls(windows, tick_ns, rate_bps=8 * NS_PER_S, size=tick_ns, catch_up_ticks=catch_up_ticks)

    # -- arithmetic ---------------------------------------------------------

    def cumulative(self, k: int, length: Optional[int] = None) -> int:
        """Messages sent by the first ``k`` ticks of a window of ``length`` ns (default: the current one).

        The budget of a tick that reaches past the window's end is cut at the end.
        """
        elapsed = min(k * self.tick_ns, self._length if length is None else length)
        return _ceil_div(elapsed * self._rate, self._den)

    def messages_per_window(self, window: Window) -> int:
        length = window.stop_ns - window.start_ns
        return self.cumulative(_ceil_div(length, self.tick_ns), length)

    # -- state --------------------------------------------------------------

    def _pull(self) -> Optional[Window]:
        if self._pending is not None:
            w, self._pending = self._pending, None
            return w
        return next(self._windows, None)

    def _peek(self) -> Optional[Window]:
        if self._pending is None:
            self._pending = next(self._windows, None)
        return self._pending

    def _advance_window(self) -> None:
        self._window = self._pull()
        self._k = 0
        if self._window is not None:
            self._length = self._window.stop_ns - self._window.start_ns
            self._n_ticks = _ceil_div(self._length, self.tick_ns)

    def next_due(self) -> Optional[int]:
        """Run-clock time of the next tick, or None when the schedule is finished."""
        if self._window is None:
            return None
        return self._window.start_ns + self._k * self.tick_ns

    @property
    def finished(self) -> bool:
        return self._window is None

    def take(self, now_ns: int) -> Optional[Tick]:
        """Serve the latest tick due at or before ``now_ns``; None if no tick is due yet (or finished).

        Up to ``catch_up_ticks`` unserved ticks just before it are sent with it; older
        unserved ticks are skipped and reported in the Tick.
        """
        skipped_ticks = 0
        skipped_msgs = 0
        while self._window is not None:
            w = self._window
            due = w.start_ns + self._k * self.tick_ns
            if due > now_ns:
                break
            last = min(self._n_ticks - 1, self._k + (now_ns - due) // self.tick_ns)
            if last == self._n_ticks - 1 and now_ns >= w.stop_ns:
                nxt = self._peek()
                if nxt is not None and nxt.start_ns <= now_ns:
                    # this whole window is in the past and a later one is already due
                    skipped_ticks += self._n_ticks - self._k
                    skipped_msgs += self.cumulative(self._n_ticks) - self.cumulative(self._k)
                    self._advance_window()
                    continue
            caught_up = min(self.catch_up_ticks, last - self._k)
            first = last - caught_up  # first tick sent now
            skipped_ticks += first - self._k
            skipped_msgs += self.cumulative(first) - self.cumulative(self._k)
            count = self.cumulative(last + 1) - self.cumulative(first)
            tick = Tick(w.start_ns + last * self.tick_ns, count, skipped_ticks, skipped_msgs, caught_up)
            self._k = last + 1
            if self._k >= self._n_ticks:
                self._advance_window()
            return tick
        if skipped_ticks:  # not reachable with non-empty windows; kept so nothing is lost silently
            return Tick(now_ns, 0, skipped_ticks, skipped_msgs)
        return None
