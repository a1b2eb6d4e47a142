"""Live progress of a run: phase, elapsed and remaining time, messages sent, delivered, lost so far."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, TextIO


class LineCounter:
    """Counts data lines of a growing CSV file by reading only what was appended since last time."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.lines = 0

    def update(self) -> int:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return self.lines
        complete = chunk.rfind(b"\n") + 1
        self.lines += chunk.count(b"\n", 0, complete)
        self.offset += complete
        return max(0, self.lines - 1)  # minus the header line


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
    """Watches traffic/send-*.csv and recv-*.csv; each message sent is expected once per subscriber."""

    traffic_dir: Path
    subscribers: dict[str, list[str]]  # flow name -> subscriber nodes
    _send: dict[str, LineCounter] = field(default_factory=dict)
    _recv: dict[tuple[str, str], LineCounter] = field(default_factory=dict)

    def counts(self) -> TrafficCounts:
        c = TrafficCounts()
        for flow, nodes in self.subscribers.items():
            sent = self._send.setdefault(flow, LineCounter(self.traffic_dir / f"send-{flow}.csv")).update()
            c.sent += sent
            c.expected += sent * len(nodes)
            for node in nodes:
                key = (flow, node)
                c.delivered += self._recv.setdefault(key, LineCounter(
                    self.traffic_dir / f"recv-{flow}-{node}.csv")).update()
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
        line = (f"[{self.elapsed():6.1f}s] {phase} {rem}  sent {counts.sent}  delivered {counts.delivered}  "
                f"not (yet) delivered {counts.lost} ({loss:.1f}%)")
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
