"""Ctrl-C and SIGTERM during a run: the first one interrupts the run where it is (an
exception in the main thread, so every `finally` tears down what was set up); any later
one is reported and ignored so that the teardown itself is never cut short.

Inside :meth:`InterruptGuard.deferred` (around work that must be cancelled through its
own API, such as an ansible-runner playbook) a signal is only recorded; the work polls
:attr:`InterruptGuard.pending` to cancel itself, and `Interrupted` is raised when the
block ends. Libraries that install their own handlers (ansible-runner does) are undone
when the block ends, because the guard installs its handler again.
"""
from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from typing import Iterator

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """Not an Exception: code that handles failures with `except Exception` must not swallow it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


class InterruptGuard:
    def __init__(self) -> None:
        self.received: list[int] = []
        self.armed = True
        self._deferring = 0

    def install(self) -> None:
        for sig in HANDLED:
            signal.signal(sig, self._handler)

    def _handler(self, signum, frame) -> None:
        self.received.append(signum)
        if self._deferring:
            return
        if self.armed:
            self.armed = False
            raise Interrupted(signum)
        print(f"\n{signal.Signals(signum).name} received: already stopping, tearing down cleanly...",
              file=sys.stderr, flush=True)

    @property
    def pending(self) -> bool:
        """A signal arrived (use as a cancel callback for work inside :meth:`deferred`)."""
        return bool(self.received)

    @contextmanager
    def deferred(self) -> Iterator["InterruptGuard"]:
        self._deferring += 1
        try:
            yield self
        finally:
            self._deferring -= 1
            self.install()
            if not self._deferring and self.received and self.armed:
                self.armed = False
                raise Interrupted(self.received[0])

    def disarm(self) -> None:
        """From now on signals no longer interrupt (used once teardown has begun)."""
        self.armed = False


@contextmanager
def interrupt_guard() -> Iterator[InterruptGuard]:
    guard = InterruptGuard()
    previous = {sig: signal.getsignal(sig) for sig in HANDLED}
    guard.install()
    try:
        yield guard
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
