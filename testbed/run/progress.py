"""Live progress of a run: phase, elapsed and remaining time, messages sent, delivered, lost so far."""
from __future__ import annotations

import json
import sys
import time
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional, TextIO

from runfolder.layout import LAYOUT


@dataclass
class TrafficCounts:
    sent: int = 0
    expected: int = 0
    delivered: int = 0

    @property
    def lost(self) -> int:
        return max(0, self.expected - self.delivered)


@dataclass
class TrafficWatch:
    """Counts the lines of the traffic logs on the nodes: each message sent (a line of
    send-<flow>.csv on the publisher's node) is expected once per subscriber (a line of
    recv-<flow>-<node>.csv on that subscriber's node)."""

    subscribers: dict[str, list[str]]  # flow name -> subscriber nodes
    publishers: dict[str, str]  # flow name -> publisher node
    #: (node, [file names]) -> {file name: complete lines}, for the files that exist
    line_counts: Callable[[str, list[str]], dict[str, int]]
    #: the counts of the last poll (see :meth:`start_polling`)
    latest: TrafficCounts = field(default_factory=lambda: TrafficCounts())
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)

    def start_polling(self, interval_s: float = 1.0) -> None:
        """Count in a thread of its own every ``interval_s``, into :attr:`latest`: asking every node takes
        time that the scenario timeline must not wait for."""
        def poll() -> None:
            while not self._stop.is_set():
                try:
                    self.latest = self.counts()
                except Exception:  # noqa: BLE001 - progress is informative: a node that does not answer now may later
                    pass
                self._stop.wait(interval_s)

        threading.Thread(target=poll, name="traffic-watch", daemon=True).start()

    def stop_polling(self) -> None:
        self._stop.set()

    def counts(self) -> TrafficCounts:
        wanted: dict[str, list[str]] = {}
        for flow, nodes in self.subscribers.items():
            wanted.setdefault(self.publishers[flow], []).append(LAYOUT.send_log_name(flow))
            for node in nodes:
                wanted.setdefault(node, []).append(LAYOUT.recv_log_name(flow, node))
        lines = {node: self.line_counts(node, names) for node, names in wanted.items()}

        def data_lines(node: str, name: str) -> int:
            return max(0, lines[node].get(name, 0) - 1)  # minus the header line

        c = TrafficCounts()
        for flow, nodes in self.subscribers.items():
            sent = data_lines(self.publishers[flow], LAYOUT.send_log_name(flow))
            c.sent += sent
            c.expected += sent * len(nodes)
            # a receive log read after its send log may count messages whose send line came later
            c.delivered += min(sent * len(nodes), sum(data_lines(node, LAYOUT.recv_log_name(flow, node)) for node in nodes))
        return c


class Progress:
    """Prints progress lines (a status line rewritten in place on a terminal), JSON lines, or nothing."""

    def __init__(self, mode: str = "human", stream: TextIO = sys.stderr):
        self.mode = mode  # human | json | quiet
        self.stream = stream
        self.started = time.monotonic()
        self.tty = stream.isatty()
        self._status_shown = False

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _print(self, *args, **kwargs) -> None:
        """Progress is informative: a closed terminal or pipe must never stop a run or its teardown."""
        try:
            print(*args, file=self.stream, flush=True, **kwargs)
        except (OSError, ValueError):
            self.mode = "quiet"

    def phase(self, name: str, detail: str = "") -> None:
        if self.mode == "quiet":
            return
        if self.mode == "json":
            self._json({"phase": name, "detail": detail})
            return
        self._end_status()
        self._print(f"[{self.elapsed():6.1f}s] {name}{': ' + detail if detail else ''}")

    def status(self, phase: str, remaining_s: Optional[float], counts: TrafficCounts) -> None:
        if self.mode == "quiet":
            return
        loss = 100.0 * counts.lost / counts.expected if counts.expected else 0.0
        if self.mode == "json":
            self._json({"phase": phase, "remaining_s": remaining_s, "sent": counts.sent,
                        "delivered": counts.delivered, "lost": counts.lost})
            return
        rem = f"{remaining_s:5.1f}s left" if remaining_s is not None else ""
        line = (f"[{self.elapsed():6.1f}s] {phase} {rem}  sent {counts.sent}  delivered {counts.delivered} of "
                f"{counts.expected}  not (yet) delivered {counts.lost} ({loss:.1f}%)")
        if self.tty:
            self._print("\r\033[K" + line, end="")
            self._status_shown = True
        else:
            self._print(line)

    def _end_status(self) -> None:
        if self._status_shown:
            self._print()
            self._status_shown = False

    def _json(self, data: dict) -> None:
        self._print(json.dumps({"elapsed_s": round(self.elapsed(), 3), **data}))
