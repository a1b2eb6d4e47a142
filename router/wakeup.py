"""Waiting until woken, each wait bounded by its own timeout.

``asyncio.wait_for(event.wait(), timeout)`` makes a task (and a timer) for every wait; on the hot
path (a connection's writer waits for data after every batch it writes, a reader for queue room
under back-pressure) that task was a large part of the router's per-batch cost.  A ``Wakeup`` gives
each waiter a plain future and one timer instead.
"""
from __future__ import annotations

import asyncio
from typing import List, Optional


def _expire(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


class Wakeup:
    """Tasks waiting until ``wake()`` (which wakes every one waiting then) or their own timeout."""

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: List["asyncio.Future[None]"] = []

    def waiting(self) -> bool:
        return bool(self._waiters)

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, timeout: Optional[float] = None) -> None:
        """Until woken, or ``timeout`` seconds passed (None: no timeout)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiters.append(fut)
        timer = loop.call_later(timeout, _expire, fut) if timeout is not None else None
        try:
            await fut
        finally:
            if timer is not None:
                timer.cancel()
            try:
                self._waiters.remove(fut)
            except ValueError:  # woken: already taken off
                pass
