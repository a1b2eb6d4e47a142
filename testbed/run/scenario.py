"""The scenario timeline: at given times, change links, start/stop flows, kill/restart routers.

Each applied event is written to `events.jsonl` with `at_ns` (when the timeline asked
for it, on the run clock) and `ts_ns` (when it really took effect, ns since the epoch).
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Protocol

from testbed.run.rundir import RunEvents


class ScenarioError(RuntimeError):
    pass


class Actions(Protocol):
    def apply(self, event) -> dict:
        """Carry out one scenario event; return the fields to record (values really applied)."""


class Timeline:
    def __init__(self, events: list, actions: Actions, log: RunEvents):
        self.events = sorted(events, key=lambda e: e.at)
        self.actions = actions
        self.log = log
        self.applied: list[dict] = []
        self.pending: list = []  # what was still to come when the run ended

    def run(self, t0_ns: int, end_ns: int, stop: Optional[threading.Event] = None,
            tick: Optional[Callable[[], None]] = None, tick_s: float = 1.0) -> None:
        """Apply every event at ``t0_ns + at`` and return at ``end_ns``; call ``tick`` about every ``tick_s``."""
        pending = list(self.events)
        next_tick = time.monotonic()
        while True:
            now = time.time_ns()
            while pending and now >= t0_ns + pending[0].at:
                self._apply(pending.pop(0))
                now = time.time_ns()
            if now >= end_ns or (stop is not None and stop.is_set()):
                self.pending = pending
                return
            if tick is not None and time.monotonic() >= next_tick:
                tick()
                next_tick += tick_s
            wake = min([end_ns] + [t0_ns + e.at for e in pending[:1]])
            time.sleep(max(0.0, min(0.05, (wake - time.time_ns()) / 1e9)))

    def _apply(self, event) -> None:
        try:
            fields = self.actions.apply(event)
        except Exception as exc:
            self.log.write(getattr(event, "source", "scenario"), event.action, at_ns=event.at, ok=False,
                           error=str(exc))
            raise ScenarioError(f"scenario event at {event.at / 1e9:g}s ({event.action}) failed: {exc}") from exc
        record = self.log.write(getattr(event, "source", "scenario"), event.action, ts_ns=fields.pop("ts_ns", None),
                                at_ns=event.at, ok=True, **fields)
        self.applied.append(record)
