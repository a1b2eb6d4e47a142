"""Ctrl-C and SIGTERM during a run: the first one interrupts the run where it is (an
exception in the main thread, so every `finally` tears down what was set up); any later
one is reported and ignored so that the teardown itself is never cut short."""
from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from typing import Iterator

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(Exception):
    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


class InterruptGuard:
    def __init__(self) -> None:
        self.received: list[int] = []
        self.armed = True

    def _handler(self, signum, frame) -> None:
        self.received.append(signum)
        if self.armed:
            self.armed = False
            raise Interrupted(signum)
        print(f"\n{signal.Signals(signum).name} received: already stopping, tearing down cleanly...",
              file=sys.stderr, flush=True)

    def disarm(self) -> None:
        """From now on signals no longer interrupt (used once teardown has begun)."""
        self.armed = False

    @property
    def interrupted(self) -> bool:
        return bool(self.received)


@contextmanager
def interrupt_guard() -> Iterator[InterruptGuard]:
    guard = InterruptGuard()
    previous = {sig: signal.signal(sig, guard._handler) for sig in HANDLED}
    try:
        yield guard
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
